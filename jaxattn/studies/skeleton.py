"""The skeleton every study follows: configuration → run → tables → figures → report.

A study module (:mod:`jaxattn.studies.power_method`, ``consensus``, ``clusters``, ``stability``)
defines a configuration dataclass with a ``check()`` method and a ``run_study(...)`` that fills one
run directory: ``config.json`` (the configuration with seed, versions and device), CSV tables, PNG
figures and ``report.md``. What they share lives here: the run-directory contract (a new or empty
directory; a failed or interrupted study leaves it as it found it, never half-written), the CSV
tables, and the stage messages.
"""

from __future__ import annotations

import csv
import io
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from jaxattn.errors import ConfigError

T = TypeVar("T")


def csv_text(rows: Sequence[dict]) -> str:
    """Rows of one table as CSV text (floats with 9 significant digits, a header from the first row)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def check_out(out: Path) -> None:
    """A study writes into a new or empty directory only (another run is never mixed or overwritten)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} exists and is not an empty directory: choose another one")


def run_into(out: Path, body: Callable[[], T]) -> T:
    """``body()``, which writes into ``out``; if it fails or is interrupted, ``out`` is put back as it was
    (removed if the study created it, emptied if it was an empty directory the user gave)."""
    check_out(out)
    existed = out.exists()
    try:
        return body()
    except BaseException:
        if existed:
            for p in out.iterdir():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        else:
            shutil.rmtree(out, ignore_errors=True)
        raise


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
