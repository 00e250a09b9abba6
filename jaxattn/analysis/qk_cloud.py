"""The clustering paper's Figure 4: the clouds ``{K x_i(t)}`` and ``{Q x_j(t)}`` joined by ``P_ij(t)``.

Geshkovski et al. (emergence of clusters, Fig. 4) draw, for ``d = 2``, random ``V > 0`` and ``Q > 0``
(entries uniform in ``[0, 1]``, as in the paper's code) and ``K = I``, the two clouds of the rescaled
tokens ``z_i = e^{-tV} x_i`` seen through the key and the query, each pair joined by a line as wide
as its attention weight ``P_ij(t)``; the clusters show up as a self-attention matrix of rank at most
two. This module integrates the rescaled softmax flow of the paper on its own (a dozen lines of
diffrax, independent of :func:`jaxattn.solve`, so it also cross-checks the library's
``C3_RESCALED``), for :mod:`jaxattn.studies.qk_cloud`, which measures the rank of ``P(t1)`` over many
random draws and draws the figure.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
from jax.scipy.linalg import expm


def scores(z: jax.Array, t, V, Q, K, beta: float = 1.0) -> jax.Array:
    """``β <Q e^{tV} z_i, K e^{tV} z_j>`` for ``z: [n, d]``: the scores of the unrescaled tokens."""
    x = z @ expm(t * V).T
    return beta * (x @ Q.T) @ (x @ K.T).T


def attention(z: jax.Array, t, V, Q, K, beta: float = 1.0) -> jax.Array:
    """The paper's softmax self-attention matrix ``P(t)`` at the rescaled tokens ``z``."""
    return jax.nn.softmax(scores(z, t, V, Q, K, beta), axis=-1)


def field(t, z, args) -> jax.Array:
    """``ż_i = Σ_j P_ij(t) V (z_j − z_i)`` (rows of ``P`` sum to one)."""
    V, Q, K, beta = args
    Vz = z @ V.T
    return attention(z, t, V, Q, K, beta) @ Vz - Vz


def solve(z0, V, Q, K, ts, beta: float = 1.0, rtol: float = 1e-8, atol: float = 1e-10):
    """Rescaled tokens at the times ``ts`` from ``z0: [B, n, d]`` (Tsit5, adaptive steps) and, per
    configuration, whether the solver succeeded. ``V, Q, K`` are ``[d, d]`` or ``[B, d, d]``."""
    z0 = jnp.asarray(z0)
    B = z0.shape[0]
    ts = jnp.asarray(ts, z0.dtype)
    V, Q, K = (jnp.broadcast_to(jnp.asarray(M, z0.dtype), (B, *z0.shape[-1:] * 2)) for M in (V, Q, K))

    def one(z, V, Q, K):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field), diffrax.Tsit5(), ts[0], ts[-1], None, z, (V, Q, K, beta),
            saveat=diffrax.SaveAt(ts=ts), stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            max_steps=200_000, throw=False)
        return sol.ys, sol.result == diffrax.RESULTS.successful

    return jax.jit(jax.vmap(one))(z0, V, Q, K)


def random_weights(key, d: int, count: int) -> tuple[jax.Array, jax.Array]:
    """``count`` draws of the figure's ``V > 0`` and ``Q > 0`` (entries uniform in ``[0, 1]``)."""
    kv, kq = jax.random.split(key)
    return jax.random.uniform(kv, (count, d, d)), jax.random.uniform(kq, (count, d, d))
