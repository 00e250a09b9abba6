"""The equilibria and stability study behind ``jaxattn stability`` (see docs/stability.md).

Four parts, written into one run directory (``config.json``, CSV tables, PNG figures, ``report.md``):

1. **How many stable equilibria** (``counts.csv``, ``counts_summary.csv``): for random single-head
   models with a symmetric value matrix (``V = (G + Gᵀ)/2``, ``G`` Gaussian with variance ``1/d``;
   ``Q``, ``K`` Gaussian), every consensus and bipartite consensus at every eigenvector of ``V``
   (every sign pattern up to the global flip for ``n <= exhaustive_max``, a random sample of patterns
   above), each linearised with ``jax.jacfwd`` and classified, next to the closed-form conditions of
   :func:`jaxattn.analysis.stability.single_head_conditions`; for the map (D2, step ``alpha``) and the flow
   (C2), the same models for both.
2. **A stable bipartite equilibrium with a small basin** (``perturbation.csv``): among ``search``
   random models (``d = 3``), the stable bipartite consensus of the map with the weakest attraction
   (spectral radius closest to 1, yet fast enough to settle within ``steps``) is perturbed by random
   perturbations of growing size, and each perturbed start is run to its end: small perturbations
   return, larger ones escape.
3. **Trajectories on the sphere** (``trajectories.csv``), ``d = 3``, ``n = 10``: one head with
   ``O = I`` and three heads with the same layer matrix ``F`` (symmetric, eigenvalues 1, 0.4, −0.6),
   ``β = 1``, from the same random tokens; the mean correlation ``|<x_i, v_1>|`` at every step.
4. **Where the dynamics ends** (``basins.csv``): ``basin_num`` random initial conditions of the
   example model run to their end, map and flow, with basin fractions and Wilson 95% intervals.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.stability import (
    System,
    basins,
    classify,
    eigen_equilibria,
    linearisation_bytes,
    linearise,
    residual,
    settle,
    sign_patterns,
    single_head_conditions,
)
from jaxattn.analysis.stats import wilson
from jaxattn.config import non_negative, option, positive
from jaxattn.config import seed as seed_check
from jaxattn.dynamics.discrete import D1, D3, simulate
from jaxattn.dynamics.fields import C2, C2_OJA
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import ConfigError
from jaxattn.io.results import atomic_write_text, provenance, write_json
from jaxattn.model.params import Model
from jaxattn.model.sampling import init_tokens, random_model
from jaxattn.studies import plots
from jaxattn.studies.skeleton import (
    check_options,
    csv_text,
    md_cell,
    own_run_in_float64,
    refuse_inert,
    write_report,
)
from jaxattn.studies.verdicts import assumed

TIMES = ("discrete", "continuous", "both")
TRAJECTORY_SPECTRUM = (1.0, 0.4, -0.6)
#: Host memory one model's linearisations may take (:func:`jaxattn.analysis.stability.linearisation_bytes`).
MEMORY_LIMIT = 4 * 2**30


def _on_sphere(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (tokens on a sphere)"


def _tokens(v) -> str | None:
    return None if 2 <= v <= 64 else "must be between 2 and 64"


def _bipartite(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (a bipartite split needs two tokens)"


@dataclasses.dataclass
class StabilityConfig:
    """The stability study's options (those of ``jaxattn stability``, see :mod:`jaxattn.config`)."""

    seed: int = option(0, "random seed", check=seed_check)
    d: int = option(3, "token dimension of the counts", check=_on_sphere)
    tokens: Sequence[int] = option([3, 4, 5], "numbers of tokens n of the counts", check=_tokens)
    models: int = option(20, "random models per n", check=positive)
    exhaustive_max: int = option(10, "every sign pattern up to this n, random ones above", check=positive)
    patterns: int = option(128, "random sign patterns per model above --exhaustive-max", check=positive)
    alpha: float = option(0.5, "step of the map", check=positive)
    beta: float = option(4.0, "inverse temperature of the attention", check=positive)  # counts, example, basins
    time: str = option("both", "'discrete' (the map), 'continuous' (the flow) or 'both'", choices=TIMES)
    basin_num: int = option(200, "initial conditions of the basin table", check=positive)
    basin_n: int = option(5, "tokens of the example model and its basins", check=_bipartite)
    steps: int = option(300, "map steps run to the end", check=positive)
    # the map with α = 0.5 covers t = 150 in 300 steps
    t1: float = option(150.0, "flow time run to the end", check=positive)
    perturb_num: int = option(8, "random perturbations per size", check=positive)
    search: int = option(50, "models searched for a stable bipartite equilibrium", check=positive)
    figures: bool = option(True, "write PNG figures")
    multi_head_models: int = option(0, "also count the equilibria of this many multi-head models per n (--heads "
                                    "heads, symmetric layer matrix; multi_head_counts.csv)", check=non_negative)
    heads: int = option(3, "heads of the multi-head counts (must divide d)", check=positive)
    oja: bool = option(False, "also count the equilibria of the multi-agent Oja system (uniform attention, the same "
                       "models; oja_counts.csv)")
    basin_models: int = option(0, "random models (d = 3, n = basin_n) run from random starts each, their ends "
                               "tallied by eigenvector (model_basins.csv)", check=non_negative)
    basin_starts: int = option(64, "random starts per model of --basin-models, of the multi-head models and of the "
                               "Oja models run from random starts", check=positive)
    beta_sweep_models: int = option(0, "also count the stable equilibria of this many of the counts' models at n = "
                                    "--beta-sweep-n for every β of --beta-sweep, the map (beta_sweep.csv: the "
                                    "bifurcations with the attention weighting)", check=non_negative)
    beta_sweep: Sequence[float] = option([0.05, 0.25, 1.0, 2.0, 4.0, 8.0, 16.0], "inverse temperatures of the β sweep",
                                         check=positive)
    beta_sweep_n: int = option(5, "tokens of the β sweep", check=_bipartite)

    def check(self) -> None:
        """Every option checked against its declaration, then what no single option says: options that change
        nothing (:meth:`inert`), the memory the linearisations of one model take (one :class:`ConfigError`
        line, before any work)."""
        check_options(self)
        refuse_inert(self, self.inert())
        self._check_memory()
        self._check_heads()

    def inert(self) -> dict[str, str]:
        """The options that change nothing with the others, each with the reason (refused when set)."""
        inert = {"t1": "time = 'discrete' (t1 is the flow's time)"} if self.time == "discrete" else {}
        if not self.multi_head_models:
            inert["heads"] = "multi_head_models = 0 (heads is the multi-head counts' number of heads)"
        if not self.beta_sweep_models:
            inert["beta_sweep"] = inert["beta_sweep_n"] = "beta_sweep_models = 0 (no β sweep is run)"
        if not self.basin_models and not self.multi_head_models:
            inert["basin_starts"] = ("basin_models = 0 and multi_head_models = 0 (basin_starts is the starts of each "
                                     "of those models)")
        return inert

    def _check_memory(self) -> None:
        """Every candidate equilibrium of one model is linearised at once: refuse sizes that cannot fit
        (``2^(n-1)`` sign patterns up to ``exhaustive_max``) before anything runs, with the number. The
        counts use ``d``; the search for a bipartite equilibrium ``basin_n`` tokens in 3 dimensions."""
        for name, n, d in [*(("tokens n", n, self.d) for n in self.ns()), ("basin_n", self.basin_n, 3)]:
            patterns = 2 ** (n - 1) if n <= self.exhaustive_max else self.patterns + 1
            size = linearisation_bytes(patterns * d, n, d)
            if size > MEMORY_LIMIT:
                how = (f"all 2^{n - 1} = {patterns:,} sign patterns (n <= exhaustive_max = {self.exhaustive_max})"
                       if n <= self.exhaustive_max else f"{patterns:,} sign patterns")
                raise ConfigError(f"{name} = {n} with d = {d}: {how} x {d} eigenvectors need about "
                                  f"{size / 2**30:,.1f} GiB per model (limit {MEMORY_LIMIT / 2**30:g} GiB); lower "
                                  "exhaustive_max (random patterns above it), patterns or the number of tokens")

    def _check_heads(self) -> None:
        if self.multi_head_models and self.d % self.heads:
            raise ConfigError(f"heads = {self.heads} must divide d = {self.d} for the multi-head counts")

    def ns(self) -> list[int]:
        """The numbers of tokens of the counts, each once, in order."""
        return sorted(set(self.tokens))

    def times(self) -> list[str]:
        return ["discrete", "continuous"] if self.time == "both" else [self.time]


