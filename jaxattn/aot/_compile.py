"""A driver's program compiled for a target's devices, ahead of time and without them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import equinox._errors as _eqx_errors
import jax
import numpy as np

from jaxattn import dynamics
from jaxattn.aot._program import Program
from jaxattn.aot._targets import Target
from jaxattn.dynamics.options import Batch
from jaxattn.errors import ConfigError


def compile(driver: Callable, *args: Any, target: Target, **kwargs: Any) -> Program:
    """Compile the program that ``driver(*args, **kwargs)`` would run, for ``target``'s devices, without running it.

    ``driver`` is :func:`jaxattn.simulate`, :func:`jaxattn.solve`, :func:`jaxattn.repeated_passes` or anything that
    runs through them (a sweep's chunk: ``jaxattn.sweeps.Point.chunk``). Its arguments are the ones of a real call:
    the arrays give the shapes and dtypes and the facts that choose the form (identity weights, masks), their values
    are not compiled in. Every choice that depends on the backend (the lane width, the memory budgets, the
    arithmetic's arrangement) is taken for the target, not for this process's backend; ``batch`` (a
    :class:`jaxattn.Batch`) gets the target's devices (a batch naming other devices is refused). equinox's run-time
    checks inside the program (diffrax's) are compiled in their NaN form, since raising needs a host callback that
    only a local device can run. The first program the call would run is returned: a driver that runs several (the
    passes of :func:`jaxattn.repeated_passes`) compiles them alike.

    Examples:
        On a machine without a GPU (the CUDA plugin installed, as ``make gpu-compile`` does):

        >>> import jax, jaxattn as ja
        >>> h100 = ja.aot.target("h100")                                 # doctest: +SKIP
        >>> model = ja.random_model(jax.random.key(0), 2, weights="identity", value="identity", scale=1.0)
        >>> X0 = ja.init_tokens(jax.random.key(1), 2048, 32, 2)
        >>> prog = ja.aot.compile(ja.simulate, model, X0, 300, save=ja.Save(every="last"),
        ...                       target=h100)                            # doctest: +SKIP
        >>> prog.kernels_per_step()                                      # doctest: +SKIP
        5.0
    """
    if not isinstance(target, Target):
        raise ConfigError(f"target must be a jaxattn.aot.Target (jaxattn.aot.target('h100')), got {target!r}")
    batch = kwargs.get("batch", Batch())
    if not isinstance(batch, Batch):
        raise ConfigError(f"batch must be a jaxattn.Batch, got {batch!r}")
    if batch.devices is not None and not set(batch.devices) <= set(target.devices):
        raise ConfigError(f"Batch(devices=...) names devices that are not {target.name}'s: leave devices out (the "
                          "target's first device) or give some of target.devices")
    devices = batch.devices or target.devices[:1]
    kwargs["batch"] = dataclasses.replace(batch, devices=tuple(devices))
    with dynamics.compiling_for(target.run_target()._replace(devices=tuple(devices))), _checks_as_nan():
        try:
            driver(*args, **kwargs)
        except dynamics.Compiled as done:
            return Program(done.compiled, target=target, lanes=done.lanes, devices=len(devices))
    raise ConfigError(f"{getattr(driver, '__name__', driver)!r} ran no program to compile (it must run through "
                      "jaxattn.simulate, solve or repeated_passes)")


@contextlib.contextmanager
def _checks_as_nan() -> Iterator[None]:
    """equinox's run-time checks (``eqx.error_if``, which diffrax's solves hold) as NaN results while a program is
    traced for ahead-of-time compilation: raising takes a host callback, and a callback needs a backend of the
    target's kind in this process. The program is otherwise the device's own (``EQX_ON_ERROR=nan`` compiles it so)."""
    was = getattr(_eqx_errors, "EQX_ON_ERROR", None)
    if was is None:  # another equinox: its checks stay, and a callback fails to compile with its own message
        yield
        return
    _eqx_errors.EQX_ON_ERROR = "nan"
    try:
        yield
    finally:
        _eqx_errors.EQX_ON_ERROR = was


def compile_function(fn: Callable, *args: Any, target: Target, static_argnums: tuple[int, ...] = ()) -> Program:
    """Compile any JAX function of arrays for ``target``'s first device, from the shapes and dtypes of ``args`` (arrays
    or ``jax.ShapeDtypeStruct``; the ``static_argnums`` passed as they are): a reference program, such as a
    hand-written loop, read with the same :class:`Program` as a driver's."""
    if not isinstance(target, Target):
        raise ConfigError(f"target must be a jaxattn.aot.Target (jaxattn.aot.target('h100')), got {target!r}")
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.asarray(target.devices[:1]), ("conditions",)),
                                          jax.sharding.PartitionSpec())

    def spec(a):
        a = a if hasattr(a, "shape") and hasattr(a, "dtype") else np.asarray(a)
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

    specs = [a if i in static_argnums else jax.tree_util.tree_map(spec, a) for i, a in enumerate(args)]
    compiled = jax.jit(fn, static_argnums=static_argnums).lower(*specs).compile()
    return Program(compiled, target=target, lanes=0)
