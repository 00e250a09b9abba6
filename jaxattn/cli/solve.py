"""``jaxattn solve``: a continuous-time model over many random initial conditions.

A run is a one-point sweep (:mod:`jaxattn.sweeps.grid`): the options are the configuration keys of
:data:`jaxattn.sweeps.grid.SCHEMA` that apply to flows (their defaults and help come from there), the
run directory is a sweep store (chunked, checksummed, resumable) with ``config.json`` and
``summary.txt`` beside it.
"""

from __future__ import annotations

import re
import sys

from jaxattn.cli._shared import add_options, model_dims, write_summary
from jaxattn.cli._study import command
from jaxattn.cli.movie import MOVIE, write_movie
from jaxattn.cli.sweep import add_process_options, add_store_output, execute
from jaxattn.dynamics.continuous import RESULT_NAMES, failures
from jaxattn.errors import ConfigError
from jaxattn.io import load_config
from jaxattn.io.checkpoints import load_any
from jaxattn.io.results import provenance, write_json
from jaxattn.io.rundir import dir_out
from jaxattn.io.store import nonfinite_conditions
from jaxattn.sweeps.grid import RENAMED, SCHEMA, FlowRun, expand, point_of, validate_config

#: Schema keys that ``solve`` exposes, by section (the discrete-only ones are left out).
KEYS = {
    "": ("num_init", "chunk", "seed", "dtype", "matmul_precision", "keep_final", "observables"),
    "model": ("source", "d", "heads", "depth", "shared", "mask", "weights", "value", "scale"),
    "dynamics": ("space", "rescaled", "attention", "biases", "beta", "t1", "saves", "solver", "rtol", "atol", "dt",
                 "max_steps", "layer_time"),
    "init": ("n", "kind"),
}
def _flag(sec: str, key: str) -> str:
    return SCHEMA[sec][key].cli[2:]


def _as_flags(message: str) -> str:
    """A configuration error in the words of the command line: ``dynamics.t1`` becomes ``--t1``, ``model.d = 10``
    becomes ``--d 10`` (the schema names keys by section; solve's options are flat)."""
    for sec, keys in KEYS.items():
        for key in keys:
            flag = "--" + _flag(sec, key)
            if sec:  # section keys are unambiguous anywhere in the message
                message = re.sub(rf"(?<![\w.-]){sec}\.{key}\b( =)?", flag, message)
            else:  # top-level keys only where the message names them: "num_init: ..." or "seed = 3"
                message = re.sub(rf"(?<![\w.-]){key}(?=:| =)( =)?", flag, message)
    return message


#: The command's help line and description.
HELP = "integrate a continuous-time model (C2 sphere, C3 flat, Oja) over many initial conditions"
#: The command's description (argparse folds its line breaks into spaces).
DESCRIPTION = """Integrate the continuous-time token dynamics (diffrax, adaptive Tsit5 by default)
from many random initial conditions and save observables at equally spaced times.
Flows: --space sphere (tokens on the unit sphere, the vector field projected on
its tangent space), --space flat (no normalisation), --space flat --rescaled
(z = e^{-tF} x); --attention uniform gives the multi-agent Oja flow. A layered
model changes weights every --layer-time (solved interval by interval). Failed
solves are flagged per condition (result column), never aborting the run. The
output directory is resumable: run the same command again after an interruption."""


def register(sub) -> None:
    p = command(sub, "solve", help=HELP, description=DESCRIPTION)
    titles = {"model": "model", "dynamics": "flow", "init": "initial conditions", "": "run"}
    add_options(p, {titles[sec]: [SCHEMA[sec][k] for k in keys] for sec, keys in KEYS.items()})
    g = add_store_output(p, "runs/solve")
    g.add_argument("--config", help="JSON or TOML file of option = value, or a finished run's config.json "
                                    "(command-line options win)")
    g.add_argument("--movie", action="store_true", help=MOVIE.help)
    add_process_options(p)
    p.set_defaults(func=run)


