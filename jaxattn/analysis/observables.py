"""Consensus measures as observables ``observe(t, X, ctx)`` (maps, flows and repeated passes alike).

All are functions of one configuration ``X: [n, d]``; every one is 0 (or extremal) at consensus:

* ``first_token``: ``1 − (1/n) Σ_j cos(x_1, x_j)``, the GPT-Consensus code's measure (under causal
  attention with ``V = I`` token 1 never moves, so this is convergence to it);
* ``cos_consensus``: ``1 − mean_{i≠j} cos(x_i, x_j)``; ``diameter``: ``max_{i,j} ||x_i − x_j||``;
* ``nearest_consensus``: distance of the normalised tokens to the nearest consensus point on the
  sphere, ``sqrt(Σ_i ||u_i − c||²)`` with ``c = ū/||ū||`` (``u_i = x_i/||x_i||``);
* ``hemisphere``: ``min_i <x_i, w>/||x_i||`` for a unit direction ``w = ctx.aux['w']`` — the consensus
  paper's Lyapunov function, non-decreasing when the tokens start in the hemisphere of pole ``w``
  (``V = I``);
* ``energy``: ``Σ_{i,j} exp(β s <Q x_i, K x_j>) / (2 β s)`` of one head (``ctx.aux['q']``, ``['k']``,
  ``['beta_s']``), non-decreasing along the flow when ``V = QᵀK``.

and the power-method study's alignment observables (:func:`alignment_observables`, with the
directions of every layer in :class:`AlignmentTables`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxattn.analysis.metrics import cos_consensus, diameter, first_token_consensus, numerical_rank, rho_subspace
from jaxattn.model.nn import l2
from jaxattn.model.precision import full_precision

_unit = l2  # tokens as unit vectors


def nearest_consensus(X: Float[Array | np.ndarray, "n d"]) -> Float[Array, ""]:
    U = _unit(X)
    m = U.mean(axis=0)
    c = m / jnp.linalg.norm(m)
    return jnp.sqrt(jnp.sum((U - c[None]) ** 2))


def hemisphere(X: Float[Array | np.ndarray, "n d"], w: Float[Array | np.ndarray, " d"]) -> Float[Array, ""]:
    return jnp.min((X @ w) / jnp.linalg.norm(X, axis=-1))


def energy(X: Float[Array | np.ndarray, "n d"], q: Float[Array | np.ndarray, "d_h d"],
           k: Float[Array | np.ndarray, "d_h d"], beta_s: float | Float[Array | np.ndarray, ""]) -> Float[Array, ""]:
    G = (X @ q.T) @ (X @ k.T).T
    return jnp.sum(jnp.exp(beta_s * G)) / (2 * beta_s)


def consensus(t, X: Float[Array | np.ndarray, "n d"], ctx=None) -> dict:
    """The consensus measures that need no extra data: first-token, all-pairs cosine, diameter,
    distance to the nearest consensus point."""
    return {"first_token": first_token_consensus(X), "cos_consensus": cos_consensus(X), "diameter": diameter(X),
            "nearest_consensus": nearest_consensus(X)}


def consensus_hemisphere(t, X: Float[Array | np.ndarray, "n d"], ctx) -> dict:
    """:func:`consensus` and the hemisphere Lyapunov function for ``ctx.aux['w']``."""
    return {**consensus(t, X), "hemisphere": hemisphere(X, ctx.aux["w"])}


def consensus_energy(t, X: Float[Array | np.ndarray, "n d"], ctx) -> dict:
    """:func:`consensus` and the interaction energy for ``ctx.aux = {'q', 'k', 'beta_s'}``."""
    return {**consensus(t, X), "energy": energy(X, ctx.aux["q"], ctx.aux["k"], ctx.aux["beta_s"])}


# ------------------------------------------------------------------ the power-method study
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


@full_precision
def alignment_tables(spec, schedule, steps: int, phi_u1=None, beta=1.0, dtype=jnp.float32) -> AlignmentTables:
    """Build :class:`AlignmentTables` from a :class:`jaxattn.analysis.spectral.Spectrum`.

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


def alignment_observables(t, X: Float[Array | np.ndarray, "n d"], ctx) -> dict:
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
