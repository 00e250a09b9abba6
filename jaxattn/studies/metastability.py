"""The dynamic-metastability study behind ``jaxattn metastability`` (see docs/metastability.md).

On the sphere with ``Q = K = V = I`` (one head, output ``I``, score scale 1) the tokens of the flow C2,
``ẋ_i = P_{x_i} Σ_j softmax_j(β ⟨x_i, x_j⟩) x_j``, gather into a few point clusters, stay near that
configuration for a long time, then merge, cluster by cluster, until one is left. The interaction energy
``E = (1/(2βn²)) Σ_ij exp(β(⟨x_i, x_j⟩ − 1))`` (:mod:`jaxattn.analysis.energy`) never decreases along the
flow; drawn against the logarithm of time it is a staircase, one step per merge. This study integrates
``num`` random initial conditions (uniform on the sphere) for every ``(n, d, β)`` of a grid, saves the
states on a logarithmic time grid and measures, per condition:

* the energy over time, ``2βE ∈ (0, 1]`` (1: a single cluster);
* the number of clusters over time: single linkage at distance ``tol`` (tokens joined by a chain of
  steps shorter than ``tol`` share a cluster);
* the plateaus of the energy (:func:`jaxattn.analysis.plateaus.plateaus`: ``2βE`` constant to within
  ``flat_tol · 2/n²`` — ``2/n²`` is the least a merge of two tokens adds — for at least a factor
  ``min_ratio`` in time); a plateau is *metastable* when the configuration at its last saved time has
  between 2 and ``n − 1`` clusters; its dwell time is its length, censored when it lasts to ``t1``;
* at each metastable plateau (the state at its middle saved time), the kind of critical point of ``E``
  (:func:`jaxattn.analysis.energy.classify`: a strict saddle has a positive and a negative direction of the
  Riemannian Hessian, common rotations removed); the single-cluster final states are classified too, as
  a control (they should be local maxima, not saddles);
* the time to a single cluster, and the metastable time: from the start of the first metastable plateau
  to a single cluster (censored at ``t1``).

It reports the staircase (``2βE`` against ``τ = ln(1 + t)/β``, median and quantiles), the dwell times
against ``β`` (Kaplan–Meier medians, a fitted exponential growth rate with a bootstrap interval), the
fraction of plateaus that are strict saddles, the number of clusters at the first metastable plateau
against ``β`` (a fitted exponent; on the circle next to the most unstable Fourier mode of the uniform
state, ``k* = argmax_k k² I_k(β)``, from the linearisation of the mean-field equation), a movie, and the
claims they check (:func:`claims`). ``dynamics = 'D1'`` runs the map
``x_i ← N(x_i + α Σ_j softmax_j(β⟨x_i, x_j⟩) x_j)`` instead, time ``k α`` after ``k`` steps.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.clusters import count_clusters
from jaxattn.analysis.energy import classify, energy
from jaxattn.analysis.plateaus import kaplan_meier_median, plateaus, power_fit, rate_fit
from jaxattn.analysis.stats import wilson
from jaxattn.config import at_least, option, positive
from jaxattn.config import seed as seed_check
from jaxattn.dynamics import named_dtype
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.discrete import D1, simulate
from jaxattn.dynamics.fields import C2
from jaxattn.dynamics.options import Save
from jaxattn.errors import ConfigError
from jaxattn.io.results import atomic_write_text, provenance, write_json
from jaxattn.model.paper import paper_model
from jaxattn.model.sampling import init_tokens
from jaxattn.studies import plots
from jaxattn.studies.movie import encoder_available, movie, save_trajectory
from jaxattn.studies.skeleton import check_options, csv_text, md_cell, own_run_in_float64, write_report

DYNAMICS = ("C2", "D1")
#: Bytes of saved states one block of conditions may hold (the block is solved and analysed, then dropped).
BLOCK_BYTES = 64 * 2**20
#: Bytes of Hessians classified at once.
HESSIAN_BYTES = 128 * 2**20
#: Fewest durations (or conditions) behind one beta of a fit: a median of fewer is not fitted.
FIT_MIN = 10


def _on_sphere(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (tokens on a sphere)"


def _several(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (clusters need several tokens)"


def _fraction(v) -> str | None:
    return None if 0 <= v < 1 else "must be in [0, 1)"


def _ratio(v) -> str | None:
    return None if v >= 1 else "must be >= 1"


@dataclasses.dataclass
class MetastabilityConfig:
    """The metastability study's options (those of ``jaxattn metastability``, see :mod:`jaxattn.config`)."""

    dims: list[int] = option([2, 3, 4], "token dimensions d (tokens on the sphere S^(d-1))", check=_on_sphere)
    n: list[int] = option([32], "tokens per configuration", check=_several)
    betas: list[float] = option([2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0], "inverse temperatures beta", check=positive)
    num: int = option(128, "initial conditions per (n, d, beta), uniform on the sphere", check=positive)
    t1: float = option(1000.0, "final time", check=positive)
    t_min: float = option(0.1, "first saved time after 0; the saved times are logarithmic from it to t1",
                          check=positive)
    saves: int = option(100, "saved times on the logarithmic grid (and t = 0)", check=at_least(10))
    dynamics: str = option("C2", "C2: the flow on the sphere (adaptive Tsit5); D1: the map x <- N(x + alpha "
                           "sum_j a_ij x_j), time k*alpha after k steps", choices=DYNAMICS)
    alpha: float = option(1.0, "step of D1 (time per step)", check=positive)
    rtol: float = option(1e-7, "relative tolerance of C2's adaptive steps", check=positive)
    atol: float = option(1e-9, "absolute tolerance of C2's adaptive steps", check=positive)
    dtype: str = option("float64", "precision of the dynamics (the analyses run in float64)",
                        choices=("float32", "float64"))
    tol: float = option(1e-3, "single linkage: tokens joined by steps shorter than this share a cluster",
                        check=positive)
    flat_tol: float = option(0.1, "a plateau: 2*beta*E constant to within this fraction of 2/n^2 (the least a "
                             "merge of two tokens adds)", check=positive)
    min_ratio: float = option(2.0, "a plateau lasts at least this factor in time", check=_ratio)
    hessian_tol: float = option(1e-12, "a Hessian eigenvalue counts as nonzero beyond this fraction of the "
                                "largest in modulus", check=_fraction)
    classify: int = option(100, "metastable plateaus whose Hessian is classified per (n, d, beta): a random sample "
                           "when there are more", check=positive)
    boot: int = option(400, "bootstrap resamples of the confidence intervals", check=positive)
    movie: bool = option(True, "write movie.gif (and movie.mp4 where an encoder is installed): one condition per d")
    movie_beta: float = option(8.0, "the beta of the movie (one of --betas)", check=positive)
    seed: int = option(0, "random seed", check=seed_check)
    figures: bool = option(True, "write PNG figures")

    def check(self) -> MetastabilityConfig:
        """Every option checked against its declaration, then together, before any work (one line)."""
        check_options(self)
        if self.t_min >= self.t1:
            raise ConfigError(f"t_min = {self.t_min:g} must be below t1 = {self.t1:g}")
        if self.movie and float(self.movie_beta) not in [float(b) for b in self.betas]:
            raise ConfigError(f"movie_beta = {self.movie_beta:g} is not among betas "
                              f"{', '.join(f'{float(b):g}' for b in self.betas)}: give one of them")
        defaults = MetastabilityConfig.__dataclass_fields__
        if self.dynamics == "C2" and self.alpha != defaults["alpha"].default:
            raise ConfigError("alpha is the step of D1: it does nothing with dynamics = 'C2'")
        if self.dynamics == "D1" and (self.rtol, self.atol) != (defaults["rtol"].default, defaults["atol"].default):
            raise ConfigError("rtol and atol are C2's tolerances: they do nothing with dynamics = 'D1'")
        if self.dynamics == "D1" and self.t1 / self.alpha > 10_000_000:
            raise ConfigError(f"t1 / alpha = {self.t1 / self.alpha:.3g} steps of D1: at most 1e7")
        for name in ("dims", "n", "betas"):
            v = [float(x) for x in getattr(self, name)]
            if len(set(v)) < len(v):
                raise ConfigError(f"{name} repeats a value: {getattr(self, name)}")
        return self


