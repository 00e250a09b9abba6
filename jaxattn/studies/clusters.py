"""The clustering study (Geshkovski et al., the emergence of clusters in self-attention dynamics),
behind ``jaxattn clusters``.

The model is the flow ``ẋ_i = Σ_j P_ij(t) V x_j`` with ``P_ij = softmax_j(β <Q x_i, K x_j>)`` (no
normalisation of the tokens), solved for the rescaled tokens ``z_i = e^{−tV} x_i``
(:data:`jaxattn.C3_RESCALED`), single head, score scale 1, ``Q = K = I``. Written into one run
directory (``config.json``, CSV tables, PNG figures, ``report.md``):

1. ``V = I`` in 2-D and 3-D: trajectories of the tokens, which gather at the vertices of a convex
   polytope (:func:`jaxattn.analysis.clusters.polytope`).
2. A good triple in 2-D (a symmetric ``V`` with eigenvalues 1.35 and −0.07, as in the paper): the
   coordinate along the top eigenvector ``φ_1`` over time, which takes at most three values.
3. ``V`` whose top eigenvalue is a complex pair, and ``V`` whose top eigenvalue is negative: what
   the tokens do instead.
4. ``d = 1``, ``Q = K = V = 1``: the attention matrix over time and its distance to the nearest
   Boolean matrix and numerical rank.
5. ``V = I`` over many initial conditions for every ``(n, d, β)`` of a grid: cluster counts, the
   vertices of the initial convex hull (an upper bound on the count), the polytope check.
6. Good triples: the fraction of random matrices (several ensembles) whose eigenvalue of largest
   modulus is real, positive and simple, against ``d``, with Wilson intervals.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.clusters import (
    ENSEMBLES,
    boolean_observables,
    cluster_observables,
    coordinate,
    good_triple_fraction,
    hull_vertices,
    hyperplanes,
    polytope,
    top_eigen,
)
from jaxattn.config import non_negative, option, positive
from jaxattn.config import seed as seed_check
from jaxattn.io.results import atomic_write_text, provenance, write_json
from jaxattn.model.paper import paper_model
from jaxattn.model.sampling import init_tokens
from jaxattn.studies import plots
from jaxattn.studies.cluster_checks import high_dim_summary, high_dimensional, run_checks, solve_rescaled
from jaxattn.studies.skeleton import check_options, csv_text, own_run_in_float64, refuse_inert, write_report


def _several(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (clusters need several tokens)"


def _hull(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (the polytope analysis needs a hull)"


@dataclasses.dataclass
class ClustersConfig:
    """The clustering study's options (those of ``jaxattn clusters``, see :mod:`jaxattn.config`)."""

    n: int = option(20, "tokens of the pictures (the paper: 40)", check=_several)
    n_1d: int = option(20, "tokens of the one-dimensional run (the paper: 40)", check=_several)
    t1: float = option(10.0, "final time of every flow", check=positive)
    beta: float = option(1.0, "inverse temperature of the pictures and the 1-D run", check=positive)
    tol: float = option(1e-3, "distance under which tokens share a cluster", check=positive)
    num: int = option(256, "initial conditions per row of the count table", check=positive)
    table_n: Sequence[int] = option([10], "token counts of the count table", check=_several)
    table_d: Sequence[int] = option([2, 3], "dimensions of the count table", check=_hull)
    table_beta: Sequence[float] = option([1.0, 4.0], "inverse temperatures of the count table", check=positive)
    good_d: Sequence[int] = option([1, 2, 4, 8, 16], "dimensions of the good-triple estimate", check=positive)
    good_samples: int = option(4000, "random matrices per dimension and ensemble", check=positive)
    ensembles: Sequence[str] = option(["ginibre", "symmetric"], "random ensembles of the good-triple estimate; "
                                      "ginibre: entries N(0, 1/d)", choices=ENSEMBLES)
    seed: int = option(0, "random seed", check=seed_check)
    figures: bool = option(True, "write PNG figures")
    check_num: int = option(0, "initial conditions of each theorem check (Figs. 7(a) and 8, V = -I, the shrinking "
                            "hull, the hyperplanes, the doubly exponential rate; see jaxattn.studies.cluster_checks); "
                            "0: none", check=non_negative)
    rate_n: Sequence[int] = option([10, 20, 40, 80], "token counts of the doubly exponential rate check (d = 1)",
                                   check=_several)
    high_dim_n: int = option(0, "tokens of Fig. 7(b)'s run (the paper: 256; random Q, K and symmetric V); 0: none",
                             check=non_negative)
    high_dim_d: int = option(128, "dimension of Fig. 7(b)'s run (the paper: 128)", check=_hull)
    high_dim_num: int = option(4, "initial conditions of Fig. 7(b)'s run", check=positive)
    high_dim_t1: float = option(8.0, "horizon of Fig. 7(b)'s run: a coordinate of eigenvalue λ has had the time to "
                                "cluster by 3 decades once λ t ≥ 3 ln 10 (λ ≥ 0.86 at t = 8; at n = 256, d = 128 "
                                "the flow stiffens: about 4,000 steps to t = 8, over 25 CPU minutes a condition to "
                                "t = 15)", check=positive)

    def check(self) -> ClustersConfig:
        """Every option checked against its declaration, then the options that change nothing (:meth:`inert`),
        before any work (one :class:`ConfigError` line)."""
        check_options(self)
        refuse_inert(self, self.inert())
        return self

    def inert(self) -> dict[str, str]:
        """The options that change nothing with the others, each with the reason (refused when set): the rate
        check and Fig. 7(b) run among the theorem checks, only with ``check_num > 0``."""
        if not self.check_num:
            return dict.fromkeys(("rate_n", "high_dim_n", "high_dim_d", "high_dim_num", "high_dim_t1"),
                                 "check_num = 0 (the theorem checks, Fig. 7(b) among them, are not run)")
        return {} if self.high_dim_n else dict.fromkeys(("high_dim_d", "high_dim_num", "high_dim_t1"),
                                                         "high_dim_n = 0 (Fig. 7(b) is not run)")


