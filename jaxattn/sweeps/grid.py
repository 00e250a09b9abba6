"""Grids of runs from one configuration, executed chunk by chunk into a :mod:`jaxattn.io.store`.

A configuration (TOML or JSON, or a dict) names the model, the dynamics, the initial conditions
and the run; any value given as a list becomes an axis of the grid, and the grid is the product of
its axes. Every key is checked against :data:`SCHEMA` before any work: an unknown key, a wrong type
or an impossible value is an error that names the key. Example::

    num_init = 100000          # initial conditions per grid point
    seed = [0, 1]              # an axis: two points
    [model]
    source = "random"          # 'random', 'minilm' or a converted .safetensors file
    d = 64
    heads = 4
    depth = 24
    mask = ["full", "causal"]  # another axis: 2 x 2 = 4 points
    [dynamics]
    kind = "discrete"          # or "continuous" (then t1, solver, rtol, ...)
    alpha = 1.0
    beta = [0.5, 1.0, 2.0]     # 12 points; points that differ only in alpha, beta, t1 or the
    [init]                     # tolerances share one compiled program
    n = 32

Execution (:func:`sweep_grid`): the conditions of every point are cut into chunks; each chunk is
split over the local devices (``shard_map``), its observables (and optionally final states) written
to the store with a checksum, and an interrupted sweep resumes where it stopped. With several
processes (``jax.distributed``; one per host, e.g. under Slurm) process ``p`` of ``P`` takes the
chunks ``p, p + P, ...``. Condition ``i`` of a point always starts from ``fold_in(key(seed), i)``,
so every number is the same whatever the chunk size, device count or process count.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis import metrics
from jaxattn.dynamics.continuous import SOLVERS, solve
from jaxattn.dynamics.discrete import Dynamics, saved_steps, simulate
from jaxattn.dynamics.fields import Flow
from jaxattn.dynamics.kernels import choose
from jaxattn.dynamics.options import Batch, Save, check_batch, moved
from jaxattn.dynamics.runner import lanes_for, mesh_of, replicate
from jaxattn.errors import ConfigError, NonFiniteWarning
from jaxattn.io.checkpoints import load_any
from jaxattn.io.configfile import load_config
from jaxattn.io.results import device_info, versions
from jaxattn.io.store import CorruptChunk, SweepStore, chunk_ranges, fingerprint, nonfinite_conditions, open_sweep
from jaxattn.model.attention import KERNELS as ATTENTION_KERNELS
from jaxattn.model.params import parse_mask
from jaxattn.model.sampling import init_tokens, seeded_model

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

#: Observables a sweep can save, by name: functions of one configuration ``X: [n, d]``.
OBSERVABLES = {
    "diameter": lambda X, ctx: metrics.diameter(X),
    "mean_distance": lambda X, ctx: metrics.mean_distance(X),
    "cos_consensus": lambda X, ctx: metrics.cos_consensus(X),
    "first_token_consensus": lambda X, ctx: metrics.first_token_consensus(X),
    "attn_rank": lambda X, ctx: jnp.mean(metrics.numerical_rank(ctx.attention()).astype(X.dtype)),
}


@dataclasses.dataclass(frozen=True)
class Observables:
    """The observable of a sweep: a dict of the named quantities (hashable: compiled once per set)."""

    names: tuple

    def __call__(self, t, X, ctx):
        return {name: OBSERVABLES[name](X, ctx) for name in self.names}


# ---------------------------------------------------------------------------- configuration


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


# ---------------------------------------------------------------------------- execution
def _model_of(p: dict, cache: dict):
    if p["model.source"] == "random":
        spec: tuple = ("random", p["seed"], p["model.d"], p["model.heads"], p["model.depth"], p["model.shared"],
                p["model.mask"], p["model.weights"], p["model.value"], p["model.scale"])
        if spec not in cache:
            cache[spec] = seeded_model(p["seed"], p["model.d"], p["model.heads"], p["model.depth"],
                                       shared=p["model.shared"], weights=p["model.weights"], value=p["model.value"],
                                       mask=p["model.mask"], scale=p["model.scale"])
        return cache[spec]
    spec = ("file", p["model.source"])
    if spec not in cache:
        cache[spec] = load_any(p["model.source"])
    return cache[spec]


def _rows(chunk: int, num_init: int, batch) -> int:
    """Conditions computed per chunk of a point: the chunk, or fewer when the whole point is smaller,
    rounded up to whole blocks of the runner (``batch.size`` lanes per device)."""
    width = lanes_for(batch.size) * (1 if batch.devices is None else len(batch.devices))
    return min(chunk, -(-num_init // width) * width)


def _options(p: dict, batch):
    """A point's flat configuration keys as the drivers' :class:`~jaxattn.Save` and :class:`~jaxattn.Batch`
    (the one place they are mapped): ``observables``, ``dynamics.save`` (maps) or ``dynamics.t1`` and
    ``dynamics.saves`` (flows), ``matmul_precision`` and ``kernel`` (the map's path), on top of the sweep's
    ``batch`` (lane width and devices)."""
    default = tuple(p["observables"]) == ("diameter", "cos_consensus")  # the fused kernel computes these on chip
    obs = None if default else Observables(tuple(p["observables"]))
    if p["dynamics.kind"] == "continuous":
        save = Save(ts=np.linspace(0.0, p["dynamics.t1"], p["dynamics.saves"]), observe=obs)
        return save, dataclasses.replace(batch, precision=p["matmul_precision"])
    save = Save(every=p["dynamics.save"], observe=obs)
    return save, dataclasses.replace(batch, precision=p["matmul_precision"], path=p["kernel"])


def _dynamics(p: dict):
    return Dynamics(norm=p["dynamics.norm"], ffn=p["dynamics.ffn"], pre_ln=p["dynamics.pre_ln"],
                    biases=p["dynamics.biases"], attention=p["dynamics.attention"])


def _run_chunk(p: dict, model, X0, batch):
    save, batch = _options(p, batch)
    dtype = p["dtype"]
    if p["dynamics.kind"] == "discrete":
        steps = model.depth if p["dynamics.steps"] is None else p["dynamics.steps"]
        with warnings.catch_warnings():  # non-finite conditions are counted and reported by the sweep
            warnings.simplefilter("ignore", NonFiniteWarning)
            res = simulate(model, X0, steps, dynamics=_dynamics(p), alpha=p["dynamics.alpha"], beta=p["dynamics.beta"],
                           save=save, batch=batch, dtype=dtype)
        return {"observables": res.observables, "final": res.final}
    flow = Flow(space=p["dynamics.space"], rescaled=p["dynamics.rescaled"], attention=p["dynamics.attention"])
    sol = solve(model, X0, p["dynamics.t1"], flow=flow, beta=p["dynamics.beta"], save=save, batch=batch, dtype=dtype,
                solver=p["dynamics.solver"], rtol=p["dynamics.rtol"], atol=p["dynamics.atol"], dt=p["dynamics.dt"],
                max_steps=p["dynamics.max_steps"], layer_time=p["dynamics.layer_time"])
    return {"observables": sol.observables, "final": sol.final, "result": sol.result, "num_steps": sol.num_steps}


def _kernel_choice(p: dict, model) -> str:
    """The path a point's chunks take: 'fused' (Pallas kernel), 'plain' or 'diffrax' (flows)."""
    if p["dynamics.kind"] == "continuous":
        return "diffrax"
    save, batch = _options(p, Batch())
    return choose(batch.path, model, _dynamics(p), save.observe, save.trajectory, save.every, p["init.n"])


def saved_times(p: dict, depth: int) -> np.ndarray:
    """The times (maps: step indices) at which a point saves its observables."""
    if p["dynamics.kind"] == "continuous":
        return np.linspace(0.0, p["dynamics.t1"], p["dynamics.saves"])
    steps = depth if p["dynamics.steps"] is None else p["dynamics.steps"]
    return saved_steps(steps, p["dynamics.save"]).astype(np.float64)


def distributed_from_env(process_id=None, num_processes=None, coordinator=None) -> tuple[int, int, str | None]:
    """Process index, count and coordinator from the arguments, else the environment
    (``JAXATTN_PROCESS_ID`` / ``JAXATTN_NUM_PROCESSES`` / ``JAXATTN_COORDINATOR``, or Slurm's
    ``SLURM_PROCID`` / ``SLURM_NTASKS``)."""
    if num_processes is None:
        num_processes = _env_int("JAXATTN_NUM_PROCESSES", "SLURM_NTASKS", 1)
    if process_id is None:
        process_id = _env_int("JAXATTN_PROCESS_ID", "SLURM_PROCID", 0)
    coordinator = coordinator or os.environ.get("JAXATTN_COORDINATOR")
    if num_processes < 1:
        raise ConfigError(f"the number of processes must be at least 1, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise ConfigError(f"process id {process_id} is outside 0..{num_processes - 1}")
    if num_processes > 1 and not coordinator:
        raise ConfigError("several processes need a coordinator address host:port "
                          "(--coordinator or JAXATTN_COORDINATOR)")
    if coordinator:
        _check_address(coordinator)
    return process_id, num_processes, coordinator


def _env_int(name: str, fallback: str, default: int) -> int:
    """An integer from ``$name`` (else ``$fallback``, else ``default``); a non-integer is one clear error."""
    var = name if name in os.environ else fallback
    raw = os.environ.get(var)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"${var} must be an integer, got {raw!r}") from None


def _check_address(address: str) -> None:
    """A coordinator address is ``host:port`` with a port in 1..65535 (jax.distributed fails obscurely otherwise)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"coordinator address must be host:port (e.g. node0:1234), got {address!r}")


@moved
def sweep_grid(config, out, *, batch: Batch | None = None, process_id: int | None = None,
               num_processes: int | None = None, coordinator: str | None = None, progress: bool = True, log=None):
    """Run every grid point of ``config`` into the store ``out`` (created, or resumed if it holds this
    configuration). Returns the opened :class:`jaxattn.io.store.Sweep`.

    ``batch`` (:class:`jaxattn.Batch`): the lane width (``size``) and the devices each chunk is split over;
    default ``Batch(devices=jax.local_devices())``, every local device. Its precision and path are the
    configuration's (``matmul_precision``, ``kernel``), so a ``Batch`` giving its own is refused.
    ``process_id``/``num_processes``/``coordinator``: several cooperating processes (one per host)
    under ``jax.distributed``; see :func:`distributed_from_env`.

    Examples:
        >>> import os, shutil, tempfile, jaxattn as ja
        >>> tmp = tempfile.mkdtemp()
        >>> config = {"num_init": 6, "chunk": 4, "init": {"n": 5},
        ...           "model": {"source": "random", "d": 8, "heads": 2, "depth": 3},
        ...           "dynamics": {"beta": [1.0, 2.0]}}            # a list is an axis: two grid points
        >>> sw = ja.sweep_grid(config, os.path.join(tmp, "grid"), progress=False)
        >>> sw.table(summary=True)["dynamics.beta"].tolist()
        [1.0, 2.0]
        >>> ja.open_sweep(os.path.join(tmp, "grid")).table().shape  # one row per point and condition
        (12, 7)
        >>> shutil.rmtree(tmp)
    """
    from tqdm.auto import tqdm

    if batch is not None and (check_batch(batch, "sweep_grid", fused=True).precision,
                              batch.path) != ("highest", "auto"):
        raise ConfigError("sweep_grid takes the precision and the path from its configuration (matmul_precision, "
                          "kernel): give Batch(size=..., devices=...) only")
    cfg = validate_config(load_config(config))
    points = expand(cfg)
    if any(p["dtype"] == "float64" for p in points) and not jax.config.read("jax_enable_x64"):
        with jax.enable_x64(True):  # asked for in the configuration, for this call only: the caller's setting stays
            return sweep_grid(config, out, process_id=process_id, num_processes=num_processes,
                              coordinator=coordinator, progress=progress, batch=batch, log=log)
    pid, nproc, coord = distributed_from_env(process_id, num_processes, coordinator)
    if nproc > 1 and not jax.distributed.is_initialized():
        jax.distributed.initialize(coordinator_address=coord, num_processes=nproc, process_id=pid)
    batch = Batch(devices=jax.local_devices()) if batch is None else batch
    devices = list(batch.devices or jax.local_devices()[:1])
    chunk = cfg[""]["chunk"]
    decisive = {s: {k: v for k, v in keys.items() if k not in ("name",)} for s, keys in cfg.items()}
    models: dict = {}
    point_info = []
    for p in points:
        m = _model_of(p, models)
        point_info.append({"params": p["params"], "num_init": p["num_init"], "n": p["init.n"], "d": m.d_model,
                           "times": saved_times(p, m.depth).tolist(), "kernel": _kernel_choice(p, m)})
    manifest = {"fingerprint": fingerprint({"config": decisive, "lanes": batch.size}), "config": cfg, "chunk": chunk,
                "points": point_info, "created_by": {"versions": versions(), "device": device_info(),
                                                    "processes": nproc}}
    existed = Path(out).exists()
    store = SweepStore.open(out, manifest)
    store.lock(pid)
    computed = 0
    try:
        work = [(i, c, start, size) for i, p in enumerate(points)
                for c, start, size in chunk_ranges(p["num_init"], chunk)]
        mine = [w for j, w in enumerate(work) if j % nproc == pid]
        total = sum(w[3] for w in mine)
        bar = tqdm(total=total, unit="cond", desc="sweep", file=sys.stderr, disable=not progress, smoothing=0.1)
        t0 = time.perf_counter()
        resumed = failed = 0
        nonfinite = [0] * len(points)  # conditions whose observables or states became NaN or inf, per point
        replicated: dict = {}
        for i, c, start, size in mine:
            p = points[i]
            try:
                kept = store.read_chunk(i, c, start, size)
            except CorruptChunk:  # recomputed
                kept = None
            if kept is not None:
                nonfinite[i] += int(nonfinite_conditions(kept, size).sum())
                resumed += size
                bar.update(size)
                continue
            m = _model_of(p, models)
            dtype = jnp.float64 if p["dtype"] == "float64" else jnp.float32
            key = id(m), str(dtype)
            if key not in replicated:  # weights placed on the devices once per sweep, not per chunk
                bare = m.replace(embeddings=None, final_ln_w=None, final_ln_b=None).astype(dtype)
                replicated[key] = replicate(bare, mesh_of(devices))
            # every chunk of a point has one shape (the last one padded): one compiled program. A point with
            # fewer conditions than a chunk is padded only to the runner's block width, not to the chunk (a
            # solve of 8 conditions integrated 4096); the blocks, hence the numbers, are the same either way
            X0 = init_tokens(jax.random.key(p["seed"]), _rows(chunk, p["num_init"], batch), p["init.n"],
                             m.d_model, kind=p["init.kind"], start=start, dtype=dtype)
            res = _run_chunk(p, replicated[key], X0, batch)
            arrays = {f"observables/{k}": np.asarray(v)[:size] for k, v in res["observables"].items()}
            if p["keep_final"]:
                arrays["final"] = np.asarray(res["final"])[:size]
            if "result" in res:
                arrays["result"] = np.asarray(res["result"])[:size]
                arrays["num_steps"] = np.asarray(res["num_steps"])[:size]
                failed += int(np.sum(arrays["result"] != 0))
            nonfinite[i] += int(nonfinite_conditions(arrays, size).sum())
            store.write_chunk(i, c, start, arrays, p["num_init"], chunk, {"process": pid})
            computed += size
            bar.update(size)
        bar.close()
        seconds = time.perf_counter() - t0
    except BaseException:
        store.release()
        if not existed and computed == 0 and not any((store.root / "done").rglob("*.json")):
            import shutil  # a run refused before any result: leave nothing behind

            shutil.rmtree(store.root, ignore_errors=True)
        raise
    store.release()
    summary = {"points": len(points), "conditions": sum(p["num_init"] for p in points), "computed": computed,
               "resumed": resumed, "failed": failed, "nonfinite": sum(nonfinite), "nonfinite_per_point": nonfinite,
               "seconds": round(seconds, 3),
               "conditions_per_second": round(computed / seconds, 1) if seconds > 0 and computed else None,
               "process": pid, "processes": nproc, "devices": [str(d) for d in devices]}
    store.mark_finished(summary, pid)
    if log is not None:
        log(summary)
    sw = open_sweep(out)
    sw.summary = summary
    return sw
