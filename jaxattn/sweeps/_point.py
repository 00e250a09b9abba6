"""A grid point as the objects the drivers take.

The configuration (:mod:`jaxattn.sweeps._schema`) is the serialised form: flat keys, checked one by one. A point
of its grid becomes, once, in :func:`point_of`, what it describes: the model's law (:class:`RandomModel`) or its
file, the dynamics (:class:`MapRun` around a :class:`jaxattn.Dynamics`, or :class:`FlowRun` around a
:class:`jaxattn.Flow` and a :class:`~jaxattn.dynamics.continuous.Solver`), and the drivers' :class:`jaxattn.Save`
and :class:`jaxattn.Batch`. Everything that runs a point (the chunk loop, the movie, the command's report) reads
these objects, never the keys. Each key is declared on the field that holds it (:func:`jaxattn.config.about`), and
``fields_of`` fills an object from the keys its fields declare: a field added to :class:`jaxattn.Dynamics` or
:class:`jaxattn.Flow` with its declaration is a key and reaches the run, not through a line of translation.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jaxtyping import Float

from jaxattn.config import at_least, non_negative, option, plain, positive, specs
from jaxattn.dynamics import continuous, discrete, resolve_dtype
from jaxattn.dynamics.continuous import Solver, solve
from jaxattn.dynamics.discrete import Dynamics, saved_steps, simulate
from jaxattn.dynamics.fields import Flow
from jaxattn.dynamics.options import BETA, Batch, Save
from jaxattn.errors import ConfigError, NonFiniteWarning
from jaxattn.io.checkpoints import load_any
from jaxattn.io.results import flatten
from jaxattn.model.params import Model, parse_mask
from jaxattn.model.sampling import NEEDS_ARRAY, VALUE_KINDS, WEIGHT_KINDS, init_tokens, seeded_model
from jaxattn.sweeps._observables import Observables

#: The observables the drivers save by default: named in a
#: configuration, they are the drivers' default rather than a list of names.
DEFAULT_OBSERVABLES = ("diameter", "cos_consensus")


def fields_of(cls, values: Mapping, *, kind: str | None = None) -> dict:
    """The keyword arguments of ``cls`` (an option record or a run below) that ``values`` names by configuration
    key: each option reaches the field that declares it (:func:`jaxattn.config.specs`), nothing translates by hand.
    ``kind`` (``'discrete'`` or ``'continuous'``): leave out the options declared for the other kind only."""
    return {spec.field: values[key] for key, spec in specs(cls).items()
            if key in values and (kind is None or spec.only in (None, kind))}


def dynamics_of(values: Mapping) -> Dynamics:
    """The :class:`~jaxattn.Dynamics` that options name (``values``: by key, e.g. a command's resolved options or a
    point's ``dynamics.*`` keys without the prefix); the fields not given keep their defaults."""
    return Dynamics(**fields_of(Dynamics, values))


def _mask(v):
    try:
        parse_mask(v)
    except ConfigError as e:
        return str(e).rsplit(", got ", 1)[0]  # the value is said once, by the caller
    return None


def _beta() -> Any:
    """β of a map's run and of a flow's, one declaration (a field object belongs to one class: made per class)."""
    return dataclasses.field(default=1.0, metadata=BETA)


@dataclasses.dataclass(frozen=True)
class RandomModel:
    """A random model's law and shape (``model.source = 'random'``): :func:`jaxattn.model.sampling.seeded_model`'s
    options, each a key of the configuration's ``[model]``. Hashable: one model per (seed, law) in a sweep."""

    d: int = option(64, "random model: token dimension", check=positive)
    heads: int = option(4, "random model: number of heads H (d % H == 0)", check=positive)
    depth: int = option(12, "random model: number of blocks", check=positive)
    shared: bool = option(True, "random model: one weight set for every block (ALBERT-like) or one per block")
    mask: str = option("full", "random model: 'full', 'causal' or 'local:W'", check=_mask)
    weights: str = option("gaussian", "random model: law of the entries of Q, K (and V, O unless value = identity): "
                          "gaussian N(0, 1/d), uniform in [-1, 1], identity (Q = K = I)",
                          choices=plain(WEIGHT_KINDS, NEEDS_ARRAY))
    value: str = option("random", "random model: value/output matrices", choices=plain(VALUE_KINDS, NEEDS_ARRAY))
    scale: float | None = option(None, "random model: score scale s of <Q x_i, K x_j> (the clustering papers use 1; "
                                 "default 1/sqrt(d_h))", check=positive)
    unit_output: bool = False  # D2: drawn with O = I (the dynamics' option, not the law's)

    def build(self, seed: int) -> Model:
        return seeded_model(seed, self.d, self.heads, self.depth, shared=self.shared, weights=self.weights,
                            value=self.value, mask=self.mask, scale=self.scale, unit_output=self.unit_output)


@dataclasses.dataclass(frozen=True)
class MapRun:
    """A map (:func:`jaxattn.simulate`): its dynamics, step size, inverse temperature and number of steps
    (``None``: the model's depth); the last three are keys of the configuration's ``[dynamics]``."""

    dynamics: Dynamics
    alpha: float = option(1.0, "step size α")
    beta: float = _beta()
    steps: int | None = option(None, "number of steps (default: the model's depth; more prolongs it)",
                               check=non_negative)
    # an ellipsoid's matrix (jaxattn.sweep's, from Python: a configuration names no matrix); not compared, an array
    S: Any = dataclasses.field(default=None, compare=False)

    def steps_of(self, depth: int) -> int:
        """The steps of a model of ``depth`` blocks."""
        return depth if self.steps is None else self.steps

    def times(self, depth: int, save: Save) -> Float[np.ndarray, " T"]:
        """The steps at which observables are saved, as floats."""
        return saved_steps(self.steps_of(depth), save.when).astype(np.float64)

    def lanes(self, model: Model, n: int, save: Save, batch: Batch, dtype, conditions: int | None) -> int | None:
        """The lane width of :meth:`run` for ``conditions`` conditions per device (:func:`discrete.lanes_of`)."""
        return discrete.lanes_of(model, n, dynamics=self.dynamics, steps=self.steps_of(model.depth), save=save,
                                 batch=batch, dtype=dtype, conditions=conditions)

    def run(self, model: Model, X0, save: Save, batch: Batch, dtype, progress=None) -> dict[str, Any]:
        with warnings.catch_warnings():  # non-finite conditions are counted and reported by the sweep
            warnings.simplefilter("ignore", NonFiniteWarning)
            res = simulate(model, X0, self.steps_of(model.depth), dynamics=self.dynamics, alpha=self.alpha,
                           beta=self.beta, S=self.S, save=save, batch=batch, dtype=dtype)
        return {"observables": res.observables, "final": res.final, "trajectory": res.trajectory}


@dataclasses.dataclass(frozen=True)
class FlowRun:
    """A flow (:func:`jaxattn.solve`): its :class:`jaxattn.Flow`, its solver's options (a
    :class:`jaxattn.dynamics.continuous.Solver`, :func:`jaxattn.solve`'s keywords), and the inverse temperature,
    final time, number of equally spaced saved times and duration of a layer (keys of ``[dynamics]``)."""

    flow: Flow
    solver: Solver
    beta: float = _beta()
    t1: float = option(10.0, "final time", check=positive)
    saves: int = option(11, "number of equally spaced saved times in [0, t1]", check=at_least(2))
    layer_time: float = option(1.0, "duration of one layer", check=positive)
    # an ellipsoid's matrix, as MapRun's (no driver builds a flow point on the ellipsoid yet: None); not an option
    S: Any = dataclasses.field(default=None, compare=False)

    def times(self, depth: int = 0, save: Save | None = None) -> Float[np.ndarray, " T"]:
        """The saved times: ``saves`` equally spaced in ``[0, t1]``."""
        return np.linspace(0.0, self.t1, self.saves)

    def lanes(self, model: Model, n: int, save: Save, batch: Batch, dtype, conditions: int | None) -> int | None:
        """The lane width of :meth:`run` for ``conditions`` conditions per device (:func:`continuous.lanes_of`)."""
        return continuous.lanes_of(model, n, flow=self.flow, batch=batch, dtype=dtype, conditions=conditions)

    def run(self, model: Model, X0, save: Save, batch: Batch, dtype, progress=None) -> dict[str, Any]:
        """``progress``: :func:`jaxattn.solve`'s, a host function of the time reached."""
        sol = solve(model, X0, self.t1, flow=self.flow, beta=self.beta, S=self.S, save=save, batch=batch, dtype=dtype,
                    layer_time=self.layer_time, progress=progress, **self.solver.keywords())
        return {"observables": sol.observables, "final": sol.final, "trajectory": sol.trajectory,
                "result": sol.result, "num_steps": sol.num_steps}


@dataclasses.dataclass(frozen=True)
class Point:
    """One grid point: what the drivers take, built once from the configuration's keys by :func:`point_of`.

    ``params`` the values of the grid's axes at this point (what distinguishes it); ``model`` a
    :class:`RandomModel`, the source a converted model is loaded from ('minilm' or a file), or the model itself
    (:func:`jaxattn.sweep`, a one-point grid of a model given in Python); ``run`` a :class:`MapRun` or
    :class:`FlowRun`; ``save`` and ``batch`` the drivers' options (the batch's precision and path; its lane width
    and devices are the sweep's); ``observables`` the names saved."""

    params: Mapping[str, Any]
    num_init: int
    seed: int
    dtype: str
    keep_final: bool
    n: int
    init: str
    model: RandomModel | str | Model
    run: MapRun | FlowRun
    save: Save
    batch: Batch
    observables: tuple[str, ...]

    def build_model(self, cache: dict) -> Model:
        """The point's model, built (random) or loaded once per ``cache``."""
        if isinstance(self.model, Model):
            return self.model
        key = (self.seed, self.model) if isinstance(self.model, RandomModel) else ("file", self.model)
        if key not in cache:
            cache[key] = self.model.build(self.seed) if isinstance(self.model, RandomModel) else load_any(self.model)
        return cache[key]

    def times(self, depth: int) -> Float[np.ndarray, " T"]:
        """The times (maps: step indices) at which the point saves its observables."""
        return self.run.times(depth, self.save)

    def kernel(self) -> str:
        """The path the point's chunks take: 'plain' (maps) or 'diffrax' (flows), recorded in the store's manifest
        (a removed fused kernel was the other path of maps)."""
        return "plain" if isinstance(self.run, MapRun) else "diffrax"

    def _batch(self, batch: Batch | None) -> Batch:
        """The sweep's lane width and devices under the point's precision and path."""
        return self.batch if batch is None else dataclasses.replace(batch, precision=self.batch.precision,
                                                                     path=self.batch.path)

    def lanes(self, model: Model, conditions: int | None, batch: Batch | None = None) -> int | None:
        """The lane width :meth:`evolve` runs ``conditions`` conditions per device in (``None``: the uncapped
        default of stores written before the width followed the batch). A sweep
        records it and resumes at it."""
        return self.run.lanes(model, self.n, self.save, self._batch(batch), self.dtype, conditions)

    def evolve(self, model: Model, X0, batch: Batch | None = None, progress=None) -> dict[str, Any]:
        """Run the map or the flow from ``X0`` (``batch``: the sweep's lane width and devices, under the point's
        precision and path): the driver's observables, final states (and trajectory, solver results).
        ``progress``: a flow's solve reports the time reached to it (a map ignores it)."""
        return self.run.run(model, X0, self.save, self._batch(batch), self.dtype, progress)

    def chunk(self, model: Model, start: int, rows: int, size: int, batch: Batch | None = None,
              progress=None) -> dict[str, np.ndarray]:
        """The stored arrays of conditions ``start .. start + size - 1``, computed in one call of the driver on
        ``rows >= size`` conditions (a fixed shape, one compiled program; condition ``i`` drawn from
        ``fold_in(key(seed), i)``): ``observables/<name>`` (a nested observable's names joined by dots), with
        ``keep_final`` the ``final`` states, and a flow's ``result`` and ``num_steps``. ``model``: the point's (as
        placed on the devices); ``batch`` and ``progress`` as :meth:`evolve`'s."""
        dtype = resolve_dtype(self.dtype)
        X0 = init_tokens(jax.random.key(self.seed), rows, self.n, model.d_model, kind=self.init, S=self.run.S,
                         start=start, dtype=dtype)
        res = self.evolve(model, X0, batch, progress)
        out = {k.replace("observables.", "observables/", 1): v for k, v in flatten({"observables": res["observables"]})
               .items()}
        if self.keep_final:
            out["final"] = res["final"]
        if "result" in res:
            out |= {"result": res["result"], "num_steps": res["num_steps"]}
        return {k: np.asarray(v)[:size] for k, v in out.items()}


def point_of(p: Mapping) -> Point:
    """The objects that a point of :func:`jaxattn.sweeps._schema.expand` names: the one place where the
    configuration's keys become the drivers' options."""
    sec = {s: {k.split(".", 1)[1]: v for k, v in p.items() if k.startswith(s + ".")} for s in ("model", "dynamics",
                                                                                                "init")}
    dyn, kind = sec["dynamics"], sec["dynamics"]["kind"]
    obs = tuple(p["observables"])
    observe = None if obs == DEFAULT_OBSERVABLES else Observables(obs)
    run: MapRun | FlowRun
    if kind == "discrete":
        run = MapRun(dynamics_of(dyn), **fields_of(MapRun, dyn))
        listed = dyn["save_steps"]  # a list of steps replaces the period (whose default is every step)
        save = Save(**fields_of(Save, {**dyn, "save": None if listed is not None else dyn["save"]}), observe=observe)
    else:
        run = FlowRun(Flow(**fields_of(Flow, dyn)), Solver(**fields_of(Solver, dyn)), **fields_of(FlowRun, dyn))
        save = Save(ts=run.times(), observe=observe)
    model: RandomModel | str = sec["model"]["source"]
    if model == "random":
        model = RandomModel(**fields_of(RandomModel, sec["model"]), unit_output=kind == "discrete"
                            and dyn["unit_output"])
    batch = Batch(**fields_of(Batch, p, kind=kind))  # a flow's: without the maps' path
    return Point(params=dict(p["params"]), num_init=p["num_init"], seed=p["seed"], dtype=p["dtype"],
                 keep_final=p["keep_final"], n=sec["init"]["n"], init=sec["init"]["kind"], model=model, run=run,
                 save=save, batch=batch, observables=obs)
