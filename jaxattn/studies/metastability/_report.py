"""The metastability study's output: its CSV tables read and written, the report, the figures, the movie."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np

from jaxattn.analysis.plateaus import kaplan_meier_median
from jaxattn.io.results import atomic_write_text, provenance, write_json
from jaxattn.io.trajectory import save_trajectory
from jaxattn.plotting import encoder_available, movie
from jaxattn.studies import plots
from jaxattn.studies.metastability._config import MetastabilityConfig
from jaxattn.studies.metastability._tables import FIT_MIN, linear_mode
from jaxattn.studies.skeleton import csv_text, md_cell, write_report

TABLES = ("points", "plateaus", "energy", "fits", "claims")


def load_tables(out_dir) -> dict:
    """The tables of a finished run read back from its CSV files (numbers as floats, booleans as bools), e.g. for
    :func:`claims`."""
    out = {}
    for name in TABLES:
        with open(Path(out_dir) / f"{name}.csv", newline="") as f:
            out[name] = [{k: _cell(v) for k, v in r.items()} for r in csv.DictReader(f)]
    return out


def _cell(v: str):
    if v in ("True", "False"):
        return v == "True"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def write(out: Path, cfg: MetastabilityConfig, tables: dict, shown: dict, ts: np.ndarray, seconds: float,
           say) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        if tables[name]:
            atomic_write_text(out / f"{name}.csv", csv_text(tables[name]))
    write_json(out / "config.json", {"command": "metastability", "config": dataclasses.asdict(cfg),
                                     "seconds": round(seconds, 3), **provenance()})
    figs = _figures(out, cfg, tables) if cfg.figures else []
    movies = _movie(out, cfg, shown, ts, say) if cfg.movie and shown else []
    write_report(out, _report(cfg, tables, seconds, movies), figs)


def _movie(out: Path, cfg: MetastabilityConfig, shown: dict, ts: np.ndarray, say) -> list[str]:
    ds = sorted(shown)
    traj = [shown[d][0] for d in ds]
    obs = {"2*beta*E": np.stack([shown[d][1] for d in ds]), "clusters": np.stack([shown[d][2] for d in ds])}
    titles = [f"d = {d}, n = {cfg.n[0]}, beta = {float(cfg.movie_beta):g}" for d in ds]
    save_trajectory(out / "trajectory.safetensors", traj, ts, observables=obs, titles=titles,
                    note=f"jaxattn metastability ({cfg.dynamics}): condition 0 of each d")
    say("movie: movie.gif" + (" and movie.mp4" if encoder_available() else ""))
    names = ["movie.gif"]
    movie(traj, out / "movie.gif", ts=ts, observables=obs, titles=titles)
    if encoder_available():
        movie(traj, out / "movie.mp4", ts=ts, observables=obs, titles=titles)
        names.append("movie.mp4")
    return names


def _report(cfg: MetastabilityConfig, tables: dict, seconds: float, movies: list[str]) -> list[str]:
    dyn = ("the flow C2, `ẋ_i = P_{x_i} Σ_j softmax_j(β⟨x_i, x_j⟩) x_j`, adaptive Tsit5 "
           f"(rtol {cfg.rtol:g}, atol {cfg.atol:g})") if cfg.dynamics == "C2" else \
        f"the map D1, `x_i ← N(x_i + α Σ_j softmax_j(β⟨x_i, x_j⟩) x_j)`, α = {cfg.alpha:g} (time k·α)"
    L = ["# Dynamic metastability", "",
         f"Tokens on the sphere with Q = K = V = I under {dyn}, {cfg.dtype}; {cfg.num} initial conditions uniform "
         f"on the sphere per (n, d, β), the same ones for every β; states saved at t = 0 and {cfg.saves} times "
         f"from {cfg.t_min:g} to {cfg.t1:g} (logarithmic). Clusters: single linkage at distance {cfg.tol:g}. "
         f"Plateaus: 2βE constant to within {cfg.flat_tol:g} × 2/n² for at least a factor {cfg.min_ratio:g} in "
         "time; metastable when the configuration at the plateau's end has between 2 and n − 1 clusters. Strict "
         f"saddle: the Riemannian Hessian of E (common rotations removed) has eigenvalues beyond ±{cfg.hessian_tol:g}"
         f" × its largest in modulus of both signs. {seconds:.0f} s in all.", "",
         "## Per point", "",
         "| n | d | β | conditions | solver failures | metastable plateaus | dwell (KM median) | censored | "
         "clusters at the first plateau (median [10%, 90%]) | k* (circle) | metastable time (KM median) | "
         "one cluster at t1 | strict saddles | 95% | single-cluster ends that are maxima |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in tables["points"]:
        L.append(f"| {p['n']} | {p['d']} | {p['beta']:g} | {p['conditions']} | {p['solver_failures']} | "
                 f"{p['plateaus']} | {_num(p['dwell_median'])} | {_num(p['dwell_censored'], '.2f')} | "
                 f"{_num(p['first_clusters_median'], 'g')} [{_num(p['first_clusters_q10'], 'g')}, "
                 f"{_num(p['first_clusters_q90'], 'g')}] | {p['linear_mode'] if p['linear_mode'] > 0 else '–'} | "
                 f"{_num(p['metastable_time_median'])} | {_num(p['single_at_t1'], '.2f')} | "
                 f"{p['strict_saddles']} of {p['classified']} | [{_num(p['saddle_ci_low'], '.3f')}, "
                 f"{_num(p['saddle_ci_high'], '.3f')}] | {p['control_maxima']} of {p['controls']} |")
    L += ["", "KM: Kaplan–Meier median (durations still running at t1 count as censored); `inf`: more than half "
          "outlast t1. k*: the most unstable Fourier mode of the uniform state on the circle, argmax_k k² I_k(β).",
          "", "## Fits against β", "",
          "| n | d | quantity | model | value | 95% interval | β used | residuals (exponential) | "
          "residuals (power law) |", "|---|---|---|---|---|---|---|---|---|"]
    for f in tables["fits"]:
        L.append(f"| {f['n']} | {f['d']} | {f['quantity']} | {f['model']} | {_num(f['value'])} | "
                 f"[{_num(f['ci_low'])}, {_num(f['ci_high'])}] | {f['betas_used'] or '–'} | "
                 f"{_num(f['rss_exponential'])} | {_num(f['rss_power'])} |")
    L += ["", "`metastable_time`, `dwell_k_clusters`: log(median) = a + c·β, c in the value column (per unit β); "
          "`first_clusters`: mean clusters at the first metastable plateau ∝ β^p.", "",
          "## Claims", "", "Each verdict follows from its checks (✓ holds, ✗ fails, ? undecided at this sample size or "
          "horizon): reproduced when every check holds, differs when one fails, inconclusive otherwise. Fractions "
          "are judged on their 95% Wilson interval; “almost all” is read as at least 90%.", "",
          "| claim | measured | checks | verdict | source |", "|---|---|---|---|---|"]
    for c in tables["claims"]:
        L.append(f"| {md_cell(c['claim'])} | {md_cell(c['number'])} | {md_cell(c['checks'])} | "
                 f"**{md_cell(c['verdict'])}** | {md_cell(c['source'])} |")
    if movies:
        L += ["", "## Movie", "", f"Condition 0 of each d at β = {float(cfg.movie_beta):g}: "
              + ", ".join(f"[{m}]({m})" for m in movies) + " (the states of trajectory.safetensors; "
              "`jaxattn movie` renders it again).", "", "![movie](movie.gif)"]
    return L


def _num(v, fmt: str = ".4g") -> str:
    if isinstance(v, float) and math.isnan(v):
        return "–"
    return format(v, fmt) if isinstance(v, (int, float)) else str(v)


def _figures(out: Path, cfg: MetastabilityConfig, tables: dict) -> list[str]:
    plt = plots.pyplot()
    if plt is None:
        return []
    names = []
    n0 = cfg.n[0]
    betas = [float(b) for b in cfg.betas]
    colours = plt.get_cmap("viridis")

    # the staircase: 2βE against log t and against τ = ln(1 + t)/β, median and 10-90% band
    fig, axes = plt.subplots(2, len(cfg.dims), figsize=(4.2 * len(cfg.dims), 7), squeeze=False)
    for j, d in enumerate(cfg.dims):
        for i, b in enumerate(betas):
            rows = [r for r in tables["energy"] if r["n"] == n0 and r["d"] == d and r["beta"] == b and r["t"] > 0]
            if not rows:
                continue
            c = colours(i / max(len(betas) - 1, 1))
            for ax, x in ((axes[0, j], [r["t"] for r in rows]), (axes[1, j], [r["tau"] for r in rows])):
                ax.plot(x, [r["energy_median"] for r in rows], color=c, label=f"β = {b:g}")
                ax.fill_between(x, [r["energy_q10"] for r in rows], [r["energy_q90"] for r in rows], color=c,
                                alpha=0.15, lw=0)
        axes[0, j].set(xscale="log", xlabel="t", title=f"d = {d}, n = {n0}")
        axes[1, j].set(xlabel="τ = ln(1 + t) / β")
        for ax in axes[:, j]:
            ax.set_ylabel("2βE (1: one cluster)")
    axes[0, 0].legend(fontsize=7)
    names.append(_save(plt, fig, out, "staircase.png"))

    # dwell times against beta: the plateaus of k clusters (Kaplan-Meier medians of at least FIT_MIN plateaus),
    # with the fitted exponential rate, and the time from the first metastable plateau to one cluster
    fig, axes = plt.subplots(1, len(cfg.dims), figsize=(4.2 * len(cfg.dims), 3.8), squeeze=False)
    for j, d in enumerate(cfg.dims):
        ax = axes[0, j]
        mine = [r for r in tables["plateaus"] if r["n"] == n0 and r["d"] == d]
        fits = {f["quantity"]: f for f in tables["fits"] if f["n"] == n0 and f["d"] == d}
        ks = sorted({r["clusters"] for r in mine})
        for i, k in enumerate(ks):
            medians: list[tuple[float, float]] = []
            for b in betas:
                sel = [r for r in mine if r["beta"] == b and r["clusters"] == k]
                if len(sel) >= FIT_MIN:
                    m = kaplan_meier_median([r["dwell"] for r in sel], [r["censored"] for r in sel])
                    if math.isfinite(m):
                        medians.append((b, m))
            if medians:
                f = fits.get(f"dwell_{k}_clusters")
                label = f"{k} clusters" + (f": e^({f['value']:.2g} β)" if f and math.isfinite(f["value"]) else "")
                ax.plot(*zip(*medians, strict=True), "o-", color=colours(i / max(len(ks) - 1, 1)), label=label)
        sel = [(p["beta"], p["metastable_time_median"]) for p in tables["points"]
               if p["n"] == n0 and p["d"] == d and math.isfinite(p["metastable_time_median"])]
        if sel:
            ax.plot(*zip(*sel, strict=True), "ks--", label="to one cluster")
        ax.set(yscale="log", xlabel="β", ylabel="dwell time (Kaplan–Meier median)", title=f"d = {d}, n = {n0}")
        ax.legend(fontsize=6)
    names.append(_save(plt, fig, out, "dwell.png"))

    # strict saddles, and the clusters of the first plateau against beta
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for d in cfg.dims:
        pts = [p for p in tables["points"] if p["n"] == n0 and p["d"] == d and p["classified"]]
        if pts:
            f = np.asarray([p["saddle_fraction"] for p in pts])
            err = np.maximum([f - [p["saddle_ci_low"] for p in pts], [p["saddle_ci_high"] for p in pts] - f], 0)
            axes[0].errorbar([p["beta"] for p in pts], f, yerr=err, marker="o", capsize=3, label=f"d = {d}")
        pts = [p for p in tables["points"] if p["n"] == n0 and p["d"] == d and p["with_plateau"]]
        if pts:
            axes[1].plot([p["beta"] for p in pts], [p["first_clusters_mean"] for p in pts], "o-", label=f"d = {d}")
    if 2 in cfg.dims:
        axes[1].plot(betas, [linear_mode(b) for b in betas], "k:", label="k* (circle, linear)")
    axes[0].set(xscale="log", xlabel="β", ylabel="fraction of plateaus that are strict saddles", ylim=(-0.02, 1.02))
    axes[1].set(xscale="log", yscale="log", xlabel="β", ylabel="clusters at the first metastable plateau (mean)")
    for ax in axes:  # the betas of the grid as plain numbers on the log axes
        ax.set_xticks(betas, [f"{b:g}" for b in betas])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    lo, hi = axes[1].get_ylim()
    whole = [k for k in range(1, 257) if lo <= k <= hi]
    if whole:
        axes[1].set_yticks(whole, [str(k) for k in whole])
    names.append(_save(plt, fig, out, "saddles_clusters.png"))
    return names


def _save(plt, fig, out: Path, name: str) -> str:
    fig.tight_layout()
    plots.save(fig, out / name, 110)
    return name