def _rotated(key, M: np.ndarray) -> np.ndarray:
    """``U M Uᵀ`` for a Haar-random orthogonal ``U`` (same spectrum, generic eigenvectors)."""
    g = np.asarray(jax.random.normal(key, M.shape, jnp.float64))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diag(r))[None, :]
    return q @ M @ q.T


def spectra_matrices(key) -> dict[str, np.ndarray]:
    """The value matrices of the 2-D pictures: a good triple (the paper's spectrum {1.35, −0.07}),
    a complex top pair ``0.5 ± 1i`` with a real 0.2 dropped (2-D: just the pair), a negative top
    eigenvalue {−1.2, 0.5}."""
    return {"good": _rotated(jax.random.fold_in(key, 0), np.diag([1.35, -0.07])),
            "complex": _rotated(jax.random.fold_in(key, 1), np.array([[0.5, -1.0], [1.0, 0.5]])),
            "negative": _rotated(jax.random.fold_in(key, 2), np.diag([-1.2, 0.5]))}


#: The study's public shape (as every study's): ``Config`` and ``run``.
Config = ClustersConfig


def run(out_dir, config: ClustersConfig | None = None, *, model=None, model_name: str = "model",
        progress=None) -> dict:
    """Run the study into ``out_dir`` (created); returns the tables (lists of row dicts). ``config`` defaults to
    ``Config()``; the study builds its own models, so ``model`` must be left out. ``progress(message)`` receives
    the stage messages. Runs in float64 (eigenvalues and cluster tolerances need it) inside a scoped
    ``jax.enable_x64``: the caller's ``jax_enable_x64`` is left as it was."""
    return own_run_in_float64("clusters", ClustersConfig, config, model, out_dir, progress, _run)



