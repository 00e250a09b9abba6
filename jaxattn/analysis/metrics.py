"""Metrics for one configuration ``X: [n, d]`` (batches come from ``vmap``).

Every function here is pure JAX and cheap enough to run as an observable inside the jitted
simulation, so that large sweeps never materialise whole trajectories.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxattn.dynamics.observables import (  # noqa: F401  (re-exported: the metrics in one place)
    consensus_observables,
    cos_consensus,
    diameter,
    pairwise_distances,
)
from jaxattn.model.nn import l2

_unit = l2  # tokens as unit vectors


def mean_distance(X: Float[Array | np.ndarray, "n d"]) -> Float[Array, ""]:
    """``mean_{i≠j} ||x_i - x_j||`` (0 for a single token)."""
    n = X.shape[0]
    return pairwise_distances(X).sum() / max(float(n) * (n - 1), 1.0)  # float: n (n - 1) overflows int32


def first_token_consensus(X: Float[Array | np.ndarray, "n d"]) -> Float[Array, ""]:
    """``1 - (1/n) Σ_j cos(x_1, x_j)``: the GPT-Consensus code's measure (convergence to token 1)."""
    U = _unit(X)
    return 1.0 - jnp.mean(U @ U[0])


def rho(X: Float[Array | np.ndarray, "n d"], v: Float[Array | np.ndarray, " d"]) -> Float[Array, " n"]:
    """Correlation of each token with a unit direction: ``|<x_i, v>| / ||x_i||``, shape ``[n]``."""
    return jnp.abs(X @ v) / jnp.linalg.norm(X, axis=-1)


def rho_subspace(X: Float[Array | np.ndarray, "*B n d"], U: Float[Array | np.ndarray, "d r"]) -> Float[Array, "*B n"]:
    """Correlation with a subspace of orthonormal basis ``U: [d, r]``: ``||Uᵀ x_i|| / ||x_i||`` (over any leading
    axes of ``X``)."""
    return jnp.linalg.norm(X @ U, axis=-1) / jnp.linalg.norm(X, axis=-1)


def numerical_rank(A: Float[Array | np.ndarray, "*B n n"], rtol: float = 1e-6) -> Int[Array, "*B"]:
    """Numerical rank of each ``[n, n]`` matrix in ``A: [..., n, n]`` (singular values above
    ``rtol · σ_max``): 1 at consensus, 2 at bipartite consensus."""
    s = jnp.linalg.svd(A, compute_uv=False)
    return jnp.sum(s > rtol * s[..., :1], axis=-1)


def boolean_distance(A: Float[Array | np.ndarray, "*B n n"]) -> Float[Array, "*B"]:
    """Max-entry distance of ``A`` to the nearest Boolean matrix (entrywise rounding),
    the quantity of Geshkovski et al. Thm 2.1."""
    return jnp.max(jnp.abs(A - jnp.round(A)), axis=(-2, -1))