def random_symmetric_single_head(key, d: int) -> Model:
    """One head, ``O = I``, Gaussian ``Q, K`` (variance ``1/d``), ``V = (G + Gᵀ)/2`` with ``G`` likewise."""
    kg, km = jax.random.split(key)
    g = jax.random.normal(kg, (d, d), jnp.float64) / np.sqrt(d)
    m = random_model(km, d, 1, unit_output=True, dtype=jnp.float64)
    return m.replace(layers=m.layers.replace(v=((g + g.T) / 2)[None, None]))


def _system(model: Model, time: str, cfg: StabilityConfig, beta=None, oja: bool = False) -> System:
    """The map (D2, or D3 with ``oja``: uniform attention) or the flow (C2, or the Oja flow) of ``model``."""
    beta = cfg.beta if beta is None else beta
    if time == "discrete":
        return System(model, D3 if oja else D1, cfg.alpha, beta)
    return System(model, C2_OJA if oja else C2, 1.0, beta)


def random_symmetric_multi_head(key, d: int, heads: int) -> Model:
    """``heads`` heads with Gaussian ``Q, K`` and value/output blocks whose layer matrix ``F = Σ_h O_h V_h`` is
    ``(G + Gᵀ)/2`` (``G`` Gaussian with variance ``1/d``), the spectrum of :func:`random_symmetric_single_head`."""
    kg, km = jax.random.split(key)
    g = np.asarray(jax.random.normal(kg, (d, d), jnp.float64)) / np.sqrt(d)
    return random_model(km, d, heads, value="symmetric", spectrum=np.linalg.eigvalsh((g + g.T) / 2),
                        dtype=jnp.float64)


def _patterns(n: int, cfg: StabilityConfig, key) -> tuple[np.ndarray, str]:
    if n <= cfg.exhaustive_max:
        return sign_patterns(n), "exhaustive"
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    rest = rng.choice([1, -1], size=(cfg.patterns, n - 1))
    pats = np.concatenate([np.ones((cfg.patterns, 1), np.int64), rest], axis=1)
    pats = np.unique(np.concatenate([np.ones((1, n), np.int64), pats]), axis=0)[::-1]  # consensus first
    return pats, "sampled"


def count_stable(model: Model, n: int, time: str, cfg: StabilityConfig, patterns: np.ndarray, oja: bool = False):
    """Classify every candidate equilibrium of one model: numerical Jacobian next to the closed form (one head;
    a multi-head model has no closed form: its ``analytic_stable`` and ``agree`` are -1).

    Returns ``(row, candidates, linearisation, analytic)``; candidates that are not fixed points of the
    map (``1 + αλ s_i c_i <= 0`` for some token, or a bipartite split the heads do not hold) are left out.
    The row also counts the stable equilibria at the principal eigenvector ``v1`` and at the others, and
    records the step bound of the consensus theorem (``α < 2/(|λ_d| − λ_1)`` when ``|λ_d| > λ_1``).
    """
    sy = _system(model, time, cfg, oja=oja)
    cand = eigen_equilibria(sy.layer_matrix(), n, patterns=patterns)
    r = residual(sy, cand.X)
    keep = r < 1e-10
    one_head = model.n_heads == 1
    an = ([single_head_conditions(sy, int(k), s) for k, s in zip(cand.k[keep], cand.signs[keep], strict=True)]
          if one_head else [])
    lin = linearise(sy, cand.X[keep])
    cons = cand.is_consensus[keep]
    principal = cand.k[keep] == 0
    stable = lin.stable
    astable = np.array([a.stable for a in an], bool)
    lam = np.sort(cand.eigvals.real)
    negative = cand.eigvals.real[cand.k[keep]] < 0  # candidates at an eigenvector of a negative eigenvalue
    # w = β·scale·vᵀQᵀKv >= 0: a token weighs its own group at least as much as the antipodal one, so c_+ > 0 for
    # the larger group and 1 + αλc_+ < 1 at λ < 0 (the reading under which Remark 10's argument goes through)
    w_nonneg = np.array([a.w >= 0 for a in an], bool) if one_head else np.zeros(int(keep.sum()), bool)
    row = {"time": time, "n": n, "lambda_1": float(lam[-1]), "lambda_d": float(lam[0]),
           "alpha_bound": float(2 / (abs(lam[0]) - lam[-1])) if abs(lam[0]) > lam[-1] else float("inf"),
           "candidates": int(keep.sum()), "not_fixed": int((~keep).sum()), "stable": int(stable.sum()),
           "stable_consensus": int((stable & cons).sum()), "stable_bipartite": int((stable & ~cons).sum()),
           "stable_consensus_v1": int((stable & cons & principal).sum()),
           "stable_consensus_other": int((stable & cons & ~principal).sum()),
           "stable_bipartite_v1": int((stable & ~cons & principal).sum()),
           "stable_bipartite_other": int((stable & ~cons & ~principal).sum()),
           "analytic_stable": int(astable.sum()) if one_head else -1,
           "agree": int((astable == stable).sum()) if one_head else -1,
           "marginal": int((lin.status == "marginal").sum()),
           # Remark 10 (power-method paper, Supp.): a bipartite equilibrium at a negative eigenvalue is never stable;
           # the same counted where w >= 0 (one head; -1 where there is no closed form)
           "bipartite_negative": int((~cons & negative).sum()),
           "stable_bipartite_negative": int((stable & ~cons & negative).sum()),
           "bipartite_negative_w_nonneg": int((~cons & negative & w_nonneg).sum()) if one_head else -1,
           "stable_bipartite_negative_w_nonneg": int((stable & ~cons & negative & w_nonneg).sum()) if one_head else -1}
    return row, dataclasses.replace(cand, X=cand.X[keep], k=cand.k[keep], signs=cand.signs[keep]), lin, an


