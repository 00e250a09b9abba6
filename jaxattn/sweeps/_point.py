"""A grid point as the objects the drivers take.

The configuration (:mod:`jaxattn.sweeps._schema`) is the serialised form: flat keys, checked one by one. A point
of its grid becomes, once, in :func:`point_of`, what it describes: the model's law (:class:`RandomModel`) or its
file, the dynamics (:class:`MapRun` around a :class:`jaxattn.Dynamics`, or :class:`FlowRun` around a
:class:`jaxattn.Flow` and the solver's options), and the drivers' :class:`jaxattn.Save` and
:class:`jaxattn.Batch`. Everything that runs a point (the chunk loop, the movie, the command's report) reads
these objects, never the keys: the field names are the drivers' own (``dynamics_of`` and ``fields_of`` fill an
object from the keys of the same name), so a key added to :class:`jaxattn.Dynamics` or :class:`jaxattn.Flow`
reaches the run by its name, not through a line of translation.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from jaxtyping import Float

from jaxattn.dynamics import continuous, discrete
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.discrete import Dynamics, saved_steps, simulate
from jaxattn.dynamics.fields import Flow
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import ConfigError, NonFiniteWarning
from jaxattn.io.checkpoints import load_any
from jaxattn.model.params import Model
from jaxattn.model.sampling import seeded_model
from jaxattn.sweeps._observables import OBSERVABLES, Observables
from jaxattn.sweeps._schema import dynamics_of, fields_of

#: The observables the drivers save by default: named in a
#: configuration, they are the drivers' default rather than a list of names.
DEFAULT_OBSERVABLES = ("diameter", "cos_consensus")


@dataclasses.dataclass(frozen=True)
class RandomModel:
    """A random model's law and shape (``model.source = 'random'``): :func:`jaxattn.model.sampling.seeded_model`'s
    options. Hashable: one model per (seed, law) in a sweep."""

    d: int
    heads: int
    depth: int
    shared: bool
    mask: str
    weights: str
    value: str
    scale: float | None
    unit_output: bool  # D2: drawn with O = I

    def build(self, seed: int) -> Model:
        return seeded_model(seed, self.d, self.heads, self.depth, shared=self.shared, weights=self.weights,
                            value=self.value, mask=self.mask, scale=self.scale, unit_output=self.unit_output)


@dataclasses.dataclass(frozen=True)
class MapRun:
    """A map (:func:`jaxattn.simulate`): its dynamics, step size, inverse temperature and number of steps
    (``None``: the model's depth)."""

    dynamics: Dynamics
    alpha: float
    beta: float
    steps: int | None

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
                           beta=self.beta, save=save, batch=batch, dtype=dtype)
        return {"observables": res.observables, "final": res.final, "trajectory": res.trajectory}


@dataclasses.dataclass(frozen=True)
class FlowRun:
    """A flow (:func:`jaxattn.solve`): its :class:`jaxattn.Flow`, inverse temperature, final time, number of
    equally spaced saved times and the solver's options (by :func:`jaxattn.solve`'s keyword names)."""

    flow: Flow
    beta: float
    t1: float
    saves: int
    solver: str
    rtol: float
    atol: float
    dt: float | None
    max_steps: int
    layer_time: float

    def times(self, depth: int = 0, save: Save | None = None) -> Float[np.ndarray, " T"]:
        """The saved times: ``saves`` equally spaced in ``[0, t1]``."""
        return np.linspace(0.0, self.t1, self.saves)

    def lanes(self, model: Model, n: int, save: Save, batch: Batch, dtype, conditions: int | None) -> int | None:
        """The lane width of :meth:`run` for ``conditions`` conditions per device (:func:`continuous.lanes_of`)."""
        return continuous.lanes_of(model, n, flow=self.flow, batch=batch, dtype=dtype, conditions=conditions)

    def run(self, model: Model, X0, save: Save, batch: Batch, dtype, progress=None) -> dict[str, Any]:
        """``progress``: :func:`jaxattn.solve`'s, a host function of the time reached."""
        sol = solve(model, X0, self.t1, flow=self.flow, beta=self.beta, save=save, batch=batch, dtype=dtype,
                    solver=self.solver, rtol=self.rtol, atol=self.atol, dt=self.dt, max_steps=self.max_steps,
                    layer_time=self.layer_time, progress=progress)
        return {"observables": sol.observables, "final": sol.final, "trajectory": sol.trajectory,
                "result": sol.result, "num_steps": sol.num_steps}