def _run(out: Path, cfg: ClustersConfig, say) -> dict:
    key = jax.random.key(cfg.seed)
    ts = np.linspace(0.0, cfg.t1, 61)
    obs = cluster_observables(cfg.tol)
    tables: dict = {"pictures": [], "counts": [], "good_triples": [], "boolean": []}
    pics: dict = {}

    # 1-3: the pictures (one compiled program for every 2-D run)
    runs = [("identity_2d", np.eye(2)), ("identity_3d", np.eye(3))]
    runs += [(k, v) for k, v in spectra_matrices(jax.random.fold_in(key, 10)).items()]
    for i, (name, V) in enumerate(runs):
        d = V.shape[0]
        say(f"{name}: V with eigenvalues {np.round(np.linalg.eigvals(V), 3).tolist()}, n = {cfg.n}")
        X0 = init_tokens(jax.random.fold_in(key, 20 + i), 1, cfg.n, d, kind="gaussian", dtype=jnp.float64)
        sol = solve_rescaled(paper_model(V), X0, ts, beta=cfg.beta, observe=obs, trajectory=True)
        Z = np.asarray(sol.trajectory[0], np.float64)  # [T, n, d]
        # a failed solve (e.g. scores that overflow) is analysed up to its last finite saved state
        finite = np.all(np.isfinite(Z), axis=(1, 2))
        T = int(np.argmin(finite)) if not finite.all() else len(ts)
        Z = Z[:T]
        ob = {k: np.asarray(v, np.float64)[0, T - 1] for k, v in sol.observables.items()}
        row = {"setting": name, "d": d, "n": cfg.n, "top_eigenvalue": _fmt_eig(top_eigen(V).value),
               "solver_ok": bool(np.asarray(sol.ok)[0]) and len(ts) == T, "t_end": float(ts[T - 1]),
               "clusters": int(ob["clusters"]), "gap_clusters": int(ob["gap_clusters"]),
               "gap_decades": float(ob["gap_decades"]),
               "initial_hull_vertices": int(hull_vertices(Z[0]).sum()), "polytope_vertices": -1,
               "hyperplanes": -1, "max_norm": float(np.linalg.norm(Z[-1], axis=-1).max())}
        extra: dict[str, Any] = {}
        if name.startswith("identity"):
            p = polytope(Z[-1], cfg.tol)
            row["polytope_vertices"] = p.vertices
            extra["polytope"] = p
        if name in ("good", "negative"):
            coord = np.asarray(coordinate(Z, V))  # [T, n]
            row["hyperplanes"] = int(hyperplanes(Z[-1], V, cfg.tol).count)
            extra["coordinate"] = coord
        tables["pictures"].append(row)
        pics[name] = (V, Z, extra)

    # 4: one dimension, Boolean attention
    say(f"d = 1: attention of {cfg.n_1d} tokens over time")
    B1 = 16
    X0 = init_tokens(jax.random.fold_in(key, 30), B1, cfg.n_1d, 1, kind="gaussian", dtype=jnp.float64)
    sol = solve_rescaled(paper_model(np.ones((1, 1))), X0, ts, beta=cfg.beta, observe=boolean_observables(1),
                 trajectory=False)
    dist = np.asarray(sol.observables["boolean_distance"], np.float64)  # [B, T]
    rank = np.asarray(sol.observables["rank"], np.float64)
    for k, t in enumerate(ts):
        good = np.isfinite(dist[:, k]) & np.isfinite(rank[:, k])  # conditions whose solve reached t
        if not good.any():
            break
        tables["boolean"].append({"t": float(t), "conditions": int(good.sum()),
                                  "distance_median": float(np.median(dist[good, k])),
                                  "distance_max": float(dist[good, k].max()), "rank_min": int(rank[good, k].min()),
                                  "rank_max": int(rank[good, k].max())})
    # the picture lists the tokens by increasing initial value, so the leaders sit at the edges
    order = np.argsort(np.asarray(X0[0, :, 0]))
    A0 = np.asarray(sol.observables["attention"][0], np.float64)[:, order][:, :, order]
    pics["boolean"] = (A0, dist, rank)

    # 5: cluster counts over many initial conditions, V = I
    for n in cfg.table_n:
        for d in cfg.table_d:
            Xc = init_tokens(jax.random.fold_in(key, 1000 * n + d), cfg.num, n, d, kind="gaussian", dtype=jnp.float64)
            model = paper_model(np.eye(d))
            hull = np.asarray([hull_vertices(x).sum() for x in np.asarray(Xc)])  # the same for every β
            for beta in map(float, cfg.table_beta):  # a config file may give integers
                say(f"counts: n = {n}, d = {d}, beta = {beta:g}, {cfg.num} initial conditions")
                sol = solve_rescaled(model, Xc, np.asarray([cfg.t1]), beta=beta, observe=obs)
                tables["counts"].append(count_row(n, d, beta, hull, sol, cfg.tol))

    # 6: good triples against d
    for e, ens in enumerate(cfg.ensembles):
        for d in cfg.good_d:
            say(f"good triples: {ens}, d = {d}, {cfg.good_samples} matrices")
            est = good_triple_fraction(jax.random.fold_in(jax.random.fold_in(key, 5000 + e), d), d, cfg.good_samples,
                                          ensemble=ens)
            tables["good_triples"].append({"ensemble": ens, "d": d, "samples": est.samples, "good": est.count,
                                           "fraction": est.fraction, "ci_low": est.lo, "ci_high": est.hi,
                                           **{k: v for k, v in est.classes.items() if k != "good"}})

    if cfg.check_num:
        out.mkdir(parents=True, exist_ok=True)
        tables.update(run_checks(jax.random.fold_in(key, 7000), cfg,
                                 spectra_matrices(jax.random.fold_in(key, 10))["good"], say, out))
    _write(out, cfg, tables, pics)
    return tables