#: The study's public shape (as every study's): ``Config`` and ``run``.
Config = MetastabilityConfig


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


def time_grid(cfg: MetastabilityConfig) -> np.ndarray:
    """The saved times: 0, then ``saves`` logarithmically spaced from ``t_min`` to ``t1`` (for D1, rounded to
    whole blocks of steps, see :func:`d1_steps`)."""
    if cfg.dynamics == "D1":
        return d1_steps(cfg)[0] * cfg.alpha
    return np.concatenate([[0.0], np.geomspace(cfg.t_min, cfg.t1, cfg.saves)])


def d1_steps(cfg: MetastabilityConfig) -> tuple[np.ndarray, int]:
    """D1's saved steps (0, then the logarithmic grid rounded to whole blocks, repeated values dropped) and the
    block: the steps one compiled call runs (a power of two, so that at most about 1000 calls reach the end)."""
    total = max(round(cfg.t1 / cfg.alpha), 1)
    block = 1 << max(0, math.ceil(math.log2(total / 1000))) if total > 1000 else 1
    grid = np.geomspace(max(cfg.t_min / cfg.alpha, 1.0), total, cfg.saves)
    steps = np.unique(np.maximum(np.round(grid / block), 1).astype(np.int64) * block)
    return np.concatenate([[0], steps]), block