def _point_config(args) -> tuple[dict, dict[str, str]]:
    """The point's configuration, and how the config file wrote each key it set that the command line did not
    (by ``section.key``: an error about its value names the file, :func:`_in_file`)."""
    base = load_config(args.config) if args.config else {}
    if not isinstance(base, dict):
        raise ConfigError("--config must hold a table of option = value")
    flat_cfg = {}
    if "command" in base and isinstance(base.get("config"), dict):  # a finished run's config.json: replayed
        if base["command"] != "solve":
            raise ConfigError(f"{args.config} is the config of a `{base['command']}` run, not `solve`")
        recorded = base["config"]
        unknown = sorted(f"{sec + '.' if sec else ''}{k}" for sec, keys in recorded.items() if isinstance(keys, dict)
                         for k in keys if k not in SCHEMA.get(sec, {}) and k not in RENAMED)
        if unknown or not all(isinstance(keys, dict) and sec in SCHEMA for sec, keys in recorded.items()):
            what = ", ".join(unknown) or ", ".join(sorted(sec for sec in recorded if sec not in SCHEMA))
            raise ConfigError(f"{args.config} records {what}, which `jaxattn solve` does not take (another jaxattn "
                              "version, or an edited file): remove it to replay the rest")
        # its resolved configuration, every key of every section: those solve takes (the rest are a sweep's)
        base = {sec or k: ({kk: vv for kk, vv in keys.items() if kk in KEYS[sec]} if sec else keys[k])
                for sec, keys in base["config"].items() if isinstance(keys, dict)
                for k in ([sec] if sec else [k for k in keys if k in KEYS[""]])}
    written: dict = {}  # (section, key) -> how the file wrote it
    for k, v in base.items():  # accept flat keys (d = 64) or sections ([model] d = 64)
        if isinstance(v, dict):
            places = [((k, kk.replace("-", "_")), f"[{k}] {kk}", vv) for kk, vv in v.items()]
        else:
            sec = next((s for s, keys in KEYS.items() if k.replace("-", "_") in keys), None)
            key = k.replace("-", "_")
            if sec is None and key in ("model", "init"):
                sec, key = {"model": ("model", "source"), "init": ("init", "kind")}[key]
            if sec is None:
                raise ConfigError(f"unknown option in config file: {k}")
            places = [((sec, key), k, v)]
        for place, name, value in places:
            if place in written:  # n next to [init] n: one option given twice, the last would win silently
                raise ConfigError(f"config file {args.config} gives {written[place]} and {name}, one option: "
                                  "give it once")
            written[place] = name
            flat_cfg[place] = value
    for sec, keys in KEYS.items():
        for key in keys:
            v = getattr(args, _flag(sec, key).replace("-", "_"))
            if v is not None:
                flat_cfg[(sec, key)] = v
                written.pop((sec, key), None)
    cfg: dict = {"dynamics": {"kind": "continuous"}}
    for (sec, key), v in flat_cfg.items():
        if (sec and key not in KEYS.get(sec, ())) or (not sec and key not in KEYS[""]):
            raise ConfigError(f"unknown option in config file: {sec + '.' if sec else ''}{key}")
        if isinstance(v, list) and key != "observables":
            raise ConfigError(f"{key}: solve runs one point; use `jaxattn sweep` for a grid")
        (cfg.setdefault(sec, {}) if sec else cfg)[key] = v
    return cfg, {(f"{sec}.{key}" if sec else key): name for (sec, key), name in written.items()}


def _in_file(message: str, filed: dict[str, str], path) -> str | None:
    """A value error about a key the config file set (``init.n: must be > 0, got -3``) in the other commands' words,
    naming the file: ``config value n: must be > 0, got -3 (in c.toml)``; ``None`` for any other error."""
    key, sep, rest = message.partition(": ")
    m = re.fullmatch(r"([\w.]+)(\[\d+\])?", key)
    if not sep or m is None or m[1] not in filed:
        return None
    return f"config value {filed[m[1]]}{m[2] or ''}: {rest} (in {path})"


#: What to do about a failed solve, by diffrax's result (jaxattn.dynamics.continuous.RESULT_NAMES).
_ADVICE = {"max_steps_reached": "raise --max-steps (now {max_steps})",
           "max_steps_rejected": "raise --max-steps (now {max_steps}) or loosen --rtol/--atol",
           "dt_min_reached": "loosen --rtol/--atol", "nonfinite": "a smaller --beta or --dtype float64 may keep them "
           "finite"}


