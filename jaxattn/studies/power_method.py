"""The power-method study (Li & Altafini), the main job of ``jaxattn analyze``.

For one model: spectra of every layer matrix; the simplified D1 dynamics (α = 1, L2, no FFN)
from many random Gaussian initial conditions; per layer ρ1, Δρ1, P1 against the baselines
ρ̄, Δρ̄ and the paper's P̄ over all eigendirections; a prolonged run for shared-weight models; the same with the
FFN and affine LayerNorm kept; rank-1 steering of the last layer; the cumulative-product
comparison. Every number of the report comes from the tables written next to it.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxattn.analysis.alignment import alignment, layer_table
from jaxattn.analysis.directions import direction_increments, direction_rows
from jaxattn.analysis.gradients import layer_sensitivity
from jaxattn.analysis.observables import alignment_observables, alignment_tables
from jaxattn.analysis.spectral import (
    ORDERS,
    Spectrum,
    cumulative_products,
    layer_matrices,
    lyapunov_exponents,
    spectrum,
)
from jaxattn.analysis.stability import consensus_step_bound
from jaxattn.analysis.steering import entering_states, precompensate, steer, steer_to_target, steered_alignment
from jaxattn.config import non_negative, option, positive, specs
from jaxattn.config import seed as seed_check
from jaxattn.dynamics import SIMULATION_DTYPES, named_dtype
from jaxattn.dynamics.discrete import FAITHFUL, ROPES, Dynamics, rope_of
from jaxattn.dynamics.options import PRECISIONS, Batch, Save
from jaxattn.io.results import atomic_write_text, provenance, save_arrays, weights_sha256, write_json
from jaxattn.model.params import Model
from jaxattn.model.sampling import INIT_KINDS, NEEDS_ARRAY, init_tokens
from jaxattn.studies import plots
from jaxattn.studies.skeleton import check_options, csv_text, need_model, own_config, refuse_inert
from jaxattn.sweeps.chunked import Timer, sweep


def _below_one(v) -> str | None:
    return None if 0 <= v < 1 else "must be in [0, 1) (0: no search)"


@dataclasses.dataclass
class PowerMethodConfig:
    """The power-method study's options (those of ``jaxattn analyze``, see :mod:`jaxattn.config`)."""

    num_init: int = option(1000, "random initial conditions", check=positive)  # the paper: more than 1000
    n: int = option(10, "tokens per initial condition", check=positive)  # the paper's ALBERT figures: 10
    seed: int = option(0, "random seed", check=seed_check)
    init: str = option("gaussian", "initial token distribution",  # the paper: Gaussian tokens of the model dimension
                       choices=tuple(k for k in INIT_KINDS if k not in NEEDS_ARRAY))
    alpha: float = option(1.0, "step size α", check=positive)
    beta: float = option(1.0, "inverse temperature β")
    order: str = option("real", "principal eigenvalue: largest real part, modulus or |1+αλ|", choices=ORDERS)
    prolong: int = option(10, "shared-weight models: also run PROLONG × depth steps", check=positive)
    gammas: Sequence[float] = option([1.0, 10.0, 100.0, 1000.0], "steering gains γ", check=non_negative)
    steer_target: float = option(0.99, "also find, by bisection in log γ, the smallest gain whose mean alignment with "
                                 "the steering direction reaches this value; 0: no search", check=_below_one)
    ffn_study: bool = option(True, "also run with FFN and affine LayerNorm (models that have them)")
    rope: str = option("none", "D1's positions: 'none' position-free (the plain reading), 'model' the model's own "
                       "RoPE, 'on' the model's or the standard RoPE (θ = 10⁴)", choices=ROPES)
    sensitivity: bool = option(True, "also report which layer matters: d(mean ρ1)/d(log F_k) for every block, by "
                               "jax.grad")
    dtype: str = option("float32", "simulation precision (spectra are float64)", choices=SIMULATION_DTYPES)
    matmul_precision: str = option("highest", "matrix products of float32 runs (docs/gpu.md)", choices=PRECISIONS)
    chunk: int = option(1024, "initial conditions per chunk", check=positive)
    progress: bool = option(True, "show progress bars")
    figures: bool = option(True, "write PNG figures")

    def check(self) -> None:
        """Every option checked against its declaration, before any work (one :class:`ConfigError` line)."""
        check_options(self)

    def inert(self, model: Model) -> dict[str, str]:
        """The options that change nothing on ``model``, each with the reason (refused when set)."""
        out = {}
        if not model.shared:
            out["prolong"] = "a model without shared weights (the prolonged run repeats one shared block)"
        if self.ffn_study and (model.layers.w1 is None or model.layers.ln1_w is None):  # --no-ffn-study is true
            out["ffn_study"] = "a model without FFN and LayerNorm (an attention-only model)"
        return out