def _nothing(t, X, ctx) -> dict:
    return {}


def trajectories(X0, beta: float, ts: np.ndarray, cfg: MetastabilityConfig) -> tuple[np.ndarray, np.ndarray]:
    """The states of ``X0: [B, n, d]`` at the saved times ``ts`` under the study's dynamics: ``[B, T, n, d]``
    (float64) and ``ok: [B]`` (the solve succeeded and every state is finite)."""
    d = X0.shape[-1]
    model = paper_model(np.eye(d))
    dtype = named_dtype(cfg.dtype)
    if cfg.dynamics == "C2":
        sol = solve(model, X0, float(ts[-1]), flow=C2, beta=beta, save=Save(ts=ts, observe=_nothing, trajectory=True),
                    dtype=dtype, rtol=cfg.rtol, atol=cfg.atol, max_steps=max(100_000, int(4 * ts[-1])))
        traj = np.asarray(sol.trajectory, np.float64)
        ok = np.asarray(sol.ok)
    else:
        steps, block = d1_steps(cfg)
        X, k, states = jnp.asarray(X0, dtype), 0, [np.asarray(X0, np.float64)]
        for target in steps[1:]:
            while k < target:
                X = simulate(model, X, block, dynamics=D1, alpha=cfg.alpha, beta=beta,
                             save=Save(every="last", observe=_nothing), dtype=dtype).final
                k += block
            states.append(np.asarray(X, np.float64))
        traj = np.stack(states, axis=1)
        ok = np.ones(traj.shape[0], bool)
    return traj, ok & np.all(np.isfinite(traj), axis=(1, 2, 3))


def condition_summary(ts: np.ndarray, y: np.ndarray, counts: np.ndarray, n: int, *, flat_tol: float,
                      min_ratio: float) -> dict:
    """What one condition shows: ``y = 2βE`` and the cluster ``counts`` at the saved times ``ts``.

    Returns ``plateaus`` (the metastable ones: ``(start, stop, t_start, t_end, clusters, level, censored)``,
    ``clusters`` counted at the plateau's last saved time, between 2 and ``n − 1``; the plateau that starts at
    ``t = 0``, the initial configuration at rest, is never one), ``steps`` (the energy steps that follow a
    metastable plateau: ``(clusters before, clusters after)``, counted at the last saved times of the two
    plateaus), ``t_single`` (the first saved time with one cluster, ``inf`` if none), ``metastable_time``
    and ``metastable_censored`` (from the start of the first metastable plateau to ``t_single``, or to the
    last saved time and censored when there is no single cluster by then; ``nan`` without a metastable
    plateau), ``first_clusters`` (clusters of the first metastable plateau, 0 without one) and
    ``max_decrease`` (the largest decrease of ``y`` between consecutive saved times, 0 if none).
    """
    all_p = plateaus(ts, y, tol=flat_tol * 2.0 / n**2, min_ratio=min_ratio)
    # the plateau that starts at t = 0 is the initial configuration at rest, not a metastable one
    meta = [(p.start, p.stop, p.t_start, p.t_end, int(counts[p.stop]), p.level, p.censored)
            for p in all_p if 2 <= counts[p.stop] < n and p.t_start > 0]
    steps = [(int(counts[a.stop]), int(counts[b.stop])) for a, b in itertools.pairwise(all_p)
             if 2 <= counts[a.stop] < n and a.t_start > 0]
    single = np.flatnonzero(counts == 1)
    t_single = float(ts[single[0]]) if single.size else math.inf
    first = meta[0] if meta else None
    end = t_single if math.isfinite(t_single) else float(ts[-1])
    return {"plateaus": meta, "steps": steps, "t_single": t_single,
            "metastable_time": end - first[2] if first else math.nan,
            "metastable_censored": first is not None and not math.isfinite(t_single),
            "first_clusters": first[4] if first else 0,
            "max_decrease": float(max(0.0, -np.min(np.diff(y)))) if len(y) > 1 else 0.0}


