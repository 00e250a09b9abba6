"""Arithmetic arranged for the backend a program is compiled for, chosen when it is lowered.

A few computations have two exact arrangements, one that a CPU runs fastest and one that XLA's GPU compiler fuses into
fewer kernels (the softmax's division, the sphere's normalisation, the diameter's blown-up check). :func:`gpu_or`
traces both and lets :func:`jax.lax.platform_dependent` keep the target's when the program is lowered, so the choice
follows the device the program is compiled for, whoever compiles it: ``simulate`` on a GPU, ``jaxattn.aot`` on a
machine without one, or a user's own ``jit`` of ``vmap(simulate_one)``. The two agree to round-off.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import jax

#: Tests only (:func:`arranged_as`): the arrangement to trace whatever the backend, so that a GPU's is checked on a CPU.
_FORCED: contextvars.ContextVar[str | None] = contextvars.ContextVar("jaxattn_arrangement", default=None)


def gpu_or(*args: Any, gpu: Callable, other: Callable, cuda: Callable | None = None) -> Any:
    """``gpu(*args)`` in a program compiled for an NVIDIA or AMD GPU, ``other(*args)`` elsewhere (CPU, TPU);
    ``cuda``, where given, replaces ``gpu`` on an NVIDIA GPU (a Triton kernel: :mod:`jaxattn.model.fused`)."""
    cuda = gpu if cuda is None else cuda
    forced = _FORCED.get()
    if forced is not None:
        return (cuda if forced == "gpu" else other)(*args)
    return jax.lax.platform_dependent(*args, cuda=cuda, rocm=gpu, default=other)


@contextlib.contextmanager
def arranged_as(platform: str) -> Iterator[None]:
    """Within this block :func:`gpu_or` traces ``platform``'s arrangement (``'gpu'`` or ``'cpu'``) whatever the
    backend: a GPU's arithmetic checked eagerly on a CPU (tests)."""
    token = _FORCED.set(platform)
    try:
        yield
    finally:
        _FORCED.reset(token)
