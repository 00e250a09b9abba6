"""Finite-time blow-up of the unnormalised kernel ``exp(β <Q x_i, K x_j>)/n``: the model, not the solver.

With the unnormalised kernel the flow ``ẋ_i = (1/n) Σ_j exp(β <x_i, x_j>) V x_j`` (``Q = K = I``) has
no softmax to keep the weights bounded. For ``V = I`` each token feeds its own growth: since
``s e^{βs} ≥ −1/(eβ)`` for every cross term, ``u_i = |x_i|²`` obeys

    u_i' ≥ (2/n) (u_i e^{β u_i} − (n − 1)/(eβ)),

and once ``u e^{βu}`` exceeds ``c = (n − 1)/(eβ)`` the comparison solution reaches infinity at the
finite time ``(n/2) ∫ du / (u e^{βu} − c)`` (:func:`comparison_bound`). One token alone (``n = 1``)
blows up at ``E1(β u0)/2`` exactly (:func:`single_token_time`). The rescaled tokens
``z = e^{−tV} x`` blow up at the same time, since ``e^{−tV}`` is bounded on bounded intervals.
For ``V = −I`` the same bound gives ``u_i' ≤ 2(n − 1)/(n e β)``: at most linear growth, no blow-up.

:func:`blowup_times` measures the time at which the largest score reaches ``score_cap`` with an
adaptive solver (diffrax ``Event``); doing it at two tolerances and two caps shows that the time
is a property of the equation (it does not move with the solver), and :func:`jaxattn.studies.blowup.study` tabulates
it for the initial distributions the clustering studies use.
"""

from __future__ import annotations

import functools
import math

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate, special

from jaxattn.analysis._hulls import polytope
from jaxattn.analysis._linkage import gap_clusters
from jaxattn.analysis.qk_cloud import solve


def field(t, x, args) -> jax.Array:
    """``ẋ_i = (1/n) Σ_j exp(β <Q x_i, K x_j>) V x_j`` for ``x: [n, d]``."""
    V, Q, K, beta = args
    A = jnp.exp(beta * (x @ Q.T) @ (x @ K.T).T) / x.shape[0]
    return A @ (x @ V.T)


def blowup_times(x0, V, *, beta: float = 1.0, t_max: float = 20.0, score_cap: float = 60.0,
                 rtol: float = 1e-8, Q=None, K=None) -> np.ndarray:
    """For each configuration of ``x0: [B, n, d]``, the time at which ``max_ij β <Q x_i, K x_j>`` first
    reaches ``score_cap`` (``inf`` when it does not by ``t_max``, ``nan`` when the solver fails)."""
    x0 = jnp.asarray(x0, jnp.float64)
    d = x0.shape[-1]
    V = jnp.asarray(V, jnp.float64)
    Q = jnp.eye(d) if Q is None else jnp.asarray(Q, jnp.float64)
    K = jnp.eye(d) if K is None else jnp.asarray(K, jnp.float64)
    return np.asarray(_times(x0, V, Q, K, jnp.float64(beta), float(t_max), float(score_cap), float(rtol)))


@functools.partial(jax.jit, static_argnames=("t_max", "score_cap", "rtol"))
def _times(x0, V, Q, K, beta, t_max: float, score_cap: float, rtol: float) -> jax.Array:
    def cond(t, x, args, **kwargs):
        return jnp.max(beta * (x @ Q.T) @ (x @ K.T).T) >= score_cap

    def one(x):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, t_max, None, x, (V, Q, K, beta),
            saveat=diffrax.SaveAt(t1=True), stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol * 1e-2),
            event=diffrax.Event(cond), max_steps=100_000, throw=False)
        hit = sol.result == diffrax.RESULTS.event_occurred
        done = sol.result == diffrax.RESULTS.successful
        return jnp.where(hit, sol.ts[-1], jnp.where(done, jnp.inf, jnp.nan))

    return jax.vmap(one)(x0)


def single_token_time(u0: float, beta: float = 1.0, score_cap: float = math.inf) -> float:
    """``n = 1``, ``V = Q = K = I``: ``u' = 2u e^{βu}``, so ``βu`` reaches ``score_cap`` at
    ``(E1(β u0) − E1(score_cap))/2`` (``E1(β u0)/2``, the blow-up time, for an infinite cap)."""
    tail = 0.0 if math.isinf(score_cap) else float(special.exp1(score_cap))
    return (float(special.exp1(beta * u0)) - tail) / 2


