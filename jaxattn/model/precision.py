"""Full float32 products by default, wherever a jaxattn function is called from.

XLA computes float32 matrix products in TF32 on NVIDIA GPUs (Ampere and later) unless told otherwise: a
10-bit mantissa, errors near ``1e-3`` where the project promises agreement with Hugging Face to ``1e-4`` in
float32. The drivers (``simulate``, ``solve``, ``repeated_passes``, ``sweep``) set the precision their
``Batch(precision=...)`` asks for; every other public function that multiplies matrices (the faithful forward
pass, the building blocks a user composes under their own ``jit``, the gradient analyses) is wrapped in
:func:`full_precision`, or only calls functions that are. The precision is settled when JAX traces a product,
so the wrapper works under the caller's ``jit``, ``vmap`` and ``grad`` too; a caller who chose a precision
(``jax.default_matmul_precision``, or a driver's ``Batch``) keeps it. On a CPU nothing changes: its float32
products are full precision anyway.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax

P = ParamSpec("P")
R = TypeVar("R")


def full_precision(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with float32 products at XLA's ``"highest"`` precision unless its caller has set one."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        # the caller's (or a driver's Batch) choice
        if jax.config.jax_default_matmul_precision is not None:  # type: ignore[attr-defined]  # set at run time
            return fn(*args, **kwargs)
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapper
