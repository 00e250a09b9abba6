"""Metrics for one configuration ``X: [n, d]`` (batches come from ``vmap``).

Every function here is pure JAX and cheap enough to run as an observable inside the jitted
simulation, so that large sweeps never materialise whole trajectories.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .nn import l2

_unit = l2  # tokens as unit vectors


def pairwise_distances(X: jax.Array) -> jax.Array:
    """``[n, n]`` Euclidean distances ``||x_i - x_j||``.

    Gram form on centred tokens: ``||y_i||² + ||y_j||² − 2<y_i, y_j>`` with ``y = x − mean(x)``.
    Centring keeps the cancellation relative to the spread of the tokens, so distances near
    consensus stay accurate, without the ``[n, n, d]`` array of differences (3x faster in sweeps).
    """
    Y = X - X.mean(axis=0, keepdims=True)
    s = jnp.sum(Y * Y, axis=-1)
    sq = s[:, None] + s[None, :] - 2.0 * (Y @ Y.T)
    return jnp.sqrt(jnp.maximum(sq, 0.0))


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
    if n == 1:  # a single token is at consensus
        return jnp.zeros((), X.dtype)
    # Σ_{i≠j} <u_i, u_j> = ||Σ_i u_i||² − Σ_i ||u_i||²: O(n d) instead of the O(n² d) Gram matrix
    m = U.sum(axis=0)
    return 1.0 - (m @ m - jnp.sum(U * U)) / (n * (n - 1))


def first_token_consensus(X: jax.Array) -> jax.Array:
    """``1 - (1/n) Σ_j cos(x_1, x_j)``: the GPT-Consensus code's measure (convergence to token 1)."""
    U = _unit(X)
    return 1.0 - jnp.mean(U @ U[0])


def consensus_observables(t, X: jax.Array, ctx=None) -> dict:
    """Default observables of :func:`jaxattn.simulate` and :func:`jaxattn.solve` (signature
    ``(t, X, ctx)``): diameter and cosine consensus."""
    return {"diameter": diameter(X), "cos_consensus": cos_consensus(X)}


def rho(X: jax.Array, v: jax.Array) -> jax.Array:
    """Correlation of each token with a unit direction: ``|<x_i, v>| / ||x_i||``, shape ``[n]``."""
    return jnp.abs(X @ v) / jnp.linalg.norm(X, axis=-1)


def rho_subspace(X: jax.Array, U: jax.Array) -> jax.Array:
    """Correlation with a subspace of orthonormal basis ``U: [d, r]``: ``||Uᵀ x_i|| / ||x_i||``."""
    return jnp.linalg.norm(X @ U, axis=-1) / jnp.linalg.norm(X, axis=-1)


def numerical_rank(A: jax.Array, rtol: float = 1e-6) -> jax.Array:
    """Numerical rank of each ``[n, n]`` matrix in ``A: [..., n, n]`` (singular values above
    ``rtol · σ_max``): 1 at consensus, 2 at bipartite consensus."""
    s = jnp.linalg.svd(A, compute_uv=False)
    return jnp.sum(s > rtol * s[..., :1], axis=-1)


def boolean_distance(A: jax.Array) -> jax.Array:
    """Max-entry distance of ``A`` to the nearest Boolean matrix (entrywise rounding),
    the quantity of Geshkovski et al. Thm 2.1."""
    return jnp.max(jnp.abs(A - jnp.round(A)), axis=(-2, -1))


class AlignmentTables(NamedTuple):
    """Directions the alignment observables correlate with, as plain arrays (jit inputs).

    ``G`` weight sets, ``T`` steps; complex vectors are stored as ``[..., d, 2]`` (real, imaginary).
    """

    set_of_step: jax.Array  # [T] int32: weight set applied at step t -> t+1
    v1: jax.Array  # [G, d, 2] principal eigenvector (imaginary part 0 unless case 2)
    sub: jax.Array  # [G, d, 2] orthonormal basis of the 2-D subspace
    dirs: jax.Array  # [G, d, d] orthonormalised eigendirection bases (columns)
    groups: jax.Array  # [G, d, d] one-hot: column c of dirs belongs to eigendirection j
    n_dirs: jax.Array  # [G] number of eigendirections
    phi: jax.Array  # [T, d, 2] principal eigenvector of the cumulative product Φ(t)
    beta: jax.Array  # [] inverse temperature (for the attention-rank observable)