def _fmt_eig(z: complex) -> str:
    return f"{z.real:.4g}" if abs(z.imag) < 1e-12 * abs(z) else f"{z.real:.4g}{z.imag:+.4g}i"


def count_row(n: int, d: int, beta: float, hull: np.ndarray, sol, tol: float) -> dict:
    """One row of the count table from a batch solved with :func:`cluster_observables` (means over the
    conditions whose solve succeeded); ``hull: [B]`` the number of vertices of each initial hull."""
    final = np.asarray(sol.final, np.float64)
    ok = np.asarray(sol.ok) & np.all(np.isfinite(final), axis=(1, 2))
    tolc = np.where(ok, np.nan_to_num(np.asarray(sol.observables["clusters"])[:, -1]), 0).astype(int)
    gapc = np.where(ok, np.nan_to_num(np.asarray(sol.observables["gap_clusters"])[:, -1]), 0).astype(int)
    polys = [polytope(final[b], tol) for b in np.flatnonzero(ok)]
    if not polys:
        return {"n": n, "d": d, "beta": float(beta), "conditions": len(ok), "solver_failures": len(ok),
                **{k: float("nan") for k in ("clusters_mean", "gap_clusters_mean")}, "gap_clusters_min": -1,
                "gap_clusters_max": -1, **{k: float("nan") for k in (
                    "agree_fraction", "hull_vertices_mean", "le_hull_fraction", "polytope_vertices_mean",
                    "at_vertices_fraction", "inside_fraction")}, "all_at_vertices": 0, "conditions_ok": 0,
                "at_most_half_n_vertices": 0}
    return {"n": n, "d": d, "beta": float(beta), "conditions": len(ok), "solver_failures": int((~ok).sum()),
            "clusters_mean": float(tolc[ok].mean()), "gap_clusters_mean": float(gapc[ok].mean()),
            "gap_clusters_min": int(gapc[ok].min()), "gap_clusters_max": int(gapc[ok].max()),
            "agree_fraction": float((tolc == gapc)[ok].mean()), "hull_vertices_mean": float(hull[ok].mean()),
            "le_hull_fraction": float((tolc <= hull)[ok].mean()),
            "polytope_vertices_mean": float(np.mean([p.vertices for p in polys])),
            "at_vertices_fraction": float(np.mean([p.vertex_tokens / n for p in polys])),
            "all_at_vertices": int(sum(p.vertex_tokens == n for p in polys)), "conditions_ok": len(polys),
            "inside_fraction": float(np.mean([p.inside for p in polys])),
            # the paper: "the number of vertices of K is often significantly smaller than n"
            "at_most_half_n_vertices": int(sum(2 * p.vertices <= n for p in polys))}