def _as_floats(cfg: PowerMethodConfig) -> dict:
    """The configuration with its float options as floats: ``gammas=[1, 10]`` (a config file, the command line)
    and ``[1.0, 10.0]`` decide the same numbers, so a run resumes the other."""
    floats = {k for k, s in specs(PowerMethodConfig).items() if float in s.types and not s.optional}
    return {k: ([float(x) for x in v] if isinstance(v, (list, tuple)) else float(v)) if k in floats else v
            for k, v in dataclasses.asdict(cfg).items()}


def spectrum_rows(spec: Spectrum, alpha: float) -> list[dict]:
    rows = []
    for g in range(spec.eigvals.shape[0]):
        lam = spec.eigvals[g]
        rows.append({"weight_set": g, "case": int(spec.case[g]), "lambda1_re": float(lam[0].real),
                     "lambda1_im": float(lam[0].imag),
                     "lambda2_re": float(lam[1].real) if len(lam) > 1 else float("nan"),
                     "lambda2_im": float(lam[1].imag) if len(lam) > 1 else float("nan"), "gap": float(spec.gap[g]),
                     "v1_v2_collinearity": float(spec.collinearity[g]), "spectral_radius": float(np.abs(lam).max()),
                     "most_negative_re": float(lam.real.min()), "trace": float(np.trace(spec.F[g])),
                     # of the spectrum's real parts whatever order the spectrum was sorted in
                     "alpha_bound": consensus_step_bound(lam)})
    return rows


STORE = ".jaxattn-analyze"  # the chunk stores of the study's runs, kept only to resume

#: The study's public shape (as every study's): ``Config`` and ``run``.
Config = PowerMethodConfig


def run(out_dir, config: PowerMethodConfig | None = None, *, model: Model | None = None, model_name: str = "model",
        progress=None) -> dict:
    """Run the power-method study of ``model`` into ``out_dir``; return the tables (lists of row dicts). ``config``
    defaults to ``PowerMethodConfig()``; ``progress(message)`` receives the stage messages (default: on stderr when
    ``config.progress``)."""
    model = need_model("power-method", model)
    cfg = own_config("power-method", PowerMethodConfig, config)
    return _run(model, out_dir, cfg, model_name=model_name, progress=progress)