#: The study's public shape (as every study's): ``Config`` and ``run``.
Config = StabilityConfig


def run(out_dir, config: StabilityConfig | None = None, *, model=None, model_name: str = "model",
        progress=None) -> dict:
    """Run the study into ``out_dir``; returns the tables (lists of row dicts). ``config`` defaults to ``Config()``;
    the study draws its own models, so ``model`` must be left out. ``progress(message)`` receives the stage
    messages. Runs in float64 (Jacobians at 1e-10 and residuals at 1e-7 need it) inside a scoped
    ``jax.enable_x64``: the caller's ``jax_enable_x64`` is left as it was."""
    return own_run_in_float64("stability", StabilityConfig, config, model, out_dir, progress, _run)



def _run(out: Path, cfg: StabilityConfig, say) -> dict:
    key = jax.random.key(cfg.seed)
    tables: dict = {"counts": [], "counts_summary": [], "perturbation": [], "basins": [], "trajectories": [],
                    "multi_head_counts": [], "oja_counts": [], "model_basins": [],
                    "multi_head_basins": [], "oja_basins": [], "beta_sweep": []}
    # 1. counts
    hist: dict = {}
    for n in cfg.ns():
        pats, mode = _patterns(n, cfg, jax.random.fold_in(key, 10_000 + n))
        for time in cfg.times():
            say(f"counts: n = {n}, {time}, {cfg.models} models x {len(pats)} sign patterns x {cfg.d} eigenvectors")
            rows = []
            for i in range(cfg.models):
                m = random_symmetric_single_head(jax.random.fold_in(jax.random.fold_in(key, n), i), cfg.d)
                row, *_ = count_stable(m, n, time, cfg, pats)
                rows.append({"model": i, "mode": mode, **row})
            tables["counts"] += rows
            s = np.array([r["stable"] for r in rows])
            hist[(time, n)] = s
            tables["counts_summary"].append({
                "time": time, "n": n, "mode": mode, "patterns": len(pats), "models": cfg.models,
                "mean_stable": float(s.mean()), "max_stable": int(s.max()),
                "multistable": float(np.mean(s > 1)),
                "with_stable_bipartite": float(np.mean([r["stable_bipartite"] > 0 for r in rows])),
                "mean_fraction_stable": float(np.mean([r["stable"] / max(r["candidates"], 1) for r in rows])),
                "agreement": f"{sum(r['agree'] for r in rows)}/{sum(r['candidates'] for r in rows)}"})
    # 1b. the same counts for multi-head models and for the multi-agent Oja system (uniform attention)
    for n in cfg.ns():
        pats, mode = _patterns(n, cfg, jax.random.fold_in(key, 10_000 + n))
        for time in cfg.times():
            if cfg.multi_head_models:
                say(f"multi-head counts: n = {n}, {time}, {cfg.multi_head_models} models x {cfg.heads} heads")
                for i in range(cfg.multi_head_models):
                    m = random_symmetric_multi_head(jax.random.fold_in(jax.random.fold_in(key, 70_000 + n), i), cfg.d,
                                                    cfg.heads)
                    row, *_ = count_stable(m, n, time, cfg, pats)
                    tables["multi_head_counts"].append({"model": i, "heads": cfg.heads, "mode": mode, **row})
            if cfg.oja:
                say(f"Oja counts: n = {n}, {time}, {cfg.models} models (uniform attention)")
                for i in range(cfg.models):
                    m = random_symmetric_single_head(jax.random.fold_in(jax.random.fold_in(key, n), i), cfg.d)
                    row, *_ = count_stable(m, n, time, cfg, pats, oja=True)
                    tables["oja_counts"].append({"model": i, "mode": mode, **row})
    # 2. the stable bipartite example
    say(f"searching {cfg.search} models (d = 3, n = {cfg.basin_n}) for the weakest stable bipartite equilibrium")
    example = _find_bipartite(cfg, jax.random.fold_in(key, 20_000))
    perturb_traj = {}
    if example is not None:
        model, X_eq, label, _ = example
        sy = _system(model, "discrete", cfg)
        eps_grid = np.geomspace(1e-3, 1.0, 10)
        say(f"perturbing {label} ({cfg.perturb_num} perturbations x {len(eps_grid)} sizes)")
        # every size in one batch: one settle and one classification (settle keeps a fixed compiled width,
        # so each end state is what a batch of one size would give)
        X0 = np.concatenate([_perturb(X_eq, eps, cfg.perturb_num, jax.random.fold_in(key, 30_000 + j))
                             for j, eps in enumerate(eps_grid)])
        all_ends = classify(sy, settle(sy, X0, steps=cfg.steps))
        # how far a perturbation of size ε moves a token on the sphere, in degrees (mean over the tokens)
        angles = np.degrees(np.arccos(np.clip(np.sum(X0 * X_eq[None], axis=-1), -1.0, 1.0))).reshape(
            len(eps_grid), -1).mean(axis=1)
        for j, eps in enumerate(eps_grid):
            ends = all_ends[j * cfg.perturb_num:(j + 1) * cfg.perturb_num]
            ret = sum(t.group == label for t in ends)
            cons = sum(t.kind == "consensus" for t in ends)
            lo, hi = wilson(ret, len(ends))
            tables["perturbation"].append({"eps": float(eps), "returned": ret, "to_consensus": cons,
                                           "other": len(ends) - ret - cons, "total": len(ends),
                                           "returned_fraction": ret / len(ends), "ci_low": lo, "ci_high": hi,
                                           "angle_deg": float(angles[j]), "label": label})
        if cfg.figures:
            small = tables["perturbation"][0]["eps"]
            escaped = [r["eps"] for r in tables["perturbation"] if r["returned"] < r["total"]]
            big = escaped[0] if escaped else tables["perturbation"][-1]["eps"]
            for name, eps in (("small", small), ("large", big)):
                X0 = _perturb(X_eq, eps, 1, jax.random.fold_in(key, 40_000))
                perturb_traj[name] = (eps, _trajectory(model, D1, X0, cfg.steps, cfg.alpha, cfg.beta), X_eq[0])
    # 3. trajectories on the sphere, one head and three heads
    say("trajectories on the sphere, d = 3, n = 10")
    traj = {}
    kt = jax.random.fold_in(key, 50_000)
    T0 = init_tokens(jax.random.fold_in(kt, 1), 1, 10, 3, dtype=jnp.float64)
    for name, heads in (("single_head", 1), ("multi_head", 3)):
        m = random_model(jax.random.fold_in(kt, 0), 3, heads, value="symmetric", spectrum=TRAJECTORY_SPECTRUM,
                         unit_output=heads == 1, dtype=jnp.float64)
        v1 = np.linalg.eigh(System(m, D1).layer_matrix())[1][:, -1]
        path = _trajectory(m, D1, T0, 200, cfg.alpha, 1.0)  # [T, n, 3]
        rho = np.abs(path @ v1)
        end = classify(System(m, D1, cfg.alpha, 1.0), path[-1:])[0]
        traj[name] = (path, v1)
        for k in range(path.shape[0]):
            tables["trajectories"].append({"model": name, "step": k, "rho_mean": float(rho[k].mean()),
                                           "rho_min": float(rho[k].min()), "end": end.label})
    # 4. basins of the example model (or of the first counted model if no example was found)
    bmodel = example[0] if example is not None else random_symmetric_single_head(jax.random.fold_in(key, 20_000), 3)
    for time in cfg.times():
        say(f"basins: {cfg.basin_num} initial conditions, n = {cfg.basin_n}, {time}")
        res = basins(_system(bmodel, time, cfg), cfg.basin_num, cfg.basin_n, jax.random.fold_in(key, 60_000),
                        steps=cfg.steps, t1=cfg.t1)
        tables["basins"] += [{"time": time, **r} for r in res.table]
    # 5. other models: where random starts end, by eigenvector (a stable end off v1 is searched for here)
    if cfg.basin_models:
        say(f"ends of {cfg.basin_starts} random starts in each of {cfg.basin_models} models (n = {cfg.basin_n})")
        tables["model_basins"] = model_basins(cfg, jax.random.fold_in(key, 80_000))
    # 6. the multi-head models counted above, run from random starts: "no stable bipartite consensus is observed"
    # is a statement about where simulations end, not about which candidates are fixed points of the map
    if cfg.multi_head_models:
        say(f"ends of {cfg.basin_starts} random starts in each multi-head model ({cfg.multi_head_models} per n)")
        tables["multi_head_basins"] = counted_basins(cfg, key, "multi_head")
    # 7. the bifurcations with β: the same models' stable equilibria counted at every β of the sweep
    if cfg.beta_sweep_models:
        n = cfg.beta_sweep_n
        pats, mode = _patterns(n, cfg, jax.random.fold_in(key, 10_000 + n))
        say(f"β sweep: {cfg.beta_sweep_models} models, n = {n}, β in {', '.join(f'{b:g}' for b in cfg.beta_sweep)}")
        for beta in cfg.beta_sweep:
            swept = dataclasses.replace(cfg, beta=float(beta))
            for i in range(cfg.beta_sweep_models):
                m = random_symmetric_single_head(jax.random.fold_in(jax.random.fold_in(key, n), i), cfg.d)
                row, *_ = count_stable(m, n, "discrete", swept, pats)
                tables["beta_sweep"].append({"beta": float(beta), "model": i, "mode": mode, **row})
    # 8. the Oja system from random starts (Theorem 2: convergence to ±v1 from almost every start), in the first
    # basin_models of its counted models
    if cfg.oja and cfg.basin_models:
        say(f"ends of {cfg.basin_starts} random starts of the Oja system in {min(cfg.basin_models, cfg.models)} models "
            "per n")
        tables["oja_basins"] = counted_basins(cfg, key, "oja")
    _write(out, cfg, tables, hist, example, perturb_traj, traj)
    return tables


