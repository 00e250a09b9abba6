"""Boolean attention (``d = 1`` in the clustering paper): the distance of an attention matrix to the nearest
0/1 matrix and its numerical rank, directly or as observables of :func:`jaxattn.solve`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Float

from jaxattn.analysis._inputs import real_array, tolerance
from jaxattn.analysis.metrics import boolean_distance, numerical_rank
from jaxattn.errors import ConfigError, is_integer


class BooleanAttention(NamedTuple):
    distance: jax.Array  # [...] max_ij |A_ij − B_ij| for the nearest 0/1 matrix B
    rank: jax.Array  # [...] int32 singular values above rtol × the largest


def boolean_attention(A: Float[ArrayLike, "*B n n"], rtol: float = 1e-6) -> BooleanAttention:
    """Distance of ``A: [..., n, n]`` to the nearest Boolean matrix (entrywise rounding, max norm)
    and its numerical rank (singular values ``> rtol · σ_max``)."""
    A = real_array(A, "A")
    if A.shape[-1] != A.shape[-2]:
        raise ConfigError(f"an attention matrix is square [n, n], got shape {tuple(A.shape)}")
    return BooleanAttention(boolean_distance(A), numerical_rank(A, tolerance(rtol)).astype(jnp.int32))


def boolean_observables(d: int, rtol: float = 1e-6) -> Callable:
    """An ``observe(t, X, ctx)`` for :func:`jaxattn.solve` of a one-dimensional model: the attention
    matrix of the first head, its distance to the nearest Boolean matrix and its numerical rank.
    The theorem behind it is one-dimensional, so ``d`` must be 1."""
    if not is_integer(d) or d != 1:
        raise ConfigError(f"the Boolean attention analysis is for d = 1 tokens, got d = {d}")
    return _boolean_observe(tolerance(rtol))


@functools.lru_cache(maxsize=16)
def _boolean_observe(rtol: float) -> Callable:
    def observe(t, X, ctx):
        A = ctx.attention()[0]
        b = boolean_attention(A, rtol)
        return {"attention": A, "boolean_distance": b.distance, "rank": b.rank.astype(A.dtype)}

    return observe