@dataclasses.dataclass(frozen=True)
class Point:
    """One grid point: what the drivers take, built once from the configuration's keys by :func:`point_of`.

    ``params`` the values of the grid's axes at this point (what distinguishes it); ``model`` a
    :class:`RandomModel` or the source a converted model is loaded from ('minilm' or a file); ``run`` a
    :class:`MapRun` or :class:`FlowRun`; ``save`` and ``batch`` the drivers' options (the batch's precision
    and path; its lane width and devices are the sweep's); ``observables`` the names saved."""

    params: Mapping[str, Any]
    num_init: int
    seed: int
    dtype: str
    keep_final: bool
    n: int
    init: str
    model: RandomModel | str
    run: MapRun | FlowRun
    save: Save
    batch: Batch
    observables: tuple[str, ...]

    def build_model(self, cache: dict) -> Model:
        """The point's model, built (random) or loaded once per ``cache``."""
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


def keys_of(save: Save | None, batch: Batch | None) -> dict[str, Any]:
    """The configuration keys (``section.key``) that a :class:`jaxattn.Save` and a :class:`jaxattn.Batch` given to
    :func:`jaxattn.sweep_grid` stand for, beside its configuration: the inverse of :func:`point_of` for the fields
    a configuration can hold. What a store cannot hold is refused in one line: a function as the observable (a grid
    saves named observables), a flow's times (a grid's flows save ``dynamics.saves`` equally spaced ones), a
    trajectory (a store keeps the final states, ``keep_final``), ``aux``, a forced attention form. ``size`` and
    ``devices`` say how the grid runs, not what it computes: they are not keys."""
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
        if save.every is not None:
            keys["dynamics.save"] = save.every
        if save.steps is not None:
            keys["dynamics.save_steps"] = list(save.steps)
    if batch is not None:
        if not isinstance(batch, Batch):
            raise ConfigError(f"batch must be a jaxattn.Batch, got {batch!r}")
        if batch.form != "auto":
            raise ConfigError("sweep_grid chooses each point's attention form: Batch(form=...) is for simulate")
        if batch.precision != "highest":
            keys["matmul_precision"] = batch.precision
        if batch.path != "auto":
            keys["path"] = batch.path
    return keys


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
        run = MapRun(dynamics_of(dyn), alpha=dyn["alpha"], beta=dyn["beta"], steps=dyn["steps"])
        listed = dyn["save_steps"]
        save = Save(every=None if listed is not None else dyn["save"], steps=listed, observe=observe)
        batch = Batch(precision=p["matmul_precision"], path=p["path"])
    else:
        run = FlowRun(Flow(**fields_of(Flow, dyn)), **fields_of(FlowRun, dyn))  # dyn names no "flow"
        save = Save(ts=run.times(), observe=observe)
        batch = Batch(precision=p["matmul_precision"])
    model: RandomModel | str = sec["model"]["source"]
    if model == "random":
        model = RandomModel(**fields_of(RandomModel, {**sec["model"], "unit_output": kind == "discrete"
                                                    and dyn["unit_output"]}))
    return Point(params=dict(p["params"]), num_init=p["num_init"], seed=p["seed"], dtype=p["dtype"],
                 keep_final=p["keep_final"], n=sec["init"]["n"], init=sec["init"]["kind"], model=model, run=run,
                 save=save, batch=batch, observables=obs)