def _block_size(T: int, n: int, d: int) -> int:
    per = T * n * d * 8
    return int(max(64, BLOCK_BYTES // per // 64 * 64))


def _classify_states(states: list[np.ndarray], beta: float, tol: float) -> list:
    """:func:`jaxattn.analysis.energy.classify` of a list of ``[n, d]`` states, in batches of bounded memory."""
    if not states:
        return []
    n, d = states[0].shape
    size = int(min(64, max(1, HESSIAN_BYTES // (8 * (n * d) ** 2))))
    out = []
    for i in range(0, len(states), size):
        part = states[i:i + size]
        # batches of one size (the last padded with copies): the Hessian is compiled once per (n, d)
        kind = classify(np.stack(part + [part[-1]] * (size - len(part))), beta, tol=tol)
        out.extend(list(zip(*(np.asarray(a).tolist() for a in kind), strict=True))[:len(part)])
    return out


def run(out_dir, config: MetastabilityConfig | None = None, *, model=None, model_name: str = "model",
        progress=None) -> dict:
    """Run the study into ``out_dir`` (created); returns the tables (lists of row dicts). ``config`` defaults to
    ``Config()``; the study builds its own models, so ``model`` must be left out. ``progress(message)`` receives
    the stage messages. Runs inside a scoped ``jax.enable_x64`` (the plateaus and the Hessians need float64):
    the caller's ``jax_enable_x64`` is left as it was."""
    return own_run_in_float64("metastability", MetastabilityConfig, config, model, out_dir, progress, _run)


def _run(out: Path, cfg: MetastabilityConfig, say) -> dict:
    started = time.perf_counter()
    key = jax.random.key(cfg.seed)
    ts = time_grid(cfg)
    T = len(ts)
    dtype = named_dtype(cfg.dtype)
    tables: dict = {"points": [], "plateaus": [], "energy": [], "fits": []}
    shown: dict = {}  # the movie's condition per d
    points: dict = {}  # per point: per-condition summaries, for the fits
    for n in cfg.n:
        for d in cfg.dims:
            # the same initial conditions for every beta (common random numbers)
            X0 = init_tokens(jax.random.fold_in(key, 1000 * n + d), cfg.num, n, d, dtype=dtype)
            for beta in map(float, cfg.betas):
                say(f"n = {n}, d = {d}, beta = {beta:g}: {cfg.num} initial conditions to t = {ts[-1]:g} "
                    f"({cfg.dynamics})")
                conds: list[dict] = []
                states: list[np.ndarray] = []
                finals: list[np.ndarray] = []
                ys, ks, failed = [], [], 0
                size = _block_size(T, n, d)
                for start in range(0, cfg.num, size):
                    traj, ok = trajectories(X0[start:start + size], beta, ts, cfg)
                    failed += int((~ok).sum())
                    traj = traj[ok]
                    if not len(traj):
                        continue
                    y = 2.0 * beta * np.asarray(energy(traj, beta), np.float64)  # [b, T]
                    k = np.asarray(count_clusters(traj, cfg.tol))  # [b, T]
                    for b in range(len(traj)):
                        s = condition_summary(ts, y[b], k[b], n, flat_tol=cfg.flat_tol, min_ratio=cfg.min_ratio)
                        s["index"] = start + int(np.flatnonzero(ok)[b])
                        for p in s["plateaus"]:
                            states.append(traj[b, (p[0] + p[1]) // 2])
                        if k[b, -1] == 1 and len(finals) < 64:
                            finals.append(traj[b, -1])
                        conds.append(s)
                    ys.append(y)
                    ks.append(k)
                    if cfg.movie and beta == float(cfg.movie_beta) and n == cfg.n[0] and start == 0 and ok[0]:
                        shown[d] = (traj[0], y[0], k[0])
                # a random sample of the plateaus (seeded), so the Hessians cost a bounded time per point
                rng = np.random.default_rng([cfg.seed, n, d, round(beta * 1e6)])
                picked = np.sort(rng.choice(len(states), min(cfg.classify, len(states)), replace=False))
                say(f"  {len(states)} metastable plateaus, {len(picked)} Hessians")
                kinds = dict(zip(picked.tolist(), _classify_states([states[i] for i in picked], beta, cfg.hessian_tol),
                                 strict=True))
                controls = _classify_states(finals, beta, cfg.hessian_tol)
                y_all = np.concatenate(ys) if ys else np.full((0, T), np.nan)
                k_all = np.concatenate(ks) if ks else np.full((0, T), np.nan)
                tables["plateaus"] += _plateau_rows(n, d, beta, conds, kinds)
                tables["energy"] += _energy_rows(n, d, beta, ts, y_all, k_all)
                tables["points"].append(_point_row(n, d, beta, cfg, conds, kinds, controls, failed, k_all))
                points[(n, d, beta)] = conds
    for n in cfg.n:
        for d in cfg.dims:
            tables["fits"] += _fit_rows(n, d, cfg, points, tables["plateaus"])
    tables["claims"] = claims(tables, dtype=cfg.dtype)
    _write(out, cfg, tables, shown, ts, time.perf_counter() - started, say)
    return tables


def _plateau_rows(n: int, d: int, beta: float, conds: list[dict], kinds: dict) -> list[dict]:
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


def _energy_rows(n: int, d: int, beta: float, ts: np.ndarray, y: np.ndarray, k: np.ndarray) -> list[dict]:
    rows = []
    for i, t in enumerate(ts):
        q = np.quantile(y[:, i], [0.1, 0.25, 0.5, 0.75, 0.9]) if len(y) else [math.nan] * 5
        rows.append({"n": n, "d": d, "beta": beta, "t": float(t), "tau": math.log1p(t) / beta,
                     "energy_q10": float(q[0]), "energy_q25": float(q[1]), "energy_median": float(q[2]),
                     "energy_q75": float(q[3]), "energy_q90": float(q[4]),
                     "clusters_median": float(np.median(k[:, i])) if len(k) else math.nan,
                     "single_fraction": float(np.mean(k[:, i] == 1)) if len(k) else math.nan})
    return rows


def _point_row(n, d, beta, cfg, conds, kinds, controls, failed, k_all) -> dict:
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


def _fit_rows(n: int, d: int, cfg: MetastabilityConfig, points: dict, plateau_rows: list[dict]) -> list[dict]:
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


# ---------------------------------------------------------------- claims
#: the paper the claims come from, as the claims table cites it
PAPER = "Geshkovski, Koubbi, Polyanskiy & Rigollet (2024), Dynamic metastability in the self-attention model"


def claims(tables: dict, *, dtype: str = "float64") -> list[dict]:
    """The claims this study can check, each with the number measured and a verdict computed from a comparison
    that can fail (``pass`` / ``fail``), or ``not checked`` with the reason. ``tables``: what :func:`run`
    returns, or :func:`load_tables` of a finished run. The claims are those of Geshkovski, Koubbi, Polyanskiy
    and Rigollet (2024, "Dynamic metastability in the self-attention model") as this project paraphrases them (not
    the paper's own statements); ``source`` says where each one comes from and what would need the paper's own text."""
    pts, fits = tables["points"], tables["fits"]
    rows = []
    ok_pts = [p for p in pts if p["conditions"] > p["solver_failures"]]
    # 1. the energy only increases (the flow is a gradient ascent of E in a weighted metric)
    worst = max((p["max_energy_decrease"] for p in ok_pts), default=math.nan)
    limit = 1e-6 if dtype == "float64" else 1e-4
    rows.append({"claim": "E never decreases along the dynamics", "source": "the study's derivation "
                 "(dE/dt = sum_i (n^2 e^beta / Z_i) |P_{x_i} g_i|^2 >= 0 for C2); what the staircase rests on",
                 "number": f"largest decrease of 2*beta*E between saved times: {worst:.2e} (limit {limit:g})",
                 "verdict": _verdict(worst <= limit) if math.isfinite(worst) else "not checked: no condition"})
    # 2. several clusters for a time growing exponentially with beta: the time to one cluster from the first
    # metastable plateau, and the dwell of the plateaus of k clusters, each against beta
    exp = [f for f in fits if f.get("model") == "exponential" and math.isfinite(f["value"])
           and math.isfinite(f["ci_low"])]
    if exp:
        number = "; ".join(f"n={f['n']} d={f['d']} {f['quantity']}: e^({f['value']:.3g} beta), 95% "
                           f"[{f['ci_low']:.3g}, {f['ci_high']:.3g}] (betas {f['betas_used']}; log residuals: "
                           f"exponential {f['rss_exponential']:.2g}, power law {f['rss_power']:.2g})" for f in exp)
        # with four betas or more, the exponential must also fit better than a power law
        good = all(f["ci_low"] > 0 and (len(str(f["betas_used"]).split()) < 4
                                        or f["rss_exponential"] < f["rss_power"]) for f in exp)
        verdict = _verdict(good)
    else:
        number, verdict = ("no (n, d) has three betas with a median (of at least ten) within t1", "not checked: "
                           "horizon too short for these betas (raise --t1 or use smaller betas)")
    rows.append({"claim": "tokens stay near configurations of several clusters for a time growing exponentially "
                 "with beta", "source": f"{PAPER}, as this project paraphrases the claim (the exact "
                 "statement, its constants and its setting need its text)", "number": number, "verdict": verdict})
    # 3. the staircase: one energy step per merge
    steps = sum(p["steps"] for p in ok_pts)
    merged = sum(p["steps_with_merge"] for p in ok_pts)
    one = sum(p["steps_one_merge"] for p in ok_pts)
    rows.append({"claim": "the energy climbs a staircase, one step per merge", "source": f"{PAPER}, as this project "
                 "paraphrases the claim (its time rescaling needs the paper's text: the study draws "
                 "tau = ln(1 + t)/beta)",
                 "number": f"{merged} of {steps} energy steps after a metastable plateau end with fewer clusters "
                           f"({one} with exactly one merge)",
                 "verdict": _verdict(merged >= 0.9 * steps) if steps else "not checked: no energy step"})
    # 4. saddle to saddle
    n_cls = sum(p["classified"] for p in ok_pts)
    n_sad = sum(p["strict_saddles"] for p in ok_pts)
    n_ctl = sum(p["controls"] for p in ok_pts)
    n_max = sum(p["control_maxima"] for p in ok_pts)
    if n_cls:
        lo, hi = wilson(n_sad, n_cls)
        number = (f"{n_sad} of {n_cls} metastable plateaus are strict saddles ({n_sad / n_cls:.3f}, 95% "
                  f"[{lo:.3f}, {hi:.3f}]); control: {n_max} of {n_ctl} single-cluster end states are local maxima")
        verdict = _verdict(n_sad >= 0.9 * n_cls and (n_ctl == 0 or n_max >= 0.9 * n_ctl))
    else:
        number, verdict = "no metastable plateau", "not checked: no plateau"
    rows.append({"claim": "the dynamics passes from saddle to saddle (each plateau is a strict saddle of E)",
                 "source": f"{PAPER}, as this project paraphrases the claim", "number": number,
                 "verdict": verdict})
    # 5. the number of metastable clusters grows with beta
    cl = [f for f in fits if f["quantity"] == "first_clusters" and math.isfinite(f["value"])]
    if cl:
        number = "; ".join(f"n={f['n']} d={f['d']}: clusters ~ beta^{f['value']:.3g} [{f['ci_low']:.3g}, "
                           f"{f['ci_high']:.3g}]" for f in cl)
        verdict = _verdict(all(f["ci_low"] > 0 for f in cl))
    else:
        number, verdict = "fewer than two betas with a metastable plateau", "not checked: no plateau"
    rows.append({"claim": "the number of metastable clusters grows with beta", "source": f"{PAPER}; the law the "
                 "paper states needs its text (the study's linearisation on the circle gives k* ~ sqrt(2 beta))",
                 "number": number, "verdict": verdict})
    # 6. collapse to one cluster in infinite time: not decidable at a finite horizon
    single = ", ".join(f"beta={p['beta']:g} d={p['d']}: {p['single_at_t1']:.2f}" for p in ok_pts)
    rows.append({"claim": "the tokens collapse to a single cluster in infinite time", "source": PAPER,
                 "number": f"fraction in one cluster at t1: {single}",
                 "verdict": "not checked: a finite horizon cannot show a limit"})
    return rows


def _verdict(ok: bool) -> str:
    return "pass" if ok else "fail"


# ---------------------------------------------------------------- output
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


def _write(out: Path, cfg: MetastabilityConfig, tables: dict, shown: dict, ts: np.ndarray, seconds: float,
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
          "## Claims", "", "| claim | measured | verdict | source |", "|---|---|---|---|"]
    for c in tables["claims"]:
        L.append(f"| {md_cell(c['claim'])} | {md_cell(c['number'])} | **{md_cell(c['verdict'])}** | "
                 f"{md_cell(c['source'])} |")
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


__all__ = ["DYNAMICS", "TABLES", "Config", "MetastabilityConfig", "claims", "condition_summary", "d1_steps",
           "linear_mode", "load_tables", "run", "time_grid", "trajectories"]
