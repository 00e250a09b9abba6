"""``jaxattn inspect PATH``: the architecture summary and provenance of a converted file."""

from __future__ import annotations

from jaxattn.cli._study import command
from jaxattn.io.checkpoints import inspect


def register(sub):
    p = command(sub, "inspect", help="print the architecture summary of a converted file",
                description="Print the architecture summary and provenance of a converted .safetensors file.")
    p.add_argument("path", help="converted .safetensors file")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    print(inspect(args.path))
    return 0