def comparison_bound(u0: float, n: int, beta: float = 1.0) -> float:
    """Upper bound on the blow-up time of a token with ``|x_i(0)|² = u0`` among ``n`` (``V = Q = K = I``),
    from ``u' ≥ (2/n)(u e^{βu} − (n−1)/(eβ))``; ``inf`` when ``u0 e^{βu0}`` does not exceed the constant."""
    c = (n - 1) / (math.e * beta)
    if u0 * math.exp(beta * u0) <= c:
        return math.inf
    # written as e^{-βu} / (u − c e^{-βu}) so that large u underflows instead of overflowing
    val, _ = integrate.quad(lambda u: math.exp(-beta * u) / (u - c * math.exp(-beta * u)), u0, math.inf, limit=200)
    return n * val / 2


def initial_tokens(key, kind: str, num: int, n: int, d: int) -> jax.Array:
    """The initial distributions compared: ``gaussian`` (N(0, I), the clustering study's), ``uniform1``
    (``[-1, 1]^d``), ``uniform5`` (``[-5, 5]^d``, the paper's code for its 2-D pictures), ``small``
    (N(0, 0.01 I)) and ``sphere`` (unit tokens)."""
    if kind == "gaussian":
        return jax.random.normal(key, (num, n, d), jnp.float64)
    if kind == "small":
        return 0.1 * jax.random.normal(key, (num, n, d), jnp.float64)
    if kind == "sphere":
        g = jax.random.normal(key, (num, n, d), jnp.float64)
        return g / jnp.linalg.norm(g, axis=-1, keepdims=True)
    half = {"uniform1": 1.0, "uniform5": 5.0}[kind]
    return jax.random.uniform(key, (num, n, d), jnp.float64, -half, half)


#: (rtol, score cap) of the two measurements of every blow-up time. The cap stays well below the
#: scores at which the time left before the blow-up, about ``n e^{-cap}/(2 cap)``, falls under the
#: float64 resolution of ``t`` (a cap of 80 stalls the solver there: steps of 1e-17 are all rejected,
#: and a stall is not told apart from a stiff run, so it counts as a solver failure).
CHECKS = ((1e-6, 15.0), (1e-10, 22.0))

def paper_setting(key, num: int, n: int = 20, t1: float = 5.0, tol: float = 1e-3) -> dict:
    """The paper's code (its 2-D polytope picture): ``V = Q = K = I``, ``n`` tokens uniform in ``[-5, 5]²``,
    softmax attention, horizon 5. Solved here with adaptive steps in float64; the clusters and the
    vertices of the final polytope, and the blow-up time of the unnormalised kernel from the same tokens."""
    d = 2
    z0 = initial_tokens(key, "uniform5", num, n, d)
    eye = jnp.eye(d)
    zs, ok = solve(z0, eye, eye, eye, jnp.array([0.0, t1]))
    ok = np.asarray(ok)
    zend = np.asarray(zs[:, -1])
    polys = [polytope(zend[i], tol) for i in range(num) if ok[i]]
    gaps = np.asarray(gap_clusters(jnp.asarray(zend[ok])).count) if ok.any() else np.zeros(0)
    t_unnorm = blowup_times(z0, np.eye(d), t_max=t1, score_cap=CHECKS[1][1], rtol=CHECKS[1][0])
    return {
        "draws": num, "n": n, "t1": t1, "tol": tol, "solver_failures": int((~ok).sum()),
        "clusters_mean": float(np.mean([p.clusters for p in polys])) if polys else float("nan"),
        "gap_clusters_mean": float(gaps.mean()) if gaps.size else float("nan"),
        "vertices_mean": float(np.mean([p.vertices for p in polys])) if polys else float("nan"),
        "at_vertices_fraction": float(np.mean([p.vertex_tokens / n for p in polys])) if polys else float("nan"),
        "inside_fraction": float(np.mean([p.inside for p in polys])) if polys else float("nan"),
        "all_at_vertices": int(sum(p.vertex_tokens == n for p in polys)), "conditions_ok": len(polys),
        "unnormalised_blown_before_t1": float(np.mean(np.isfinite(t_unnorm))),
        "unnormalised_t_median": float(np.median(t_unnorm[np.isfinite(t_unnorm)])) if np.isfinite(t_unnorm).any()
        else float("inf"),
    }
