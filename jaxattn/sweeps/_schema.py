"""A sweep's configuration: the keys (:data:`SCHEMA`), their checks, the grid points (:func:`expand`) and the
options that would change nothing at a point (refused rather than recorded)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

from jaxattn.config import Spec as Key
from jaxattn.config import at_least, check_value, non_negative, option, positive, specs
from jaxattn.config import seed as seed_check
from jaxattn.dynamics import SIMULATION_DTYPES
from jaxattn.dynamics.continuous import SOLVERS, adaptive
from jaxattn.dynamics.discrete import NORMS, ROPES, Dynamics
from jaxattn.dynamics.fields import RESCALED_NEEDS_FLOAT64
from jaxattn.dynamics.geometry import NEEDS_S, SPACES
from jaxattn.dynamics.options import FUSED_REMOVED, PATHS, PRECISIONS
from jaxattn.errors import ConfigError, is_every
from jaxattn.model.attention import ATTENTIONS
from jaxattn.model.params import parse_mask
from jaxattn.model.sampling import INIT_KINDS, MAX_CONDITIONS, NEEDS_ARRAY, VALUE_KINDS, WEIGHT_KINDS
from jaxattn.sweeps._observables import OBSERVABLES


def _num_init(v):
    return positive(v) or (None if v <= MAX_CONDITIONS else "must be <= 2^32, the conditions one seed names (split "
                                                              "over seeds)")


def _save(v):
    return None if v is not None and is_every(v) else "must be a positive integer or 'last'"


def _mask(v):
    try:
        parse_mask(v)
    except ConfigError as e:
        return str(e).rsplit(", got ", 1)[0]  # the value is said once, by the caller
    return None


def _plain(kinds, needs_array) -> tuple:
    """The kinds that one value names (those needing an array, e.g. an ellipsoid's matrix S, are for Python)."""
    return tuple(k for k in kinds if k not in needs_array)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The run: conditions, chunks, seed, precision, what is saved (the configuration's top-level keys)."""

    name: str = option("sweep", "a label for the sweep", axis=False)
    num_init: int = option(1000, "number of random initial conditions (in a sweep: of every grid point)",
                           check=_num_init)
    chunk: int = option(4096, "conditions per chunk (unit of storage and resumption)", check=positive, axis=False)
    seed: int = option(0, "random seed (model and initial conditions)", check=seed_check)
    dtype: str = option("float32", "simulation precision", choices=SIMULATION_DTYPES)
    matmul_precision: str = option("highest", "matrix products of float32 runs: full float32, or TF32/bf16 (faster "
                                   "on GPUs, about 1e-3 off after 24 layers; docs/gpu.md)", choices=PRECISIONS)
    path: str = option("auto", "discrete: auto and plain are the same path (kept so that configurations naming it "
                       "still run; a fused kernel, slower on a GPU, was removed: docs/gpu.md); formerly 'kernel'",
                       choices=PATHS)
    keep_final: bool = option(False, "also store the final states [N, n, d]", axis=False)
    observables: list[str] = option(["diameter", "cos_consensus"], "observables saved at every saved time",
                                    choices=tuple(OBSERVABLES), axis=False)


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """The model: a random one (its law and shape) or a converted file (``[model]``)."""

    source: str = option("random", "'random', 'minilm' (built-in all-MiniLM-L6-v2) or a converted .safetensors file",
                         flag="model")
    d: int = option(64, "random model: token dimension", check=positive)
    heads: int = option(4, "random model: number of heads H (d % H == 0)", check=positive)
    depth: int = option(12, "random model: number of blocks", check=positive)
    shared: bool = option(True, "random model: one weight set for every block (ALBERT-like) or one per block")
    mask: str = option("full", "random model: 'full', 'causal' or 'local:W'", check=_mask)
    weights: str = option("gaussian", "random model: law of the entries of Q, K (and V, O unless value = identity): "
                          "gaussian N(0, 1/d), uniform in [-1, 1], identity (Q = K = I)",
                          choices=_plain(WEIGHT_KINDS, NEEDS_ARRAY))
    value: str = option("random", "random model: value/output matrices", choices=_plain(VALUE_KINDS, NEEDS_ARRAY))
    scale: float | None = option(None, "random model: score scale s of <Q x_i, K x_j> (the clustering papers use 1; "
                                 "default 1/sqrt(d_h))", check=positive)


@dataclasses.dataclass(frozen=True)
class DynamicsOptions:
    """The dynamics: a map (discrete, :class:`jaxattn.Dynamics`) or a flow (continuous, :class:`jaxattn.Flow`)."""

    kind: str = option("discrete", "'discrete' (maps: one step per layer) or 'continuous' (flows, solved by diffrax)",
                       choices=("discrete", "continuous"))
    attention: str = option("softmax", "attention kernel: softmax, uniform a_ij = 1/n (the Oja model) or "
                            "unnormalised exp(scores)/n (rows not normalised)", choices=ATTENTIONS)
    beta: float = option(1.0, "inverse temperature β multiplying the scores")
    norm: str = option("l2", "discrete: normalisation after the update", choices=_plain(NORMS, NEEDS_S))
    alpha: float = option(1.0, "discrete: step size α")
    steps: int | None = option(None, "discrete: number of steps (default: the model's depth; more prolongs it)",
                               check=non_negative)
    save: int | str = option(1, "discrete: observe every m-th step, or 'last'", check=_save)
    save_steps: list[int] | None = option(None, "discrete: the steps to observe, instead of save's period (e.g. a "
                                          "logarithmic grid of a long run; jaxattn.Save(steps=...))",
                                          check=non_negative)
    ffn: bool = option(False, "discrete: keep the FFN (converted models)")
    pre_ln: bool = option(False, "discrete: pre-norm models (GPT-2, GPT-Neo): keep ln_1 before attention")
    biases: bool = option(False, "include biases (converted models)")
    drop_ln2: bool = option(False, "discrete: pre-norm models without the FFN: the block is x + α Attn(LN1 x), no "
                            "norm after it (the GPT-Consensus reading)")
    unit_output: bool = option(False, "discrete: D2, one head with O = I (a random model is drawn so; a converted "
                               "one must have it)")
    rope: str = option("none", "discrete: positions in attention: 'none' position-free (tokens exchangeable), "
                       "'model' the model's own RoPE (Llama, GPT-NeoX...), 'on' the model's or the standard RoPE "
                       "(θ = 10⁴)", choices=ROPES)
    space: str = option("sphere", "continuous: token space", choices=_plain(SPACES, NEEDS_S))
    rescaled: bool = option(False, "continuous, flat: the rescaled form z = e^{-tF} x (in float64 only)")
    t1: float = option(10.0, "continuous: final time", check=positive)
    saves: int = option(11, "continuous: number of equally spaced saved times in [0, t1]", check=at_least(2))
    solver: str = option("tsit5", "continuous: diffrax solver", choices=tuple(SOLVERS))
    rtol: float = option(1e-6, "continuous: relative tolerance", check=positive)
    atol: float = option(1e-8, "continuous: absolute tolerance", check=positive)
    dt: float | None = option(None, "continuous: fixed step size (default adaptive)", check=positive)
    max_steps: int = option(100_000, "continuous: most solver steps per condition", check=positive, axis=False)
    layer_time: float = option(1.0, "continuous: duration of one layer", check=positive)


@dataclasses.dataclass(frozen=True)
class InitOptions:
    """The initial conditions (``[init]``)."""

    n: int = option(10, "tokens per initial condition", check=positive)
    kind: str = option("sphere", "distribution of initial tokens", choices=_plain(INIT_KINDS, NEEDS_ARRAY),
                       flag="init")


#: The configuration's sections and the dataclass that declares each ("" holds the top-level keys).
SECTIONS: dict[str, type] = {"": RunOptions, "model": ModelOptions, "dynamics": DynamicsOptions, "init": InitOptions}
#: Every key of a sweep configuration, by section: derived from :data:`SECTIONS`.
SCHEMA: dict[str, dict[str, Key]] = {sec: specs(cls) for sec, cls in SECTIONS.items()}
#: Keys renamed since stores were first written: an old configuration file still runs, an old store still resumes.
RENAMED = {"kernel": "path"}
#: Keys added after stores were first written, with the value every older store ran: left out of the
#: fingerprint at that value, so those stores resume.
ADDED = {("dynamics", "rope"): "none", ("dynamics", "drop_ln2"): False, ("dynamics", "unit_output"): False,
         ("dynamics", "save_steps"): None}


def fields_of(cls, values: Mapping) -> dict:
    """The keyword arguments of the dataclass ``cls`` that ``values`` names, by field name (a key reaches the field
    of its name: nothing translates by hand)."""
    return {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}


def dynamics_of(values: Mapping) -> Dynamics:
    """The :class:`~jaxattn.Dynamics` that options name (``values``: by field name, e.g. a command's resolved
    options or a point's ``dynamics.*`` keys without the prefix); the fields not given keep their defaults."""
    return Dynamics(**fields_of(Dynamics, values))


def decisive(cfg: dict) -> dict:
    """What of a validated configuration decides the numbers, as the fingerprint of its store reads it: every
    key but the label, under the names and with the keys that stores were first written with (:data:`RENAMED`,
    :data:`ADDED`), so that a store written before a rename or an addition still resumes."""
    back = {new: old for old, new in RENAMED.items()}
    out = {s: {back.get(k, k) if not s else k: v for k, v in keys.items() if k != "name"} for s, keys in cfg.items()}
    for (sec, key), old in ADDED.items():
        if out[sec].get(key) == old:
            del out[sec][key]
    return out


def validate_config(raw: Mapping) -> dict:
    """Check every key against :data:`SCHEMA`; fill defaults. Returns ``{section: {key: value}}``
    where a value is a list exactly when it is a grid axis."""
    out: dict[str, dict] = {sec: {} for sec in SCHEMA}
    both = [(old, new) for old, new in RENAMED.items() if {old, new} <= {k.replace("-", "_") for k in raw}]
    if both:
        raise ConfigError(f"{both[0][0]} is the old name of {both[0][1]}: give one of them")
    for name, value in raw.items():
        key = RENAMED.get(name.replace("-", "_"), name.replace("-", "_"))
        if key == "path" and (value == "fused" or (isinstance(value, list) and "fused" in value)):
            raise ConfigError(f"{name.replace('-', '_')}: got 'fused': {FUSED_REMOVED.split(': ', 1)[1]}")
        if key in SCHEMA and key != "" and isinstance(value, Mapping):
            for sub, v in value.items():
                _fill(out, key, sub.replace("-", "_"), v)
        else:
            _fill(out, "", key, value, written=name.replace("-", "_"))
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
    points = expand(out)
    for p in points:
        _check_point(p)
    _refuse_inert(points, set_keys)
    return out


#: Keys that only a discrete (map) or only a continuous (flow) point uses: those whose help says so.
DISCRETE_ONLY = tuple(f"{sec}.{k}" if sec else k for sec, keys in SCHEMA.items() for k, spec in keys.items()
                      if spec.help.startswith("discrete:"))
CONTINUOUS_ONLY = tuple(f"{sec}.{k}" if sec else k for sec, keys in SCHEMA.items() for k, spec in keys.items()
                        if spec.help.startswith("continuous"))


def inert_keys(p: dict) -> dict[str, str]:
    """The keys that change nothing at grid point ``p``, each with the reason."""
    out = {}
    kind = p["dynamics.kind"]
    for k in CONTINUOUS_ONLY if kind == "discrete" else DISCRETE_ONLY:
        out[k] = f"dynamics.kind = '{kind}'"
    if p["dynamics.attention"] == "uniform":  # a_ij = 1/n whatever the scores
        out["dynamics.beta"] = out["model.scale"] = out["dynamics.rope"] = "dynamics.attention = 'uniform' (no scores)"
    if p["dtype"] == "float64":  # the precision setting only lowers float32 products
        out["matmul_precision"] = "dtype = 'float64' (its products are float64)"
    if kind == "continuous" and p["dynamics.dt"] is not None:
        out["dynamics.rtol"] = out["dynamics.atol"] = "a fixed step size dynamics.dt (no step-size control)"
    if p["model.source"] == "random" and p["model.shared"]:  # one weight set: the same field at every time
        out["dynamics.layer_time"] = "model.shared = true (one weight set, no layers in time)"
    if p["model.source"] == "random":
        for k in ("dynamics.ffn", "dynamics.pre_ln", "dynamics.biases", "dynamics.drop_ln2"):
            out.setdefault(k, "model.source = 'random' (attention-only, post-norm, no biases)")
        if kind == "discrete" and p["dynamics.rope"] == "model":
            out["dynamics.rope"] = "model.source = 'random' (no RoPE of its own; 'on' applies the standard one)"
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


def _fill(out, sec, key, v, written: str | None = None):
    where = written or (f"{sec}.{key}" if sec else key)
    if key in out[sec]:  # num-init next to num_init, or kernel next to path: one key given twice
        raise ConfigError(f"{where} is given twice (under two spellings): give it once")
    if key not in SCHEMA[sec]:
        # at the top level the sections are keys too: a misspelled [dynamic] is told the tables it may mean
        known = ", ".join([k for k in SCHEMA[sec] if k] + ([f"[{k}]" for k in SCHEMA if k] if not sec else []))
        raise ConfigError(f"unknown key '{where}' (known{' in [' + sec + ']' if sec else ''}: {known})")
    spec = SCHEMA[sec][key]
    if isinstance(v, list) and not spec.is_list:
        if not spec.axis:
            raise ConfigError(f"{where}: takes a single value, not a list")
        if not v:
            raise ConfigError(f"{where}: an empty list gives an empty grid")
        values = [check_value(f"{where}[{i}]", spec, x) for i, x in enumerate(v)]
        repeated = next((x for i, x in enumerate(values) if x in values[:i]), None)
        if repeated is not None or (None in values and values.count(None) > 1):
            raise ConfigError(f"{where}: the axis repeats {repeated!r}, which would run one point twice")
        out[sec][key] = values
    else:
        out[sec][key] = check_value(where, spec, v)


def expand(cfg: dict) -> list[dict]:
    """The grid points of a validated configuration: flat dicts ``{'section.key': value}`` with
    ``'params'`` holding the values of the axes (what distinguishes the point)."""
    flat = {(f"{s}.{k}" if s else k): v for s, keys in cfg.items() for k, v in keys.items()}
    lists = {(f"{sec}.{k}" if sec else k) for sec, keys in SCHEMA.items() for k, spec in keys.items() if spec.is_list}
    axes = [k for k, v in flat.items() if isinstance(v, list) and k not in lists]
    points = []
    for combo in itertools.product(*(flat[a] for a in axes)):
        p = dict(flat)
        p.update(zip(axes, combo, strict=True))
        p["params"] = dict(zip(axes, combo, strict=True))
        points.append(p)
    return points


def _check_point(p: dict) -> None:
    if p["model.source"] == "random" and p["model.d"] % p["model.heads"]:
        raise ConfigError(f"model.d = {p['model.d']} is not divisible by model.heads = {p['model.heads']}")
    if p["dynamics.kind"] == "discrete" and p["dynamics.save_steps"] is not None and p["dynamics.save"] != 1:
        raise ConfigError("dynamics.save_steps lists the steps to observe; dynamics.save gives a period: give one of "
                          "them")
    if p["dynamics.kind"] == "continuous":
        if p["dynamics.rescaled"] and p["dynamics.space"] != "flat":
            raise ConfigError("dynamics.rescaled needs dynamics.space = 'flat'")
        if p["dynamics.rescaled"] and p["dtype"] != "float64":
            raise ConfigError(f"dynamics.rescaled runs in float64 only: {RESCALED_NEEDS_FLOAT64}; set dtype = "
                              "'float64'")
        if p["dynamics.dt"] is None and not adaptive(p["dynamics.solver"]):
            raise ConfigError(f"dynamics.solver = {p['dynamics.solver']} has no error estimate: give a fixed step "
                              "size dynamics.dt")