def _run(model: Model, out_dir, cfg: PowerMethodConfig, *, model_name: str, progress) -> dict:
    cfg.check()
    refuse_inert(cfg, cfg.inert(model))
    d1 = Dynamics(rope=cfg.rope)  # D1: position-free by default, RoPE by token index on request
    out = Path(out_dir)
    dtype = named_dtype(cfg.dtype)
    spec = spectrum(model, order=cfg.order, alpha=cfg.alpha)
    depth = model.depth
    Fs = layer_matrices(model)[list(model.schedule)]
    _Phi, u1 = cumulative_products(Fs, cfg.order, cfg.alpha)
    lyap = lyapunov_exponents(Fs)
    common: dict[str, Any] = dict(num_init=cfg.num_init, n=cfg.n, seed=cfg.seed, chunk=cfg.chunk, init=cfg.init,
                                  alpha=cfg.alpha, beta=cfg.beta, dtype=dtype,
                                  batch=Batch(precision=cfg.matmul_precision), progress=cfg.progress, keep_final=True)
    # what decides the numbers (not progress bars or figures): a resumed run must match it
    fp = {"model": model_name, "cfg": {k: v for k, v in _as_floats(cfg).items() if k not in ("progress", "figures")}}
    tables: dict[str, list] = {}
    finals: dict[str, np.ndarray] = {}
    timings = {}

    def say(msg):
        if progress is not None:
            progress(msg)
        elif cfg.progress:
            print(f"[analyze] {msg}", file=sys.stderr, flush=True)

    def study(run: str, steps: int, dyn: Dynamics, phi=u1):
        say(f"{run}: {cfg.num_init} initial conditions x {cfg.n} tokens, {steps} steps")
        tab = alignment_tables(spec, model.schedule, steps, phi, cfg.beta, dtype)
        with Timer() as t:
            # the attention rank comes from the weights each step applies, for every dynamics
            arrays = sweep(model, steps=steps, dynamics=dyn, save=Save(observe=alignment_observables, aux=tab),
                           out_dir=out / STORE / run, fingerprint={**fp, "run": run}, **common)
        timings[run] = round(t.seconds, 3)
        tables[run] = layer_table(arrays, spec, model.schedule, steps, run)
        finals[f"{run}.rho1_final"] = arrays["observables.rho1_after"][:, -1].reshape(-1)
        finals[f"{run}.rho2_final"] = arrays["observables.rho2_after"][:, -1].reshape(-1)

    study("main", depth, d1)
    if model.shared and cfg.prolong > 1:
        study("prolonged", cfg.prolong * depth, d1, phi=None)
    has_ffn = model.layers.w1 is not None and model.layers.ln1_w is not None
    if cfg.ffn_study and has_ffn:
        study("ffn_layernorm", depth, FAITHFUL)

    say(f"steering the last layer with gains {', '.join(f'{g:g}' for g in cfg.gammas)}")
    # steering: rank-1 modification of the last layer towards a random unit u
    rng = np.random.default_rng(cfg.seed + 1)
    u = rng.normal(size=model.d_model)
    u /= np.linalg.norm(u)
    steer_rows = []
    X0 = init_tokens(jax.random.key(cfg.seed), min(cfg.num_init, 1000), cfg.n, model.d_model, kind=cfg.init,
                     dtype=dtype)

    # every run of the dynamics below at the study's matrix-product precision (config.json records it)
    sim: dict[str, Any] = dict(alpha=cfg.alpha, beta=cfg.beta, dtype=dtype, batch=Batch(precision=cfg.matmul_precision))
    say(f"every eigendirection's increment (the paper's P̄) over {X0.shape[0]} initial conditions")
    with Timer() as t:
        tables["directions"] = direction_rows(direction_increments(model, X0, dynamics=d1, order=cfg.order, **sim))
    timings["directions"] = round(t.seconds, 3)
    if cfg.sensitivity:
        say(f"which layer matters: d(mean ρ1)/d(log F_k) by jax.grad over {X0.shape[0]} initial conditions")
        with Timer() as t:
            tables["sensitivity"] = layer_sensitivity(model, X0, dynamics=d1, order=cfg.order, **sim)
        timings["sensitivity"] = round(t.seconds, 3)

    def srow(dyn, gamma, beta, cos, ms, residual, found_by="grid", sides=True):
        """One row of steering.csv from the tokens' signed cosines with u (``cos``): the alignment |cos| over
        all of them, and apart for the tokens that end on the +u side and on the −u side (``sides=False``:
        ``cos`` is the alignment itself, the sides are not known)."""
        sp = spectrum(layer_matrices(ms)[ms.schedule[-1]])  # the last block's layer matrix (steered unless γ = 0)
        a = np.abs(cos)
        side = lambda m, f: float(f(a[m])) if m.any() else float("nan")
        plus = cos > 0 if sides else np.zeros(a.shape, bool)
        return {"dynamics": dyn, "gamma": float(gamma), "beta": float(beta), "align_mean": float(a.mean()),
                "align_std": float(a.std()), "align_q01": float(np.quantile(a, 0.01)),
                "frac_above_0.99": float((a > 0.99).mean()), "lambda1_re_after": float(sp.eigvals[0, 0].real),
                "gap_after": float(sp.gap[0]), "residual": float(residual), "found_by": found_by,
                "frac_plus": float(plus.mean()) if sides else float("nan"), "align_mean_plus": side(plus, np.mean),
                "align_mean_minus": side(~plus & sides, np.mean),
                "align_q01_plus": side(plus, lambda x: np.quantile(x, 0.01)),
                "align_q01_minus": side(~plus & sides, lambda x: np.quantile(x, 0.01))}

    entering = entering_states(model, X0, dynamics=d1, **sim)  # the unsteered blocks run once for every gain
    base, _, _ = steered_alignment(model, u, 0.0, X0, dynamics=d1, entering=entering, signed=True, **sim)
    steer_rows.append(srow("D1", 0.0, 0.0, base, model, 0.0))
    for gamma in map(float, cfg.gammas):  # a config file may give integers
        a, ms, info = steered_alignment(model, u, gamma, X0, dynamics=d1, entering=entering, signed=True, **sim)
        steer_rows.append(srow("D1", gamma, info.beta, a, ms, info.residual))
    # the same grid on held-out initial conditions (drawn from another key; nothing was chosen on them)
    X_held = init_tokens(jax.random.fold_in(jax.random.key(cfg.seed), 1), X0.shape[0], cfg.n, model.d_model,
                         kind=cfg.init, dtype=dtype)
    entering_held = entering_states(model, X_held, dynamics=d1, **sim)
    held_rows = []
    for gamma in [0.0, *map(float, cfg.gammas)]:
        a, ms, info = steered_alignment(model, u, gamma, X_held, dynamics=d1, entering=entering_held, signed=True,
                                        **sim)
        held_rows.append({**srow("D1 held-out", gamma, info.beta, a, ms, info.residual),
                          "conditions": a.shape[0], "tokens": a.size, "above_0.99": int((abs(a) > 0.99).sum()),
                          "conditions_all_above_0.99": int(np.all(abs(a) > 0.99, axis=1).sum())})
    tables["steering_heldout"] = held_rows
    if cfg.steer_target > 0:
        say(f"bisection in log γ for the smallest gain with mean alignment >= {cfg.steer_target:g}")
        with Timer() as t:
            tgt = steer_to_target(model, u, cfg.steer_target, X0, dynamics=d1, **sim)
            ms, _ = steer(model, u, tgt.gamma)
            # the paper's Fig. 2: ρ1, Δρ1, P1 in every layer of the model whose last layer is steered
            tables["steered"] = alignment(ms, X0, dynamics=d1, alpha=cfg.alpha, beta=cfg.beta, order=cfg.order,
                                          dtype=dtype, run="steered", batch=Batch(precision=cfg.matmul_precision))
        timings["steer_target"] = round(t.seconds, 3)
        steer_rows.append(srow("D1", tgt.gamma, tgt.beta, tgt.alignment, ms, tgt.residual,
                               found_by=f"bisection (target {cfg.steer_target:g}, "
                                        f"{'reached' if tgt.reached else 'not reached'})", sides=False))
        tables["steer_target"] = [{"target": tgt.target, "reached": tgt.reached, "gamma": tgt.gamma, "beta": tgt.beta,
                                   "align_mean": tgt.align_mean, "gap_after": tgt.gap,
                                   "lambda1_re_after": tgt.lambda1_re, "gamma_below": tgt.gamma_below,
                                   "align_below": tgt.align_below, "evaluations": len(tgt.evaluations)}]
    if cfg.ffn_study and has_ffn:
        # both signs: the tokens sent to -u' meet FFN(-u') != -FFN(u'); "+u' only" inverts the FFN at +u' alone
        targets = (("FFN+LN, steer u", u), ("FFN+LN, precompensated", precompensate(model, u)),
                   ("FFN+LN, precompensated +u' only", precompensate(model, u, signs="plus")))
        entering = entering_states(model, X0, dynamics=FAITHFUL, **sim)
        for gamma in map(float, cfg.gammas):
            for name, target in targets:
                a, ms, info = steered_alignment(model, target, gamma, X0, dynamics=FAITHFUL, entering=entering,
                                                along=u, signed=True, **sim)  # steered towards target, along u
                steer_rows.append(srow(name, gamma, info.beta, a, ms, info.residual))
    tables["steering"] = steer_rows
    tables["spectrum"] = spectrum_rows(spec, cfg.alpha)

    # ---- write everything (atomically), then the figures and the report
    layer_rows = [r for k in ("main", "prolonged", "ffn_layernorm") if k in tables for r in tables[k]]
    atomic_write_text(out / "layers.csv", csv_text(layer_rows))
    atomic_write_text(out / "spectrum.csv", csv_text(tables["spectrum"]))
    atomic_write_text(out / "steering.csv", csv_text(steer_rows))
    atomic_write_text(out / "steering_heldout.csv", csv_text(tables["steering_heldout"]))
    atomic_write_text(out / "directions.csv", csv_text(tables["directions"]))
    if "steered" in tables:
        atomic_write_text(out / "steered_layers.csv", csv_text(tables["steered"]))
    if "sensitivity" in tables:
        atomic_write_text(out / "sensitivity.csv", csv_text(tables["sensitivity"]))
    save_arrays(out / "arrays.safetensors", {
        "eigvals_re": spec.eigvals.real, "eigvals_im": spec.eigvals.imag, "lyapunov": lyap,
        "phi_u1_re": u1.real, "phi_u1_im": u1.imag, "steer_u": u,
        **{f"final.{k}": v.astype(np.float32) for k, v in finals.items()}})
    write_json(out / "config.json", {"command": "analyze", "model": model_name,
                                     "model_summary": model.summary().splitlines(),
                                     "model_dims": {"d": model.d_model, "heads": model.n_heads, "depth": model.depth,
                                                    "shared": model.shared, "masks": _masks(model)},
                                     "weights_sha256": weights_sha256(model),
                                     "config": dataclasses.asdict(cfg), "seconds": timings, **provenance()})
    figures = []
    if cfg.figures:
        figures = plots.power_method_figures(out, spec, tables, finals, model_name)
    report = make_report(model, model_name, cfg, spec, tables, lyap, figures)
    atomic_write_text(out / "report.md", report)
    shutil.rmtree(out / STORE, ignore_errors=True)  # the tool's chunk stores, kept only to resume
    return tables