def _reasons(failed: dict[str, int], flow: FlowRun) -> str:
    """Failed solves counted by diffrax's result, each with what to do: ``3 max_steps_reached: raise --max-steps``."""
    return "; ".join(f"{count:,} {name}" + (f": {_ADVICE[name].format(max_steps=flow.solver.max_steps)}"
                                             if name in _ADVICE else "") for name, count in failed.items())


def _recorded(resolved: dict) -> tuple[dict, dict]:
    """The configuration ``config.json`` records, and what goes beside it: with a converted model, its own
    dimensions (``model_dims``) instead of the random model's defaults, which describe nothing in this run
    (and would be refused when the file is replayed)."""
    source = resolved["model"]["source"]
    if source == "random":
        return resolved, {}
    return {**resolved, "model": {"source": source}}, {"model_dims": model_dims(load_any(source))}


def run(args, cfg) -> int:
    import numpy as np

    point, filed = _point_config(args)
    try:
        resolved = validate_config(point)
    except ConfigError as e:
        raise ConfigError(_in_file(str(e), filed, args.config) or _as_flags(str(e))) from None
    out = dir_out("runs/solve" if args.out is None else args.out)
    sw = execute(point, out, args)
    p = point_of(expand(resolved)[0])
    flow = p.run
    if not isinstance(flow, FlowRun):  # solve sets dynamics.kind = 'continuous' itself
        raise ConfigError("solve runs flows: its configuration must not set dynamics.kind")
    arrays = sw.arrays(0)
    ts = np.asarray(sw.points[0]["times"])
    res = arrays.get("result")
    recorded, dims = _recorded(resolved)
    write_json(out / "config.json", {"command": "solve", "config": recorded, **dims, "summary": sw.summary,
                                     **provenance()})
    lines = ["jaxattn solve",
             f"flow         space={flow.flow.space}{' rescaled' if flow.flow.rescaled else ''} "
             f"attention={flow.flow.attention} beta={flow.beta:g}  t in [0, {flow.t1:g}]  "
             f"solver={flow.solver.solver} " + (f"dt={flow.solver.dt:g}" if flow.solver.dt else
                                                f"rtol={flow.solver.rtol:g} atol={flow.solver.atol:g}"),
             f"run          {p.num_init} initial conditions x {p.n} tokens, seed {p.seed}, {p.dtype}, "
             f"{sw.summary['seconds']:.2f} s ({sw.summary['computed']} computed, {sw.summary['resumed']} resumed)"]
    nonfinite = nonfinite_conditions(arrays, p.num_init)
    overflowed, stopped = nonfinite, None
    if res is not None:
        failed = failures(res)
        steps = arrays["num_steps"]
        why = f" ({', '.join(f'{c:,} {name}' for name, c in failed.items())})" if failed else ""
        lines.append(f"solver       {len(res) - sum(failed.values())} of {len(res)} solves succeeded{why}; steps per "
                     f"condition median {int(np.median(steps))}, max {int(steps.max())}")
        # a solve that stopped early (its step budget, a step size too small) leaves its later saved values at inf:
        # the cause is diffrax's result, not an overflow, and the warning says which
        early = (res != 0) & (res != RESULT_NAMES.index("nonfinite"))
        if early.any():
            stopped = (f"{int(early.sum()):,} of {len(res):,} solves stopped before t = {flow.t1:g} "
                       f"({_reasons(failures(res[early]), flow)}): their values after the stop are not computed "
                       "and are left out of the statistics")
            lines.append(f"warning      {stopped}")
            overflowed = nonfinite & ~early
    for name in p.observables:
        a = arrays.get(f"observables.{name}")
        if a is not None and a.ndim == 2 and not nonfinite.all():
            a = a[~nonfinite]
            q = np.quantile(a[:, -1], [0.0, 0.5, 1.0])
            lines.append(f"{name:<12} t=0 mean {np.mean(a[:, 0]):.4g} -> t={ts[-1]:g}: min {q[0]:.3g} "
                         f"median {q[1]:.3g} max {q[2]:.3g}")
    if stopped:
        print(f"jaxattn: warning: {stopped}", file=sys.stderr)
    write_summary(out, lines, overflowed, "config.json, summary.txt, manifest.json, data.zarr")
    if args.movie:
        write_movie(out, progress=args.progress)
    return 0