def model_basins(cfg: StabilityConfig, key) -> list[dict]:
    """For ``cfg.basin_models`` random models (d = 3, ``basin_n`` tokens), the ends of ``cfg.basin_starts``
    random starts of the map, counted by class and eigenvector: one row per (model, end), with how many of the
    model's candidate equilibria at that eigenvector are stable (the Jacobian)."""
    rows = []
    for i in range(cfg.basin_models):
        m = random_symmetric_single_head(jax.random.fold_in(key, i), 3)
        sy = _system(m, "discrete", cfg)
        res = basins(sy, cfg.basin_starts, cfg.basin_n, jax.random.fold_in(key, 1_000_000 + i), steps=cfg.steps)
        pats = sign_patterns(cfg.basin_n) if cfg.basin_n <= cfg.exhaustive_max else \
            _patterns(cfg.basin_n, cfg, jax.random.fold_in(key, 2_000_000 + i))[0]
        row, cand, lin, _ = count_stable(m, cfg.basin_n, "discrete", cfg, pats)
        stable_k = {int(k) + 1: int((lin.stable & (cand.k == k)).sum()) for k in range(3)}
        for end in _ends(res, cfg.basin_starts):
            k = end["eigenvector"]
            rows.append({"model": i, **end, "stable_at_eigenvector": stable_k.get(k, -1) if k else -1,
                         "stable_v1": stable_k[1], "stable_other": stable_k[2] + stable_k[3],
                         "lambda_1": row["lambda_1"]})
    return rows


