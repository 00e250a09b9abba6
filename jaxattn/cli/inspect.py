"""``jaxattn inspect PATH``: the architecture summary and provenance of a converted file."""

from __future__ import annotations

from jaxattn.cli._study import formatter
from jaxattn.io.checkpoints import inspect


def register(sub):
    p = sub.add_parser("inspect", formatter_class=formatter, help="print the architecture summary of a converted file",
                       description="Print the architecture summary and provenance of a converted .safetensors file.")
    p.add_argument("path", help="converted .safetensors file")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    print(inspect(args.path))
    return 0