def alignment_tables(spec, schedule, steps: int, phi_u1=None, beta=1.0, dtype=jnp.float32) -> AlignmentTables:
    """Build :class:`AlignmentTables` from a :class:`jaxattn.spectral.Spectrum`.

    ``schedule`` is the model's; step t uses set ``schedule[t % len(schedule)]``.
    ``phi_u1: [T', d]`` eigenvectors of Φ (default: v1 of each step's layer).
    """
    depth = len(schedule)
    sos = np.asarray([schedule[t % depth] for t in range(max(steps, 1))], np.int32)
    cplx = lambda v: np.stack([v.real, v.imag], axis=-1)
    G, d, _ = spec.directions.shape
    onehot = np.zeros((G, d, d))
    for g in range(G):
        onehot[g, np.arange(d), spec.direction_group[g]] = 1.0
    if phi_u1 is None:
        phi = spec.v1[sos]
    else:
        phi = np.asarray(phi_u1)
        phi = np.concatenate([phi, np.repeat(phi[-1:], max(len(sos) - len(phi), 0), axis=0)])[: len(sos)]
    as_ = lambda a: jnp.asarray(a, dtype)
    return AlignmentTables(set_of_step=jnp.asarray(sos), v1=as_(cplx(spec.v1)), sub=as_(spec.subspace),
                           dirs=as_(spec.directions), groups=as_(onehot), n_dirs=as_(spec.n_directions),
                           phi=as_(cplx(phi)), beta=jnp.asarray(beta, dtype))


def alignment_observables(t, X: jax.Array, ctx) -> dict:
    """Per-token correlations at state ``t`` with the directions of the layer that maps
    ``t -> t+1`` (``*_before``) and of the layer that mapped ``t-1 -> t`` (``*_after``), so that
    ``Δρ(k) = after[k+1] − before[k]`` (eq. 4 of the power-method paper) needs no trajectory. Also the
    correlation with Φ(t−1)'s eigenvector, consensus measures and the mean numerical rank of the
    attention matrices applied at ``t`` (those of the step taken from state ``t``).
    ``ctx.aux`` is the :class:`AlignmentTables`.
    """
    tab = ctx.aux
    T = tab.set_of_step.shape[0]
    g_before = tab.set_of_step[jnp.minimum(t, T - 1)]
    g_after = tab.set_of_step[jnp.maximum(t - 1, 0)]

    # a complex unit vector v stored as [d, 2] = (Re v, Im v): |v^H x| = ||[Re v, Im v]ᵀ x||,
    # so every correlation below is rho_subspace with a 2-column (or wider) basis
    def rbar(g):
        p = (X @ tab.dirs[g]) ** 2
        return jnp.sum(jnp.sqrt(p @ tab.groups[g]), axis=-1) / tab.n_dirs[g] / jnp.linalg.norm(X, axis=-1)

    out = {
        "rho1_before": rho_subspace(X, tab.v1[g_before]), "rho1_after": rho_subspace(X, tab.v1[g_after]),
        "rho2_before": rho_subspace(X, tab.sub[g_before]), "rho2_after": rho_subspace(X, tab.sub[g_after]),
        "rhobar_before": rbar(g_before), "rhobar_after": rbar(g_after),
        "rho_phi": rho_subspace(X, tab.phi[jnp.maximum(t - 1, 0)]),
        "diameter": diameter(X), "cos_consensus": cos_consensus(X),
    }
    out["attn_rank"] = jnp.mean(numerical_rank(ctx.attention()).astype(X.dtype))
    return out