def _ends(res, starts: int) -> list[dict]:
    """One row per end of :func:`jaxattn.analysis.basins`'s table: its class (consensus, bipartite, clustering,
    polygonal, not converged), its eigenvector (1-based; 0 for none), how many of the ``starts`` end there, with
    the 95% interval of their fraction."""
    rows = []
    for t in res.table:
        ends = [e for e in res.terminals if e.group == t["end"]]
        rows.append({"end": t["end"], "kind": ends[0].kind if ends else "", "eigenvector": ends[0].k if ends else 0,
                     "count": t["count"], "starts": starts, "fraction": t["fraction"], "ci_low": t["ci_low"],
                     "ci_high": t["ci_high"]})
    return rows


def counted_basins(cfg: StabilityConfig, key, which: str) -> list[dict]:
    """Models of the counts (the same keys) run by the map from ``cfg.basin_starts`` random starts at every ``n`` of
    the counts: ``which="multi_head"`` the multi-head models, ``"oja"`` the first ``basin_models`` single-head models
    under uniform attention. One row per (n, model, end) with the end's class (consensus, bipartite, clustering,
    polygonal, not converged) and eigenvector (0 for none)."""
    rows = []
    for n in cfg.ns():
        if which == "multi_head":
            models = [(i, random_symmetric_multi_head(jax.random.fold_in(jax.random.fold_in(key, 70_000 + n), i),
                                                      cfg.d, cfg.heads)) for i in range(cfg.multi_head_models)]
        else:
            models = [(i, random_symmetric_single_head(jax.random.fold_in(jax.random.fold_in(key, n), i), cfg.d))
                      for i in range(min(cfg.basin_models, cfg.models))]
        for i, m in models:
            seed = jax.random.fold_in(jax.random.fold_in(key, (90_000 if which == "multi_head" else 95_000) + n), i)
            res = basins(_system(m, "discrete", cfg, oja=which == "oja"), cfg.basin_starts, n, seed, steps=cfg.steps)
            heads = cfg.heads if which == "multi_head" else 1
            rows += [{"n": n, "model": i, "heads": heads, **end} for end in _ends(res, cfg.basin_starts)]
    return rows


def _find_bipartite(cfg: StabilityConfig, key):
    """Among ``cfg.search`` random models (d = 3), the stable bipartite consensus of the map whose intrinsic
    Jacobian has the spectral radius closest to 1 (the weakest attraction, where small basins are
    expected) while a perturbation still decays by 1e-5 within ``cfg.steps`` steps (radius at most
    ``1e-5 ** (1/steps)``, so that returning starts are recognised as converged):
    ``(model, X, group label, spectral radius)``, or ``None`` if no model has one."""
    n = cfg.basin_n
    cap = 1e-5 ** (1.0 / cfg.steps)
    best = None
    for i in range(cfg.search):
        m = random_symmetric_single_head(jax.random.fold_in(key, i), 3)
        pats = sign_patterns(n) if n <= cfg.exhaustive_max else _patterns(n, cfg, jax.random.fold_in(key, i))[0]
        _, cand, lin, _ = count_stable(m, n, "discrete", cfg, pats)
        ok = lin.stable & ~cand.is_consensus & (lin.growth <= cap)
        if ok.any():
            j = int(np.flatnonzero(ok)[np.argmax(lin.growth[ok])])
            if best is None or lin.growth[j] > best[3]:
                s = cand.signs[j]
                p, q = int((s > 0).sum()), int((s < 0).sum())
                best = (m, np.asarray(cand.X[j]), f"bipartite v{int(cand.k[j]) + 1} {max(p, q)}|{min(p, q)}",
                        float(lin.growth[j]))
    return best


def _perturb(X: np.ndarray, eps: float, num: int, key) -> np.ndarray:
    """``num`` copies of ``X`` with Gaussian perturbations of norm ``eps`` per token, renormalised."""
    g = np.array(jax.random.normal(key, (num, *X.shape), jnp.float64))
    g *= eps / np.linalg.norm(g, axis=-1, keepdims=True)
    Y = X[None] + g
    return Y / np.linalg.norm(Y, axis=-1, keepdims=True)


def _trajectory(model: Model, dyn, X0, steps: int, alpha: float, beta: float) -> np.ndarray:
    sim = simulate(model, jnp.asarray(X0)[:1], steps, dynamics=dyn, alpha=alpha, beta=beta,
                   save=Save(trajectory=True), batch=Batch(path="plain"), dtype=jnp.float64)
    assert sim.trajectory is not None
    return np.asarray(sim.trajectory[0])




