"""The metastability study's tables: a row per plateau, per saved time, per point, per fit against β."""

from __future__ import annotations

import math

import numpy as np

from jaxattn.analysis.plateaus import kaplan_meier_median, power_fit, rate_fit
from jaxattn.analysis.stats import wilson
from jaxattn.studies.metastability._config import MetastabilityConfig

#: Fewest durations (or conditions) behind one beta of a fit: a median of fewer is not fitted.
FIT_MIN = 10


def linear_mode(beta: float, kmax: int = 512) -> int:
    """The most unstable Fourier mode of the uniform distribution on the circle for the mean-field C2 flow with
    ``Q = K = V = I``: its growth rate is ``λ_k = k² I_k(β) / (β I_0(β))`` (linearisation of the continuity
    equation; the study's own derivation, docs/metastability.md), maximal at ``k* ≈ √(2β)`` for large β.

    Examples:
        >>> [linear_mode(b) for b in (1.0, 4.0, 16.0, 64.0)]
        [1, 3, 6, 11]
    """
    from scipy.special import ive  # exp-scaled Bessel functions: no overflow at large beta

    k = np.arange(1, kmax + 1)
    return int(k[np.argmax(k * k * ive(k, beta))])


def plateau_rows(n: int, d: int, beta: float, conds: list[dict], kinds: dict) -> list[dict]:
    """One row per metastable plateau; the Hessian columns of those not classified are empty (NaN, -1)."""
    rows, i = [], 0
    unknown = (math.nan, math.nan, -1, -1, None, math.nan)
    for c in conds:
        for p in c["plateaus"]:
            lmin, lmax, pos, neg, saddle, grad = kinds.get(i, unknown)
            i += 1
            rows.append({"n": n, "d": d, "beta": beta, "condition": c["index"], "clusters": p[4],
                         "t_start": p[2], "t_end": p[3], "dwell": p[3] - p[2], "censored": bool(p[6]),
                         "level": p[5], "classified": saddle is not None, "lambda_min": lmin, "lambda_max": lmax,
                         "positive": int(pos), "negative": int(neg), "strict_saddle": bool(saddle),
                         "gradient": grad})
    return rows


def energy_rows(n: int, d: int, beta: float, ts: np.ndarray, y: np.ndarray, k: np.ndarray) -> list[dict]:
    rows = []
    for i, t in enumerate(ts):
        q = np.quantile(y[:, i], [0.1, 0.25, 0.5, 0.75, 0.9]) if len(y) else [math.nan] * 5
        rows.append({"n": n, "d": d, "beta": beta, "t": float(t), "tau": math.log1p(t) / beta,
                     "energy_q10": float(q[0]), "energy_q25": float(q[1]), "energy_median": float(q[2]),
                     "energy_q75": float(q[3]), "energy_q90": float(q[4]),
                     "clusters_median": float(np.median(k[:, i])) if len(k) else math.nan,
                     "single_fraction": float(np.mean(k[:, i] == 1)) if len(k) else math.nan})
    return rows


