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

XLA's own ``'bfloat16'`` setting changes nothing on a CPU either, and an H200 gave TF32 products under it. So the
products of the attention and the feed-forward layer go through :func:`rounded`: under ``'bfloat16'`` (a driver's
``Batch(precision='bf16')``) their float32 operands are rounded to bfloat16 first, on every backend, and multiplied
and summed in float32 (the product of two bfloat16 numbers is exact in float32, so every backend computes the
same products).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax
import jax.numpy as jnp

#: XLA's setting under which :func:`rounded` rounds the operands of a product to bfloat16 (``Batch(precision='bf16')``).
BFLOAT16 = "bfloat16"

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


def setting() -> str | None:
    """XLA's matmul precision setting in force as JAX traces (``None``: none set)."""
    return jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]  # set at run time


def rounded(*operands: jax.Array) -> tuple[jax.Array, ...]:
    """The operands of a matrix product as the precision in force takes them: under XLA's ``'bfloat16'`` setting
    float32 operands rounded to bfloat16 (and back to float32, so that the product accumulates in float32), on every
    backend; unchanged otherwise, and float64 operands always. Read when JAX traces the product, like the setting
    itself (which is part of the compilation cache key).

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> from jaxattn.model.precision import rounded
        >>> x = jnp.float32(1 + 2**-10)
        >>> float(rounded(x)[0]) == float(x)
        True
        >>> with jax.default_matmul_precision("bfloat16"):
        ...     float(rounded(x)[0])                     # 8 significant bits
        1.0
    """
    if jax.config.jax_default_matmul_precision != BFLOAT16:  # type: ignore[attr-defined]  # set at run time
        return operands
    return tuple(a.astype(jnp.bfloat16).astype(a.dtype) if a.dtype == jnp.float32 else a
                 for a in map(jnp.asarray, operands))
