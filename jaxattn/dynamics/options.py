"""The option objects every driver shares, in the style of diffrax's ``SaveAt``.

:func:`jaxattn.simulate`, :func:`jaxattn.solve`, :func:`jaxattn.repeated_passes` and
:func:`jaxattn.sweep` say **what is saved** with one :class:`Save` and **how the batch runs** with one
:class:`Batch` (:func:`jaxattn.simulate_one`, one condition, takes only a ``Save``; :func:`jaxattn.sweep_grid`
only a ``Batch``, its configuration file saying what is saved); an option means the same thing in each
of them. A field that does not apply to a driver (times ``ts`` for a map, steps
``every`` for a flow) is refused by that driver with one line rather than ignored.

``Save`` is an Equinox module: its arrays (``ts``, ``aux``) are pytree leaves, so a ``Save`` can be passed
through ``jax.jit`` or built from traced times, while ``every``, ``trajectory`` and ``observe`` are static.
``Batch`` holds settings only and is hashable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import equinox as eqx
import jax
import numpy as np

from jaxattn.config import about, non_negative, static
from jaxattn.dynamics.observables import check_observe
from jaxattn.errors import ConfigError, every, integer, is_every, is_integer
from jaxattn.model.attention import ATTENTIONS
from jaxattn.model.forms import Form

#: Matrix-product precision policies: name -> XLA's setting. float32 runs use full float32 products
#: on every backend by default ("highest"); NVIDIA GPUs would otherwise use TF32 (10-bit mantissa). "bf16" also
#: rounds the operands of the attention's and feed-forward products to bfloat16 itself, on every backend
#: (:func:`jaxattn.model.precision.rounded`); "tf32" is XLA's setting only, which a CPU ignores.
PRECISIONS = {"highest": "highest", "tf32": "tensorfloat32", "bf16": "bfloat16"}

#: How a map's batch is computed: XLA's operations over blocks of conditions, under both names. ``'fused'``, a
#: Pallas kernel running every step of a condition in one program, was removed: on an H200 it agreed with this path
#: but ran at 0.40-0.69 times its speed at every shape timed (docs/gpu.md). The option stays so that code and sweep
#: configurations that name a path still run.
PATHS = ("auto", "plain")
#: Paths once allowed, with why each is refused now.
REMOVED_PATHS = {"fused": "the fused Pallas kernel was removed (on an H200 it ran at 0.40-0.69x the plain path at "
                          "every shape timed, docs/gpu.md); 'auto' and 'plain' run the plain path"}

# Options that a map's and a flow's records both hold (Dynamics and Flow, the runs of a grid point): declared once.
#: The attention kernel.
ATTENTION = about("attention kernel: softmax, uniform a_ij = 1/n (the Oja model) or unnormalised exp(scores)/n "
                  "(rows not normalised)", choices=ATTENTIONS)
#: The biases of a converted model.
BIASES = about("include biases (converted models)")
#: The inverse temperature.
BETA = about("inverse temperature β multiplying the scores")


def _period(v) -> str | None:
    return None if v is not None and is_every(v) else "must be a positive integer or 'last'"


class Save(eqx.Module):
    """What a driver keeps: where observables are evaluated, the states, the observable and its inputs.

    Attributes:
        every: maps (:func:`jaxattn.simulate`, :func:`jaxattn.repeated_passes`, :func:`jaxattn.sweep`):
            ``None`` every step ``0..steps``; an integer ``m`` every m-th step and the last; ``'last'`` the
            last step only (see :func:`jaxattn.dynamics.discrete.saved_steps`).
        steps: maps: the steps to save, any non-negative integers up to the run's ``steps`` (kept sorted, each
            once), e.g. a logarithmic grid for a long run; instead of ``every``. One compiled program runs them
            all (a scan over every step that saves at the listed ones).
        ts: flows (:func:`jaxattn.solve`): the times at which observables (and the trajectory) are saved,
            a non-decreasing 1-D sequence within ``[t0, t1]``; ``None``: 101 equally spaced times.
        trajectory: also keep the configuration at every saved step or time (``[B, T, n, d]``).
        observe: ``observe(t, X: [n, d], ctx) -> pytree`` evaluated at the saved steps or times (``t`` the
            step index of a map or the time of a flow, ``ctx.aux`` = ``aux``, ``ctx.attention()`` the
            attention weights ``[H, n, n]`` at this state); only what it returns is kept. A module-level
            function is reused across calls without recompiling (a fresh lambda recompiles). ``None``:
            :func:`jaxattn.analysis.metrics.consensus_observables`.
        aux: a pytree of arrays handed to the observable as ``ctx.aux`` (jit inputs: changing them does not
            recompile, and they are not baked in as constants).

    Examples:
        >>> import jaxattn as ja
        >>> ja.Save(every="last").every, ja.Save(ts=[0.0, 1.0]).ts.tolist(), ja.Save(steps=[100, 1, 10]).steps
        ('last', [0.0, 1.0], (1, 10, 100))
        >>> ja.Save(every=0)
        Traceback (most recent call last):
        ...
        jaxattn.errors.ConfigError: Save(every=...) must be None, a positive integer or 'last', got 0
    """

    # a NumPy integer becomes a Python one: it is static (hashed into the compiled program) and recorded in JSON
    # a configuration's dynamics.save has always written "every step" as 1
    every: int | str | None = static(None, converter=lambda v: int(v) if isinstance(v, np.integer) else v,
                                     option=about("observe every m-th step, or 'last'", key="save", default=1,
                                                  hint=int | str, only="discrete", check=_period))
    # any sequence of integers (a list, a range, an array), kept as a sorted tuple of Python integers
    steps: Any = static(None, converter=lambda v: _steps(v),
                        option=about("the steps to observe, instead of save's period (e.g. a logarithmic grid of a "
                                     "long run; jaxattn.Save(steps=...))", key="save_steps", hint=list[int] | None,
                                     only="discrete", check=non_negative))
    ts: Any = eqx.field(default=None, converter=lambda v: _times(v))
    trajectory: bool = eqx.field(default=False, static=True)
    observe: Callable | None = eqx.field(default=None, static=True)
    aux: Any = None

    def __check_init__(self):
        every("Save(every=...)", self.every)
        if self.steps is not None and self.every is not None:  # the steps themselves are checked as converted
            raise ConfigError("Save(steps=...) lists the steps to save; Save(every=...) gives a period: give one of "
                              "them")
        if not isinstance(self.trajectory, (bool, np.bool_)):
            raise ConfigError(f"Save(trajectory=...) must be True or False, got {self.trajectory!r}")
        if self.observe is not None and not callable(self.observe):
            raise ConfigError(f"Save(observe=...) must be a function observe(t, X, ctx) or None, got {self.observe!r}")

    @property
    def when(self) -> int | str | tuple[int, ...] | None:
        """The steps a map saves, as :func:`jaxattn.dynamics.discrete.saved_steps` reads them: the listed
        ``steps`` if given, else ``every`` (``None``, a period or ``'last'``)."""
        return self.steps if self.steps is not None else self.every


def _steps(steps):
    """Steps to save as a sorted tuple of distinct Python integers (static: hashed into the program), or one line
    saying what is wrong."""
    if steps is None:
        return None
    items = None
    if not isinstance(steps, (str, bytes)) and hasattr(steps, "__iter__") and np.ndim(steps) == 1:
        items = list(steps) if isinstance(steps, (list, tuple, range)) else np.asarray(steps).tolist()
    if not items or not all(is_integer(k, 0) for k in items):  # one number, a string, a table, a negative step
        raise ConfigError(f"Save(steps=...) must be a non-empty sequence of non-negative integers (steps of a map), "
                          f"got {steps!r}")
    return tuple(sorted({int(k) for k in items}))


def _times(ts):
    """Concrete times as a float64 array checked for shape and order (their range is checked by the
    flow, which knows ``t0`` and ``t1``); traced times are kept as they are (checked inside the program)."""
    if ts is None or isinstance(ts, jax.core.Tracer):
        return ts
    try:
        arr = np.asarray(ts, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"Save(ts=...) must be a 1-D sequence of times, got {ts!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ConfigError(f"Save(ts=...) must be a non-empty 1-D sequence of times, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(np.diff(arr) < 0):
        raise ConfigError("Save(ts=...) must be finite, non-decreasing times")
    return arr


class Batch(eqx.Module):
    """How a batch of conditions is computed; no field changes which map or flow is computed.

    Attributes:
        size: conditions per compiled block (the lane width); the batch is padded to whole blocks, and memory
            grows with ``size``, not with the batch. For a fixed ``size`` a condition's numbers are the same bits
            whatever the batch it is run in and however a sweep is split (on a CPU; a GPU once gave 1 ulp, see
            docs/gpu.md); at another width they are the same to round-off (tested within 1e-6 in float32 and
            1e-13 in float64). ``None``, in every driver: the backend's width for conditions of this size (on a
            CPU 64, up to 1024 for the small conditions of one-head maps, fewer for large ones such as long
            prompts of a real model), capped at the smallest power of two holding the batch (each device's share):
            fewer than twice the batch is computed (:func:`jaxattn.dynamics.default_lanes`). The default thus
            follows the batch, and so may the numbers, to round-off; a resumed sweep (:func:`jaxattn.sweep`,
            :func:`jaxattn.sweep_grid`) keeps the width recorded with it, so resuming is bit-identical.
        devices: split the batch over these devices (e.g. ``jax.local_devices()``); ``None``: the default
            device (:func:`jaxattn.sweep_grid`, given no ``Batch``, uses every local device).
        precision: matrix products in float32 runs (float64 runs are full precision under every policy):
            ``'highest'`` (full float32 on every backend, the default); ``'bf16'``: the operands of the
            attention's and feed-forward products are rounded to bfloat16 (8 significant bits) on every backend,
            products summed in float32 (W1 moves by a few 1e-3 after 24 layers; other products, the observables',
            take XLA's bfloat16 setting: TF32 on an H200, full float32 on a CPU); ``'tf32'``: XLA's TensorFloat-32
            setting, which changes only NVIDIA GPUs from Ampere on (10-bit mantissa, about 1e-3 off after 24
            layers) and TPUs (several bfloat16 passes), and changes nothing on a CPU.
        path: ``'auto'`` or ``'plain'``, the same path (:data:`PATHS`: kept so that code and configurations that
            name one still run; ``'fused'``, a removed kernel, is refused with the reason).
        form: how each layer's attention is arranged on the plain path: ``'auto'`` (the cheapest exact form,
            :func:`jaxattn.model.forms.choose`) or a :class:`jaxattn.model.forms.Form` to force one (tests, benchmarks;
            ``ja.model.forms.Form()`` is the general per-head form). Every form gives the same numbers up to round-off.
        unroll: steps of a map per iteration of its compiled loop (``lax.scan(unroll=...)``; 1, the default, one):
            the same arithmetic in fewer iterations. On a GPU each iteration launches its kernels and checks the
            loop's condition, so a small step may run faster unrolled (``make gpu-check`` times 1, 4 and 8; its
            compiled structure: ``make gpu-compile``); XLA may fuse across the unrolled steps, which changes float32
            results to round-off. Maps only: :func:`jaxattn.solve` refuses it (diffrax's adaptive loop is its own).

    Examples:
        >>> import jaxattn as ja
        >>> ja.Batch(size=8, precision="tf32")                     # the fields set (the others at their defaults)
        Batch(size=8, precision='tf32')
        >>> ja.Batch(size=0)
        Traceback (most recent call last):
        ...
        jaxattn.errors.ConfigError: Batch(size=...) must be None or a positive integer, got 0
    """

    size: int | None = static(None, converter=lambda v: int(v) if is_integer(v) else v)
    # a tuple: the option stays hashable
    devices: tuple | None = static(None, converter=lambda v: v if v is None or isinstance(v, (str, bytes)) or not
                                   hasattr(v, "__iter__") else tuple(v))
    precision: str = static("highest", option=about(
        "matrix products of float32 runs: full float32, or TF32/bf16 (faster on GPUs, about 1e-3 off after 24 layers; "
        "docs/gpu.md)", key="matmul_precision", choices=PRECISIONS))
    path: str = static("auto", option=about(
        "auto and plain are the same path (kept so that configurations naming it still run; a fused kernel, slower on "
        "a GPU, was removed: docs/gpu.md); formerly 'kernel'", choices=PATHS, removed=REMOVED_PATHS, only="discrete"))
    form: Form | str = static("auto")
    unroll: int = static(1, converter=lambda v: int(v) if is_integer(v) else v)

    def __check_init__(self):
        integer("Batch(size=...)", self.size, none=True)
        integer("Batch(unroll=...)", self.unroll, minimum=1)
        if self.devices is not None:
            if not isinstance(self.devices, tuple):
                raise ConfigError(f"Batch(devices=...) must be a sequence of JAX devices, got {self.devices!r}")
            if not self.devices or not all(isinstance(d, jax.Device) for d in self.devices):
                raise ConfigError(f"Batch(devices=...) must be a non-empty sequence of JAX devices "
                                  f"(e.g. jax.local_devices()), got {self.devices!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"Batch(precision=...) must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if isinstance(self.path, str) and self.path in REMOVED_PATHS:  # the reason a file's key gives too
            raise ConfigError(f"Batch(path={self.path!r}): {REMOVED_PATHS[self.path]}")
        if self.path not in PATHS:
            raise ConfigError(f"Batch(path=...) must be one of {', '.join(PATHS)}, got {self.path!r}")
        if not (isinstance(self.form, Form) or (isinstance(self.form, str) and self.form == "auto")):
            raise ConfigError(f"Batch(form=...) must be 'auto' or a jaxattn.model.forms.Form, got {self.form!r}")


def check_save(save, driver: str, *, kind: str) -> Save:
    """``save`` as a :class:`Save` whose fields apply to ``driver`` (``kind``: ``'map'`` or ``'flow'``),
    refused with one line otherwise."""
    if not isinstance(save, Save):
        hint = " (steps to save are Save(every=...))" if is_every(save) and save is not None else ""
        raise ConfigError(f"save must be a jaxattn.Save, got {save!r}{hint}")
    if kind == "map" and save.ts is not None:
        raise ConfigError(f"Save(ts=...) gives times of a flow; {driver} runs a map: save steps with Save(every=...)")
    if kind == "flow" and (save.every is not None or save.steps is not None):
        which = "every" if save.every is not None else "steps"
        raise ConfigError(f"Save({which}=...) gives steps of a map; {driver} solves a flow: save times with "
                          "Save(ts=...)")
    if save.observe is not None:
        check_observe(save.observe)  # observe(t, X, ctx), or one line naming it
    return save


def check_batch(batch, driver: str) -> Batch:
    """``batch`` as a :class:`Batch`, refused with one line otherwise (``driver`` names the caller)."""
    if not isinstance(batch, Batch):
        raise ConfigError(f"batch must be a jaxattn.Batch, got {batch!r}")
    if driver == "solve" and batch.unroll != 1:  # an option that would change nothing is refused, not ignored
        raise ConfigError(f"Batch(unroll={batch.unroll}) unrolls the steps of a map; solve's steps are diffrax's "
                          "adaptive loop: leave unroll out")
    return batch


#: Keywords the drivers no longer take, and where each went.
MOVED = {
    "observe": "save=jaxattn.Save(observe=...)",
    "aux": "save=jaxattn.Save(aux=...)",
    "trajectory": "save=jaxattn.Save(trajectory=True)",
    "ts": "save=jaxattn.Save(ts=...)",
    "batch_size": "batch=jaxattn.Batch(size=...)",
    "lanes": "batch=jaxattn.Batch(size=...)",
    "devices": "batch=jaxattn.Batch(devices=...)",
    "precision": "batch=jaxattn.Batch(precision=...)",
    "kernel": "batch=jaxattn.Batch(path=...)",
}


F = TypeVar("F", bound=Callable[..., Any])


def moved(fn: F) -> F:
    """``fn`` refusing the keywords of :data:`MOVED` it does not take with a ``TypeError`` that says where
    each went (rather than Python's bare "unexpected keyword argument")."""
    import inspect

    own = set(inspect.signature(fn).parameters)
    gone = {k: v for k, v in MOVED.items() if k not in own}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        old = [k for k in kwargs if k in gone]
        if old:
            raise TypeError(f"{fn.__name__}() no longer takes {', '.join(o + '=' for o in old)}: use "
                            + "; ".join(gone[o] for o in old))
        return fn(*args, **kwargs)

    return cast(F, wrapper)


__all__ = ["MOVED", "PATHS", "PRECISIONS", "Batch", "Save", "check_batch", "check_save", "moved"]