def _write(out: Path, cfg: ClustersConfig, tables: dict, pics: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in ("pictures", "counts", "good_triples", "boolean"):
        atomic_write_text(out / f"{name}.csv", csv_text(tables[name]))
    for name in ("mixed", "high_dim", "collapse", "hull", "hyperplanes", "rate"):  # the theorem checks, when run
        if tables.get(name):
            atomic_write_text(out / f"{name}.csv", csv_text(_uniform_rows(tables[name])))
    write_json(out / "config.json", {"command": "clusters", "config": dataclasses.asdict(cfg), **provenance()})
    figs = _figures(out, cfg, pics, tables) if cfg.figures else []
    L = ["# Clustering study", "",
         f"Flow `ż_i = e^(−tV) Σ_j P_ij V e^(tV) z_j − V z_i` of the rescaled tokens `z = e^(−tV) x` "
         f"(single head, `Q = K = I`, score scale 1, softmax attention, β = {cfg.beta:g} for the pictures), "
         f"solved to t = {cfg.t1:g} in float64 (Tsit5, rtol 1e-8). Clusters: single linkage at distance "
         f"{cfg.tol:g}, and the tolerance-free count (cut at the largest gap of the hierarchy).", "",
         "## The pictures", "",
         "| setting | d | top eigenvalue of V | clusters | tolerance-free | gap (decades) "
         "| vertices of the initial hull | polytope vertices | hyperplanes | max norm at the end | end (t) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tables["pictures"]:
        end = f"{r['t_end']:g}" + ("" if r["solver_ok"] else " (solver failed)")
        L.append(f"| {r['setting']} | {r['d']} | {r['top_eigenvalue']} | {r['clusters']} | {r['gap_clusters']} | "
                 f"{r['gap_decades']:.2f} | {r['initial_hull_vertices']} | {_dash(r['polytope_vertices'])} | "
                 f"{_dash(r['hyperplanes'])} | {r['max_norm']:.4g} | {end} |")
    L += ["", "`identity_*` (V = I): the tokens gather at the vertices of a convex polytope. `good`: the coordinate "
          "along φ_1 takes at most three values (parallel hyperplanes). `complex`: a rotation is mixed into the "
          "attraction; `negative`: the tokens repel along φ_1 and spread out instead of clustering.", "",
          "## One dimension: the attention matrix becomes Boolean", "",
          f"{cfg.n_1d} tokens, 16 initial conditions, `Q = K = V = 1`.", "",
          "| t | distance to Boolean (median) | (max) | rank (min) | rank (max) |", "|---|---|---|---|---|"]
    for r in tables["boolean"][::10]:
        L.append(f"| {r['t']:.4g} | {r['distance_median']:.3e} | {r['distance_max']:.3e} | {r['rank_min']} | "
                 f"{r['rank_max']} |")
    L += ["", f"## Cluster counts, V = I, {cfg.num} initial conditions per row", "",
          "| n | d | β | clusters (mean) | tolerance-free (mean) | min | max | vertices of the initial hull (mean) | "
          "count ≤ initial vertices | polytope vertices (mean) | tokens at vertices | rest inside the hull | "
          "solver failures |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tables["counts"]:
        L.append(f"| {r['n']} | {r['d']} | {r['beta']:g} | {r['clusters_mean']:.3f} | {r['gap_clusters_mean']:.3f} | "
                 f"{r['gap_clusters_min']} | {r['gap_clusters_max']} | {r['hull_vertices_mean']:.3f} | "
                 f"{r['le_hull_fraction']:.4f} | {r['polytope_vertices_mean']:.3f} | {r['at_vertices_fraction']:.4f} | "
                 f"{r['inside_fraction']:.4f} | {r['solver_failures']} |")
    L += ["", "## Good triples", "",
          "Fraction of random matrices whose eigenvalue of largest modulus is real, positive and simple "
          f"({cfg.good_samples} per row, 95% Wilson interval; eigenvalues in float64).", "",
          "| ensemble | d | fraction | 95% interval | complex top | negative top |", "|---|---|---|---|---|---|"]
    for r in tables["good_triples"]:
        L.append(f"| {r['ensemble']} | {r['d']} | {r['fraction']:.4f} | [{r['ci_low']:.4f}, {r['ci_high']:.4f}] | "
                 f"{r['complex']} | {r['negative']} |")
    L += _checks_section(tables)
    write_report(out, L, figs)


def _checks_section(tables: dict) -> list[str]:
    """The report's summary of the theorem checks (their tables hold every condition)."""
    L: list[str] = []
    if tables.get("mixed"):
        L += ["", "## Positive and negative eigenvalues together (Figs. 7(a), 8; `mixed.csv`)", "",
              "| setting | conditions | positive component: clusters (max) | on ∂K or at 0 (all tokens) | "
              "spread along the negative eigenspace: t = 0 → end (median) | growth rate (median) |",
              "|---|---|---|---|---|---|"]
        for name in dict.fromkeys(r["setting"] for r in tables["mixed"]):
            rs = [r for r in tables["mixed"] if r["setting"] == name and r["solver_ok"]]
            if rs:
                L.append(f"| {name} | {len(rs)} | {max(r['gap_clusters'] for r in rs)} | "
                         f"{sum(r['inside'] == 0 for r in rs)}/{len(rs)} | "
                         f"{np.median([r['negative_spread_0'] for r in rs]):.3g} → "
                         f"{np.median([r['negative_spread_end'] for r in rs]):.3g} | "
                         f"{np.median([r['negative_rate'] for r in rs]):.3f} |")
    for name, text in (("collapse", "V = −I: largest token norm at the end (max over conditions)"),
                       ("hull", "the hull: largest relative excursion outside the previous hull"),
                       ("hyperplanes", "good triple: hyperplanes (max over conditions)")):
        rs = tables.get(name) or []
        if rs:
            col = {"collapse": "max_norm_end", "hull": "max_outside_relative", "hyperplanes": "hyperplanes"}[name]
            L += ["", f"* {text}: {max(r[col] for r in rs):.3g} ({len(rs)} conditions, `{name}.csv`)"]
    if tables.get("rate"):
        L += ["", "* doubly exponential rate (d = 1, `rate.csv`): median slope of log(−log dist) per n: "
              + ", ".join(f"n = {n}: {np.nanmedian([r['slope'] for r in tables['rate'] if r['n'] == n]):.3f}"
                          for n in dict.fromkeys(r["n"] for r in tables["rate"]))]
    if tables.get("high_dim"):
        h = high_dim_summary(tables["high_dim"])
        L += ["", f"* Fig. 7(b) (`high_dim.csv`, {h['conditions']} conditions, n = {h['n']}, d = {h['d']}, "
              f"t = {h['t']:g}): {h['judged']} of the {h['positive_dims']} coordinates along positive eigenvalues "
              f"have had the time to cluster by 3 decades (λ ≥ {h['lambda_needed']:.3g}); of those (condition, "
              f"coordinate) pairs {h['clear']} of {h['pairs']} form at most three clear clusters, and their variance "
              f"over the tokens is {h['variance_ratio']:.3g} of its start (median); the spread along the negative "
              f"eigenspace grew {h['negative_growth']:.3g}× (median)"]
    return L


def _uniform_rows(rows: list[dict]) -> list[dict]:
    """Rows with every column any row has (NaN where a row lacks one: a failed solve measures nothing)."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: r.get(k, float("nan")) for k in keys} for r in rows]


def _dash(v: int) -> str:
    return "–" if v < 0 else str(v)


def _figures(out: Path, cfg: ClustersConfig, pics: dict, tables: dict) -> list[str]:
    plt = plots.pyplot()
    if plt is None:
        return []
    names = []

    def save(fig, name):
        fig.tight_layout()
        plots.save(fig, out / name, 110)
        names.append(name)

    def paths2d(ax, Z, title):
        for i in range(Z.shape[1]):
            ax.plot(Z[:, i, 0], Z[:, i, 1], color="0.6", lw=0.7)
        ax.scatter(Z[0, :, 0], Z[0, :, 1], s=10, color="C0", label="t = 0")
        ax.scatter(Z[-1, :, 0], Z[-1, :, 1], s=25, color="C3", label=f"t = {cfg.t1:g}")
        ax.set_title(title, fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")

    # V = I: 2-D and 3-D trajectories
    _, Z2, _ = pics["identity_2d"]
    _, Z3, _ = pics["identity_3d"]
    fig = plt.figure(figsize=(10, 4.5))
    ax = fig.add_subplot(1, 2, 1)
    paths2d(ax, Z2, "V = I, d = 2")
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 2, 2, projection="3d")
    for i in range(Z3.shape[1]):
        ax.plot(Z3[:, i, 0], Z3[:, i, 1], Z3[:, i, 2], color="0.6", lw=0.7)
    ax.scatter(*Z3[0].T, s=8, color="C0")
    ax.scatter(*Z3[-1].T, s=25, color="C3")
    ax.set_title("V = I, d = 3", fontsize=9)
    save(fig, "polytope.png")

    # good triple: coordinate along φ_1 over time
    V, Zg, ex = pics["good"]
    ts = np.linspace(0.0, cfg.t1, 61)  # the saved times; a failed solve's pictures stop early
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    paths2d(axes[0], Zg, f"good triple, eigenvalues {np.round(np.linalg.eigvals(V).real, 2).tolist()}")
    phi = top_eigen(V).right
    axes[0].annotate("", xy=tuple(phi), xytext=(0, 0), arrowprops=dict(color="C1", width=1.5))
    axes[1].plot(ts[: len(ex["coordinate"])], ex["coordinate"], color="C0", lw=0.8)
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("coordinate along φ_1")
    save(fig, "hyperplanes.png")

    # what happens instead: complex and negative top eigenvalues
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    Vc, Zc, _ = pics["complex"]
    paths2d(axes[0], Zc, f"complex top pair {_fmt_eig(top_eigen(Vc).value)}")
    Vn, Zn, exn = pics["negative"]
    paths2d(axes[1], Zn, f"negative top eigenvalue {_fmt_eig(top_eigen(Vn).value)}")
    axes[2].plot(ts[: len(exn["coordinate"])], exn["coordinate"], color="C0", lw=0.8)
    axes[2].set_xlabel("t")
    axes[2].set_yscale("symlog", linthresh=1.0)  # the repelled coordinates grow exponentially
    axes[2].set_ylabel("coordinate along φ_1 (negative case)")
    save(fig, "other_spectra.png")

    # d = 1: the attention matrix becomes Boolean
    A, dist, _rank = pics["boolean"]  # A: [T, n, n] of condition 0
    last = max(int(np.sum(np.all(np.isfinite(A), axis=(1, 2)))), 1)  # finite frames of the picture
    picks = [0, last // 20, last // 6, last - 1]
    fig, axes = plt.subplots(1, len(picks) + 1, figsize=(16, 3.4))
    for ax, k in zip(axes, picks, strict=False):
        ax.imshow(A[k], cmap="Greys", vmin=0, vmax=max(A[k].max(), 1e-12))
        ax.set_title(f"P(t), t = {ts[k]:.2g}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[-1].semilogy(ts, np.maximum(dist.T, 1e-17), color="C0", alpha=0.3)
    axes[-1].set_xlabel("t")
    axes[-1].set_ylabel("distance to Boolean")
    save(fig, "boolean.png")

    # cluster counts and good triples
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    rows = tables["counts"]
    for d in sorted({r["d"] for r in rows}):
        for beta in sorted({r["beta"] for r in rows}):
            sel = [r for r in rows if r["d"] == d and r["beta"] == beta]
            axes[0].plot([r["n"] for r in sel], [r["gap_clusters_mean"] for r in sel], "o-", label=f"d={d}, β={beta:g}")
            axes[0].plot([r["n"] for r in sel], [r["hull_vertices_mean"] for r in sel], "x:", color="0.5")
    axes[0].set_xlabel("n (x: vertices of the initial hull)")
    axes[0].set_ylabel("tolerance-free clusters at t1 (mean)")
    axes[0].legend(fontsize=7)
    for ens in dict.fromkeys(r["ensemble"] for r in tables["good_triples"]):
        sel = [r for r in tables["good_triples"] if r["ensemble"] == ens]
        x = np.asarray([r["d"] for r in sel])
        f = np.asarray([r["fraction"] for r in sel])
        err = np.maximum(np.asarray([[r["fraction"] - r["ci_low"] for r in sel],
                                     [r["ci_high"] - r["fraction"] for r in sel]]), 0.0)
        axes[1].errorbar(x, f, yerr=err, marker="o", capsize=3, label=ens)
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("d")
    axes[1].set_ylabel("fraction of good triples")
    axes[1].legend(fontsize=7)
    save(fig, "counts.png")
    names += check_figures(out, tables)
    return names


def fig7b(out: Path, n: int = 256, d: int = 128, num: int = 4, t1: float = 8.0, saves: int = 11,
          max_steps: int = 200_000, seed: int = 0) -> None:
    """Fig. 7(b) alone, at the paper's size by default (the reproductions' ``clusters_high_dim`` run): the
    coordinate-by-coordinate rows of :func:`~jaxattn.studies.cluster_checks.high_dimensional` from the same key as
    ``jaxattn clusters --high-dim-n``, into ``out/high_dim.csv``, with ``high_dim.png``."""
    with jax.enable_x64(True):
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), 7000), 11)  # as run_checks draws it
        rows = high_dimensional(key, n, d, t1, saves, num,
                                max_steps=max_steps)
    out = Path(out)
    atomic_write_text(out / "high_dim.csv", csv_text(rows))
    check_figures(out, {"high_dim": rows})


def check_figures(out: Path, tables: dict) -> list[str]:
    """The theorem checks' figures, from their rows (as the study makes them, or as read back from their CSV files):
    ``high_dim.png`` (Fig. 7(b): the mean ± sd over the tokens of three coordinates along positive eigenvalues in
    the first condition, and every coordinate's clusters' gap at the end against its eigenvalue, with the line
    ``λ t = 3 ln 10`` beyond which it has had the time) and ``rate.png`` (Fig. 11: the slope of log(−log dist(P(t),
    Boolean)) per condition, for each n). Returns the names written."""
    plt = plots.pyplot()
    if plt is None:
        return []
    names = []
    rs = [{k: float(r[k]) for k in ("condition", "t", "coordinate", "lambda", "mean", "variance", "gap_decades")}
          for r in tables.get("high_dim") or []]
    if rs:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        first = [r for r in rs if r["condition"] == 0]
        coords = sorted({r["coordinate"] for r in first})
        for c, j in zip(("C0", "C1", "C2"), (coords[0], coords[len(coords) // 4], coords[len(coords) // 2]),
                        strict=False):
            rj = [r for r in first if r["coordinate"] == j]
            t, mu = np.array([r["t"] for r in rj]), np.array([r["mean"] for r in rj])
            sd = np.sqrt([r["variance"] for r in rj])
            axes[0].plot(t, mu, color=c, label=f"φ_{int(j) + 1}, λ = {rj[0]['lambda']:.2f}")
            axes[0].fill_between(t, mu - sd, mu + sd, color=c, alpha=0.2)
        axes[0].set(xlabel="t", ylabel="<φ_j, z_i>: mean ± sd over the tokens (condition 0)")
        axes[0].legend(fontsize=7)
        t1 = max(r["t"] for r in rs)
        end = [r for r in rs if r["t"] == t1]
        axes[1].semilogx([r["lambda"] for r in end], [r["gap_decades"] for r in end], ".", ms=4)
        axes[1].axhline(3.0, color="C3", lw=1, label="3 decades")
        axes[1].axvline(3 * math.log(10) / t1, color="0.5", ls="--", lw=1, label="λ t = 3 ln 10")
        axes[1].set(xlabel="eigenvalue λ_j of the coordinate", ylabel=f"gap of its clusters at t = {t1:g} (decades)")
        axes[1].legend(fontsize=7)
        fig.suptitle(f"Fig. 7(b): n = {tables['high_dim'][0]['n']}, d = {tables['high_dim'][0]['d']}, random Q, K, "
                     "symmetric V; coordinates along positive eigenvalues", fontsize=10)
        fig.tight_layout()
        plots.save(fig, out / "high_dim.png", 110)
        names.append("high_dim.png")
    rate = tables.get("rate") or []
    ns = sorted({int(r["n"]) for r in rate})
    if ns:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, n in enumerate(ns):
            # a condition without enough points in the window has no fit: its slope is NaN
            slopes = [float(r["slope"]) for r in rate if int(r["n"]) == n and math.isfinite(float(r["slope"]))]
            ax.plot(np.full(len(slopes), i) + np.linspace(-0.2, 0.2, len(slopes)), slopes, ".", color="C0", ms=4)
            if slopes:
                ax.plot([i - 0.3, i + 0.3], [np.median(slopes)] * 2, color="C3", lw=2)
        ax.set_xticks(range(len(ns)), [str(n) for n in ns])
        ax.set(xlabel="n (red: the median)", ylabel="slope of log(−log dist(P(t), Boolean)) in t",
               title="Theorem 2.1, Fig. 11: the doubly exponential rate")
        fig.tight_layout()
        plots.save(fig, out / "rate.png", 110)
        names.append("rate.png")
    return names
