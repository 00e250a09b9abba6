"""Running one grid point's chunk: its model (built or loaded once per sweep), its drivers' options, the rows
a chunk computes and the path (fused kernel or plain) its chunks take."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from jaxattn.dynamics import choose_path, lanes_for
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.discrete import Dynamics, saved_steps, simulate
from jaxattn.dynamics.fields import Flow
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import NonFiniteWarning
from jaxattn.io.checkpoints import load_any
from jaxattn.model.sampling import seeded_model
from jaxattn.sweeps._observables import Observables
from jaxattn.sweeps._schema import dynamics_of


def model_of(p: dict, cache: dict):
    """A point's model, built (random) or loaded once per ``cache``."""
    if p["model.source"] == "random":
        unit = p["dynamics.kind"] == "discrete" and p["dynamics.unit_output"]  # D2: drawn with O = I
        spec: tuple = ("random", p["seed"], p["model.d"], p["model.heads"], p["model.depth"], p["model.shared"],
                       p["model.mask"], p["model.weights"], p["model.value"], p["model.scale"], unit)
        if spec not in cache:
            cache[spec] = seeded_model(p["seed"], p["model.d"], p["model.heads"], p["model.depth"],
                                       shared=p["model.shared"], weights=p["model.weights"], value=p["model.value"],
                                       mask=p["model.mask"], scale=p["model.scale"], unit_output=unit)
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


def options_of(p: dict, batch):
    """A point's flat configuration keys as the drivers' :class:`~jaxattn.Save` and :class:`~jaxattn.Batch`
    (the one place they are mapped): ``observables``, ``dynamics.save`` (maps) or ``dynamics.t1`` and
    ``dynamics.saves`` (flows), ``matmul_precision`` and ``path`` (the map's), on top of the sweep's
    ``batch`` (lane width and devices)."""
    default = tuple(p["observables"]) == ("diameter", "cos_consensus")  # the fused kernel computes these on chip
    obs = None if default else Observables(tuple(p["observables"]))
    if p["dynamics.kind"] == "continuous":
        save = Save(ts=np.linspace(0.0, p["dynamics.t1"], p["dynamics.saves"]), observe=obs)
        return save, dataclasses.replace(batch, precision=p["matmul_precision"])
    save = Save(every=p["dynamics.save"], observe=obs)
    return save, dataclasses.replace(batch, precision=p["matmul_precision"], path=p["path"])


def _dynamics(p: dict) -> Dynamics:
    return dynamics_of({k.split(".", 1)[1]: v for k, v in p.items() if k.startswith("dynamics.")})


def _run_chunk(p: dict, model, X0, batch):
    save, batch = options_of(p, batch)
    dtype = p["dtype"]
    if p["dynamics.kind"] == "discrete":
        steps = model.depth if p["dynamics.steps"] is None else p["dynamics.steps"]
        with warnings.catch_warnings():  # non-finite conditions are counted and reported by the sweep
            warnings.simplefilter("ignore", NonFiniteWarning)
            res = simulate(model, X0, steps, dynamics=_dynamics(p), alpha=p["dynamics.alpha"], beta=p["dynamics.beta"],
                           save=save, batch=batch, dtype=dtype)
        return {"observables": res.observables, "final": res.final}
    flow = Flow(space=p["dynamics.space"], rescaled=p["dynamics.rescaled"], attention=p["dynamics.attention"],
                biases=p["dynamics.biases"])
    sol = solve(model, X0, p["dynamics.t1"], flow=flow, beta=p["dynamics.beta"], save=save, batch=batch, dtype=dtype,
                solver=p["dynamics.solver"], rtol=p["dynamics.rtol"], atol=p["dynamics.atol"], dt=p["dynamics.dt"],
                max_steps=p["dynamics.max_steps"], layer_time=p["dynamics.layer_time"])
    return {"observables": sol.observables, "final": sol.final, "result": sol.result, "num_steps": sol.num_steps}


def _kernel_choice(p: dict, model) -> str:
    """The path a point's chunks take: 'fused' (Pallas kernel), 'plain' or 'diffrax' (flows)."""
    if p["dynamics.kind"] == "continuous":
        return "diffrax"
    save, batch = options_of(p, Batch())
    return choose_path(batch.path, model, _dynamics(p), save.observe, save.trajectory, save.every, p["init.n"])


def saved_times(p: dict, depth: int) -> np.ndarray:
    """The times (maps: step indices) at which a point saves its observables."""
    if p["dynamics.kind"] == "continuous":
        return np.linspace(0.0, p["dynamics.t1"], p["dynamics.saves"])
    steps = depth if p["dynamics.steps"] is None else p["dynamics.steps"]
    return saved_steps(steps, p["dynamics.save"]).astype(np.float64)
