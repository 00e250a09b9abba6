"""The consensus study (Karagodin et al., asymptotic consensus of self-attention), behind
``jaxattn consensus``.

Two parts, written into one run directory (``config.json``, ``synthetic.csv``, ``passes.csv``,
figures, ``report.md``):

1. **The theorems' settings, in continuous time** (the flow on the sphere, :func:`jaxattn.solve`):
   (a) time-varying weights with uniform random entries (a new weight set every unit of time),
   ``V = I``, tokens starting in an open hemisphere: the hemisphere Lyapunov function
   ``min_i <x_i, w>`` never decreases and the tokens reach consensus; (b) causal attention with two
   heads and ``V = I``: the first token never moves and the others converge to it; (c) causal
   attention with a symmetric ``V`` whose top eigenvalue is simple: tokens converge to ± its
   eigenvector.
2. **A real model run for many passes** (:func:`jaxattn.repeated_passes`) on random prompts (token ids
   uniform over the vocabulary, embedded with the model's embeddings): with and without the FFN,
   with the same weights every pass (periodic) and with weights redrawn before every pass
   (aperiodic); the GPT-Consensus code's first-token measure after every layer, mean and spread
   over prompts.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.observables import consensus, consensus_hemisphere
from jaxattn.config import option, positive
from jaxattn.config import seed as seed_check
from jaxattn.dynamics import continuous
from jaxattn.dynamics._runner import DTYPES, PRECISIONS
from jaxattn.dynamics.discrete import FAITHFUL, NO_FFN, Dynamics
from jaxattn.dynamics.options import Batch, Save
from jaxattn.dynamics.passes import repeated_passes
from jaxattn.dynamics.prompts import embed_prompts, hemisphere_tokens, random_prompts
from jaxattn.errors import ConfigError
from jaxattn.io.results import atomic_write_text, provenance, write_json
from jaxattn.model.params import Model, repeat_kv
from jaxattn.model.sampling import init_tokens, random_model
from jaxattn.studies import plots
from jaxattn.studies.skeleton import (
    check_options,
    csv_text,
    need_model,
    own_config,
    quiet,
    refuse_inert,
    write_report,
)


def _on_sphere(v) -> str | None:
    return None if v >= 2 else "must be >= 2 (tokens on a sphere)"


@dataclasses.dataclass
class ConsensusConfig:
    """The consensus study's options (those of ``jaxattn consensus``, see :mod:`jaxattn.config`)."""

    passes: int = option(10, "passes of the model", check=positive)
    prompts: int = option(100, "random prompts", check=positive)  # the paper: 100
    tokens: int = option(32, "tokens per prompt (the paper: 200)", check=positive)
    seed: int = option(0, "random seed", check=seed_check)
    dtype: str = option("float32", "precision of the passes", choices=tuple(DTYPES))
    matmul_precision: str = option("highest", "matrix products of float32 passes (docs/gpu.md)", choices=PRECISIONS)
    synthetic: bool = option(True, "also run the theorem settings in continuous time")
    synthetic_d: int = option(3, "token dimension of the theorem settings", check=_on_sphere)
    synthetic_n: int = option(8, "tokens of the theorem settings", check=positive)
    synthetic_num: int = option(64, "initial conditions per theorem setting", check=positive)
    t1: float = option(30.0, "final time of the theorem settings", check=positive)
    figures: bool = option(True, "write PNG figures")

    def check(self) -> None:
        """Every option checked against its declaration, and none that changes nothing (:meth:`inert`), before
        any work (one :class:`ConfigError` line)."""
        check_options(self)
        refuse_inert(self, self.inert())

    def inert(self) -> dict[str, str]:
        """The options that change nothing with the others, each with the reason (refused when set)."""
        if self.synthetic:
            return {}
        return dict.fromkeys(("synthetic_d", "synthetic_n", "synthetic_num", "t1"),
                             "synthetic = false (the theorem settings are not run)")


