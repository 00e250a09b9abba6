"""The skeleton every study follows: configuration → run → tables → figures → report.

Every study module (:mod:`jaxattn.studies.power_method`, ``consensus``, ``clusters``, ``stability``) has
the same public shape: ``Config``, a configuration dataclass whose fields are options (declared with
:func:`jaxattn.config.option`: help, allowed values, check; the study's command line and config-file keys
are derived from them) with a ``check()`` method, and

    run(out_dir, config=None, *, model=None, model_name="model", progress=None) -> dict

which fills one run directory (``config.json``: the configuration with seed, versions and device; CSV
tables; PNG figures through :mod:`jaxattn.studies.plots`; ``report.md``) and returns the tables. The
studies of a model (power method, consensus) need ``model``; the others build their own and refuse one.
``progress(message)`` receives the stage messages. A study changes no global JAX setting: one that needs
float64 enables it in a scoped ``jax.enable_x64``. What they share lives here: running into a run
directory (the contract of :mod:`jaxattn.io.rundir`; a failed or interrupted study leaves it as it found
it, never half-written), the CSV tables, the report and the stage messages.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import jax

from jaxattn.config import check_value, specs
from jaxattn.errors import ConfigError
from jaxattn.io import rundir
from jaxattn.io.results import atomic_write_text
from jaxattn.model.params import Model

T = TypeVar("T")


def csv_text(rows: Sequence[dict], digits: int = 9) -> str:
    """Rows of one table as CSV text (floats with ``digits`` significant digits, a header from the first row)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.{digits}g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a table :func:`csv_text` wrote, as text (empty without the file): what a figure drawn from a
    finished run's tables reads, the study's own or an earlier version's."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_into(out, body: Callable[[Path], T], *, command: str, overwrite: bool = False) -> T:
    """``body(path)``, which writes the study ``command`` into the run directory ``out``, checked and prepared
    first by :func:`jaxattn.io.rundir.start` (a finished study is replaced only with ``overwrite``: written beside
    it and swapped in by :func:`jaxattn.io.rundir.finish`); if the study fails or is interrupted, what it wrote is
    removed and ``out`` is left as it was found."""
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


def check_options(config) -> None:
    """Every option of a study's configuration checked against its declaration (type, allowed values, check):
    a :class:`ConfigError` line naming the field. A list option given as the comma-separated text of the
    command line is refused with the list it should be."""
    for name, spec in specs(type(config)).items():
        v = getattr(config, name)
        if spec.is_list and isinstance(v, str):
            raise ConfigError(f"{name} must be a list ({name}=[...]), not comma-separated text; got {v!r}")
        # the checked value: a NumPy number from a Python caller becomes the Python one (recorded in JSON)
        object.__setattr__(config, name, check_value(name, spec, v))
    # a study that runs both precisions: the matrix-product setting lowers float32 products only
    dtype, precision = getattr(config, "dtype", "float32"), getattr(config, "matmul_precision", "highest")
    if dtype != "float32" and precision != "highest":
        raise ConfigError(f"matmul_precision = {precision!r} does nothing with dtype = {dtype!r} (it lowers float32 "
                          "products only): leave it out")


def refuse_inert(config, inert: Mapping[str, str], *, given: Iterable[str] | None = None,
                 name: Callable[[str], str] | None = None) -> None:
    """Options that would change nothing in this run are refused rather than recorded as if they had (the
    report and ``config.json`` would claim them). ``inert``: ``{option: why it changes nothing}`` (the
    study's ``Config.inert()``); ``given``: the options the user set (the command line, a config file), else
    those whose value is not the declared default; ``name(option)``: how the error names it."""
    defaults = {k: s.default for k, s in specs(type(config)).items()}
    for key, why in inert.items():
        if key in given if given is not None else getattr(config, key) != defaults[key]:
            raise ConfigError(f"{(name or str)(key)} does nothing with {why}: leave it out")


def write_report(out: Path, lines: Sequence[str], figures: Sequence[str] = ()) -> None:
    """``report.md`` from its Markdown ``lines``, the ``figures`` (file names in ``out``) appended, atomically."""
    lines = list(lines)
    if figures:
        lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")


def quiet(message: str) -> None:
    """The stage messages of a study run without ``progress``: none."""


def own_config(study: str, cls: type[T], config) -> T:
    """The study's configuration: ``cls()`` for ``None``, ``config`` if it is a ``cls``, else one line saying how to
    build one (a dict or another study's configuration would fail later on a missing attribute)."""
    if config is None:
        return cls()
    if not isinstance(config, cls):
        how = f"{cls.__name__}(**{{...}})" if isinstance(config, dict) else f"{cls.__name__}(...)"
        raise ConfigError(f"the {study} study's config must be a {cls.__module__}.Config ({how}), got "
                          f"{type(config).__name__} {config!r:.80}")
    return config


def own_run_in_float64(study: str, cls: type[T], config, model, out_dir, progress,
                       body: Callable[[Path, T, Callable[[str], None]], dict]) -> dict:
    """``body(out, cfg, say)`` of a study that builds its own models (``model`` refused), its configuration
    (:func:`own_config`) checked, inside a scoped ``jax.enable_x64`` (the caller's ``jax_enable_x64`` is left as it
    was); ``say`` is ``progress`` or :func:`quiet`."""
    no_model(study, model)
    cfg = own_config(study, cls, config)
    cfg.check()  # type: ignore[attr-defined]  # every study configuration has check()
    with jax.enable_x64(True):
        return body(Path(out_dir), cfg, progress or quiet)


def no_model(study: str, model) -> None:
    """Refuse a ``model`` given to a study that builds its own models (one line)."""
    if model is not None:
        raise ConfigError(f"the {study} study builds its own models; call run(out_dir, config) without model=")


def need_model(study: str, model) -> Model:
    """The ``model`` a study of a model runs on, refused with one line when missing or not a Model."""
    if not isinstance(model, Model):
        raise ConfigError(f"the {study} study runs on a model: run(out_dir, config, model=...) with a jaxattn Model "
                          f"(ja.load_any('minilm') or ja.random_model(...)), got {model!r}")
    return model
