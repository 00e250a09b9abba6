"""The clustering paper's Figure 4: the clouds ``{K x_i(t)}`` and ``{Q x_j(t)}`` joined by ``P_ij(t)``.

Geshkovski et al. (emergence of clusters, Fig. 4) draw, for ``d = 2``, random ``V > 0`` and ``Q > 0``
(entries uniform in ``[0, 1]``, as in the paper's code) and ``K = I``, the two clouds of the rescaled
tokens ``z_i = e^{-tV} x_i`` seen through the key and the query, each pair joined by a line as wide
as its attention weight ``P_ij(t)``; the clusters show up as a self-attention matrix of rank at most
two. This module integrates the rescaled softmax flow of the paper on its own (a dozen lines of
diffrax, independent of :func:`jaxattn.solve`, so it also cross-checks the library's
``C3_RESCALED``), measures the rank of ``P(t1)`` over many random draws and draws the figure.
"""

from __future__ import annotations

import csv
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import expm

from jaxattn.analysis.clusters import boolean_attention
from jaxattn.analysis.stats import wilson


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


def study(out: Path, num: int = 256, n: int = 20, t1: float = 5.0, seed: int = 0, figures: bool = True) -> dict:
    """``num`` random ``(V, Q)`` with ``K = I``, ``n`` tokens uniform in ``[-1, 1]²`` each, solved to ``t1``
    in float64; writes ``qk_cloud.csv`` (one row per draw), ``qk_summary.csv`` and ``qk_cloud.png``."""
    jax.config.update("jax_enable_x64", True)
    out = Path(out)
    d = 2
    key = jax.random.key(seed)
    kw, kz = jax.random.split(key)
    V, Q = random_weights(kw, d, num)
    K = jnp.broadcast_to(jnp.eye(d), (num, d, d))
    z0 = jax.random.uniform(kz, (num, n, d), jnp.float64, -1.0, 1.0)
    ts = jnp.linspace(0.0, t1, 6)
    zs, ok = solve(z0, V, Q, K, ts)
    P_end = jax.vmap(lambda z, V, Q, K: attention(z, t1, V, Q, K))(zs[:, -1], V, Q, K)
    b = boolean_attention(P_end, rtol=1e-6)
    rank, dist, ok = np.asarray(b.rank), np.asarray(b.distance), np.asarray(ok)
    lam = np.linalg.eigvals(np.asarray(V))
    with open(out / "qk_cloud.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["draw", "solver_ok", "rank_end", "boolean_distance_end", "v_lambda1", "v_lambda2"])
        for i in range(num):
            l1, l2 = sorted(lam[i], key=lambda z: -z.real)
            w.writerow([i, bool(ok[i]), int(rank[i]), f"{dist[i]:.6g}", f"{l1.real:.6g}", f"{l2.real:.6g}"])
    good = ok & np.isfinite(dist)
    low = int(((rank <= 2) & good).sum())
    lo, hi = wilson(low, max(int(good.sum()), 1))
    summary = {"draws": num, "n": n, "d": d, "t1": t1, "solver_failures": int((~ok).sum()),
               "rank_le2": low, "fraction": low / max(int(good.sum()), 1), "ci_low": lo, "ci_high": hi,
               "rank_max": int(rank[good].max()) if good.any() else -1,
               "boolean_distance_median": float(np.median(dist[good])) if good.any() else float("nan")}
    with open(out / "qk_summary.csv", "w", newline="") as f:
        dw = csv.DictWriter(f, fieldnames=list(summary))
        dw.writeheader()
        dw.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in summary.items()})
    if figures:
        figure(out / "qk_cloud.png", np.asarray(zs[0]), np.asarray(ts), np.asarray(V[0]), np.asarray(Q[0]),
               np.asarray(K[0]))
    return summary


def figure(path: Path, zs: np.ndarray, ts: np.ndarray, V, Q, K, times: int = 4) -> None:
    """Panels at ``times`` saved times: ``K z_i`` (green), ``Q z_j`` (purple), a line from ``Q z_i``
    to ``K z_j`` as wide as ``P_ij`` (the rescaled tokens; the attention of the unrescaled ones)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    picks = np.linspace(0, len(ts) - 1, times).round().astype(int)
    fig, axes = plt.subplots(1, times, figsize=(3.2 * times, 3.2))
    for ax, k in zip(axes, picks, strict=True):
        z, t = zs[k], float(ts[k])
        P = np.asarray(attention(jnp.asarray(z), t, jnp.asarray(V), jnp.asarray(Q), jnp.asarray(K)))
        kz, qz = z @ K.T, z @ Q.T
        for i in range(len(z)):
            for j in range(len(z)):
                if P[i, j] > 1e-3:
                    ax.plot([qz[i, 0], kz[j, 0]], [qz[i, 1], kz[j, 1]], color="0.4", lw=2.0 * P[i, j], zorder=1)
        ax.scatter(*kz.T, s=14, color="tab:green", label="K z_i", zorder=2)
        ax.scatter(*qz.T, s=14, color="tab:purple", label="Q z_j", zorder=2)
        rank = int(boolean_attention(jnp.asarray(P)).rank)
        ax.set_title(f"t = {t:g}, rank P = {rank}", fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