def synthetic_settings(cfg: ConsensusConfig) -> dict:
    """The three theorem settings: ``{name: (Solution, extra)}``."""
    d, n, B = cfg.synthetic_d, cfg.synthetic_n, cfg.synthetic_num
    key = jax.random.key(cfg.seed)
    # float64 where JAX allows it: the theorems' limits are far below float32's round-off (1e-7)
    dt = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    solve = _with_dtype(continuous.solve, dt)
    ts = np.linspace(0.0, cfg.t1, 61)
    out = {}
    # (a) time-varying uniform random Q, K (a new set per unit time, 10 sets cycled), V = I, hemisphere start
    m = random_model(jax.random.fold_in(key, 1), d, 1, 10, shared=False, weights="uniform", value="identity",
                     dtype=jnp.float32)
    w = jnp.zeros(d).at[0].set(1.0)
    X0 = hemisphere_tokens(jax.random.fold_in(key, 2), B, n, d)
    out["hemisphere"] = (solve(m, X0, cfg.t1, save=Save(ts=ts, observe=consensus_hemisphere, aux={"w": w})), X0)
    # (b) causal, two heads (an even dimension), V = I
    m = random_model(jax.random.fold_in(key, 3), d + d % 2, 2, 1, mask="causal", value="identity", dtype=jnp.float32)
    X0 = init_tokens(jax.random.fold_in(key, 4), B, n, m.d_model)
    out["causal_two_heads"] = (solve(m, X0, cfg.t1, save=Save(ts=ts, observe=consensus)), X0)
    # (c) causal, one head, symmetric V with a simple top eigenvalue
    spec = np.linspace(1.0, -0.5, d)
    m = random_model(jax.random.fold_in(key, 5), d, 1, 1, mask="causal", value="symmetric", spectrum=spec,
                     dtype=jnp.float32)
    X0 = init_tokens(jax.random.fold_in(key, 6), B, n, d)
    sol = solve(m, X0, cfg.t1, save=Save(ts=ts, observe=consensus))
    _, vec = np.linalg.eigh(np.asarray(jnp.einsum("hdk,hke->de", m.layers.o[0], repeat_kv(m.layers).v[0]), np.float64))
    out["causal_symmetric_V"] = (sol, np.abs(np.asarray(sol.final, np.float64) @ vec[:, -1]))
    return out


def _with_dtype(fn, dtype):
    return lambda *a, **k: fn(*a, dtype=dtype, rtol=1e-9 if dtype == jnp.float64 else 1e-6,
                              atol=1e-11 if dtype == jnp.float64 else 1e-8, **k)


def _runs(model: Model) -> list[tuple[str, Dynamics, bool]]:
    if model.layers.ln1_w is None:
        raise ConfigError("repeated passes of a real model need a converted checkpoint (LayerNorm and FFN weights); "
                          "this model is attention-only")
    no_ffn = NO_FFN if model.norm_style == "pre" else Dynamics(norm="layernorm", ffn=False, biases=True)
    return [("ffn_periodic", FAITHFUL, False), ("ffn_redrawn", FAITHFUL, True),
            ("no_ffn_periodic", no_ffn, False), ("no_ffn_redrawn", no_ffn, True)]


#: The study's public shape (as every study's): ``Config`` and ``run``.
Config = ConsensusConfig


def run(out_dir, config: ConsensusConfig | None = None, *, model: Model | None = None, model_name: str = "model",
        progress=None) -> dict:
    """Run the study of ``model`` into ``out_dir``; returns the tables (lists of row dicts). ``config`` defaults
    to ``Config()``; ``progress(message)`` receives the stage messages. With ``dtype='float64'`` the study runs
    inside a scoped ``jax.enable_x64`` (the caller's ``jax_enable_x64`` is left as it was); otherwise the theorem
    settings run in float64 only where the caller has enabled it."""
    model = need_model("consensus", model)
    cfg = own_config("consensus", ConsensusConfig, config)
    cfg.check()
    with jax.enable_x64(True) if cfg.dtype == "float64" else contextlib.nullcontext():
        return _run(model, Path(out_dir), cfg, model_name, progress or quiet)


