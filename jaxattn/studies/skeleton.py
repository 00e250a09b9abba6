"""The skeleton every study follows: configuration → run → tables → figures → report.

A study module (:mod:`jaxattn.studies.power_method`, ``consensus``, ``clusters``, ``stability``)
defines a configuration dataclass with a ``check()`` method and a ``run_study(...)`` that fills one
run directory: ``config.json`` (the configuration with seed, versions and device), CSV tables, PNG
figures and ``report.md``. What they share lives here: running into a run directory (the contract of
:mod:`jaxattn.io.rundir`; a failed or interrupted study leaves it as it found it, never half-written),
the CSV tables, and the stage messages.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def csv_text(rows: Sequence[dict]) -> str:
    """Rows of one table as CSV text (floats with 9 significant digits, a header from the first row)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def run_into(out, body: Callable[[Path], T], *, command: str, overwrite: bool = False) -> T:
    """``body(path)``, which writes the study ``command`` into the run directory ``out``, checked and prepared
    first by :func:`jaxattn.io.rundir.start` (a finished study is replaced only with ``overwrite``); if the
    study fails or is interrupted, what it wrote is removed and ``out`` is left as it was found."""
    from jaxattn.io import rundir

    run = rundir.start(out, command, overwrite=overwrite)
    try:
        result = body(run.path)
    except BaseException:
        rundir.abandon(run)
        raise
    rundir.finish(run)
    return result


def md_cell(value) -> str:
    """``value`` as a Markdown table cell: a ``|`` (``bipartite v1 3|2``, ``|<x, v>|``) would end the cell."""
    return str(value).replace("|", "\\|")


def stages(name: str, enabled: bool) -> Callable[[str], None] | None:
    """Stage messages ``[name] ...`` on stderr, or ``None`` when progress is off."""
    if not enabled:
        return None
    return lambda message: print(f"[{name}] {message}", file=sys.stderr, flush=True)


def config_defaults(config_cls: type, **extra) -> dict:
    """The defaults of a study's configuration dataclass, plus what only its command takes (``extra``):
    the one place a command's defaults come from."""
    import dataclasses

    return {**{f.name: f.default for f in dataclasses.fields(config_cls)}, **extra}


def write_report(out: Path, lines: Sequence[str], figures: Sequence[str] = ()) -> None:
    """``report.md`` from its Markdown ``lines``, the ``figures`` (file names in ``out``) appended, atomically."""
    from jaxattn.io.results import atomic_write_text

    lines = list(lines)
    if figures:
        lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
