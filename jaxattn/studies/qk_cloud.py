"""The clustering paper's Figure 4 measured: the rank of the self-attention matrix of the Q/K clouds.

The flow and the attention are :mod:`jaxattn.analysis.qk_cloud`; this module draws random ``(V, Q)``,
measures the rank of ``P(t1)`` over the draws and writes ``qk_cloud.csv``, ``qk_summary.csv`` and
``qk_cloud.png`` (atomically; float64 in a scope, the caller's JAX setting unchanged).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.clusters import boolean_attention
from jaxattn.analysis.qk_cloud import attention, random_weights, solve
from jaxattn.analysis.stats import wilson
from jaxattn.io.results import atomic_write_text
from jaxattn.studies import plots
from jaxattn.studies.skeleton import csv_text


def study(out: Path, num: int = 256, n: int = 20, t1: float = 5.0, seed: int = 0, figures: bool = True) -> dict:
    """``num`` random ``(V, Q)`` with ``K = I``, ``n`` tokens uniform in ``[-1, 1]²`` each, solved to ``t1``
    in float64; writes ``qk_cloud.csv`` (one row per draw), ``qk_summary.csv`` and ``qk_cloud.png``."""
    with jax.enable_x64(True):  # float64 for this call only: the caller's setting stays
        return _study(out, num=num, n=n, t1=t1, seed=seed, figures=figures)


def _study(out: Path, num: int, n: int, t1: float, seed: int, figures: bool) -> dict:
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
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["draw", "solver_ok", "rank_end", "boolean_distance_end", "v_lambda1", "v_lambda2"])
    for i in range(num):
        l1, l2 = sorted(lam[i], key=lambda z: -z.real)
        w.writerow([i, bool(ok[i]), int(rank[i]), f"{dist[i]:.6g}", f"{l1.real:.6g}", f"{l2.real:.6g}"])
    atomic_write_text(out / "qk_cloud.csv", buf.getvalue())
    good = ok & np.isfinite(dist)
    low = int(((rank <= 2) & good).sum())
    lo, hi = wilson(low, max(int(good.sum()), 1))
    summary = {"draws": num, "n": n, "d": d, "t1": t1, "solver_failures": int((~ok).sum()),
               "rank_le2": low, "fraction": low / max(int(good.sum()), 1), "ci_low": lo, "ci_high": hi,
               "rank_max": int(rank[good].max()) if good.any() else -1,
               "boolean_distance_median": float(np.median(dist[good])) if good.any() else float("nan")}
    atomic_write_text(out / "qk_summary.csv", csv_text([summary], digits=6))
    if figures:
        figure(out / "qk_cloud.png", np.asarray(zs[0]), np.asarray(ts), np.asarray(V[0]), np.asarray(Q[0]),
               np.asarray(K[0]))
    return summary


def figure(path: Path, zs: np.ndarray, ts: np.ndarray, V, Q, K, times: int = 4) -> None:
    """Panels at ``times`` saved times: ``K z_i`` (green), ``Q z_j`` (purple), a line from ``Q z_i``
    to ``K z_j`` as wide as ``P_ij`` (the rescaled tokens; the attention of the unrescaled ones)."""
    plt = plots.pyplot()
    if plt is None:
        return
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
    plots.save(fig, path, dpi=80)