def _write(out: Path, cfg: StabilityConfig, tables, hist, example, perturb_traj, traj) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        if rows:
            atomic_write_text(out / f"{name}.csv", csv_text(rows))
    write_json(out / "config.json", {"command": "stability", "config": dataclasses.asdict(cfg), **provenance()})
    L_extra = _extra_sections(tables)
    # the claims' figures are drawn from the tables just written, as they are for a run made by an earlier version
    figs = _figures(out, cfg, tables, hist, perturb_traj, traj) + claim_figures(out) if cfg.figures else []
    L = ["# Equilibria and stability", "",
         f"Single-head models with a random symmetric value matrix, d = {cfg.d}, inverse temperature β = {cfg.beta:g}; "
         f"the map is D2 with step α = {cfg.alpha:g}, the flow is C2. Equilibria are counted up to the global flip "
         "X → −X (an antipodal pair counts once).", "",
         "## How many stable equilibria", "",
         "Every consensus and bipartite consensus at every eigenvector of V (candidates that are not fixed points of "
         "the map are left out), linearised numerically; `analytic = numerical` counts the equilibria on which the "
         "closed-form single-head conditions give the same verdict as the Jacobian. In `sampled` mode (n above "
         f"{cfg.exhaustive_max}) the counts are over consensus and up to {cfg.patterns} random sign patterns per "
         "eigenvector; the "
         "fraction of stable candidates estimates the share among all of them.", "",
         "| time | n | mode | mean stable | max stable | multistable models | with a stable bipartite "
         "| analytic = numerical | fraction of candidates stable |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in tables["counts_summary"]:
        L.append(f"| {r['time']} | {r['n']} | {r['mode']} | {r['mean_stable']:.2f} | {r['max_stable']} | "
                 f"{r['multistable']:.2f} | {r['with_stable_bipartite']:.2f} | {r['agreement']} | "
                 f"{r['mean_fraction_stable']:.3f} |")
    L += ["", "## A stable bipartite equilibrium and the size of its basin", ""]
    if example is None:
        L.append(f"No stable bipartite consensus was found among {cfg.search} random models (d = 3, "
                 f"n = {cfg.basin_n}, β = {cfg.beta:g}).")
    else:
        _, _, label, growth = example
        L += [f"Equilibrium `{label}` of the map, spectral radius of its intrinsic Jacobian {growth:.6f} (< 1: locally "
              f"stable). Random perturbations of norm ε per token, each run {cfg.steps} steps:", "",
              "| ε | returned | to consensus | other | returned fraction [95% CI] |", "|---|---|---|---|---|"]
        for r in tables["perturbation"]:
            L.append(f"| {r['eps']:.3g} | {r['returned']} | {r['to_consensus']} | {r['other']} | "
                     f"{r['returned_fraction']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] |")
    L += ["", "## Trajectories on the sphere (d = 3, n = 10, β = 1)", "",
          f"| model | mean {md_cell('|<x_i, v_1>|')} at step 0 | at the end | end |", "|---|---|---|---|"]
    for name in ("single_head", "multi_head"):
        rows = [r for r in tables["trajectories"] if r["model"] == name]
        L.append(f"| {name} | {rows[0]['rho_mean']:.4f} | {rows[-1]['rho_mean']:.6f} | {md_cell(rows[-1]['end'])} |")
    L += ["", f"## Where the dynamics ends ({cfg.basin_num} random initial conditions, n = {cfg.basin_n})", "",
          "| time | end | count | fraction | 95% CI |", "|---|---|---|---|---|"]
    for r in tables["basins"]:
        L.append(f"| {r['time']} | {md_cell(r['end'])} | {r['count']} | {r['fraction']:.3f} | "
                 f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] |")
    write_report(out, L + L_extra, figs)


def _extra_sections(tables) -> list[str]:
    """The report's sections on the multi-head counts, the Oja system and the other models' ends."""
    L: list[str] = []
    for name, title in (("multi_head_counts", "Multi-head models"), ("oja_counts", "The multi-agent Oja system")):
        rows = tables[name]
        if not rows:
            continue
        L += ["", f"## {title}", "", "| time | n | models | mean stable | stable consensus at v1 | stable consensus "
              "elsewhere | stable bipartite at v1 | stable bipartite elsewhere | candidates that are not fixed "
              "points |",
              "|---|---|---|---|---|---|---|---|---|"]
        for (time, n), group in _groups(rows, ("time", "n")).items():
            L.append(f"| {time} | {n} | {len(group)} | {np.mean([r['stable'] for r in group]):.2f} | "
                     + " | ".join(str(sum(r[c] for r in group)) for c in (
                         "stable_consensus_v1", "stable_consensus_other", "stable_bipartite_v1",
                         "stable_bipartite_other", "not_fixed")) + " |")
    if tables["beta_sweep"]:
        L += ["", "## The stable equilibria against β (the map)", "",
              "| β | models | mean stable | stable consensus at v1 | stable consensus elsewhere | stable bipartite "
              "at v1 | stable bipartite elsewhere |", "|---|---|---|---|---|---|---|"]
        for (beta,), group in _groups(tables["beta_sweep"], ("beta",)).items():
            L.append(f"| {beta:g} | {len(group)} | {np.mean([r['stable'] for r in group]):.2f} | "
                     + " | ".join(str(sum(r[c] for r in group)) for c in (
                         "stable_consensus_v1", "stable_consensus_other", "stable_bipartite_v1",
                         "stable_bipartite_other")) + " |")
    for name, title in (("multi_head_basins", "the multi-head models"), ("oja_basins", "the Oja system")):
        if not tables[name]:
            continue
        L += ["", f"## Where random starts end in {title}", "",
              "| n | models | starts | consensus at ±v1 | other consensus | bipartite | clustering | polygonal | "
              "not converged |", "|---|---|---|---|---|---|---|---|---|"]
        for (n,), group in _groups(tables[name], ("n",)).items():
            starts = sum(r["starts"] for r in {r["model"]: r for r in group}.values())
            count = lambda keep, group=group: str(sum(r["count"] for r in group if keep(r)))
            L.append(f"| {n} | {len({r['model'] for r in group})} | {starts} | "
                     + " | ".join([count(lambda r: r["kind"] == "consensus" and r["eigenvector"] == 1),
                                   count(lambda r: r["kind"] == "consensus" and r["eigenvector"] != 1),
                                   *(count(lambda r, k=k: r["kind"] == k)
                                     for k in ("bipartite", "clustering", "polygonal", "not converged"))]) + " |")
    if tables["model_basins"]:
        L += ["", "## Where random starts end in other models", "",
              "| model | end | count | fraction [95% CI] | stable equilibria at that eigenvector |",
              "|---|---|---|---|---|"]
        for r in tables["model_basins"]:
            L.append(f"| {r['model']} | {md_cell(r['end'])} | {r['count']}/{r['starts']} | {r['fraction']:.3f} "
                     f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] | {_dash(r['stable_at_eigenvector'])} |")
    return L


def _groups(rows: list[dict], keys: tuple[str, ...]) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def _dash(v: int) -> str:
    return "–" if v < 0 else str(v)


def _sphere(ax) -> None:
    u, v = np.mgrid[0:2 * np.pi:30j, 0:np.pi:15j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", lw=0.4)
    ax.set_box_aspect((1, 1, 1))
    ax.set_axis_off()


def _paths(ax, path: np.ndarray, v1: np.ndarray, title: str) -> None:
    _sphere(ax)
    for i in range(path.shape[1]):
        ax.plot(path[:, i, 0], path[:, i, 1], path[:, i, 2], lw=1.0)
        ax.scatter(*path[-1, i], s=18, color="k")
    for s in (1, -1):
        ax.scatter(*(s * v1), marker="x", s=40, color="r")
    ax.set_title(title, fontsize=9)


def _figures(out: Path, cfg: StabilityConfig, tables, hist, perturb_traj, traj) -> list[str]:
    plt = plots.pyplot()
    if plt is None:
        return []
    names = []
    times = cfg.times()
    fig, axes = plt.subplots(1, len(times), figsize=(5 * len(times), 3.6), squeeze=False)
    for ax, time in zip(axes[0], times, strict=True):
        for n in cfg.ns():
            s = hist[(time, n)]
            ax.hist(s, bins=np.arange(0, s.max() + 2) - 0.5, alpha=0.5, label=f"n = {n}")
        ax.set_xlabel("stable equilibria per model (antipodal pairs)")
        ax.set_title(time, fontsize=9)
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("models")
    fig.tight_layout()
    plots.save(fig, out / "counts.png", 120)
    names.append("counts.png")
    fig = plt.figure(figsize=(9, 4.2))
    for j, (name, (path, v1)) in enumerate(traj.items()):
        _paths(fig.add_subplot(1, 2, j + 1, projection="3d"), path, v1, name.replace("_", " "))
    fig.tight_layout()
    plots.save(fig, out / "sphere_trajectories.png", 120)
    names.append("sphere_trajectories.png")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for name in traj:
        rows = [r for r in tables["trajectories"] if r["model"] == name]
        ax.plot([r["step"] for r in rows], [r["rho_mean"] for r in rows], label=name.replace("_", " "))
    ax.set_xlabel("step")
    ax.set_ylabel("mean |<x_i, v_1>|")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plots.save(fig, out / "correlation.png", 120)
    names.append("correlation.png")
    if tables["perturbation"]:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        P = tables["perturbation"]
        e = np.array([r["eps"] for r in P])
        f = np.array([r["returned_fraction"] for r in P])
        ax.semilogx(e, f, "o-")
        ax.fill_between(e, [r["ci_low"] for r in P], [r["ci_high"] for r in P], alpha=0.2)
        ax.set_xlabel("perturbation ε")
        ax.set_ylabel("fraction returned")
        fig.tight_layout()
        plots.save(fig, out / "perturbation.png", 120)
        names.append("perturbation.png")
    if perturb_traj:
        fig = plt.figure(figsize=(9, 4.2))
        for j, (name, (eps, path, v)) in enumerate(perturb_traj.items()):
            _paths(fig.add_subplot(1, 2, j + 1, projection="3d"), path, v, f"ε = {eps:.3g} ({name})")
        fig.tight_layout()
        plots.save(fig, out / "bipartite_perturbation.png", 120)
        names.append("bipartite_perturbation.png")
    if tables["basins"]:
        fig, axes = plt.subplots(1, len(times), figsize=(5 * len(times), 3.6), squeeze=False)
        for ax, time in zip(axes[0], times, strict=True):
            rows = [r for r in tables["basins"] if r["time"] == time]
            y = np.arange(len(rows))
            f = np.array([r["fraction"] for r in rows])
            err = np.array([[r["fraction"] - r["ci_low"] for r in rows], [r["ci_high"] - r["fraction"] for r in rows]])
            ax.barh(y, f, xerr=err)
            ax.set_yticks(y, [r["end"] for r in rows], fontsize=7)
            ax.set_xlabel("basin fraction")
            ax.set_title(time, fontsize=9)
        fig.tight_layout()
        plots.save(fig, out / "basins.png", 120)
        names.append("basins.png")
    return names


# ------------------------------------------------------------------------------------------ figures from the tables
def claim_figures(run: Path, dest: Path | None = None) -> list[str]:
    """The claims' figures, drawn from the tables of a finished run in ``run`` (this version's or an earlier one's)
    into ``dest`` (default ``run``): ``oja_starts.png`` (``oja_basins.csv``), ``beta_sweep.png``
    (``beta_sweep.csv``) and ``negative_bipartite.png`` (``counts.csv``), each without the cases outside the
    assumptions (λ1 > 0 and, for the map, the step ``alpha`` of ``config.json`` below the step bound); a figure whose
    table is missing or empty is left out, and without matplotlib none is drawn. Returns the names written."""
    run = Path(run)
    config = run / "config.json"
    alpha = float((json.loads(config.read_text()) if config.exists() else {}).get("config", {}).get("alpha", 1.0))
    return plots.from_tables(run, dest, (
        ("oja_starts.png", ("oja_basins.csv", "oja_counts.csv"), functools.partial(_oja_starts_figure, alpha=alpha)),
        ("beta_sweep.png", ("beta_sweep.csv",), functools.partial(_beta_sweep_figure, alpha=alpha)),
        ("negative_bipartite.png", ("counts.csv",), functools.partial(_negative_bipartite_figure, alpha=alpha))))


#: The ends of random starts, in the order they are stacked: (label, test of an ``oja_basins.csv`` row).
_ENDS = (("consensus at ±v1", lambda r: r["kind"] == "consensus" and int(r["eigenvector"]) == 1),
         ("consensus at another eigenvector", lambda r: r["kind"] == "consensus" and int(r["eigenvector"]) != 1),
         ("bipartite", lambda r: r["kind"] == "bipartite"),
         ("other end (clustering, polygonal)", lambda r: r["kind"] not in ("consensus", "bipartite", "not converged")),
         ("not converged", lambda r: r["kind"] == "not converged"))


def _oja_starts_figure(plt, rows: list[dict[str, str]], counts: list[dict[str, str]], *, alpha: float):
    """The share of the Oja map's random starts (``oja_basins.csv``) ending at each kind of end, per n (Theorem 2:
    almost all at ±v1). Theorem 2 assumes λ1 > 0 and the step bound: its cases outside are read from the Oja counts
    (``oja_counts.csv``: the same models, the same keys) and left out, as the reproductions' check does; without
    those counts no figure is drawn (from_tables), rather than one showing such cases unmarked."""
    outside = {(r["n"], r["model"]) for r in counts if r["time"] == "discrete" and not assumed(r, alpha)}
    left = len({(r["n"], r["model"]) for r in rows} & outside)
    rows = [r for r in rows if (r["n"], r["model"]) not in outside]
    if not rows:
        return None
    ns = sorted({int(r["n"]) for r in rows})
    fig, ax = plt.subplots(figsize=(8.5, 3.8))  # room for each bar's counts
    bottom = np.zeros(len(ns))
    starts = np.array([sum(int(r["starts"]) for r in {r["model"]: r for r in rows if int(r["n"]) == n}.values())
                       for n in ns])
    for i, (label, keep) in enumerate(_ENDS):
        share = np.array([sum(int(r["count"]) for r in rows if int(r["n"]) == n and keep(r)) for n in ns]) / starts
        ax.bar(range(len(ns)), share, 0.6, bottom=bottom, color=f"C{i}", label=label)
        bottom += share
    for j, n in enumerate(ns):
        models = len({r["model"] for r in rows if int(r["n"]) == n})
        ax.text(j, 1.01, f"{models} model{'s' * (models != 1)}\n{starts[j]} starts", ha="center", va="bottom",
                fontsize=6)
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set(xlabel="tokens n", ylabel="share of random starts", ylim=(0, 1.25),
           title="Where random starts of the Oja map (uniform attention) end"
                 + (f"\n({left} (n, model) cases outside Theorem 2's assumptions left out)" if left else ""))
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


#: The stable classes of the counts drawn against β: (column, label).
_STABLE_CLASSES = (("stable_consensus_v1", "consensus at v1"), ("stable_consensus_other", "consensus elsewhere"),
                   ("stable_bipartite_v1", "bipartite at v1"), ("stable_bipartite_other", "bipartite elsewhere"))


def _beta_sweep_figure(plt, every: list[dict[str, str]], *, alpha: float):
    """The map's stable equilibria against β (``beta_sweep.csv``): their mean number per model, and how many models
    have each class."""
    rows = [r for r in every if assumed(r, alpha)]  # λ1 and the step bound do not depend on β: whole models go
    if not rows:
        return None
    left = len({r["model"] for r in every}) - len({r["model"] for r in rows})
    betas = sorted({float(r["beta"]) for r in rows})
    at = {b: [r for r in rows if float(r["beta"]) == b] for b in betas}
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    axes[0].plot(betas, [np.mean([int(r["stable"]) for r in at[b]]) for b in betas], "o-", color="C3")
    axes[0].axhline(1.0, color="k", lw=0.6, ls=":", label="1: the principal consensus alone")
    axes[0].set(xscale="log", xlabel="inverse temperature β", ylabel="stable equilibria per model (mean)")
    axes[0].legend(fontsize=7)
    for i, (col, label) in enumerate(_STABLE_CLASSES):
        axes[1].plot(betas, [sum(int(r[col]) > 0 for r in at[b]) for b in betas], "os^v"[i] + "-", color=f"C{i}",
                     label=label)
    models = len({r["model"] for r in rows})
    axes[1].set(xscale="log", xlabel="inverse temperature β", ylabel="models with a stable one",
                ylim=(-0.3, models + 0.5))
    axes[1].yaxis.set_major_locator(plt.MaxNLocator(integer=True))
    axes[1].legend(fontsize=7)
    fig.suptitle(f"The map's stable equilibria against β: {models} models, n = {rows[0]['n']}"
                 + (f" ({left} outside the assumptions left out)" if left else ""), fontsize=9)
    fig.tight_layout()
    return fig


#: The counts of bipartite equilibria at an eigenvector of a negative eigenvalue: (column, label).
_NEGATIVE = (("bipartite_negative", "bipartite at a negative eigenvalue"),
             ("stable_bipartite_negative", "of them stable"),
             ("bipartite_negative_w_nonneg", "with w ≥ 0"),
             ("stable_bipartite_negative_w_nonneg", "stable with w ≥ 0"))


def _negative_bipartite_figure(plt, table: list[dict[str, str]], *, alpha: float):
    """Per n, the map's bipartite equilibria at an eigenvector of a negative eigenvalue and how many are stable, in all
    and where w ≥ 0 (Remark 10's argument holds there: none stable), from ``counts.csv``."""
    rows = [r for r in table if r["time"] == "discrete" and assumed(r, alpha)]
    if not rows or _NEGATIVE[0][0] not in rows[0]:  # an earlier version's counts do not split them out
        return None
    ns = sorted({int(r["n"]) for r in rows})

    def total(col: str, n: int) -> float:
        # -1: not computed (no closed form), and a column an earlier version did not write is not drawn
        counted = [int(r[col]) for r in rows if int(r["n"]) == n and int(r.get(col, -1)) >= 0]
        return float(sum(counted)) if counted else np.nan

    fig, ax = plt.subplots(figsize=(min(9.0, 4.0 + 1.2 * len(ns)), 3.8))
    width = 0.8 / len(_NEGATIVE)
    counts = {col: np.array([total(col, n) for n in ns]) for col, _ in _NEGATIVE}
    for i, (col, label) in enumerate(_NEGATIVE):
        at = np.arange(len(ns)) + (i - (len(_NEGATIVE) - 1) / 2) * width
        ax.bar(at, counts[col], width, color=f"C{i}", label=label)
        for a, c in zip(at, counts[col], strict=True):
            if np.isfinite(c):  # every count written: a zero has no bar on the log axis
                ax.text(a, max(c, 0.6) * 1.1, str(int(c)), ha="center", va="bottom", fontsize=6)
    top = max(float(np.nanmax(np.concatenate(list(counts.values())))), 1.0)
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set(yscale="log", ylim=(0.5, 5 * top), xlabel="tokens n", ylabel="equilibria (all models)")
    summed = [int(np.nansum(counts[col])) for col, _ in _NEGATIVE]
    w = (f"with w = β vᵀQᵀKv ≥ 0: {summed[3]} of {summed[2]}" if np.isfinite(counts[_NEGATIVE[2][0]]).any() else
         "w not computed")
    ax.set_title("Bipartite equilibria of the map at an eigenvector of a negative eigenvalue of V\n"
                 f"one head, λ1 > 0, α = {alpha:g} within the step bound: {summed[1]} of {summed[0]} stable; {w}",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig
