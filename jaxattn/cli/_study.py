"""What the study commands (``analyze``, ``consensus``, ``clusters``, ``stability``) share: the help layout,
the options every study takes, and running a study into its run directory (see
:mod:`jaxattn.studies.skeleton`)."""

from __future__ import annotations

import argparse
import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from jaxattn.cli._config import where
from jaxattn.cli._shared import Output, add_options, as_flags, flag_words, output_options
from jaxattn.config import Spec, specs
from jaxattn.studies.skeleton import refuse_inert, run_into, stages

T = TypeVar("T")
#: A line of a study command's summary: a format of a table's row (``format.format(**row)``), or a function of it
Line = str | Callable[[dict], str]


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, max_help_position=32, width=100)


def command(sub, name: str, *, help: str, description: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` in the commands' help layout."""
    return sub.add_parser(name, formatter_class=formatter, help=help, description=description)


def study_command(sub, name: str, study, *, help: str, description: str,
                  summary: Sequence[tuple[str, Line]]) -> None:
    """Study command ``name`` of ``study`` (a module with ``Config`` and ``run(out, config, progress=)``): its options
    from ``study.Config`` (output into ``runs/<name>``); it runs the study into its run directory and prints a line
    for every row of the tables ``summary`` names (``(table, line)``: ``line.format(**row)``, or ``line(row)`` for
    a function), then where the report is."""
    p = command(sub, name, help=help, description=description)
    p.set_defaults(func=functools.partial(_run_study, name, study, summary),
                   defaults=study_options(p, study.Config, out=f"runs/{name}"))


def _run_study(name: str, study, summary: Sequence[tuple[str, Line]], args, cfg: dict) -> int:
    config = config_of(study.Config, cfg)
    tables = run_in_out(name, cfg, lambda out, say: study.run(out, config, progress=say))
    for table, line in summary:
        for row in tables[table]:
            print(line(row) if callable(line) else line.format(**row))
    print(f"report       {cfg['out']}/report.md")
    return 0


def study_options(p: argparse.ArgumentParser, config_cls: type, *, out: str, progress: str = "stage messages on stderr",
                  resumes: bool = False) -> dict[str, Spec]:
    """The options of a study command, derived from its configuration ``config_cls`` (see
    :mod:`jaxattn.config`): every option field, then the output group (``--figures``, ``--progress``, ``--out``,
    ``--overwrite``, ``--config``; a field of the output group is not repeated). Returns them by ``argparse``
    destination, the table :func:`jaxattn.cli._config.resolve` resolves a config file against. ``resumes``:
    whether an interrupted run resumes (``analyze``; the other studies leave their directory as they found it)."""
    options = add_options(p, {"": [s for k, s in specs(config_cls).items() if k not in specs(Output)]})
    return options | output_options(p, out=out, figures=True, progress=progress, resumes=resumes)


def config_of(config_cls: type[T], cfg: dict) -> T:
    """The study's configuration from the resolved options, checked (one clear error line if impossible): an
    option the user set that changes nothing (the configuration's ``inert()``) is refused, named as given."""
    study = config_cls(**{k: cfg[k] for k in config_cls.__dataclass_fields__})  # type: ignore[attr-defined]
    inert = getattr(study, "inert", None)
    if inert is not None and "model" not in inspect.signature(inert).parameters:  # else: once the model is loaded
        refuse_given(study, inert(), cfg)
    with flag_words(cfg.get("_options", {}), spaced=True):  # the checks say time = 'discrete': --time discrete
        study.check()  # type: ignore[attr-defined]
    return study


def refuse_given(study, inert: dict[str, str], cfg: dict) -> None:
    """The options in ``inert`` (``{option: why it changes nothing}``) refused if the user set them (on the command
    line or in a config file, even to the default), named as the user gave them."""
    options = cfg.get("_options", {})
    refuse_inert(study, {k: as_flags(why, options, spaced=True) for k, why in inert.items()},
                 given=cfg.get("_given", ()), name=lambda k: where(cfg, k))


def run_in_out(name: str, cfg: dict, body: Callable[[Path, Callable[[str], None] | None], T]) -> T:
    """``body(out, say)`` into the run directory ``cfg['out']`` (see :mod:`jaxattn.io.rundir`; left as found if the
    study fails or is interrupted), with ``[name]`` stage messages when ``--progress``."""
    say = stages(name, cfg["progress"])
    return run_into(cfg["out"], lambda out: body(out, say), command=name, overwrite=cfg["overwrite"])
