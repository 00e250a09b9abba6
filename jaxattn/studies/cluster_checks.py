"""The clustering paper's statements beyond the pictures, each measured over many initial conditions (part of
``jaxattn clusters --check-num N``; every flow is the study's :func:`~jaxattn.studies.clusters.solve_rescaled`,
float64, Tsit5):

* ``mixed.csv`` — Fig. 8 / Theorem 5.1 (``V = diag(1, 1, −1/2)``, ``Q = K = I``, d = 3) and Fig. 7(a)
  (a symmetric ``V`` with eigenvalues ``{1.96, 0.25, −0.22}``): the tokens' component in the positive
  eigenspace clusters (at most three values, Conjecture 4.2; on the boundary of a polytope or at 0,
  Theorem 5.1) while their spread along the negative eigendirection grows;
* ``high_dim.csv`` — Fig. 7(b): n = 256 tokens in d = 128, random ``Q``, ``K`` and symmetric ``V``;
* ``collapse.csv`` — ``V = −I`` (Theorem C.5): the tokens themselves (not rescaled) go to the origin;
* ``hull.csv`` — Proposition C.2: the convex hull of the rescaled tokens (``V = I``) never grows;
* ``hyperplanes.csv`` — Theorem 4.1 over many initial conditions of the good triple;
* ``rate.csv`` — Theorem 2.1 (d = 1): the attention matrix converges doubly exponentially, the same for
  every n (Fig. 11): ``log(−log dist(P(t), Boolean))`` against ``t`` is a line (a single exponential would
  make ``log dist`` the line), whose slope should not depend on n.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.clusters import (
    boolean_observables,
    count_clusters,
    gap_clusters,
    hyperplanes,
    outside_distance,
    polytope,
)
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.fields import Flow
from jaxattn.dynamics.options import Save
from jaxattn.model.paper import paper_model
from jaxattn.model.sampling import init_tokens
from jaxattn.studies import plots


def solve_rescaled(model, X0, ts, *, beta=1.0, attention: str = "softmax", observe=None, trajectory: bool = False,
                   rtol: float = 1e-8, atol: float = 1e-10, max_steps: int = 20_000):
    """The study's solve: the rescaled flow ``z = e^{−tV} x`` (:data:`jaxattn.C3_RESCALED` with the
    given attention kernel) from ``X0: [B, n, d]`` to ``ts[-1]``, saved at ``ts``, float64, Tsit5.

    Every run of the study goes through here with the same static settings, so runs of the same
    shapes (up to 64 conditions are one block on a CPU) and step budget share one compiled program.
    ``max_steps``: more for a long horizon (the rescaled flow stiffens as e^{−tV} grows: Fig. 7(a)'s flow takes
    about 5,000 steps to t = 20 and 20,000 to t = 28).
    """
    ts = np.asarray(ts, np.float64)
    flow = Flow(space="flat", rescaled=True, attention=attention)
    return solve(model, X0, float(ts[-1]), flow=flow, beta=beta,
                 save=Save(ts=ts, observe=observe or _nothing, trajectory=trajectory), rtol=rtol, atol=atol,
                 dtype=jnp.float64, max_steps=max_steps)


#: Fig. 7(a)'s spectrum (the paper's V is "a random matrix" with it; here a random rotation of the diagonal).
FIG7A_SPECTRUM = (1.96, 0.25, -0.22)


def cluster_horizon(lam_min_positive: float, decades: float = 3.0) -> float:
    """The time over which a clusters' gap growing at the rate of the smallest positive eigenvalue of ``V``
    (``λ/ln 10`` decades per unit time) grows by ``decades``: the horizon a check of clear clusters needs (Fig. 7(a):
    λ = 0.25, 27.6)."""
    return decades * math.log(10.0) / lam_min_positive


def _nothing(t, X, ctx) -> dict:
    return {}


def _rotated(key, M: np.ndarray) -> np.ndarray:
    g = np.asarray(jax.random.normal(key, M.shape, jnp.float64))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diag(r))[None, :]
    return q @ M @ q.T


def _spread(Y: np.ndarray) -> np.ndarray:
    """Standard deviation over the tokens of the coordinates ``Y: [..., n, k]`` (root of the summed variances)."""
    return np.sqrt(np.sum(np.var(Y, axis=-2), axis=-1))


def boundary_or_origin(P: np.ndarray, tol: float) -> tuple[int, int, int]:
    """Of the points ``P: [n, k]``: how many lie at a vertex of the polytope of their clusters, how many on its
    boundary or at the origin (Theorem 5.1's limit set ``∂K ∪ {0}``, within ``tol``), and how many inside."""
    p = polytope(P, tol)
    cen = np.asarray(P, np.float64)
    k = P.shape[1]
    from scipy.spatial import ConvexHull

    at_origin = np.linalg.norm(cen, axis=-1) <= tol
    try:
        eq = ConvexHull(cen).equations  # the hull of all points is the polytope of the vertices
        depth = -(cen @ eq[:, :-1].T + eq[:, -1]).max(axis=1)  # distance to the boundary, >= 0 inside
    except Exception:  # a flat set (fewer than k + 1 affinely independent points): all on its boundary
        depth = np.zeros(len(cen))
    on = (depth <= tol * max(k, 1)) | at_origin
    return p.vertex_tokens, int(on.sum()), int((~on).sum())


def mixed_signs(key, V: np.ndarray, num: int, n: int, t1: float, tol: float) -> list[dict]:
    """``num`` initial conditions of ``n`` Gaussian tokens under the rescaled flow with value ``V`` (symmetric, some
    eigenvalues positive, some negative): per condition the clusters of the positive-eigenspace component, where
    its tokens sit (vertex, boundary or origin, inside), and the spread along the negative eigenspace at
    ``t = 0, t1/2, t1`` with its growth rate over the second half. ``t1`` is at least :func:`cluster_horizon` of
    ``V``'s smallest positive eigenvalue: a shorter run could only find clusters still forming."""

    lam, U = np.linalg.eigh(V)
    pos, neg = U[:, lam > 0], U[:, lam < 0]
    t1 = max(float(t1), cluster_horizon(float(lam[lam > 0].min())))
    ts = np.asarray([0.0, t1 / 2, t1])  # the gap at t1/2 and t1: its rate tells a plateau from clusters still forming
    X0 = init_tokens(key, num, n, V.shape[0], kind="gaussian", dtype=jnp.float64)
    sol = solve_rescaled(paper_model(V), X0, ts, trajectory=True, max_steps=20_000 if t1 <= 20 else 200_000)
    Z = np.asarray(sol.trajectory, np.float64)  # [B, 3, n, d]
    ok = np.asarray(sol.ok) & np.all(np.isfinite(Z), axis=(1, 2, 3))
    rows = []
    for b in range(num):
        zp, zn = Z[b] @ pos, Z[b] @ neg  # [3, n, k+], [3, n, k-]
        row = {"condition": b, "solver_ok": bool(ok[b]), "positive_dims": pos.shape[1], "negative_dims": neg.shape[1],
               # the clusters' gap grows at about the smallest positive eigenvalue's rate: the horizon it needs
               "lambda_min_positive": float(lam[lam > 0].min()), "t1": float(t1)}
        if ok[b]:
            g, g_mid = gap_clusters(jnp.asarray(zp[-1])), gap_clusters(jnp.asarray(zp[1]))
            vert, bnd, inside = boundary_or_origin(zp[-1], tol)
            s = _spread(zn)
            row.update(clusters=int(count_clusters(jnp.asarray(zp[-1]), tol)), gap_clusters=int(g.count),
                       gap_decades=float(g.gap), gap_decades_mid=float(g_mid.gap), at_vertices=vert,
                       on_boundary_or_origin=bnd, inside=inside,
                       negative_spread_0=float(s[0]), negative_spread_mid=float(s[1]), negative_spread_end=float(s[2]),
                       negative_rate=float(np.log(s[2] / s[1]) / (t1 / 2)),
                       positive_spread_end=float(_spread(zp[-1][None])[0]))
        rows.append(row)
    return rows


def high_dimensional(key, n: int = 256, d: int = 128, t1: float = 5.0, saves: int = 11, num: int = 1,
                     max_steps: int = 20_000) -> list[dict]:
    """Fig. 7(b): ``num`` conditions of ``n`` Gaussian tokens, random Gaussian ``Q``, ``K`` (entries ``N(0, 1/d)``)
    and a symmetric ``V = (G + Gᵀ)/2``, read coordinate by coordinate as the figure does: one row per condition,
    saved time and coordinate ``j`` along a positive eigenvector ``φ_j`` of ``V`` (largest eigenvalue first) with
    the mean and variance over the tokens of ``<φ_j, z_i>``, the tolerance-free clusters of those values, the
    horizon :func:`cluster_horizon` their eigenvalue sets, and the spread along the negative eigenspace. The
    conjecture is about the whole positive component, not one coordinate at a time (points at (±1, ±1) are two
    values per coordinate and four jointly), so each row also carries the clusters of the tokens projected on the
    span of the coordinates that have had the time by ``t1`` (``λ_j t1 ≥ 3 ln 10``): ``joint_clusters``,
    ``joint_gap`` (-1 and NaN when no coordinate has)."""

    kq, kk, kv, kx = jax.random.split(key, 4)
    g = lambda k: np.asarray(jax.random.normal(k, (d, d), jnp.float64)) / np.sqrt(d)
    G = g(kv)
    V = (G + G.T) / 2
    lam, U = np.linalg.eigh(V)
    order = np.argsort(-lam)
    lam, U = lam[order], U[:, order]
    pos, neg = U[:, lam > 0], U[:, lam < 0]
    timely = int(np.sum(lam >= cluster_horizon(1.0) / t1))  # the leading coordinates that have had the time
    ts = np.linspace(0.0, t1, saves)
    X0 = init_tokens(kx, num, n, d, kind="gaussian", dtype=jnp.float64)
    sol = solve_rescaled(paper_model(V, g(kq), g(kk)), X0, ts, trajectory=True, max_steps=max_steps)
    Z = np.asarray(sol.trajectory, np.float64)  # [num, saves, n, d]
    solved = np.asarray(sol.ok)
    rows = []
    for b in range(num):
        for i, t in enumerate(ts):
            if not np.all(np.isfinite(Z[b, i])):
                break
            zp = Z[b, i] @ pos  # [n, k+]
            spread = float(_spread((Z[b, i] @ neg)[None])[0])
            joint = gap_clusters(jnp.asarray(zp[:, :timely])) if timely else None
            for j in range(pos.shape[1]):
                gc = gap_clusters(jnp.asarray(zp[:, j:j + 1]))
                rows.append({"condition": b, "t": float(t), "n": n, "d": d, "positive_dims": pos.shape[1],
                             "negative_dims": neg.shape[1], "solver_ok": bool(solved[b]), "coordinate": j,
                             "lambda": float(lam[j]), "horizon": cluster_horizon(float(lam[j])),
                             "mean": float(zp[:, j].mean()), "variance": float(zp[:, j].var()),
                             "gap_clusters": int(gc.count), "gap_decades": float(gc.gap),
                             "joint_clusters": int(joint.count) if joint else -1,
                             "joint_gap": float(joint.gap) if joint else math.nan, "negative_spread": spread})
    return rows


def high_dim_summary(rows) -> dict:
    """Fig. 7(b)'s rows (:func:`high_dimensional`, or read back from ``high_dim.csv``) at their last time ``t``: the
    coordinates whose eigenvalue has had the time to cluster by 3 decades (``λ t ≥ 3 ln 10``), their (condition,
    coordinate) pairs' gaps at ``t`` and a quarter of the run earlier (``mid``, the rate), how many form clear clusters
    and how many of those more than three, the same per condition for the tokens projected on those coordinates'
    span (``joint``), their variance over the tokens at ``t`` over that at the start, the growth of the spread along
    the negative eigenspace, and the conditions whose solve failed (left out of the rest)."""
    rs = [{k: (str(v) in ("True", "true", "1") if k == "solver_ok" else float(v)) for k, v in r.items()} for r in rows]
    ts = sorted({r["t"] for r in rs})
    t, t0 = ts[-1], ts[0]
    mid = ts[max(0, len(ts) - 1 - max(1, (len(ts) - 1) // 4))]
    at = lambda s: {(r["condition"], r["coordinate"]): r for r in rs if r["t"] == s and r["solver_ok"]}
    end, start, before = at(t), at(t0), at(mid)
    need = cluster_horizon(1.0) / t if t > 0 else math.inf  # the smallest eigenvalue whose horizon is within t
    judged = sorted(k for k, r in end.items() if r["lambda"] >= need)
    clear = sum(end[k]["gap_decades"] >= 3.0 for k in judged)
    many = sum(end[k]["gap_clusters"] > 3 and end[k]["gap_decades"] >= 3.0 for k in judged)
    ratio = [end[k]["variance"] / start[k]["variance"] for k in judged if k in start and start[k]["variance"] > 0]
    conds = sorted({k[0] for k in end})
    first = {c: end[(c, 0.0)] for c in conds if (c, 0.0) in end}  # one row per condition: its joint values
    joint = [c for c in conds if first[c].get("joint_clusters", -1) >= 0 and math.isfinite(first[c]["joint_gap"])]
    neg = [first[c]["negative_spread"] / start[(c, 0.0)]["negative_spread"] for c in conds if (c, 0.0) in start]
    r0 = rs[0]
    return {"t": t, "dt": t - mid, "n": int(r0["n"]), "d": int(r0["d"]), "positive_dims": int(r0["positive_dims"]),
            "conditions": len({r["condition"] for r in rs}), "failed": len({r["condition"] for r in rs
                                                                           if not r["solver_ok"]}),
            "lambda_needed": need, "judged": len({k[1] for k in judged}), "pairs": len(judged), "clear": clear,
            "more_than_three": many, "ends": [end[k]["gap_decades"] for k in judged],
            "mids": [before[k]["gap_decades"] if k in before else math.nan for k in judged],
            "lambda_min_judged": min((end[k]["lambda"] for k in judged), default=math.nan),
            "joint_conditions": len(joint),
            "joint_clear": sum(first[c]["joint_gap"] >= 3.0 for c in joint),
            "joint_more_than_three": sum(first[c]["joint_clusters"] > 3 and first[c]["joint_gap"] >= 3.0
                                         for c in joint),
            "joint_gaps": [first[c]["joint_gap"] for c in joint],
            "variance_ratio": float(np.median(ratio)) if ratio else math.nan,
            "negative_growth": float(np.median(neg)) if neg else math.nan,
            "longest_horizon": max((r["horizon"] for r in end.values()), default=math.nan)}


def collapse(key, num: int, n: int, d: int, t1: float) -> list[dict]:
    """``V = −I``, ``Q = K = I`` (Theorem C.5): the unrescaled tokens' largest norm at ``t = 0``, ``t1/2`` and ``t1``
    per condition, with the power of ``t`` it decays like over the second half
    (``log(r(t1)/r(t1/2)) / log 2``; near the origin the attention is nearly uniform, the mean decays like
    ``e^{−t}`` and the spread around it only algebraically)."""
    X0 = init_tokens(key, num, n, d, kind="gaussian", dtype=jnp.float64)
    sol = solve(paper_model(-np.eye(d)), X0, float(t1), flow=Flow(space="flat"), beta=1.0,
                save=Save(ts=np.asarray([0.0, t1 / 2, t1]), observe=_nothing, trajectory=True), rtol=1e-10,
                atol=1e-14, dtype=jnp.float64, max_steps=20_000)
    Z = np.asarray(sol.trajectory, np.float64)
    ok = np.asarray(sol.ok)
    rows = []
    for b in range(num):
        r0, rm, r1 = (float(np.linalg.norm(Z[b, i], axis=-1).max()) for i in range(3))
        rows.append({"condition": b, "n": n, "d": d, "t1": t1, "solver_ok": bool(ok[b]), "max_norm_0": r0,
                     "max_norm_mid": rm, "max_norm_end": r1,
                     "exponent": float(np.log(r1 / rm) / np.log(2.0)) if r1 > 0 and rm > 0 else float("-inf")})
    return rows


#: Relative tolerance of the hull check's solve: far below the 1e-9 by which an excursion outside the hull is judged.
HULL_RTOL = 1e-11


def hull_shrinks(key, num: int, n: int, d: int, t1: float, saves: int = 31) -> list[dict]:
    """Proposition C.2 (``V = I``): per condition, the largest distance by which a token at a saved time lies
    outside the convex hull of the tokens at the saved time before (relative to the configuration's size), and
    whether the hull's volume ever grew.

    Solved at :data:`HULL_RTOL`: the excursion is judged against 1e-9 of the configuration's size, and at the study's
    usual rtol of 1e-8 the solver's own error reached 5e-8 (measured: 5 of 64 conditions above 1e-9 at rtol 1e-8,
    none at 1e-11, whose largest excursion was 1.4e-15)."""
    from scipy.spatial import ConvexHull

    ts = np.linspace(0.0, t1, saves)
    X0 = init_tokens(key, num, n, d, kind="gaussian", dtype=jnp.float64)
    sol = solve_rescaled(paper_model(np.eye(d)), X0, ts, trajectory=True, rtol=HULL_RTOL, atol=HULL_RTOL * 1e-2)
    Z = np.asarray(sol.trajectory, np.float64)
    ok = np.asarray(sol.ok)
    rows = []
    for b in range(num):
        worst, grew, vol = 0.0, 0, []
        for i in range(saves):
            vol.append(ConvexHull(Z[b, i]).volume)
            if i:
                scale = np.abs(Z[b, i - 1]).max()
                worst = max(worst, float(outside_distance(Z[b, i - 1], Z[b, i]).max()) / scale)
                grew += vol[i] > vol[i - 1] * (1 + 1e-9)
        rows.append({"condition": b, "n": n, "d": d, "solver_ok": bool(ok[b]), "max_outside_relative": worst,
                     "volume_increases": int(grew), "volume_0": vol[0], "volume_end": vol[-1]})
    return rows


def hyperplane_counts(key, V: np.ndarray, num: int, n: int, t1: float, tol: float) -> list[dict]:
    """Theorem 4.1 over ``num`` conditions of the good triple ``V``: hyperplanes at ``tol`` and tolerance-free."""

    X0 = init_tokens(key, num, n, V.shape[0], kind="gaussian", dtype=jnp.float64)
    sol = solve_rescaled(paper_model(V), X0, np.asarray([t1]))
    Z = np.asarray(sol.final, np.float64)
    ok = np.asarray(sol.ok) & np.all(np.isfinite(Z), axis=(1, 2))
    h = hyperplanes(jnp.asarray(np.where(ok[:, None, None], Z, 0.0)), V, tol)
    gd = gap_clusters(jnp.asarray(np.asarray(h.values)[..., None])).gap
    return [{"condition": b, "n": n, "solver_ok": bool(ok[b]), "hyperplanes": int(h.count[b]) if ok[b] else -1,
             "gap_hyperplanes": int(h.gap_count[b]) if ok[b] else -1, "gap_decades": float(gd[b])}
            for b in range(num)]


def doubly_exponential(key, ns, num: int, t1: float = 8.0, saves: int = 161, window=(1e-250, 1e-2)) -> list[dict]:
    """Theorem 2.1 (d = 1, Q = K = V = 1): per ``n`` and condition, the least-squares slope of
    ``log(−log dist(P(t), Boolean))`` against ``t`` on the saved times where the distance is inside ``window``
    (above float64's underflow, below the transient), its R², and the R² of a single exponential
    (``log dist`` linear in ``t``) on the same points."""

    ts = np.linspace(0.0, t1, saves)
    rows = []
    for n in ns:
        X0 = init_tokens(jax.random.fold_in(key, n), num, n, 1, kind="gaussian", dtype=jnp.float64)
        sol = solve_rescaled(paper_model(np.ones((1, 1))), X0, ts, observe=boolean_observables(1))
        dist = np.asarray(sol.observables["boolean_distance"], np.float64)  # [B, T]
        for b in range(num):
            sel = (dist[b] > window[0]) & (dist[b] < window[1]) & np.isfinite(dist[b])
            row = {"n": n, "condition": b, "points": int(sel.sum()), "slope": float("nan"), "r2": float("nan"),
                   "r2_single_exponential": float("nan"), "t_start": float("nan"), "t_end": float("nan")}
            if sel.sum() >= 4:
                t, y = ts[sel], np.log(-np.log(dist[b, sel]))
                row.update(slope=float(np.polyfit(t, y, 1)[0]), r2=_r2(t, y),
                           r2_single_exponential=_r2(t, np.log(dist[b, sel])), t_start=float(t[0]),
                           t_end=float(t[-1]))
            rows.append(row)
    return rows


def _r2(x: np.ndarray, y: np.ndarray) -> float:
    fit = np.polyval(np.polyfit(x, y, 1), x)
    ss = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - fit) ** 2)) / ss if ss > 0 else 1.0


def mixed_figure(path, key, V: np.ndarray, n: int, t1: float) -> None:
    """Fig. 8 as the study draws it: one condition's trajectories in the positive eigenspace (left) and its
    coordinates along the negative eigendirection against time (right, symmetric log scale)."""

    plt = plots.pyplot()
    if plt is None:
        return
    lam, U = np.linalg.eigh(V)
    ts = np.linspace(0.0, t1, 121)
    X0 = init_tokens(key, 1, n, V.shape[0], kind="gaussian", dtype=jnp.float64)
    Z = np.asarray(solve_rescaled(paper_model(V), X0, ts, trajectory=True).trajectory[0], np.float64)
    zp, zn = Z @ U[:, lam > 0], Z @ U[:, lam < 0]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i in range(n):
        axes[0].plot(zp[:, i, 0], zp[:, i, 1], color="0.6", lw=0.7)
    axes[0].scatter(zp[0, :, 0], zp[0, :, 1], s=10, color="C0", label="t = 0")
    axes[0].scatter(zp[-1, :, 0], zp[-1, :, 1], s=25, color="C3", label=f"t = {t1:g}")
    axes[0].set_title(f"positive eigenspace, V eigenvalues {np.round(lam, 2).tolist()}", fontsize=9)
    axes[0].legend(fontsize=7)
    axes[1].plot(ts, zn[:, :, 0], color="C0", lw=0.6)
    axes[1].set_yscale("symlog", linthresh=1.0)
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("coordinate along the negative eigendirection")
    fig.tight_layout()
    plots.save(fig, path, 110)


def run_checks(key, cfg, good_V: np.ndarray, say, out_dir=None) -> dict[str, list[dict]]:
    """Every check above at the study's configuration (``cfg.check_num`` conditions each); with ``out_dir`` and
    ``cfg.figures``, Fig. 8's picture ``mixed.png`` too."""
    num, tol = cfg.check_num, cfg.tol
    out: dict[str, list[dict]] = {}
    if out_dir is not None and cfg.figures:
        mixed_figure(out_dir / "mixed.png", jax.random.fold_in(key, 1), np.diag([1.0, 1.0, -0.5]), cfg.n, cfg.t1)
    say(f"checks: Fig. 8 and Fig. 7(a), {num} conditions of {cfg.n} tokens")
    out["mixed"] = [{"setting": "fig8", **r} for r in mixed_signs(jax.random.fold_in(key, 1), np.diag([1.0, 1.0, -0.5]),
                                                                   num, cfg.n, cfg.t1, tol)]
    out["mixed"] += [{"setting": "fig7a", **r} for r in mixed_signs(
        jax.random.fold_in(key, 2), _rotated(jax.random.fold_in(key, 3), np.diag(FIG7A_SPECTRUM)), num, cfg.n, cfg.t1,
        tol)]
    say(f"checks: V = -I, {num} conditions")
    out["collapse"] = collapse(jax.random.fold_in(key, 4), num, cfg.n, 2, 2 * cfg.t1)
    say(f"checks: the convex hull, {num} conditions in d = 2 and 3")
    out["hull"] = [r for d in (2, 3) for r in hull_shrinks(jax.random.fold_in(key, 5 + d), num, cfg.n, d, cfg.t1)]
    say(f"checks: hyperplanes of the good triple, {num} conditions")
    out["hyperplanes"] = hyperplane_counts(jax.random.fold_in(key, 9), good_V, num, cfg.n, cfg.t1, tol)
    say(f"checks: the doubly exponential rate, n in {cfg.rate_n}")
    out["rate"] = doubly_exponential(jax.random.fold_in(key, 10), cfg.rate_n, num)
    if cfg.high_dim_n:
        say(f"checks: Fig. 7(b), n = {cfg.high_dim_n}, d = {cfg.high_dim_d}")
        out["high_dim"] = high_dimensional(jax.random.fold_in(key, 11), cfg.high_dim_n, cfg.high_dim_d,
                                           cfg.high_dim_t1, num=cfg.high_dim_num, max_steps=200_000)
    return out
