"""Metrics of MATH.md §4 for one configuration ``X: [n, d]`` (batches come from ``vmap``).

Every function here is pure JAX and cheap enough to run as an observable inside the jitted
simulation, so that large sweeps never materialise whole trajectories.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _unit(X):
    return X / jnp.linalg.norm(X, axis=-1, keepdims=True)


def pairwise_distances(X: jax.Array) -> jax.Array:
    """``[n, n]`` Euclidean distances ``||x_i - x_j||``."""
    diff = X[:, None, :] - X[None, :, :]
    sq = jnp.sum(diff * diff, axis=-1)
    # sqrt has an infinite derivative at 0; the distances themselves are exact.
    return jnp.sqrt(sq)


def diameter(X: jax.Array) -> jax.Array:
    """Inter-token distance ``max_{i,j} ||x_i - x_j||`` (0 exactly at consensus)."""
    return pairwise_distances(X).max()


def mean_distance(X: jax.Array) -> jax.Array:
    """``mean_{i≠j} ||x_i - x_j||`` (0 for a single token)."""
    n = X.shape[0]
    return pairwise_distances(X).sum() / max(n * (n - 1), 1)


def cos_consensus(X: jax.Array) -> jax.Array:
    """``1 - mean_{i≠j} cos(x_i, x_j)``: 0 exactly at consensus (all tokens parallel)."""
    U = _unit(X)
    n = X.shape[0]
    c = U @ U.T
    return 1.0 - (c.sum() - jnp.trace(c)) / max(n * (n - 1), 1)


def first_token_consensus(X: jax.Array) -> jax.Array:
    """``1 - (1/n) Σ_j cos(x_1, x_j)``: the GPT-Consensus code's measure (convergence to token 1)."""
    U = _unit(X)
    return 1.0 - jnp.mean(U @ U[0])


def consensus_observables(X: jax.Array, k=None) -> dict:
    """Default observables of :func:`jaxattn.simulate`: diameter and cosine consensus."""
    return {"diameter": diameter(X), "cos_consensus": cos_consensus(X)}


def rho(X: jax.Array, v: jax.Array) -> jax.Array:
    """Correlation of each token with a unit direction: ``|<x_i, v>| / ||x_i||``, shape ``[n]``."""
    return jnp.abs(X @ v) / jnp.linalg.norm(X, axis=-1)


def rho_subspace(X: jax.Array, U: jax.Array) -> jax.Array:
    """Correlation with a subspace of orthonormal basis ``U: [d, r]``: ``||Uᵀ x_i|| / ||x_i||``."""
    return jnp.linalg.norm(X @ U, axis=-1) / jnp.linalg.norm(X, axis=-1)
