"""What the study commands (``analyze``, ``consensus``, ``clusters``, ``stability``) share: the help layout,
the options every study takes, and running a study into its run directory (see
:mod:`jaxattn.studies.skeleton`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from jaxattn.studies.skeleton import run_into, stages

T = TypeVar("T")


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, max_help_position=32, width=100)


def add_output_options(p: argparse.ArgumentParser, d: dict) -> None:
    """``--figures``, ``--out``, ``--overwrite``, ``--progress`` and ``--config``, with the command's defaults ``d``."""
    p.add_argument("--figures", action=argparse.BooleanOptionalAction, default=None,
                   help=f"write PNG figures [{d['figures']}]")
    p.add_argument("--out", help=f"output run directory (new, empty, or an earlier run of this study) [{d['out']}]")
    p.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=None,
                   help=f"replace a finished run in --out (only the files jaxattn wrote) [{d['overwrite']}]")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help=f"stage messages on stderr [{d['progress']}]")
    p.add_argument("--config", help="JSON or TOML file of option = value (command-line options win)")
    p.set_defaults(resumes=False)  # an interrupted study leaves its directory as it found it: rerun, not resume


def config_of(config_cls: type[T], cfg: dict) -> T:
    """The study's configuration from the resolved options, checked (one clear error line if impossible)."""
    study = config_cls(**{k: cfg[k] for k in config_cls.__dataclass_fields__})  # type: ignore[attr-defined]
    study.check()  # type: ignore[attr-defined]
    return study


def run_in_out(name: str, cfg: dict, body: Callable[[Path, Callable[[str], None] | None], T]) -> T:
    """``body(out, say)`` into the run directory ``cfg['out']`` (see :mod:`jaxattn.io.rundir`; left as found if the
    study fails or is interrupted), with ``[name]`` stage messages when ``--progress``."""
    say = stages(name, cfg["progress"])
    return run_into(cfg["out"], lambda out: body(out, say), command=name, overwrite=cfg["overwrite"])
