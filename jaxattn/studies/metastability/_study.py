"""The metastability study's run: the dynamics from random starts, what each condition shows, the Hessians
at the plateaus."""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.clusters import count_clusters
from jaxattn.analysis.energy import classify, energy
from jaxattn.analysis.plateaus import plateaus
from jaxattn.dynamics import named_dtype
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.discrete import D1, simulate
from jaxattn.dynamics.fields import C2
from jaxattn.dynamics.options import Save
from jaxattn.model.paper import paper_model
from jaxattn.model.sampling import init_tokens
from jaxattn.studies.metastability._claims import claims
from jaxattn.studies.metastability._config import MetastabilityConfig
from jaxattn.studies.metastability._report import write
from jaxattn.studies.metastability._tables import energy_rows, fit_rows, plateau_rows, point_row
from jaxattn.studies.skeleton import own_run_in_float64

#: Bytes of saved states one block of conditions may hold (the block is solved and analysed, then dropped).
BLOCK_BYTES = 64 * 2**20
#: Bytes of Hessians classified at once.
HESSIAN_BYTES = 128 * 2**20


def time_grid(cfg: MetastabilityConfig) -> np.ndarray:
    """The saved times: 0, then ``saves`` logarithmically spaced from ``t_min`` to ``t1`` (for D1, rounded to
    whole steps, see :func:`d1_steps`)."""
    if cfg.dynamics == "D1":
        return d1_steps(cfg) * cfg.alpha
    return np.concatenate([[0.0], np.geomspace(cfg.t_min, cfg.t1, cfg.saves)])


def d1_steps(cfg: MetastabilityConfig) -> np.ndarray:
    """D1's saved steps: 0, then the logarithmic grid rounded to whole steps (repeated values dropped)."""
    total = max(round(cfg.t1 / cfg.alpha), 1)
    grid = np.geomspace(max(cfg.t_min / cfg.alpha, 1.0), total, cfg.saves)
    return np.concatenate([[0], np.unique(np.maximum(np.round(grid), 1).astype(np.int64))])


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
    else:  # one program saving the states at the grid's steps
        steps = d1_steps(cfg)
        sim = simulate(model, jnp.asarray(X0, dtype), int(steps[-1]), dynamics=D1, alpha=cfg.alpha, beta=beta,
                       save=Save(steps=steps, observe=_nothing, trajectory=True), dtype=dtype)
        traj = np.asarray(sim.trajectory, np.float64)
        ok = np.asarray(sim.ok)
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
                tables["plateaus"] += plateau_rows(n, d, beta, conds, kinds)
                tables["energy"] += energy_rows(n, d, beta, ts, y_all, k_all)
                tables["points"].append(point_row(n, d, beta, cfg, conds, kinds, controls, failed, k_all))
                points[(n, d, beta)] = conds
    for n in cfg.n:
        for d in cfg.dims:
            tables["fits"] += fit_rows(n, d, cfg, points, tables["plateaus"])
    tables["claims"] = claims(tables, dtype=cfg.dtype)
    write(out, cfg, tables, shown, ts, time.perf_counter() - started, say)
    return tables
