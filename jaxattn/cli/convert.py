"""``jaxattn convert SOURCE``: a Hugging Face checkpoint to jaxattn's canonical safetensors."""

from __future__ import annotations

from jaxattn.cli._study import command
from jaxattn.errors import JaxattnError
from jaxattn.io.checkpoints import FAMILIES, convert_source, inspect, safetensors_path, save_checkpoint
from jaxattn.io.rundir import file_out


def register(sub):
    p = command(sub, "convert", help="convert a Hugging Face checkpoint to canonical safetensors",
                description="Convert a Hugging Face checkpoint (model_type "
                            f"{', '.join(sorted(FAMILIES))}) to "
                            "jaxattn's canonical safetensors layout. SOURCE is a local folder with config.json "
                            "and model.safetensors (sharded or not) or pytorch_model.bin, or a hub model id "
                            "when online.")
    p.add_argument("source", help="checkpoint folder or hub model id")
    p.add_argument("--out", required=True, help="output .safetensors file (written atomically)")
    p.add_argument("--dtype", choices=["source", "float32", "float64"], default="source",
                   help="stored precision [source: keep the checkpoint's]")
    p.add_argument("--revision", help="hub revision (branch, tag or commit) for a hub id")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    target = safetensors_path(file_out(args.out, args.overwrite), "--out")
    model, info = convert_source(args.source, dtype=args.dtype, revision=args.revision)
    try:
        out = save_checkpoint(model, target, info)
    except OSError as e:  # written through a temporary file beside --out: name the user's path, not that one
        raise JaxattnError(f"writing --out {args.out} failed: {e.strerror or e}") from None
    print(inspect(out))
    print(f"written      {out}")
    return 0
