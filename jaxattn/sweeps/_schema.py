"""A sweep's configuration: the keys (:data:`SCHEMA`), their checks, the grid points (:func:`expand`) and the
options that would change nothing at a point (refused rather than recorded).

The keys are not declared here: each is the field of the object that runs it, declared there once with its help,
choices and check (:func:`jaxattn.config.about`): :class:`jaxattn.Dynamics` and :class:`jaxattn.Flow`, the solver's
:class:`~jaxattn.dynamics.continuous.Solver`, the drivers' :class:`jaxattn.Save` and :class:`jaxattn.Batch`, and a
point's runs and random model (:mod:`jaxattn.sweeps._point`). :data:`SECTIONS` says which objects fill each section
of a configuration; a key that only a map's objects declare applies to maps only (``discrete:`` in its help), one
that only a flow's declare to flows only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from jaxattn.config import Spec as Key
from jaxattn.config import check_value, option, plain, positive, specs
from jaxattn.config import seed as seed_check
from jaxattn.dynamics import SIMULATION_DTYPES
from jaxattn.dynamics.continuous import Solver, adaptive
from jaxattn.dynamics.discrete import Dynamics
from jaxattn.dynamics.fields import RESCALED_NEEDS_FLOAT64, Flow
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import ConfigError
from jaxattn.model.sampling import INIT_KINDS, MAX_CONDITIONS, NEEDS_ARRAY
from jaxattn.sweeps._observables import OBSERVABLES, Observables
from jaxattn.sweeps._point import FlowRun, MapRun, RandomModel


def _num_init(v):
    return positive(v) or (None if v <= MAX_CONDITIONS else "must be <= 2^32, the conditions one seed names (split "
                                                              "over seeds)")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The run: conditions, chunks, seed, precision, what is kept (the configuration's top-level keys beside
    :class:`jaxattn.Batch`'s)."""

    name: str = option("sweep", "a label for the sweep", axis=False)
    num_init: int = option(1000, "number of random initial conditions (in a sweep: of every grid point)",
                           check=_num_init)
    chunk: int = option(4096, "conditions per chunk (unit of storage and resumption)", check=positive, axis=False)
    seed: int = option(0, "random seed (model and initial conditions)", check=seed_check)
    dtype: str = option("float32", "simulation precision", choices=SIMULATION_DTYPES)
    keep_final: bool = option(False, "also store the final states [N, n, d]", axis=False)
    observables: list[str] = option(["diameter", "cos_consensus"], "observables saved at every saved time",
                                    choices=tuple(OBSERVABLES), axis=False)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where the model comes from (``[model]``; a random one's law is :class:`RandomModel`'s keys)."""

    source: str = option("random", "'random', 'minilm' (built-in all-MiniLM-L6-v2) or a converted .safetensors file",
                         flag="model")


@dataclasses.dataclass(frozen=True)
class Kind:
    """Which driver runs a point (``[dynamics]``; the other keys are its objects')."""

    kind: str = option("discrete", "'discrete' (maps: one step per layer) or 'continuous' (flows, solved by diffrax)",
                       choices=("discrete", "continuous"))


@dataclasses.dataclass(frozen=True)
class InitOptions:
    """The initial conditions (``[init]``)."""

    n: int = option(10, "tokens per initial condition", check=positive)
    kind: str = option("sphere", "distribution of initial tokens", choices=plain(INIT_KINDS, NEEDS_ARRAY),
                       flag="init")


#: The objects that run a map, and those that run a flow: a key only one side declares applies to that side only.
MAP_OBJECTS: tuple[type, ...] = (MapRun, Dynamics)
FLOW_OBJECTS: tuple[type, ...] = (FlowRun, Flow, Solver)
#: The configuration's sections and the objects whose options fill each ("" holds the top-level keys).
SECTIONS: dict[str, tuple[type, ...]] = {
    "": (RunOptions, Batch), "model": (ModelSource, RandomModel),
    "dynamics": (Kind, MapRun, Dynamics, Save, FlowRun, Flow, Solver), "init": (InitOptions,)}


def _section(objects: tuple[type, ...]) -> dict[str, Key]:
    """The keys of one section: every option of ``objects``, a key declared by objects of both kinds (the
    attention of a Dynamics and of a Flow) once, and said in its help to apply to one kind where it does."""
    out: dict[str, Key] = {}
    for cls in objects:
        side = "discrete" if cls in MAP_OBJECTS else "continuous" if cls in FLOW_OBJECTS else None
        for key, spec in specs(cls).items():
            spec = dataclasses.replace(spec, only=spec.only or side)
            if key in out:
                have = out[key]
                if dataclasses.replace(have, only=None, field="") != dataclasses.replace(spec, only=None, field=""):
                    raise TypeError(f"{cls.__name__}.{spec.field} declares the option {key!r} otherwise than another "
                                    "object of its section: declare it once and share it")
                spec = dataclasses.replace(have, only=have.only if have.only == spec.only else None)
            out[key] = spec
    # the keys of both kinds first, then the maps', then the flows' (each in the order declared)
    order = sorted(out, key=lambda k: (None, "discrete", "continuous").index(out[k].only))
    return {k: dataclasses.replace(out[k], help=f"{out[k].only}: {out[k].help}") if out[k].only else out[k]
            for k in order}


#: Every key of a sweep configuration, by section: derived from the objects of :data:`SECTIONS`.
SCHEMA: dict[str, dict[str, Key]] = {sec: _section(objects) for sec, objects in SECTIONS.items()}
#: Keys renamed since stores were first written: an old configuration file still runs, an old store still resumes.
RENAMED = {"kernel": "path"}
#: Keys added after stores were first written, with the value every older store ran: left out of the
#: fingerprint at that value, so those stores resume.
ADDED = {("dynamics", "rope"): "none", ("dynamics", "drop_ln2"): False, ("dynamics", "unit_output"): False,
         ("dynamics", "save_steps"): None}


def _dotted(sec: str, key: str) -> str:
    return f"{sec}.{key}" if sec else key


#: Keys that only a discrete (map) or only a continuous (flow) point uses.
DISCRETE_ONLY = tuple(_dotted(sec, k) for sec, keys in SCHEMA.items() for k, spec in keys.items()
                      if spec.only == "discrete")
CONTINUOUS_ONLY = tuple(_dotted(sec, k) for sec, keys in SCHEMA.items() for k, spec in keys.items()
                        if spec.only == "continuous")


def keys_of(save: Save | None, batch: Batch | None) -> dict[str, Any]:
    """The configuration keys (``section.key``) that a :class:`jaxattn.Save` and a :class:`jaxattn.Batch` given to
    :func:`jaxattn.sweep_grid` stand for, beside its configuration: the inverse of
    :func:`jaxattn.sweeps._point.point_of` for the fields a configuration can hold (each field that is an option
    declares its key). What a store cannot hold is refused in one line: a function as the observable (a grid saves
    named observables), a flow's times (a grid's flows save ``dynamics.saves`` equally spaced ones), a trajectory
    (a store keeps the final states, ``keep_final``), ``aux``, a forced attention form. ``size`` and ``devices`` say
    how the grid runs, not what it computes: they are not keys."""
    keys: dict[str, Any] = {}
    if save is not None:
        if not isinstance(save, Save):
            raise ConfigError(f"save must be a jaxattn.Save, got {save!r}")
        if save.ts is not None:
            raise ConfigError("sweep_grid: a grid's flows save dynamics.saves equally spaced times in [0, t1]: give "
                              "dynamics.saves in the configuration instead of Save(ts=...)")
        if save.trajectory:
            raise ConfigError("sweep_grid: a store keeps the final states (keep_final) and the observables, not "
                              "trajectories: Save(trajectory=True) is for simulate and solve")
        if save.aux is not None:
            raise ConfigError("sweep_grid: a grid's observables are named ones (observables = [...]): they take no aux")
        if save.observe is not None:
            if not isinstance(save.observe, Observables):
                raise ConfigError(f"sweep_grid saves named observables (the configuration's observables = [...], of "
                                  f"{', '.join(OBSERVABLES)}), not a function: got Save(observe={save.observe!r})")
            keys["observables"] = list(save.observe.names)
    if batch is not None:
        if not isinstance(batch, Batch):
            raise ConfigError(f"batch must be a jaxattn.Batch, got {batch!r}")
        if batch.form != "auto":
            raise ConfigError("sweep_grid chooses each point's attention form: Batch(form=...) is for simulate")
    for obj in (save, batch):  # each field that is an option, set: the key that declares it
        if obj is None:
            continue
        cls = Save if isinstance(obj, Save) else Batch  # a subclass holds the same options
        sec = next(sec for sec, objects in SECTIONS.items() if cls in objects)
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for key, spec in specs(cls).items():
            value = getattr(obj, spec.field)
            if value != defaults[spec.field]:
                keys[_dotted(sec, key)] = list(value) if spec.is_list else value
    return keys


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