def _masks(model: Model) -> list[str]:
    lay = model.layers
    return [("causal" if bool(lay.causal[g]) else "full")
            + (f"/local:{int(lay.window[g])}" if int(lay.window[g]) else "")
            for g in range(lay.n_sets)]


def _fmt_lam(re, im):
    return f"{re:.4g}" if abs(im) < 1e-12 else f"{re:.4g}{'+' if im >= 0 else '-'}{abs(im):.4g}i"


def architecture_reading(model: Model, rope: str = "none") -> list[str]:
    """What D1 keeps of this model and what it drops, one bullet per choice (the report states it)."""
    lay = model.layers
    H, Hkv = lay.n_heads, lay.n_kv_heads
    out = []
    if Hkv < H:
        out.append(f"* Grouped-query attention: {H} query heads share {Hkv} key/value heads ({lay.kv_group} each); "
                   "the layer matrix is F = Σ_h O_h V_g(h) with the shared value head of each query head, and D1 "
                   "uses the shared keys and values as the model does.")
    else:
        out.append(f"* {H} attention heads, one key/value head each: F = Σ_h O_h V_h.")
    r = rope_of(model, Dynamics(rope=rope))
    if model.rope is not None and r is None:
        out.append(f"* Positions: the model rotates queries and keys (RoPE, {model.rope.dim} of {lay.d_head} head "
                   "dimensions); D1 here is position-free (RoPE dropped, tokens exchangeable), the plain reading. "
                   "`--rope model` keeps RoPE by token index.")
    elif r is not None:
        out.append(f"* Positions: RoPE on queries and keys by token index 0..n-1 ({r.dim} of {lay.d_head} head "
                   f"dimensions, θ = {r.theta:g}, scaling {r.kind}" + (", the model's own" if model.rope is not None
                                                                        else ", the standard one: the model has none")
                   + "): tokens are not exchangeable, a dynamics of its own.")
    elif model.embeddings is not None and model.embeddings.position is not None:
        out.append("* Positions: the model's are absolute embeddings added to the input; the dynamics starts from "
                   "random tokens, so it has none.")
    if model.norm_kind == "rmsnorm":
        out.append("* Normalisation: the model's RMSNorm is g ⊙ √d · x/‖x‖ (up to its ε): the L2 normalisation "
                   "onto the sphere of radius √d times a diagonal gain. D1's L2 is RMSNorm with unit gains and "
                   "radius 1; the FFN run below uses the model's RMSNorm with its gains.")
    elif lay.ln1_w is not None:
        out.append("* Normalisation: the model's LayerNorm centres, then scales to radius √d, then applies a gain and "
                   "a bias; D1 replaces it by L2 (no centring, no gain, radius 1).")
    if model.parallel:
        out.append("* Block: the model runs attention and MLP in parallel on the same input (x + Attn + MLP); "
                   "without the MLP D1 is the sequential attention block.")
    if lay.wg is not None:
        out.append("* MLP: gated (act(W_g y) ⊙ W_1 y); dropped by D1, kept in the FFN run.")
    windows = sorted({int(w) for w in np.asarray(lay.window) if int(w)})
    if windows:
        out.append(f"* Sliding windows ({', '.join(map(str, windows))}) on some layers: kept (a token attends to the "
                   "previous w - 1 tokens and itself).")
    return out