def run_study(model: Model, out_dir, cfg: ConsensusConfig | None = None, *, model_name: str = "model",
              progress=None) -> dict:
    """:func:`run` under its earlier name."""
    return run(out_dir, cfg, model=model, model_name=model_name, progress=progress)


def _run(model: Model, out: Path, cfg: ConsensusConfig, model_name: str, say) -> dict:
    runs = _runs(model)
    key = jax.random.key(cfg.seed)
    ids = random_prompts(jax.random.fold_in(key, 7), model, cfg.prompts, cfg.tokens)
    X0 = embed_prompts(model, ids, dtype=jnp.float64 if cfg.dtype == "float64" else jnp.float32)
    tables: dict = {"passes": [], "synthetic": [], "summary": []}
    curves = {}
    for name, dyn, redraw in runs:
        say(f"{name}: {cfg.prompts} prompts x {cfg.tokens} tokens, {cfg.passes} passes of {model.depth} blocks")
        res = repeated_passes(model, X0, cfg.passes, dynamics=dyn, redraw=redraw, key=jax.random.fold_in(key, 8),
                              save=Save(observe=consensus), batch=Batch(precision=cfg.matmul_precision),
                              dtype=cfg.dtype)
        ft = np.asarray(res.observables["first_token"], np.float64)  # [B, passes*depth + 1]
        cc = np.asarray(res.observables["cos_consensus"], np.float64)
        curves[name] = ft
        for layer in range(ft.shape[1]):
            tables["passes"].append({"run": name, "layer": layer,
                                     "pass": (layer - 1) // model.depth + 1 if layer else 0,
                                     "first_token_mean": float(np.nanmean(ft[:, layer])),
                                     "first_token_std": float(np.nanstd(ft[:, layer])),
                                     "cos_consensus_mean": float(np.nanmean(cc[:, layer]))})
        tables["summary"].append({"run": name, "first_token_start": float(np.nanmean(ft[:, 0])),
                                  "first_token_end": float(np.nanmean(ft[:, -1])),
                                  "first_token_end_std": float(np.nanstd(ft[:, -1])),
                                  "nonfinite_prompts": int(np.sum(~np.isfinite(ft[:, -1])))})
    syn = {}
    if cfg.synthetic:
        say("synthetic settings (continuous time, sphere)")
        syn = synthetic_settings(cfg)
        for name, (sol, _) in syn.items():
            obs = {k: np.asarray(v, np.float64) for k, v in sol.observables.items()}
            for i, t in enumerate(sol.ts):
                row = {"setting": name, "t": float(t), "first_token_mean": float(obs["first_token"][:, i].mean()),
                       "cos_consensus_mean": float(obs["cos_consensus"][:, i].mean()),
                       "diameter_mean": float(obs["diameter"][:, i].mean())}
                if "hemisphere" in obs:
                    row["hemisphere_min"] = float(obs["hemisphere"][:, i].min())
                tables["synthetic"].append(row)
    _write(out, model, model_name, cfg, tables, curves, syn)
    return tables


