"""``jaxattn solve``: a continuous-time model over many random initial conditions.

A run is a one-point sweep (:mod:`jaxattn.sweeps.grid`): the options are the configuration keys of
:data:`jaxattn.sweeps.grid.SCHEMA` that apply to flows (their defaults and help come from there), the
run directory is a sweep store (chunked, checksummed, resumable) with ``config.json`` and
``summary.txt`` beside it.
"""

from __future__ import annotations

import re

from jaxattn.cli._shared import add_options, write_summary
from jaxattn.cli._study import formatter
from jaxattn.cli.movie import MOVIE, write_movie
from jaxattn.cli.sweep import add_process_options, execute
from jaxattn.errors import ConfigError
from jaxattn.io._configfile import load_config
from jaxattn.io.results import provenance, write_json
from jaxattn.io.rundir import dir_out
from jaxattn.io.store import nonfinite_conditions
from jaxattn.sweeps.grid import SCHEMA, expand, validate_config

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


def register(sub) -> None:
    p = sub.add_parser("solve", formatter_class=formatter,
                       help="integrate a continuous-time model (C2 sphere, C3 flat, Oja) over many initial conditions",
                       description="Integrate the continuous-time token dynamics (diffrax, adaptive Tsit5 by default) "
                                   "from many random initial conditions and save observables at equally spaced times. "
                                   "Flows: --space sphere (tokens on the unit sphere, the vector field projected on "
                                   "its tangent space), --space flat (no normalisation), --space flat --rescaled "
                                   "(z = e^{-tF} x); --attention uniform gives the multi-agent Oja flow. A layered "
                                   "model changes weights every --layer-time (solved interval by interval). Failed "
                                   "solves are flagged per condition (result column), never aborting the run. The "
                                   "output directory is resumable: run the same command again after an interruption.")
    titles = {"model": "model", "dynamics": "flow", "init": "initial conditions", "": "run"}
    add_options(p, {titles[sec]: [SCHEMA[sec][k] for k in keys] for sec, keys in KEYS.items()})
    g = p.add_argument_group("output")
    g.add_argument("--out", help="output run directory [runs/solve]")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--config", help="JSON or TOML file of option = value (command-line options win)")
    g.add_argument("--movie", action="store_true", help=MOVIE.help)
    add_process_options(p)
    p.set_defaults(func=run)


def _point_config(args) -> dict:
    base = load_config(args.config) if args.config else {}
    if not isinstance(base, dict):
        raise ConfigError("--config must hold a table of option = value")
    flat_cfg = {}
    if "command" in base and isinstance(base.get("config"), dict):  # a finished run's config.json: replayed
        if base["command"] != "solve":
            raise ConfigError(f"{args.config} is the config of a `{base['command']}` run, not `solve`")
        # its resolved configuration, every key of every section: those solve takes (the rest are a sweep's)
        base = {sec or k: ({kk: vv for kk, vv in keys.items() if kk in KEYS[sec]} if sec else keys[k])
                for sec, keys in base["config"].items() if isinstance(keys, dict)
                for k in ([sec] if sec else [k for k in keys if k in KEYS[""]])}
    for k, v in base.items():  # accept flat keys (d = 64) or sections ([model] d = 64)
        if isinstance(v, dict):
            for kk, vv in v.items():
                flat_cfg[(k, kk.replace("-", "_"))] = vv
        else:
            sec = next((s for s, keys in KEYS.items() if k.replace("-", "_") in keys), None)
            if sec is None and k.replace("-", "_") in ("model", "init"):
                sec, k = {"model": ("model", "source"), "init": ("init", "kind")}[k.replace("-", "_")]
            if sec is None:
                raise ConfigError(f"unknown option in config file: {k}")
            flat_cfg[(sec, k.replace("-", "_"))] = v
    for sec, keys in KEYS.items():
        for key in keys:
            v = getattr(args, _flag(sec, key).replace("-", "_"))
            if v is not None:
                flat_cfg[(sec, key)] = v
    cfg: dict = {"dynamics": {"kind": "continuous"}}
    for (sec, key), v in flat_cfg.items():
        if (sec and key not in KEYS.get(sec, ())) or (not sec and key not in KEYS[""]):
            raise ConfigError(f"unknown option in config file: {sec + '.' if sec else ''}{key}")
        if isinstance(v, list) and key != "observables":
            raise ConfigError(f"{key}: solve runs one point; use `jaxattn sweep` for a grid")
        (cfg.setdefault(sec, {}) if sec else cfg)[key] = v
    return cfg


def run(args, cfg) -> int:
    import numpy as np

    point = _point_config(args)
    try:
        resolved = validate_config(point)
    except ConfigError as e:
        raise ConfigError(_as_flags(str(e))) from None
    out = dir_out("runs/solve" if args.out is None else args.out)
    sw = execute(point, out, args, args.quiet)
    p = expand(resolved)[0]
    arrays = sw.arrays(0)
    ts = np.asarray(sw.points[0]["times"])
    res = arrays.get("result")
    write_json(out / "config.json", {"command": "solve", "config": resolved, "summary": sw.summary, **provenance()})
    lines = ["jaxattn solve",
             f"flow         space={p['dynamics.space']}{' rescaled' if p['dynamics.rescaled'] else ''} "
             f"attention={p['dynamics.attention']} beta={p['dynamics.beta']:g}  t in [0, {p['dynamics.t1']:g}]  "
             f"solver={p['dynamics.solver']} " + (f"dt={p['dynamics.dt']:g}" if p["dynamics.dt"] else
                                                  f"rtol={p['dynamics.rtol']:g} atol={p['dynamics.atol']:g}"),
             f"run          {p['num_init']} initial conditions x {p['init.n']} tokens, seed {p['seed']}, {p['dtype']}, "
             f"{sw.summary['seconds']:.2f} s ({sw.summary['computed']} computed, {sw.summary['resumed']} resumed)"]
    if res is not None:
        bad = int(np.sum(res != 0))
        steps = arrays["num_steps"]
        lines.append(f"solver       {len(res) - bad} of {len(res)} solves succeeded; steps per condition median "
                     f"{int(np.median(steps))}, max {int(steps.max())}")
    nonfinite = nonfinite_conditions(arrays, p["num_init"])
    for name in p["observables"]:
        a = arrays.get(f"observables.{name}")
        if a is not None and a.ndim == 2 and not nonfinite.all():
            a = a[~nonfinite]
            q = np.quantile(a[:, -1], [0.0, 0.5, 1.0])
            lines.append(f"{name:<12} t=0 mean {np.mean(a[:, 0]):.4g} -> t={ts[-1]:g}: min {q[0]:.3g} "
                         f"median {q[1]:.3g} max {q[2]:.3g}")
    write_summary(out, lines, nonfinite, "config.json, summary.txt, manifest.json, data.zarr")
    if args.movie:
        write_movie(out, progress=not args.quiet)
    return 0