def make_report(model, name, cfg, spec, tables, lyap, figures) -> str:
    """A short markdown report; every number is read from ``tables`` (the CSV files' rows)."""
    main = tables["main"]
    L = len(main)
    holds = sum(r["holds"] for r in main)
    pos = sum(r["drho1"] > 0 for r in main)
    half = sum(r["P1"] > 0.5 for r in main)
    beats = sum(r["drho1"] > r["drhobar"] for r in main)
    lines = [f"# Power-method analysis of {name}", "",
             "```", model.summary(), "```", "",
             f"Simplified dynamics D1 (α = {cfg.alpha:g}, β = {cfg.beta:g}, L2 normalisation, no FFN, no biases) "
             f"from {cfg.num_init} random {cfg.init} initial conditions of {cfg.n} tokens "
             f"(seed {cfg.seed}, {cfg.dtype}).", "",
             "## Reading of the architecture", "", *architecture_reading(model, cfg.rope), "",
             "## Spectra of the layer matrices F = Σ_h O_h V_h", "",
             "| set | case | λ1 | λ2 | gap | \\|<v1,v2>\\| | spectral radius |", "|---|---|---|---|---|---|---|"]
    for r in tables["spectrum"]:
        lines.append(f"| {r['weight_set']} | {r['case']} | {_fmt_lam(r['lambda1_re'], r['lambda1_im'])} | "
                     f"{_fmt_lam(r['lambda2_re'], r['lambda2_im'])} | {r['gap']:.4g} | {r['v1_v2_collinearity']:.3f} | "
                     f"{r['spectral_radius']:.4g} |")
    lines += ["", "Cases: 1 real dominant, 2 complex dominant pair (correlate with span(Re v1, Im v1)), "
              "3 no strict dominance (span(v1, v2)).", "",
              f"Lyapunov exponents of the product F(L)⋯F(1) (repeated QR): largest {lyap[0]:.4g}, "
              f"second {lyap[1]:.4g}." if len(lyap) > 1 else "", "",
              "## Layer by layer (eqs. 4–5)", "",
              "| step | set | ρ1 | Δρ1 | P1 | ρ̄ | Δρ̄ | P(Δρ̄ > 0) | ρ(2-D) | ρ(Φ) | diameter | analogy holds |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in main:
        lines.append(f"| {r['step']} | {r['weight_set']} | {r['rho1']:.3f} | {r['drho1']:+.4f} | {r['P1']:.3f} | "
                     f"{r['rhobar']:.3f} | {r['drhobar']:+.4f} | {r['P_rhobar']:.3f} | {r['rho2']:.3f} | "
                     f"{r['rho_phi']:.3f} | {r['diameter']:.3g} | {'yes' if r['holds'] else 'no'} |")
    verdict = "holds in every layer" if holds == L else f"holds in {holds} of {L} layers"
    lines += ["", f"**The power-method analogy {verdict}** (Δρ1 > 0 in {pos}/{L}, P1 > 1/2 in {half}/{L}, "
              f"Δρ1 > Δρ̄ in {beats}/{L}).", ""]
    if tables.get("directions"):
        dr = tables["directions"]
        lines += ["## P1 against every eigendirection (the paper's P̄)", "",
                  f"Over {dr[0]['tokens']} tokens (the first {min(cfg.num_init, 1000)} initial conditions): P_k is the "
                  "fraction of tokens whose correlation with eigendirection k grows through the layer, P̄ the mean of "
                  "P_k over all eigendirections (a complex pair counts once), as in §3.2 of the paper "
                  "(`directions.csv`). "
                  "The P(Δρ̄ > 0) column above is the probability that the direction-averaged ρ̄ grows, another "
                  "number.", "",
                  "| step | directions | P1 | P̄ (mean of P_k) | rank of P1 | P_k > 1/2 | Δρ1 | Δρ̄ |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in dr:
            lines.append(f"| {r['step']} | {r['directions']} | {r['P1']:.3f} | {r['Pbar']:.3f} | {r['P1_rank']} | "
                         f"{r['P_above_half']:.3f} | {r['drho1']:+.4f} | {r['drhobar']:+.4f} |")
        lines += ["", f"**P1 > P̄ in {sum(r['P1'] > r['Pbar'] for r in dr)} of {len(dr)} layers.**", ""]
    if "prolonged" in tables:
        pr = tables["prolonged"]
        lines += ["## Prolonged shared-weight model", "",
                  f"Running {len(pr)} steps ({cfg.prolong}× the depth): ρ1 goes from {main[-1]['rho1']:.3f} at the "
                  f"model's depth to {pr[-1]['rho1']:.3f} (2-D subspace: {pr[-1]['rho2']:.3f}); mean diameter "
                  f"{pr[-1]['diameter']:.3g}.", ""]
    if "ffn_layernorm" in tables:
        fr = tables["ffn_layernorm"]
        h2 = sum(r["holds"] for r in fr)
        lines += ["## With FFN and affine LayerNorm (the paper's Figs 10–11)", "",
                  f"Mean Δρ1 {np.mean([r['drho1'] for r in fr]):+.4f} "
                  f"(D1: {np.mean([r['drho1'] for r in main]):+.4f}), "
                  f"mean P1 {np.mean([r['P1'] for r in fr]):.3f} (D1: {np.mean([r['P1'] for r in main]):.3f}); "
                  f"the analogy holds in {h2} of {len(fr)} layers; final diameter {fr[-1]['diameter']:.3g}.", ""]
    lines += sensitivity_section(tables.get("sensitivity"), main, min(cfg.num_init, 1000))
    lines += ["## Steering the last layer (rank-1, w = u)", "",
              "| dynamics | γ | β | mean alignment with u | 1% quantile | fraction > 0.99 | spectral gap after "
              "| found by |",
              "|---|---|---|---|---|---|---|---|"]
    for r in tables["steering"]:
        lines.append(f"| {r['dynamics']} | {r['gamma']:.6g} | {r['beta']:.4g} | {r['align_mean']:.4f} | "
                     f"{r['align_q01']:.4f} | {r['frac_above_0.99']:.3f} | {r['gap_after']:.4g} | {r['found_by']} |")
    ffn = [r for r in tables["steering"] if r["dynamics"].startswith("FFN+LN")]
    if ffn:
        lines += ["", "With the FFN and LayerNorm, the tokens that end on the +u side and on the −u side apart (a "
                      "rank-1 steering sends a token to +u' or −u' by the sign of its component, and the FFN is not "
                      "odd; `precompensated` inverts the block at both signs, `+u' only` at +u' alone):", "",
                  "| dynamics | γ | share on the +u side | mean alignment, +u side | 1% quantile, +u side | "
                  "mean alignment, −u side | 1% quantile, −u side |", "|---|---|---|---|---|---|---|"]
        for r in ffn:
            lines.append(f"| {r['dynamics']} | {r['gamma']:.6g} | {r['frac_plus']:.3f} | {r['align_mean_plus']:.4f} | "
                         f"{r['align_q01_plus']:.4f} | {r['align_mean_minus']:.4f} | {r['align_q01_minus']:.4f} |")
    if tables.get("steering_heldout"):
        ho = tables["steering_heldout"]
        lines += ["", f"The same gains on {ho[0]['conditions']} held-out initial conditions "
                      "(`steering_heldout.csv`):", "",
                  "| γ | mean alignment with u | 1% quantile | fraction > 0.99 | conditions with every token > 0.99 |",
                  "|---|---|---|---|---|"]
        for r in ho:
            lines.append(f"| {r['gamma']:.6g} | {r['align_mean']:.4f} | {r['align_q01']:.4f} | "
                         f"{r['frac_above_0.99']:.3f} | {r['conditions_all_above_0.99']}/{r['conditions']} |")
    if "steer_target" in tables:
        t = tables["steer_target"][0]
        if t["reached"]:
            lines += ["", f"**Target mean alignment {t['target']:g}: the smallest gain found is γ = {t['gamma']:.6g} "
                          f"(β = {t['beta']:.4g}), with measured mean alignment {t['align_mean']:.5f} and spectral gap "
                          f"{t['gap_after']:.4g} of the steered layer matrix (Re λ1 = {t['lambda1_re_after']:.4g}).** "
                          f"Bisection in log γ ({t['evaluations']} runs of the steered dynamics): γ = "
                          f"{t['gamma_below']:.6g} gives {t['align_below']:.5f}, below the target."]
        else:
            lines += ["", f"**Target mean alignment {t['target']:g} not reached**: the largest gain tried, γ = "
                          f"{t['gamma']:.6g}, gives {t['align_mean']:.4f}."]
        st = tables["steered"]
        lines += ["", f"With the last layer steered at γ = {t['gamma']:.6g} (`steered_layers.csv`, figure "
                      "`steered_metrics.png`):", "",
                  "| step | ρ1 | Δρ1 | P1 | ρ̄ | Δρ̄ | P(Δρ̄ > 0) |", "|---|---|---|---|---|---|---|"]
        for r in st:
            lines.append(f"| {r['step']} | {r['rho1']:.3f} | {r['drho1']:+.4f} | {r['P1']:.3f} | {r['rhobar']:.3f} | "
                         f"{r['drhobar']:+.4f} | {r['P_rhobar']:.3f} |")
    lines += ["", "γ = 0 is the unmodified model. After one steered layer the alignment of a token is about "
              "β|uᵀx̄| / ||(I + F)x̄||, so inputs with a small component along u need a large γ.", ""]
    if figures:
        lines += ["## Figures", ""] + [f"![{f.stem}]({f.name})" for f in figures] + [""]
    lines += ["Tables: `layers.csv`, `spectrum.csv`, `steering.csv`, `steering_heldout.csv`, `directions.csv`"
              f"{', `steered_layers.csv`' if 'steered' in tables else ''}"
              f"{', `sensitivity.csv`' if 'sensitivity' in tables else ''}; arrays: `arrays.safetensors`; "
              "configuration, versions and device: `config.json`.", ""]
    return "\n".join(lines)


def sensitivity_section(rows, main, num: int) -> list[str]:
    """The report's "which layer matters" section from ``sensitivity.csv``'s rows (none: no section)."""
    if not rows:
        return []
    top = max(rows, key=lambda r: abs(r["dR_dlogF"]))
    lines = ["## Which layer matters (gradients)", "",
             f"R = mean ρ1 after the last block over the first {num} initial conditions of the main run "
             f"(R = {rows[0]['R']:.4f}; the main run: {main[-1]['rho1']:.4f}), differentiated by `jax.grad` "
             "through the whole D1 simulation with respect to every block's weights; v1, the principal eigenvector "
             "of the unperturbed last layer matrix, is held fixed. dR/d log F_k is dR/dε for F_k → (1+ε)F_k (every "
             "O_h of block k scaled, which leaves the eigenvectors of F_k where they are), dR/d log β_k the same "
             "for block k's scores; the norms are those of the gradients with respect to the weights "
             "(`sensitivity.csv`, figure `sensitivity.png`).", "",
             "| block | set | dR/d log F_k | dR/d log β_k | ‖∂R/∂O_k‖ | ‖∂R/∂V_k‖ | ‖∂R/∂Q_k‖ | cos(∂R/∂O_k, O_k) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['block']} | {r['weight_set']} | {r['dR_dlogF']:+.4g} | {r['dR_dlogbeta']:+.3g} | "
                     f"{r['grad_O']:.3g} | {r['grad_V']:.3g} | {r['grad_Q']:.3g} | {r['cos_O']:+.3f} |")
    return [*lines, "", f"**Block {top['block']} matters most**: F 1% larger in it alone changes R by "
                        f"{0.01 * top['dR_dlogF']:+.2g} (to first order).", ""]
