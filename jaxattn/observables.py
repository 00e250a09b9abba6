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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .metrics import cos_consensus, diameter, first_token_consensus
from .nn import l2


_unit = l2  # tokens as unit vectors


def nearest_consensus(X: jax.Array) -> jax.Array:
    U = _unit(X)
    m = U.mean(axis=0)
    c = m / jnp.linalg.norm(m)
    return jnp.sqrt(jnp.sum((U - c[None]) ** 2))


def hemisphere(X: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.min((X @ w) / jnp.linalg.norm(X, axis=-1))


def energy(X: jax.Array, q: jax.Array, k: jax.Array, beta_s) -> jax.Array:
    G = (X @ q.T) @ (X @ k.T).T
    return jnp.sum(jnp.exp(beta_s * G)) / (2 * beta_s)


def consensus(t, X, ctx=None) -> dict:
    """The consensus measures that need no extra data: first-token, all-pairs cosine, diameter,
    distance to the nearest consensus point."""
    return {"first_token": first_token_consensus(X), "cos_consensus": cos_consensus(X), "diameter": diameter(X),
            "nearest_consensus": nearest_consensus(X)}


def consensus_hemisphere(t, X, ctx) -> dict:
    """:func:`consensus` and the hemisphere Lyapunov function for ``ctx.aux['w']``."""
    return {**consensus(t, X), "hemisphere": hemisphere(X, ctx.aux["w"])}


def consensus_energy(t, X, ctx) -> dict:
    """:func:`consensus` and the interaction energy for ``ctx.aux = {'q', 'k', 'beta_s'}``."""
    return {**consensus(t, X), "energy": energy(X, ctx.aux["q"], ctx.aux["k"], ctx.aux["beta_s"])}