def point_row(n, d, beta, cfg, conds, kinds, controls, failed, k_all) -> dict:
    plats = [p for c in conds for p in c["plateaus"]]
    dwell = np.asarray([p[3] - p[2] for p in plats])
    cens = np.asarray([p[6] for p in plats], bool)
    meta = [(c["metastable_time"], c["metastable_censored"]) for c in conds if c["plateaus"]]
    first = np.asarray([c["first_clusters"] for c in conds if c["first_clusters"] > 0])
    steps = [s for c in conds for s in c["steps"]]
    kinds = list(kinds.values())
    saddles = sum(bool(k[4]) for k in kinds)
    maxima = sum(int(k[2]) == 0 and int(k[3]) > 0 for k in controls)
    lo, hi = wilson(saddles, len(kinds)) if kinds else (math.nan, math.nan)
    mt = np.asarray([m for m, _ in meta])
    mc = np.asarray([c for _, c in meta], bool)
    return {"n": n, "d": d, "beta": beta, "conditions": len(conds) + failed, "solver_failures": failed,
            "plateaus": len(plats), "plateaus_per_condition": len(plats) / max(len(conds), 1),
            "dwell_median": kaplan_meier_median(dwell, cens) if len(plats) else math.nan,
            "dwell_censored": float(cens.mean()) if len(plats) else math.nan,
            "with_plateau": len(first), "first_clusters_mean": float(first.mean()) if len(first) else math.nan,
            "first_clusters_median": float(np.median(first)) if len(first) else math.nan,
            "first_clusters_q10": float(np.quantile(first, 0.1)) if len(first) else math.nan,
            "first_clusters_q90": float(np.quantile(first, 0.9)) if len(first) else math.nan,
            "linear_mode": linear_mode(beta) if d == 2 else -1,
            "metastable_time_median": kaplan_meier_median(mt, mc) if len(mt) else math.nan,
            "metastable_censored": float(mc.mean()) if len(mt) else math.nan,
            "single_at_t1": float(np.mean(k_all[:, -1] == 1)) if len(k_all) else math.nan,
            "steps": len(steps), "steps_with_merge": sum(b < a for a, b in steps),
            "steps_one_merge": sum(a - b == 1 for a, b in steps),
            "classified": len(kinds), "strict_saddles": saddles, "saddle_fraction": saddles / len(kinds) if kinds
            else math.nan, "saddle_ci_low": lo, "saddle_ci_high": hi,
            "controls": len(controls), "control_maxima": maxima,
            "max_energy_decrease": max((c["max_decrease"] for c in conds), default=math.nan)}


def fit_rows(n: int, d: int, cfg: MetastabilityConfig, points: dict, plateau_rows: list[dict]) -> list[dict]:
    rows = []
    betas = [float(b) for b in cfg.betas]

    def add(what: str, fit, kind: str) -> None:
        if fit is None:
            rows.append({"n": n, "d": d, "quantity": what, "model": kind, "value": math.nan, "ci_low": math.nan,
                         "ci_high": math.nan, "betas_used": "", "rss_exponential": math.nan,
                         "rss_power": math.nan})
            return
        if kind == "exponential":
            rows.append({"n": n, "d": d, "quantity": what, "model": kind, "value": fit.rate, "ci_low": fit.lo,
                         "ci_high": fit.hi, "betas_used": " ".join(f"{x:g}" for x in fit.xs),
                         "rss_exponential": fit.rss_exponential, "rss_power": fit.rss_power})
        else:
            rows.append({"n": n, "d": d, "quantity": what, "model": kind, "value": fit.exponent, "ci_low": fit.lo,
                         "ci_high": fit.hi, "betas_used": " ".join(f"{b:g}" for b in betas
                                                                 if _firsts(points[(n, d, b)]).size >= FIT_MIN),
                         "rss_exponential": math.nan, "rss_power": math.nan})

    groups = []
    for b in betas:
        mt = [(c["metastable_time"], c["metastable_censored"]) for c in points[(n, d, b)] if c["plateaus"]]
        if len(mt) >= FIT_MIN:
            groups.append((b, np.asarray([m for m, _ in mt]), np.asarray([c for _, c in mt], bool)))
    add("metastable_time", rate_fit(groups, boot=cfg.boot, seed=cfg.seed), "exponential")
    mine = [r for r in plateau_rows if r["n"] == n and r["d"] == d]
    for k in sorted({r["clusters"] for r in mine}):
        g = [(b, np.asarray([r["dwell"] for r in mine if r["beta"] == b and r["clusters"] == k]),
              np.asarray([r["censored"] for r in mine if r["beta"] == b and r["clusters"] == k], bool))
             for b in betas]
        g = [x for x in g if len(x[1]) >= FIT_MIN]
        fit = rate_fit(g, boot=cfg.boot, seed=cfg.seed)
        if fit is not None:
            add(f"dwell_{k}_clusters", fit, "exponential")
    firsts = [(b, _firsts(points[(n, d, b)])) for b in betas]
    add("first_clusters", power_fit([(b, v) for b, v in firsts if len(v) >= FIT_MIN], boot=cfg.boot, seed=cfg.seed),
        "power")
    return rows


def _firsts(conds: list[dict]) -> np.ndarray:
    return np.asarray([c["first_clusters"] for c in conds if c["first_clusters"] > 0], np.float64)
