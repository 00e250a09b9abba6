"""The maps' and flows' default observables (diameter, cosine consensus): pure JAX functions of one
configuration ``X: [n, d]``, cheap enough to run inside the jitted simulation. They live with the
drivers that use them by default; :mod:`jaxattn.analysis.metrics` re-exports them with the other
metrics.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxattn.model.nn import l2


def pairwise_distances(X: Float[Array, "n d"]) -> Float[Array, "n n"]:
    """``[n, n]`` Euclidean distances ``||x_i - x_j||``.

    Gram form on centred tokens: ``||y_i||² + ||y_j||² − 2<y_i, y_j>`` with ``y = x − mean(x)``.
    Centring keeps the cancellation relative to the spread of the tokens, so distances near
    consensus stay accurate, without the ``[n, n, d]`` array of differences (3x faster in sweeps).
    """
    Y = X - X.mean(axis=0, keepdims=True)
    s = jnp.sum(Y * Y, axis=-1)
    sq = s[:, None] + s[None, :] - 2.0 * (Y @ Y.T)
    # sqrt has an infinite derivative at 0 (the diagonal, tokens at consensus): differentiate only the
    # positive entries, so that gradients of distance observables are finite (the values are unchanged)
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def diameter(X: Float[Array, "n d"]) -> Float[Array, ""]:
    """Inter-token distance ``max_{i,j} ||x_i - x_j||`` (0 exactly at consensus)."""
    return pairwise_distances(X).max()


def cos_consensus(X: Float[Array, "n d"]) -> Float[Array, ""]:
    """``1 - mean_{i≠j} cos(x_i, x_j)``: 0 exactly at consensus (all tokens parallel)."""
    U = l2(X)  # tokens as unit vectors
    n = X.shape[0]
    if n == 1:  # a single token is at consensus
        return jnp.zeros((), X.dtype)
    # Σ_{i≠j} <u_i, u_j> = ||Σ_i u_i||² − Σ_i ||u_i||²: O(n d) instead of the O(n² d) Gram matrix
    m = U.sum(axis=0)
    return 1.0 - (m @ m - jnp.sum(U * U)) / (n * (n - 1))


def consensus_observables(t, X: Float[Array, "n d"], ctx=None) -> dict[str, Float[Array, ""]]:
    """Default observables of :func:`jaxattn.simulate` and :func:`jaxattn.solve` (signature
    ``(t, X, ctx)``): diameter and cosine consensus."""
    return {"diameter": diameter(X), "cos_consensus": cos_consensus(X)}