def _write(out: Path, model: Model, model_name: str, cfg: ConsensusConfig, tables, curves, syn) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "passes.csv", csv_text(tables["passes"]))
    atomic_write_text(out / "summary.csv", csv_text(tables["summary"]))
    if tables["synthetic"]:
        keys = sorted({k for r in tables["synthetic"] for k in r}, key=lambda k: list(tables["synthetic"][0]).index(k)
                      if k in tables["synthetic"][0] else 99)
        atomic_write_text(out / "synthetic.csv", csv_text([{k: r.get(k, float("nan")) for k in keys}
                                                       for r in tables["synthetic"]]))
    write_json(out / "config.json", {"command": "consensus", "model": model_name, "config": dataclasses.asdict(cfg),
                                     "model_summary": model.summary().splitlines(), **provenance()})
    figs = []
    if cfg.figures:
        figs = _figures(out, model, curves, syn)
    lines = [f"# Consensus study: {model_name}", "", "```", model.summary(), "```", "",
             f"{cfg.prompts} random prompts of {cfg.tokens} tokens (ids uniform over the vocabulary, the model's "
             f"own embeddings), {cfg.passes} passes of {model.depth} blocks, {cfg.dtype}. The measure is the "
             "GPT-Consensus code's `1 − (1/n) Σ_j cos(x_1, x_j)` after every layer (0 at consensus).", "",
             "| run | first layer | after the last pass | spread (std) | prompts with non-finite values |",
             "|---|---|---|---|---|"]
    for r in tables["summary"]:
        lines.append(f"| {r['run']} | {r['first_token_start']:.4f} | {r['first_token_end']:.4g} | "
                     f"{r['first_token_end_std']:.3g} | {r['nonfinite_prompts']} |")
    if syn:
        lines += ["", "## The theorems' settings (continuous time, tokens on the sphere)", ""]
        for name, (sol, extra) in syn.items():
            obs = {k: np.asarray(v, np.float64) for k, v in sol.observables.items()}
            line = (f"* **{name}**: mean first-token measure {obs['first_token'][:, 0].mean():.3f} at t = 0 → "
                    f"{obs['first_token'][:, -1].mean():.2e} at t = {sol.ts[-1]:g}; all-pairs cosine measure "
                    f"{obs['cos_consensus'][:, -1].mean():.2e}; "
                    f"solver failures {int(np.sum(np.asarray(sol.result) != 0))}")
            if name == "hemisphere":
                dec = np.diff(obs["hemisphere"], axis=1).min()
                line += f"; hemisphere Lyapunov function: largest decrease between saved times {min(dec, 0.0):.1e}"
            if name == "causal_symmetric_V":
                line += f"; |<x_i, v_1>| at the end: median {np.median(extra):.6f}"
            if name == "causal_two_heads":
                drift = np.abs(np.asarray(sol.final)[:, 0] - np.asarray(extra)[:, 0]).max()
                line += f"; first token moved by at most {drift:.1e}"
            lines.append(line)
    write_report(out, lines, figs)


def _figures(out: Path, model: Model, curves, syn) -> list[str]:
    plt = plots.pyplot()
    if plt is None:
        return []
    names = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ft in curves.items():
        m, s = np.nanmean(ft, 0), np.nanstd(ft, 0)
        x = np.arange(ft.shape[1])
        ax.plot(x, m, label=name)
        ax.fill_between(x, np.maximum(m - s, 1e-12), m + s, alpha=0.2)
    for p in range(1, max(len(c[0]) for c in curves.values()) // model.depth + 1):
        ax.axvline(p * model.depth, color="0.85", lw=0.5)
    ax.set_yscale("log")
    ax.set_xlabel("layer (passes marked)")
    ax.set_ylabel("1 − mean cos(x_1, x_j)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plots.save(fig, out / "passes.png", 120)
    names.append("passes.png")
    if syn:
        fig, axes = plt.subplots(1, len(syn), figsize=(4 * len(syn), 3.4))
        for ax, (name, (sol, _)) in zip(np.atleast_1d(axes), syn.items(), strict=True):
            ft = np.asarray(sol.observables["first_token"], np.float64)
            ax.semilogy(sol.ts, np.maximum(ft.T, 1e-16), color="C0", alpha=0.15)
            ax.semilogy(sol.ts, np.maximum(ft.mean(0), 1e-16), color="k")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("t")
        np.atleast_1d(axes)[0].set_ylabel("first-token measure")
        fig.tight_layout()
        plots.save(fig, out / "synthetic.png", 120)
        names.append("synthetic.png")
    return names
