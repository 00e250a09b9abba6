"""What ``simulate`` and ``analyze`` share: the ``--model`` argument, the precision, the run directory, checks."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from jaxattn.cli._config import RANDOM_ONLY, where
from jaxattn.config import Spec, add_argument, option, specs
from jaxattn.dynamics import SIMULATION_DTYPES, named_dtype
from jaxattn.errors import JaxattnError, positive_int, real, seed
from jaxattn.io import rundir
from jaxattn.io.checkpoints import load_any
from jaxattn.io.results import atomic_write_text
from jaxattn.io.store import nonfinite_warning
from jaxattn.model.sampling import seeded_model


@dataclasses.dataclass(frozen=True)
class Output:
    """The options of a command's run directory (the library has none: they are the command line's)."""

    out: str = option("runs/out", "output run directory (new, empty, or an unfinished run of this command)")
    overwrite: bool = option(False, "replace a finished run (or a run of another command) in --out: the new run is "
                                    "built beside it, in .NAME.jaxattn-replace, and swapped in when it finishes; a "
                                    "folder holding files jaxattn did not write is refused")
    progress: bool = option(True, "show progress on stderr")
    figures: bool = option(True, "write PNG figures")


def add_options(p: argparse.ArgumentParser, groups: Mapping[str, Sequence[Spec]]) -> dict[str, Spec]:
    """The options ``groups`` (``{group title: [Spec, ...]}``) as arguments of ``p``; returns them by ``argparse``
    destination, the table :func:`jaxattn.cli._config.resolve` resolves a config file against."""
    out: dict[str, Spec] = {}
    for title, group in groups.items():
        g = p.add_argument_group(title) if title else p
        for spec in group:
            add_argument(g, spec)
            out[spec.dest] = spec
    return out


def output_options(p: argparse.ArgumentParser, *, out: str, figures: bool = False, progress: str | None = None,
                   resumes: bool = True) -> dict[str, Spec]:
    """An "output" group: ``--figures`` (studies), ``--out`` (default ``out``), ``--overwrite``, ``--progress``
    (help ``progress``) and ``--config``; returns the options as :func:`add_options` does. ``resumes``: whether
    an interrupted run resumes (said on Ctrl-C)."""
    o = specs(Output)
    chosen = [dataclasses.replace(o["out"], default=out), o["overwrite"],
              dataclasses.replace(o["progress"], help=progress or o["progress"].help)]
    g = p.add_argument_group("output")
    options = {}
    for spec in [o["figures"]] * figures + chosen:
        add_argument(g, spec)
        options[spec.dest] = spec
    g.add_argument("--config", help="JSON or TOML file of option = value, or a finished run's config.json "
                                    "(command-line options win)")
    p.set_defaults(resumes=resumes)
    return options


def start_run(cfg: dict, command: str, own: tuple[str, ...]):
    """``--out`` of a resumable command, checked and prepared before any computation: new, empty, an unfinished
    run of the command (resumed) or, with ``--overwrite``, a finished one (replaced by a run built beside it: the
    returned run's ``path``; see :mod:`jaxattn.io.rundir`)."""
    return rundir.start(cfg["out"], command, overwrite=cfg["overwrite"], resumable=True, own=own)


def write_summary(out, lines: list[str], bad, files: str, shown=None) -> str:
    """The summary of a run of many conditions: ``lines``, a warning when some of the conditions (``bad``: a
    ``[N]`` bool array) became non-finite (also on stderr), and where the ``files`` are (``shown``, default
    ``out``: the ``--out`` a replacement written in ``out`` is swapped into); written to ``out/summary.txt``
    atomically, printed, and returned."""
    import sys

    lines = list(lines)
    if bad.any():
        warning = nonfinite_warning(int(bad.sum()), len(bad))
        lines.append(f"warning      {warning}")
        print(f"jaxattn: warning: {warning}", file=sys.stderr)
    lines.append(f"output       {out if shown is None else shown}/ ({files})")
    text = "\n".join(lines) + "\n"
    atomic_write_text(out / "summary.txt", text)
    print(text, end="")
    return text


_CALL = re.compile(r"random_model\(([^)]*)\)")
_KEYWORD = re.compile(r"\b([a-z][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|[\w.+-]+)")
_LEADING = re.compile(r"^([a-z][a-z0-9]*_[a-z0-9_]+)\b")  # "unit_output (O = I) is ...": an option named first


@contextlib.contextmanager
def flag_words(options: Mapping[str, Spec], *, spaced: bool = False) -> Iterator[None]:
    """Around library calls whose errors speak Python (``ffn=True``, ``use heads=1``,
    ``random_model(key, d, heads=1, unit_output=True)``): the error re-raised in the command's words
    (``--ffn``, ``use --heads 1``, ``--model random --heads 1 --unit-output``). ``options``: the command's
    options by destination; only their names are rewritten."""
    try:
        yield
    except JaxattnError as e:
        raise type(e)(as_flags(str(e), options, spaced=spaced)) from None


#: ``name = value``: a study's option, or a sweep's dotted key (``dynamics.attention = 'uniform'``)
_SPACED = re.compile(r"\b([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*) = ('[^']*'|[\w.+-]+)")


def as_flags(message: str, options: Mapping[str, Spec], *, spaced: bool = False) -> str:
    """``message`` with the Python spellings of ``options`` in command-line words (see :func:`flag_words`);
    ``spaced``: also ``name = value`` (the studies' checks, a sweep's keys such as ``dynamics.attention =
    'uniform'`` where ``options`` are keyed so), which elsewhere may name a value of a config file."""
    def keyword(m: re.Match) -> str:
        spec = options.get(m.group(1))
        if spec is None:
            return m.group(0)
        value = m.group(2).strip("'\"")
        if spec.types == (bool,):  # Python's True or a config file's true
            return spec.cli if value.lower() == "true" else f"--no-{spec.cli[2:]}"
        return f"{spec.cli} {value}"

    def call(m: re.Match) -> str:  # a random model as the command line draws one
        return " ".join(["--model random", *(f for f in map(keyword, _KEYWORD.finditer(m.group(1)))
                                             if f.startswith("--"))])

    message = _KEYWORD.sub(keyword, _CALL.sub(call, message))
    if spaced:
        message = _SPACED.sub(keyword, message)
    lead = _LEADING.match(message)
    if lead and lead.group(1) in options:
        message = options[lead.group(1)].cli + message[lead.end():]
    return message


def check_number(name: str, v) -> None:
    real(f"--{name}", v, error=JaxattnError)


def dtype_arg(name: str):
    import jax

    if name not in SIMULATION_DTYPES:
        raise JaxattnError(f"dtype must be float32 or float64, got {name!r}")
    if name == "float64":
        jax.config.update("jax_enable_x64", True)
    return named_dtype(name)


def load_model_arg(spec: str, cfg: dict):
    """Resolve ``--model``: 'random', 'minilm' or a converted file."""
    if not str(spec).strip():  # not a model with other options wrong: the model is missing
        raise JaxattnError("--model must name a model ('random', 'minilm', a converted .safetensors file or a "
                           "checkpoint folder), got an empty string")
    if spec == "random":
        for k in ("d", "heads", "depth"):
            positive_int(f"--{k}", cfg.get(k), JaxattnError)
        seed("--seed", cfg["seed"], JaxattnError)
        return seeded_model(cfg["seed"], cfg["d"], cfg["heads"], cfg["depth"], shared=cfg["shared"],
                            weights=cfg["weights"], value=cfg["value"], mask=cfg["mask"], scale=cfg.get("scale"),
                            unit_output=cfg.get("unit_output", False))  # D2: drawn with O = I
    given = sorted(k for k in RANDOM_ONLY if k in cfg.get("_given", ()))
    if given:
        if spec != "minilm" and not Path(spec).exists():  # a model that is not there is said first, not --d
            load_any(spec)
        raise JaxattnError(f"{where(cfg, given[0])} only applies to --model random (a converted model brings its "
                           "own dimensions, heads, depth and masks)")

    return load_any(spec)


def named_model(spec: str, command: str, why: str):
    """The model of a command that has no random-model options (``consensus``, ``spectrum``): 'random' is refused
    with ``why`` (it is not a checkpoint name, and looking it up on the hub would fail in other words)."""
    if spec == "random":
        raise JaxattnError(f"`jaxattn {command}` takes 'minilm', a converted .safetensors file or a checkpoint folder, "
                           f"not 'random': {why}")
    return load_any(spec)


def check_rope(model, rope: str) -> None:
    if rope == "model" and model.rope is None:
        raise JaxattnError("--rope model: this model has no RoPE (its positions, if any, are embeddings); "
                           "--rope on applies the standard one")


def model_dims(model) -> dict:
    """What a converted model brings instead of the random-model options (recorded in config.json)."""
    lay = model.layers
    masks = [("causal" if bool(lay.causal[g]) else "full") + (f"/local:{int(lay.window[g])}" if int(lay.window[g])
                                                              else "") for g in range(lay.n_sets)]
    return {"d": model.d_model, "heads": model.n_heads, "depth": model.depth, "shared": model.shared,
            "masks": masks, "family": model.family}
