"""A sweep's configuration: the keys (:data:`SCHEMA`), their checks, the grid points (:func:`expand`) and the
options that would change nothing at a point (refused rather than recorded)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from jaxattn.dynamics.continuous import SOLVERS
from jaxattn.errors import ConfigError
from jaxattn.model.attention import KERNELS as ATTENTION_KERNELS
from jaxattn.model.params import parse_mask
from jaxattn.sweeps._observables import OBSERVABLES

_NUM = (int, float)


@dataclasses.dataclass(frozen=True)
class Key:
    """One configuration key: accepted Python types, default, allowed values or a check, help."""

    types: tuple
    default: Any
    choices: tuple | None = None
    check: Callable[[Any], str | None] | None = None
    help: str = ""
    axis: bool = True  # a list value makes it a grid axis


def _positive(v):
    return None if v > 0 else "must be > 0"


def _finite(v):
    return None if math.isfinite(v) else "must be finite"


def _finite_positive(v):
    return _finite(v) or _positive(v)


def _save(v):
    return None if v == "last" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1) else \
        "must be a positive integer or 'last'"


SCHEMA: dict[str, dict[str, Key]] = {
    "": {
        "name": Key((str,), "sweep", help="a label for the sweep", axis=False),
        "num_init": Key((int,), 1000, check=lambda v: _positive(v) or (None if v <= 2**32 else "must be <= 2^32, the "
                                                                      "conditions one seed names (split over seeds)"),
                        help="initial conditions per grid point"),
        "chunk": Key((int,), 4096, check=_positive, help="conditions per chunk (unit of storage and resumption)",
                     axis=False),
        "seed": Key((int,), 0, check=lambda v: None if 0 <= v < 2**63 else "must be in [0, 2^63)",
                    help="random seed of the model and the initial conditions"),
        "dtype": Key((str,), "float32", choices=("float32", "float64"), help="simulation precision"),
        "matmul_precision": Key((str,), "highest", choices=("highest", "tf32", "bf16"),
                                help="matrix products of float32 runs (tf32/bf16 are faster on GPUs)"),
        "kernel": Key((str,), "auto", choices=("auto", "fused", "plain"),
                      help="discrete: fused Pallas kernel (auto: the plain path until the kernel is proven on a "
                           "GPU, docs/gpu.md), or force one path"),
        "keep_final": Key((bool,), False, help="also store the final states [N, n, d]", axis=False),
        "observables": Key((list,), ["diameter", "cos_consensus"], help="observables saved at every saved time",
                           axis=False),
    },
    "model": {
        "source": Key((str,), "random", help="'random', 'minilm' or a converted .safetensors file"),
        "d": Key((int,), 64, check=_positive, help="random model: token dimension"),
        "heads": Key((int,), 4, check=_positive, help="random model: number of heads"),
        "depth": Key((int,), 12, check=_positive, help="random model: number of blocks"),
        "shared": Key((bool,), True, help="random model: one weight set for every block"),
        "mask": Key((str,), "full", help="random model: 'full', 'causal' or 'local:W'"),
        "weights": Key((str,), "gaussian", choices=("gaussian", "uniform", "identity"),
                       help="random model: Q, K (and V) law"),
        "value": Key((str,), "random", choices=("random", "identity"), help="random model: value/output matrices"),
        "scale": Key(_NUM, None, check=_finite_positive, help="random model: score scale (default 1/sqrt(d_h))"),
    },
    "dynamics": {
        "kind": Key((str,), "discrete", choices=("discrete", "continuous"), help="maps (layers) or flows"),
        "attention": Key((str,), "softmax", choices=ATTENTION_KERNELS, help="attention kernel"),
        "beta": Key(_NUM, 1.0, check=_finite, help="inverse temperature"),
        "norm": Key((str,), "l2", choices=("l2", "none", "layernorm"), help="discrete: normalisation"),
        "alpha": Key(_NUM, 1.0, check=_finite, help="discrete: step size"),
        "steps": Key((int,), None, check=lambda v: None if v >= 0 else "must be >= 0",
                     help="discrete: number of steps (default: the model's depth)"),
        "save": Key((int, str), 1, check=_save, help="discrete: observe every m-th step, or 'last'"),
        "ffn": Key((bool,), False, help="discrete: keep the FFN (converted models)"),
        "pre_ln": Key((bool,), False, help="discrete: keep ln_1 before attention (pre-norm models)"),
        "biases": Key((bool,), False, help="discrete: include biases"),
        "space": Key((str,), "sphere", choices=("sphere", "flat"), help="continuous: token space"),
        "rescaled": Key((bool,), False, help="continuous, flat: the rescaled form z = e^{-tF} x"),
        "t1": Key(_NUM, 10.0, check=_finite_positive, help="continuous: final time"),
        "saves": Key((int,), 11, check=lambda v: None if v >= 2 else "must be >= 2",
                     help="continuous: number of equally spaced saved times in [0, t1]"),
        "solver": Key((str,), "tsit5", help="continuous: diffrax solver name"),
        "rtol": Key(_NUM, 1e-6, check=_finite_positive, help="continuous: relative tolerance"),
        "atol": Key(_NUM, 1e-8, check=_finite_positive, help="continuous: absolute tolerance"),
        "dt": Key(_NUM, None, check=_finite_positive, help="continuous: fixed step size (default adaptive)"),
        "max_steps": Key((int,), 100_000, check=_positive, help="continuous: most solver steps per condition",
                         axis=False),
        "layer_time": Key(_NUM, 1.0, check=_finite_positive, help="continuous: duration of one layer"),
    },
    "init": {
        "n": Key((int,), 10, check=_positive, help="tokens per initial condition"),
        "kind": Key((str,), "sphere", choices=("sphere", "gaussian"), help="initial token distribution"),
    },
}


def _check_value(where: str, key: Key, v):
    if isinstance(v, bool) and bool not in key.types:
        raise ConfigError(f"{where}: expected {'/'.join(t.__name__ for t in key.types)}, got {v!r}")
    if v is None:
        return v
    if not isinstance(v, key.types):
        raise ConfigError(f"{where}: expected {'/'.join(t.__name__ for t in key.types)}, got {v!r}")
    if isinstance(v, float) and not math.isfinite(v) and (key.check is _finite or key.check is _finite_positive):
        raise ConfigError(f"{where}: must be finite, got {v!r}")
    if key.choices is not None and v not in key.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(map(str, key.choices))}, got {v!r}")
    if key.check is not None:
        msg = key.check(v)
        if msg:
            raise ConfigError(f"{where}: {msg}, got {v!r}")
    return v


def validate_config(raw: Mapping) -> dict:
    """Check every key against :data:`SCHEMA`; fill defaults. Returns ``{section: {key: value}}``
    where a value is a list exactly when it is a grid axis."""
    out: dict[str, dict] = {sec: {} for sec in SCHEMA}
    for name, value in raw.items():
        key = name.replace("-", "_")
        if key in SCHEMA and key != "" and isinstance(value, Mapping):
            for sub, v in value.items():
                _fill(out, key, sub.replace("-", "_"), v)
        else:
            _fill(out, "", key, value)
    given = set(out["model"])
    # keys given a value other than the default (one equal to it records nothing the run does not do)
    set_keys = {(f"{sec}.{k}" if sec else k) for sec, keys in out.items() for k, v in keys.items()
                if isinstance(v, list) or v != SCHEMA[sec][k].default}
    for sec, keys in SCHEMA.items():
        for k, spec in keys.items():
            out[sec].setdefault(k, spec.default)
    sources = out["model"]["source"] if isinstance(out["model"]["source"], list) else [out["model"]["source"]]
    random_only = sorted(given - {"source"})
    if random_only and "random" not in sources:
        raise ConfigError(f"model.{random_only[0]} only applies to model.source = 'random' (a converted model "
                          "brings its own dimensions, heads, depth and masks)")
    obs = out[""]["observables"]
    for o in obs:
        if o not in OBSERVABLES:
            raise ConfigError(f"observables: unknown observable {o!r}; known: {', '.join(OBSERVABLES)}")
    if not obs:
        raise ConfigError("observables: give at least one observable")
    points = expand(out)
    for p in points:
        _check_point(p)
    _refuse_inert(points, set_keys)
    return out


#: Keys that only a discrete (map) or only a continuous (flow) point uses.
DISCRETE_ONLY = ("kernel", "dynamics.norm", "dynamics.alpha", "dynamics.steps", "dynamics.save", "dynamics.ffn",
                 "dynamics.pre_ln", "dynamics.biases")
CONTINUOUS_ONLY = ("dynamics.space", "dynamics.rescaled", "dynamics.t1", "dynamics.saves", "dynamics.solver",
                   "dynamics.rtol", "dynamics.atol", "dynamics.dt", "dynamics.max_steps", "dynamics.layer_time")


def inert_keys(p: dict) -> dict[str, str]:
    """The keys that change nothing at grid point ``p``, each with the reason."""
    out = {}
    kind = p["dynamics.kind"]
    for k in CONTINUOUS_ONLY if kind == "discrete" else DISCRETE_ONLY:
        out[k] = f"dynamics.kind = '{kind}'"
    if p["dynamics.attention"] == "uniform":  # a_ij = 1/n whatever the scores
        out["dynamics.beta"] = out["model.scale"] = "dynamics.attention = 'uniform' (no scores)"
    if kind == "continuous" and p["dynamics.dt"] is not None:
        out["dynamics.rtol"] = out["dynamics.atol"] = "a fixed step size dynamics.dt (no step-size control)"
    if kind == "discrete" and p["model.source"] == "random":
        for k in ("dynamics.ffn", "dynamics.pre_ln", "dynamics.biases"):
            out[k] = "model.source = 'random' (attention-only, post-norm, no biases)"
    return out


def _refuse_inert(points: list[dict], set_keys: set) -> None:
    """Options set that change nothing are refused rather than recorded (the run would claim them): a
    key inert at every point, or an axis inert at some points (they would repeat one run)."""
    for key in sorted(set_keys):
        why = [inert_keys(p).get(key) for p in points]
        if all(why):
            raise ConfigError(f"{key} does nothing with {why[0]}: remove it")
        if any(why) and any(key in p["params"] for p in points):
            reason = next(w for w in why if w)
            raise ConfigError(f"{key} is an axis but does nothing at the points with {reason}, which would repeat "
                              "one run: run those points as a separate sweep")


def _fill(out, sec, key, v):
    where = f"{sec}.{key}" if sec else key
    if key not in SCHEMA[sec]:
        known = ", ".join(k for k in SCHEMA[sec] if k)
        raise ConfigError(f"unknown key '{where}' (known{' in [' + sec + ']' if sec else ''}: {known})")
    spec = SCHEMA[sec][key]
    if key == "observables":
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            raise ConfigError(f"observables: expected a list of names, got {v!r}")
        out[sec][key] = list(v)
        return
    if isinstance(v, list):
        if not spec.axis:
            raise ConfigError(f"{where}: takes a single value, not a list")
        if not v:
            raise ConfigError(f"{where}: an empty list gives an empty grid")
        out[sec][key] = [_check_value(f"{where}[{i}]", spec, x) for i, x in enumerate(v)]
    else:
        out[sec][key] = _check_value(where, spec, v)


def expand(cfg: dict) -> list[dict]:
    """The grid points of a validated configuration: flat dicts ``{'section.key': value}`` with
    ``'params'`` holding the values of the axes (what distinguishes the point)."""
    flat = {(f"{s}.{k}" if s else k): v for s, keys in cfg.items() for k, v in keys.items()}
    axes = [k for k, v in flat.items() if isinstance(v, list) and k != "observables"]
    points = []
    for combo in itertools.product(*(flat[a] for a in axes)):
        p = dict(flat)
        p.update(zip(axes, combo, strict=True))
        p["params"] = dict(zip(axes, combo, strict=True))
        points.append(p)
    return points


def _check_point(p: dict) -> None:
    if p["model.source"] == "random":
        if p["model.d"] % p["model.heads"]:
            raise ConfigError(f"model.d = {p['model.d']} is not divisible by model.heads = {p['model.heads']}")
        parse_mask(p["model.mask"])
    if p["dynamics.kind"] == "continuous":
        if p["dynamics.solver"] not in SOLVERS:
            raise ConfigError(f"dynamics.solver: must be one of {', '.join(SOLVERS)}, got {p['dynamics.solver']!r}")
        if p["dynamics.rescaled"] and p["dynamics.space"] != "flat":
            raise ConfigError("dynamics.rescaled needs dynamics.space = 'flat'")
        import diffrax

        if p["dynamics.dt"] is None and not issubclass(SOLVERS[p["dynamics.solver"]], diffrax.AbstractAdaptiveSolver):
            raise ConfigError(f"dynamics.solver = {p['dynamics.solver']} has no error estimate: give a fixed step "
                              "size dynamics.dt")
