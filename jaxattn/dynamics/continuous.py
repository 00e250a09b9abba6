"""Continuous-time token dynamics solved with diffrax, batched over initial conditions.

:func:`solve` integrates one of the flows of :mod:`jaxattn.dynamics.fields` from every initial configuration
of a batch in one compiled call: ``diffrax.diffeqsolve`` per condition, ``vmap``-ed by the shared
runner (:mod:`jaxattn.dynamics._runner`), observables evaluated at the requested times inside the solve
(``SaveAt(fn=...)``), so memory does not grow with the number of saved times unless the trajectory
is asked for. Each condition reports its own result code: a failed solve (``max_steps`` reached, a
step size that collapsed) is flagged in its row while the others are returned intact.

Layered models (weights that change from layer to layer) are piecewise constant in time: they are
solved layer interval by layer interval, so that no step straddles a change of weights.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxattn.config import about, positive, static
from jaxattn.dynamics import labelled
from jaxattn.dynamics._runner import (
    Context,
    block_budget,
    cast_floats,
    check_scalar,
    check_states,
    check_weights,
    checked,
    lanes_for,
    resolve_dtype,
    run,
    traced,
)
from jaxattn.dynamics.fields import C2, RESCALED_NEEDS_FLOAT64, Flow, attention_at, field, weights_at
from jaxattn.dynamics.geometry import Geometry, check_spd
from jaxattn.dynamics.observables import consensus_observables
from jaxattn.dynamics.options import Batch, Save, check_batch, check_save, moved
from jaxattn.errors import ConfigError, positive_int
from jaxattn.model import display
from jaxattn.model.forms import GENERAL, Form, check_form, choose
from jaxattn.model.params import Model, validate

if TYPE_CHECKING:
    import xarray

#: Solvers by name. The adaptive ones carry an embedded error estimate.
SOLVERS = {
    "euler": diffrax.Euler, "heun": diffrax.Heun, "midpoint": diffrax.Midpoint, "ralston": diffrax.Ralston,
    "bosh3": diffrax.Bosh3, "tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8,
}


def adaptive(solver: str) -> bool:
    """Whether the solver named ``solver`` (a key of :data:`SOLVERS`) has an error estimate (step-size control)."""
    return issubclass(SOLVERS[solver], diffrax.AbstractAdaptiveSolver)


class Solver(eqx.Module):
    """:func:`solve`'s solver keywords as one record: what a sweep's flow point and ``jaxattn solve`` name, declared
    here once (each field is also a key of a configuration, :func:`jaxattn.config.about`) and handed to the solve as
    ``solve(..., **solver.keywords())``. The defaults are solve's own, the tolerances written out (solve's
    ``None`` stands for them unless a step-size controller is given)."""

    solver: str = static("tsit5", option=about("diffrax solver", choices=tuple(SOLVERS)))
    rtol: float = static(1e-6, option=about("relative tolerance", check=positive))
    atol: float = static(1e-8, option=about("absolute tolerance", check=positive))
    dt: float | None = static(None, option=about("fixed step size (default adaptive)", check=positive))
    max_steps: int = static(100_000, option=about("most solver steps per condition", check=positive, axis=False))

    def __check_init__(self):
        if self.solver not in SOLVERS:
            raise ConfigError(f"solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")
        if self.dt is None and not adaptive(self.solver):
            raise ConfigError(f"solver = {self.solver} has no error estimate: give a fixed step size dt")

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of :func:`solve` that this record holds."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


#: Result codes of :class:`Solution`: ``result == i`` means diffrax's ``RESULTS.<RESULT_NAMES[i]>``; the
#: last code stands for any other failure diffrax reports.
RESULT_NAMES = ("successful", "max_steps_reached", "dt_min_reached", "nonfinite", "max_steps_rejected", "other")


def result_code(result) -> Int[Array, "*B"]:
    """A diffrax result as an int32 code (index in :data:`RESULT_NAMES`), through diffrax's public
    ``RESULTS`` items rather than their private values."""
    known = [result == getattr(diffrax.RESULTS, name) for name in RESULT_NAMES[:-1]]
    return jnp.select(known, [jnp.int32(i) for i in range(len(known))], jnp.int32(len(known)))


class Solution(NamedTuple):
    """Result of :func:`solve`. Observables and trajectory have leading axes ``[B, T]``.

    A pytree (``jit`` and ``vmap`` return it); :meth:`to_xarray` labels its arrays, and a terminal or a notebook
    shows a summary of it (shapes, dtypes, how many solves failed and conditions ended non-finite) rather than its
    numbers.
    """

    ts: np.ndarray  # [T] saved times
    observables: Any  # pytree of [B, T, ...]
    final: jax.Array  # [B, n, d] state at t1
    trajectory: jax.Array | None  # [B, T, n, d] when asked for
    result: jax.Array  # [B] int32, 0 = success (see RESULT_NAMES)
    num_steps: jax.Array  # [B] accepted + rejected steps taken

    @property
    def ok(self) -> jax.Array:
        """``[B]`` bool: the solve of each condition succeeded."""
        return self.result == 0

    @property
    def result_names(self) -> np.ndarray:
        """``[B]`` diffrax's result of each condition by name (:data:`RESULT_NAMES`): ``'successful'``,
        ``'max_steps_reached'`` (the step budget ran out: raise ``max_steps``), ``'nonfinite'`` (the state left the
        finite numbers), ...; the reason a solve failed, as :func:`failures` counts them."""
        return np.asarray(RESULT_NAMES)[np.asarray(self.result)]

    def to_xarray(self, *, attrs: Mapping[str, Any] | None = None) -> xarray.Dataset:
        """The result as an ``xarray.Dataset``: each observable ``(condition, t, ...)``, ``final``
        ``(condition, token, coord)``, the trajectory ``(condition, t, token, coord)`` when kept, and each solve's
        ``result`` (codes of :data:`RESULT_NAMES`, also as the attribute ``result_names``) and ``num_steps``
        ``(condition)``, the saved times as the ``t`` coordinate. ``attrs``: the run's configuration, seed... (a dict
        or list is kept as JSON text), beside ``kind = 'flow'`` and the ``versions`` (JSON) of the packages.

        Examples:
            >>> import jax, jax.numpy as jnp, jaxattn as ja
            >>> model = ja.random_model(jax.random.key(0), d=4, heads=1)
            >>> X0 = ja.init_tokens(jax.random.key(1), 3, 5, 4)
            >>> sol = ja.solve(model, X0, t1=2.0, save=ja.Save(ts=jnp.linspace(0.0, 2.0, 5)))
            >>> ds = sol.to_xarray(attrs={"beta": 1.0, "seed": 1})
            >>> dict(ds.sizes), ds.t.values.tolist(), ds.attrs["seed"]
            ({'condition': 3, 't': 5, 'token': 5, 'coord': 4}, [0.0, 0.5, 1.0, 1.5, 2.0], 1)
            >>> ds.diameter.sel(t=2.0).mean("condition").shape
            ()
        """
        ds = labelled.dataset(self.observables, self.final, self.trajectory, time_dim=labelled.TIME,
                               times=labelled.host(self.ts, "ts"),
                               per_condition={"result": self.result, "num_steps": self.num_steps}, attrs=attrs)
        ds["result"].attrs["result_names"] = ", ".join(f"{i} {name}" for i, name in enumerate(RESULT_NAMES))
        return ds

    def _summary(self) -> display.Summary:
        bad, total = labelled.nonfinite(self.final)
        *lead, n, d = display.shape(self.final)
        sizes = [(labelled.CONDITION, total)] if lead else []
        sizes += [(labelled.TIME + " (saved)", display.shape(self.ts)[0]), (labelled.TOKEN, n),
                  (labelled.COORD, d)]
        rows = [("dimensions", labelled.dims_line(sizes))]
        if not display.traced(self.ts) and np.size(self.ts):
            ts = np.asarray(self.ts)
            rows.append(("times", f"{ts[0]:g} to {ts[-1]:g}"))
        rows += [("observables", labelled.observables_line(self.observables)),
                 ("final", display.array_line(self.final)),
                 ("trajectory", display.array_line(self.trajectory))]
        if display.traced((self.result, self.num_steps)):
            rows.append(("solves", "unknown (traced values)"))
        else:
            codes, steps = np.asarray(self.result).reshape(-1), np.asarray(self.num_steps).reshape(-1)
            failed = failures(codes)
            why = f" ({', '.join(f'{c:,} {name}' for name, c in failed.items())})" if failed else ""
            rows.append(("solves", f"{codes.size - sum(failed.values()):,} of {codes.size:,} succeeded{why}"
                         + (f"; steps median {int(np.median(steps))}, max {int(steps.max())}" if steps.size else "")))
        rows.append(("non-finite", display.count_line(bad, total)))
        return display.Summary("jaxattn.Solution", rows)

    def __repr__(self) -> str:
        return display.text(display.safe(self._summary, lambda: display.fields_repr(self, self._fields)))

    def _repr_html_(self) -> str:
        return display.as_html(display.safe(self._summary, lambda: display.fields_repr(self, self._fields)))


def failures(result) -> dict[str, int]:
    """How many solves failed, by diffrax's result (:data:`RESULT_NAMES`), from :attr:`Solution.result` codes;
    successes are left out (``{}``: every solve succeeded).

    Examples:
        >>> from jaxattn.dynamics.continuous import failures
        >>> failures([0, 1, 1, 3])
        {'max_steps_reached': 2, 'nonfinite': 1}
    """
    codes = np.asarray(result).reshape(-1)
    return {name: int(np.sum(codes == i)) for i, name in enumerate(RESULT_NAMES) if i and np.any(codes == i)}


def _solver(solver):
    if isinstance(solver, diffrax.AbstractSolver):
        return solver
    if isinstance(solver, str) and solver.lower() in SOLVERS:
        return SOLVERS[solver.lower()]()
    raise ConfigError(f"solver must be one of {', '.join(SOLVERS)} or a diffrax solver, got {solver!r}")


#: Where the time reached goes while :func:`solve` runs with ``progress=``: the callable of the solve in flight (one
#: at a time per process; the callbacks arrive on XLA's host threads, so a context variable would not reach them).
_REPORT: list[Callable[[float], None] | None] = [None]
_REPORT_LOCK = threading.Lock()


def _report(t) -> None:
    """Hand the time reached to the solve in flight (host side)."""
    fn = _REPORT[0]
    if fn is not None:
        fn(float(np.asarray(t).reshape(())))


class _TimeMeter(diffrax.TqdmProgressMeter):
    """diffrax's progress meter (its host-side machinery: a callback every ``refresh_steps`` steps carrying the
    slowest condition of a vmapped solve), reporting the time ``a + progress (b − a)`` reached in the interval
    ``[a, b]`` being solved to :func:`_report` instead of drawing a bar of its own. The callback threads only the
    meter's own state: the solver's numbers are the same bits with or without it."""

    a: Any = 0.0
    b: Any = 1.0

    def step(self, state, progress):
        return super().step(state, jax.lax.stop_gradient(self.a + progress * (self.b - self.a)))

    @staticmethod
    def _init_bar() -> None:
        return None

    @staticmethod
    def _step_bar(bar, progress) -> None:
        _report(progress)

    @staticmethod
    def _close_bar(bar) -> None:
        pass


@dataclasses.dataclass(frozen=True, eq=False)
class _Static:
    """A static option that may not be hashable (diffrax's ``BacksolveAdjoint`` holds a dict): compared and
    hashed by value where it can be, else by identity (a new object then compiles anew)."""

    value: Any

    def _key(self):
        try:
            hash(self.value)
            return ("value", self.value)
        except TypeError:
            return ("id", id(self.value))

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, _Static) and (self.value is other.value or self._key() == other._key())


@dataclasses.dataclass(frozen=True)
class _FlowProgram:
    """One initial condition through ``diffeqsolve`` (see :mod:`jaxattn.dynamics._runner`).

    A layered model is solved interval by interval (``lax.scan`` over the layer intervals, one
    ``diffeqsolve`` each with that interval's weights), so no step ever straddles a change of
    weights, whatever the solver or step size. Observables at the times of an interval come from
    that interval's solve.
    """

    flow: Flow
    solver: Any  # a diffrax solver (an equinox module: hashable, compares by value)
    adaptive: bool  # PID controller, else constant steps of dt
    layered: bool  # solve interval by interval (bounds and weight sets in params)
    observe: Callable
    trajectory: bool
    max_steps: int
    weights_fn: Callable | None
    adjoint: Any = None  # _Static(a diffrax adjoint): how reverse-mode autodiff goes through the solve
    # _Static(the static part of a diffrax step-size controller replacing the PID built from rtol/atol); its float
    # fields (rtol, atol, factors) travel in params, so a new tolerance does not recompile
    controller: Any = None
    form: Form = GENERAL  # how the attention's products are arranged (jaxattn.model.forms)
    progress: bool = False  # report the time reached to solve's `progress` (layered: where each interval starts)

    def __call__(self, X0, p):
        model, beta, S, aux, t0, t1, ts, rtol, atol, dt, bounds, sets, own = p
        def segment(y0, a, b, lw_at, save_ts):
            # what the field differentiates with respect to goes through diffrax's args, not a closure: the
            # continuous adjoint (BacksolveAdjoint) differentiates args only
            def vf(t, y, args):
                m, beta_, S_ = args
                return field(t, y, lw_at(t, m), self.flow, beta_, Geometry(self.flow.space, S_), self.form)

            def save(t, y, args):
                ctx = Context(aux, lambda: attention_at(t, y, lw_at(t, model), self.flow, beta, self.form))
                return checked(self.observe)(t, y, ctx), (y if self.trajectory else None)

            controller: diffrax.AbstractStepSizeController
            if self.controller is not None:  # the user's own controller (its dt0 from dt, or chosen by it)
                controller, dt0 = eqx.combine(own, self.controller.value), dt
            elif self.adaptive:
                controller, dt0 = diffrax.PIDController(rtol=rtol, atol=atol), None
            else:
                controller, dt0 = diffrax.ConstantStepSize(), dt
            adjoint = self.adjoint.value
            meter = {"progress_meter": _TimeMeter(a=a, b=b)} if self.progress and not self.layered else {}
            if isinstance(adjoint, diffrax.BacksolveAdjoint):
                # the continuous adjoint takes neither SaveAt(fn=...) nor subs: save the states at the saved
                # times and at b, and evaluate the observables on them afterwards
                times = jnp.concatenate([save_ts, jnp.reshape(b, (1,)).astype(save_ts.dtype)])
                sol = diffrax.diffeqsolve(diffrax.ODETerm(vf), self.solver, a, b, dt0, y0,
                                          saveat=diffrax.SaveAt(ts=times), stepsize_controller=controller,
                                          args=(model, beta, S), max_steps=self.max_steps, throw=False,
                                          adjoint=adjoint, **meter)
                obs, traj = jax.vmap(lambda t, y: save(t, y, None))(times[:-1], sol.ys[:-1])
                return obs, traj, sol.ys[-1], result_code(sol.result), sol.stats["num_steps"].astype(jnp.int32)
            saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=save_ts, fn=save), diffrax.SubSaveAt(t1=True)])
            sol = diffrax.diffeqsolve(diffrax.ODETerm(vf), self.solver, a, b, dt0, y0, saveat=saveat,
                                      stepsize_controller=controller, max_steps=self.max_steps, throw=False,
                                      adjoint=adjoint, args=(model, beta, S), **meter)
            (obs, traj), final = sol.ys
            return obs, traj, final[0], result_code(sol.result), sol.stats["num_steps"].astype(jnp.int32)

        if not self.layered:
            lw_at = lambda t, m: weights_at(m, t, 1.0, self.weights_fn)
            return segment(X0, t0, t1, lw_at, ts)

        def body(carry, seg):
            a, b, g = seg
            if self.progress:  # each layer interval's start (diffrax's meter, an IO effect, cannot run in the cond)
                jax.debug.callback(_report, a)

            def run_segment(c):
                y, obs, traj, res, nsteps = c
                o, tr, yb, r, ns = segment(y, a, b, lambda t, m: m.layers.take(g), jnp.clip(ts, a, b))
                mine = (ts >= a) & ((ts < b) | (b == t1))  # the saved times this interval owns
                pick = lambda new, old: jnp.where(mine.reshape(mine.shape + (1,) * (new.ndim - 1)), new, old)
                obs = jax.tree_util.tree_map(pick, o, obs)
                traj = jax.tree_util.tree_map(pick, tr, traj)
                return yb, obs, traj, jnp.where(res == 0, r, res), nsteps + ns

            return jax.lax.cond(a < b, run_segment, lambda c: c, carry), None

        shapes = jax.eval_shape(lambda: segment(X0, t0, t1, lambda t, m: m.layers.take(0), ts)[:2])
        zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        init = (X0, zeros[0], zeros[1], jnp.int32(0), jnp.int32(0))
        (final, obs, traj, res, nsteps), _ = jax.lax.scan(body, init, (bounds[:-1], bounds[1:], sets))
        return obs, traj, final, res, nsteps


@moved
def solve(model: Model, X0: Float[ArrayLike, "*B n d"], t1, *, flow: Flow = C2, t0=0.0, beta=1.0,
          S: Float[ArrayLike, "d d"] | None = None, save: Save = Save(), batch: Batch = Batch(), dtype=None,
          solver="tsit5", rtol=None, atol=None, dt=None, max_steps: int = 100_000, layer_time=1.0,
          weights_fn: Callable | None = None, stepsize_controller=None, adjoint=None,
          progress: Callable[[float], None] | None = None) -> Solution:
    """Integrate a continuous-time model from every initial configuration, under ``jit``.

    Args:
        model: the weights. A shared-weight model is time-invariant; a layered one uses weight set
            ``schedule[floor(t / layer_time) % depth]`` at time ``t`` (periodic: repeated passes).
        X0: ``[B, n, d]`` initial configurations (``[n, d]`` is taken as ``B = 1``). On the sphere
            or ellipsoid they should lie on it (they are not projected).
        t1: final time (> ``t0``).
        flow: which model (:data:`jaxattn.C1`, :data:`C2`, :data:`C2_OJA`, :data:`C3`,
            :data:`C3_RESCALED` or any :class:`jaxattn.Flow`).
        beta: inverse temperature multiplying the scores. S: ``[d, d]`` for the ellipsoid (C1).
        save: what is kept (:class:`jaxattn.Save`): the times ``ts`` at which the observable (and the
            trajectory) is saved, within ``[t0, t1]`` (default 101 equally spaced times from ``t0`` to
            ``t1``), the observable ``observe(t, X, ctx)`` (``ctx.attention()`` the attention weights
            ``[H, n, n]`` at ``(t, X)``; default :func:`jaxattn.analysis.metrics.consensus_observables`) and
            its ``aux``, and the trajectory. ``Save(every=...)`` (steps of a map) is refused.
        batch: how the batch runs (:class:`jaxattn.Batch`, as in :func:`jaxattn.simulate`): conditions per
            compiled block, devices, matrix-product precision.
        dtype: computation dtype, a name (``'float32'``), a NumPy or a JAX dtype (default that of ``X0``). A
            rescaled flow (:data:`C3_RESCALED`) runs in float64 only, any other dtype is refused at once: in float32
            its adaptive step shrinks until ``max_steps`` (minutes, then every condition failed), because ``e^{tF}``
            amplifies the rounding of ``z`` (see :data:`jaxattn.dynamics.fields.RESCALED_NEEDS_FLOAT64`).
        solver: ``'tsit5'`` (default), ``'dopri5'``, ``'dopri8'``, ``'bosh3'``, ``'heun'``,
            ``'midpoint'``, ``'ralston'``, ``'euler'`` or any diffrax solver instance.
        rtol, atol: tolerances of the PID step-size controller (adaptive steps); default ``1e-6`` and ``1e-8``.
        dt: a fixed step size instead of adaptive steps (required for solvers without an error
            estimate such as Euler).
        max_steps: most steps per condition (per layer interval for a layered model); a condition
            that needs more is flagged in ``result`` (code 1) and the others are unaffected.
        layer_time: duration of one layer of a layered model.
        weights_fn: ``t -> Layers`` of one weight set (leading axis removed), for smooth
            time-varying weights; replaces the model's schedule (the model gives the shapes).
        stepsize_controller: a diffrax step-size controller used instead of the PID controller built
            from ``rtol``/``atol`` (e.g. ``diffrax.PIDController(rtol=1e-8, atol=1e-10, pcoeff=0.3)``), so it
            is refused together with ``rtol`` or ``atol``; ``dt``, if given, is its first step. Its float
            fields (tolerances, factors) are traced like ``rtol``: a new value does not recompile.
        adjoint: how reverse-mode autodiff goes through the solve: diffrax's
            ``RecursiveCheckpointAdjoint()`` (the default: exact gradients of the discretised solve,
            memory logarithmic in the number of steps) or ``BacksolveAdjoint(...)`` (the continuous
            adjoint, solved backwards in time).
        progress: a host function called with the time reached while the solve runs (every 20 steps; the
            slowest condition of the block of conditions being solved, from ``t0`` to ``t1`` again for each
            block), e.g. to show how far a long solve has come (the command line's progress bar). The numbers are
            the same bits with or without it; it costs a host callback every 20 steps, so it is off by default.
            One solve with ``progress`` at a time per process; ignored under ``jit``, ``vmap`` or ``grad`` (the
            program runs after ``solve`` returns). A layered model reports where each layer interval starts.

    ``solve`` composes with ``jax.jit``, ``jax.vmap`` and ``jax.grad`` / ``jax.jvp`` with respect to
    ``X0``, ``beta``, ``S``, the model's weights and, for shared-weight models, ``t0`` and ``t1``
    (a layered model's layer intervals are computed on the host from concrete times).

    ``beta``, ``t0``, ``t1``, ``save.ts`` (same length), ``rtol``, ``atol`` and ``dt`` are traced:
    changing them does not recompile (except the number of layer intervals of a layered model,
    which is rounded up to a power of two).

    Returns:
        :class:`Solution`.

    Examples:
        >>> import jax, jax.numpy as jnp, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=4, heads=1)
        >>> X0 = ja.init_tokens(jax.random.key(1), 3, 5, 4)
        >>> sol = ja.solve(model, X0, t1=2.0, flow=ja.C2, save=ja.Save(ts=jnp.linspace(0.0, 2.0, 5)))
        >>> sol.ts.tolist()
        [0.0, 0.5, 1.0, 1.5, 2.0]
        >>> sol.observables["diameter"].shape, sol.final.shape, bool(sol.ok.all())
        ((3, 5), (3, 5, 4), True)
    """
    if not isinstance(flow, Flow):
        raise ConfigError(f"flow must be a jaxattn.Flow (C1, C2, C2_OJA, C3, C3_RESCALED), got {flow!r}")
    validate(model)  # shapes and finite weights, also for a model edited with `replace`
    save = check_save(save, "solve", kind="flow")
    batch = check_batch(batch, "solve")
    d = model.d_model
    X0 = check_states(X0, d, normalised=flow.space != "flat")
    beta = check_scalar("beta", beta)
    dtype = resolve_dtype(dtype, X0)
    t0f, t1f = check_scalar("t0", t0), check_scalar("t1", t1)
    times_traced = traced((t0f, t1f))
    if not times_traced and t1f <= t0f:
        raise ConfigError(f"t1 must be greater than t0, got t0={t0f:g}, t1={t1f:g}")
    if times_traced:
        t1f = eqx.error_if(t1f, t1f <= t0f, "t1 must be greater than t0")
    if stepsize_controller is not None and (rtol is not None or atol is not None):
        raise ConfigError("rtol and atol are the tolerances of the PID controller solve builds; a stepsize_controller "
                          "brings its own (diffrax.PIDController(rtol=..., atol=...)): give one or the other")
    rtol = check_scalar("rtol", 1e-6 if rtol is None else rtol, positive=True)
    atol = check_scalar("atol", 1e-8 if atol is None else atol, positive=True)
    layer_time = check_scalar("layer_time", layer_time, positive=True)
    positive_int("max_steps", max_steps)
    solver_ = _solver(solver)
    if stepsize_controller is not None and not isinstance(stepsize_controller, diffrax.AbstractStepSizeController):
        raise ConfigError(f"stepsize_controller must be a diffrax step-size controller, got {stepsize_controller!r}")
    if adjoint is not None and not isinstance(adjoint, diffrax.AbstractAdjoint):
        raise ConfigError(f"adjoint must be a diffrax adjoint (RecursiveCheckpointAdjoint(), BacksolveAdjoint()), "
                          f"got {adjoint!r}")
    adaptive = dt is None
    if adaptive and stepsize_controller is None and not isinstance(solver_, diffrax.AbstractAdaptiveSolver):
        raise ConfigError(f"solver {type(solver_).__name__} has no error estimate: give a fixed step size dt")
    if not adaptive:
        dt = check_scalar("dt", dt, positive=True)
    if flow.space == "ellipsoid":
        S = check_spd(S, d)
    elif S is not None:
        raise ConfigError(f"S is only used on the ellipsoid (flow space 'ellipsoid'), not '{flow.space}'")
    if weights_fn is not None:
        _check_weights_fn(weights_fn, model, dtype)
    if flow.rescaled and (weights_fn is not None or not model.shared):
        raise ConfigError("the rescaled flow z = e^{-tF} x needs time-invariant weights (a shared-weight model)")
    if flow.rescaled and dtype != jnp.float64:
        raise ConfigError(f"the rescaled flow z = e^{{-tF}} x runs in float64 only ({dtype.name} given): "
                          f"{RESCALED_NEEDS_FLOAT64.replace('in float32', 'in ' + dtype.name, 1)}; pass "
                          "dtype='float64' (after jax.config.update('jax_enable_x64', True))")
    ts = _check_ts(save.ts, t0f, t1f)
    layered = weights_fn is None and not model.shared and not flow.rescaled
    if layered and (times_traced or traced(layer_time)):
        raise ConfigError("a layered model is solved layer interval by layer interval, computed on the host: t0, t1 "
                          "and layer_time must be concrete numbers (not traced by jit, vmap or grad)")
    bounds = sets = None
    if layered:
        # the layer intervals [a_k, b_k) covering [t0, t1], padded with empty ones (a = b = t1) to
        # a power of two so that a new t1 recompiles only when their number crosses one
        first = math.floor(t0f / layer_time) + 1
        inner = [k * layer_time for k in range(first, math.ceil(t1f / layer_time)) if t0f < k * layer_time < t1f]
        edges = [t0f, *inner, t1f]
        count = 1 << (len(edges) - 2).bit_length()
        bounds = np.asarray(edges + [t1f] * (count + 1 - len(edges)))
        starts = np.floor(bounds[:-1] / layer_time + 1e-12).astype(np.int64)
        sets = np.asarray([model.schedule[k % model.depth] for k in starts], dtype=np.int32)

    model = check_weights(model.replace(embeddings=None, final_ln_w=None, final_ln_b=None).astype(dtype))
    form = _form(model, flow, X0.shape[1], dtype, batch.form, weights_fn)
    if form.key_chunk is not None and batch.size is None:  # one such condition fills the device: no padded lanes
        batch = dataclasses.replace(batch, size=1)
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress must be a function of the time reached, got {progress!r}")
    own = None if stepsize_controller is None else eqx.partition(stepsize_controller, _real_value)
    # under jit, vmap or grad the program runs after solve returns: nothing to report to then
    report = progress is not None and not traced((X0, model, beta, S, t0f, t1f, ts))
    program = _FlowProgram(form=form, flow=flow, solver=solver_, adaptive=adaptive, layered=layered,
                           observe=save.observe or consensus_observables, trajectory=bool(save.trajectory),
                           max_steps=int(max_steps), weights_fn=weights_fn,
                           adjoint=_Static(diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint),
                           controller=None if own is None else _Static(own[1]), progress=report)
    as_ = lambda v: None if v is None else jnp.asarray(v, dtype)
    params = (model, as_(beta), as_(S), cast_floats(save.aux, dtype), as_(t0f), as_(t1f), as_(ts), as_(rtol),
              as_(atol), as_(dt), as_(bounds), None if sets is None else jnp.asarray(sets),
              None if own is None else jax.tree_util.tree_map(as_, own[0]))
    if not report:
        obs, traj, final, result, nsteps = run(program, X0.astype(dtype), params, batch=batch)
    else:
        with _REPORT_LOCK:  # the callbacks run while the program does: wait for it before handing the slot back
            _REPORT[0] = progress
            try:
                obs, traj, final, result, nsteps = jax.block_until_ready(run(program, X0.astype(dtype), params,
                                                                             batch=batch))
            finally:
                _REPORT[0] = None
    return Solution(ts, obs, final, traj, result, nsteps)


def _form(model: Model, flow: Flow, n: int, dtype, form, weights_fn) -> Form:
    """The attention form of a flow (:func:`jaxattn.model.forms.choose`): forced by ``Batch(form=...)``, the
    general one where the weights are a user's function of time or the flow is rescaled (their fields form
    their own products), else the cheapest exact one for the model."""
    if form != "auto":
        if weights_fn is not None or flow.rescaled:
            raise ConfigError("Batch(form=...) applies to a model's own weights: not with weights_fn or the rescaled "
                              "flow")
        return check_form(form, model)
    if weights_fn is not None or flow.rescaled:
        return GENERAL
    return choose(model, n, attention=flow.attention, biases=flow.biases, dtype=dtype, budget=block_budget())


def lanes_of(model: Model, n: int, *, flow: Flow = C2, batch: Batch = Batch(), dtype="float32",
             conditions: int | None = None) -> int:
    """The lane width in which :func:`solve` (of a model's own weights) computes ``conditions`` conditions per device
    of ``n`` tokens: ``batch.size`` when given, else the default (:func:`jaxattn.dynamics.default_lanes`, capped at
    the smallest power of two ``>= conditions``; ``None``: uncapped; 1 where the attention runs over key chunks).
    The sweeps record it and resume at it (:func:`jaxattn.dynamics.discrete.lanes_of` for maps)."""
    dtype = resolve_dtype(dtype)
    form = _form(model.astype(dtype), flow, n, dtype, batch.form, None)
    if form.key_chunk is not None and batch.size is None:  # as solve: one condition fills the device
        return 1
    return lanes_for(batch.size, conditions=conditions)


def _real_value(leaf) -> bool:
    """A leaf of a step-size controller that is a real number (a tolerance, a factor): traced rather than static.
    Integers and booleans stay static (diffrax may branch on them)."""
    if isinstance(leaf, float):
        return True
    return isinstance(leaf, (jax.Array, np.ndarray)) and jnp.issubdtype(leaf.dtype, jnp.floating)


def _check_ts(ts, t0, t1):
    """The saved times: 101 equally spaced by default; refused unless a non-empty, non-decreasing 1-D
    sequence within ``[t0, t1]`` (checked on the host when concrete, inside the program when traced)."""
    if ts is None:
        return jnp.linspace(t0, t1, 101) if traced((t0, t1)) else np.linspace(t0, t1, 101)
    if traced((ts, t0, t1)):
        ts = jnp.asarray(ts)
        if ts.ndim != 1 or ts.size == 0:
            raise ConfigError(f"Save(ts=...) must be a non-empty 1-D sequence of times, got shape {tuple(ts.shape)}")
        bad = (~jnp.all(jnp.isfinite(ts)) | (ts.min() < t0) | (ts.max() > t1) | jnp.any(jnp.diff(ts) < 0))
        return eqx.error_if(ts, bad, "Save(ts=...) must be non-decreasing times within [t0, t1]")
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0:
        raise ConfigError(f"Save(ts=...) must be a non-empty 1-D sequence of times, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)) or ts.min() < t0 or ts.max() > t1 or np.any(np.diff(ts) < 0):
        raise ConfigError(f"Save(ts=...) must be non-decreasing times within [t0, t1] = [{t0:g}, {t1:g}]")
    return ts


def _check_weights_fn(weights_fn, model: Model, dtype) -> None:
    """The weights a user's function returns must have the shapes of one of the model's sets."""
    want = jax.eval_shape(lambda: model.layers.take(0))
    try:
        got = jax.eval_shape(weights_fn, jnp.zeros((), dtype))
    except Exception as e:  # the user's function failed on a scalar time
        raise ConfigError(f"weights_fn(t) failed for a scalar time t: {e}") from None
    # jaxlib ships no type stubs for PyTreeDef (mypy sees an unresolved name)
    if jax.tree_util.tree_structure(got) != jax.tree_util.tree_structure(want):  # type: ignore[operator]
        raise ConfigError("weights_fn(t) must return a Layers (jaxattn.model.params) with the same members as the "
                          "model's (e.g. model.layers.take(0).replace(q=...))")
    for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree_util.tree_leaves(want), strict=True):
        if g.shape != w.shape:
            name = jax.tree_util.keystr(path)
            raise ConfigError(f"weights_fn(t){name} has shape {g.shape}, expected {w.shape}")
