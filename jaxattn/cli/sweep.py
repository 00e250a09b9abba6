"""``jaxattn sweep CONFIG``: a grid of runs from a TOML/JSON configuration into a resumable store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxattn.errors import ConfigError
from jaxattn.io import RESUME, full_disk
from jaxattn.io.rundir import dir_out
from jaxattn.io.store import nonfinite_warning
from jaxattn.sweeps.grid import SCHEMA, sweep_grid


def add_process_options(p) -> None:
    g = p.add_argument_group("several processes (one per host, jax.distributed)")
    g.add_argument("--process-id", type=int,
                   help="this process's index (default: $JAXATTN_PROCESS_ID, $SLURM_PROCID or 0)")
    g.add_argument("--num-processes", type=int,
                   help="number of cooperating processes (default: $JAXATTN_NUM_PROCESSES, $SLURM_NTASKS or 1)")
    g.add_argument("--coordinator", help="host:port of process 0 (default: $JAXATTN_COORDINATOR)")


def add_store_output(p, out: str):
    """The output options of a command that writes a sweep store (``sweep``, ``solve``): ``--out`` (default
    ``out``), ``--overwrite``, ``--progress/--no-progress``, spelled as every other command spells them."""
    g = p.add_argument_group("output")
    g.add_argument("--out", help=f"output store directory [{out}]")
    g.add_argument("--overwrite", action="store_true",
                   help="replace a store of another configuration in --out: the new store is built beside it, in "
                        ".NAME.jaxattn-replace, and swapped in when it finishes (a store of this configuration is "
                        "resumed; a folder holding files jaxattn did not write is refused)")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="show a progress bar [True]")
    g.add_argument("--quiet", dest="progress", action="store_false", help=argparse.SUPPRESS)  # the earlier spelling
    p.set_defaults(resumes=True)  # a store resumes (said on Ctrl-C and on a full disk)
    return g


def _key_line(key: str, spec) -> str:
    """One configuration key in ``--help``: its help, its values, its default (as written in a TOML file), wrapped."""
    import json
    import textwrap

    text = spec.help + (f"; one of {', '.join(map(str, spec.choices))}" if spec.choices else "")
    if spec.default is not None:
        text += f" [{json.dumps(spec.default)}]"
    return textwrap.fill(text, width=100, initial_indent=f"  {key:<22} ", subsequent_indent=" " * 25)


def register(sub) -> None:
    keys = "\n".join(_key_line((s + "." if s else "") + k, spec) for s, ks in SCHEMA.items() for k, spec in ks.items())
    p = sub.add_parser("sweep", formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="run a grid of simulations from a TOML/JSON configuration into a resumable store",
                       description="Run every point of a grid (the product of all keys given as lists) over many "
                                   "initial conditions, chunk by chunk, split over the local devices, into a Zarr "
                                   "store with a checksum per chunk. Running the same command again resumes; a store "
                                   "written with another configuration is refused (--overwrite replaces it).\n\n"
                                   "Configuration keys (top level, then [model], [dynamics], [init]):\n" + keys)
    p.add_argument("config", help="TOML or JSON configuration file")
    add_store_output(p, "runs/<config name>")
    add_process_options(p)
    p.set_defaults(func=run)


def execute(config, out: Path, args):
    """Run ``sweep_grid`` with the CLI's output and process options; disk errors become one clear line (a full
    disk: the :class:`jaxattn.errors.DiskFullError` every writer raises, naming ``out``). ``--overwrite`` of a store
    of this configuration resumes it (nothing is replaced): said in one line, not left to the counts."""
    held = out / "manifest.json"
    before = held.read_bytes() if args.overwrite and held.is_file() else None
    try:
        with full_disk(out, RESUME):
            sw = sweep_grid(config, out, process_id=args.process_id, num_processes=args.num_processes,
                            coordinator=args.coordinator, progress=args.progress, overwrite=args.overwrite,
                            label=args.command)
    except OSError as e:
        raise ConfigError(f"writing {out} failed: {e.strerror or e}; {RESUME}") from None
    if before is not None and held.read_bytes() == before:  # a replacement writes its own manifest
        print(f"jaxattn: note: {out} already holds this configuration: --overwrite kept it and resumed it "
              f"({sw.summary['resumed']:,} conditions kept, {sw.summary['computed']:,} computed); to start over, "
              "remove it or choose another --out", file=sys.stderr)
    return sw


def run(args, cfg) -> int:
    out = dir_out(Path("runs") / Path(args.config).stem if args.out is None else args.out)
    sw = execute(args.config, out, args)
    s = sw.summary
    print(f"jaxattn sweep: {s['points']} grid point(s), {s['conditions']:,} initial conditions "
          f"({s['computed']:,} computed, {s['resumed']:,} resumed, {s['failed']} failed solves) "
          f"in {s['seconds']:.2f} s on {', '.join(s['devices'])}", file=sys.stdout)
    if s["nonfinite"]:

        print(f"jaxattn: warning: {nonfinite_warning(s['nonfinite'], s['conditions'])}", file=sys.stderr)
    print(f"store        {out}/ (manifest.json, data.zarr; jaxattn.open_sweep('{out}').table())")
    return 0
