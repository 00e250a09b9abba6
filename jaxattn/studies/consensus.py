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
from jaxattn.config import non_negative, option, positive
from jaxattn.config import seed as seed_check
from jaxattn.dynamics import DTYPES, continuous, named_dtype
from jaxattn.dynamics.discrete import FAITHFUL, NO_FFN, Dynamics
from jaxattn.dynamics.options import PRECISIONS, Batch, Save
from jaxattn.dynamics.passes import redraw_weights, repeated_passes
from jaxattn.dynamics.prompts import embed_prompts, hemisphere_tokens, random_prompts
from jaxattn.errors import ConfigError
from jaxattn.io.results import atomic_write_text, provenance, write_json
from jaxattn.model.params import Model, repeat_kv
from jaxattn.model.sampling import init_tokens, random_model
from jaxattn.studies import plots
from jaxattn.studies.skeleton import check_options, csv_text, need_model, own_config, quiet, refuse_inert, write_report


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
    random_periodic: bool = option(True, "also run random weights drawn once with the model's initialisation and "
                                   "kept for every pass (the paper's random periodic weights)")
    until: float = option(0.0, "stop a run once every prompt's first-token measure is below this (the prompts "
                          "that blew up aside), checked every --block passes (0: run every pass)", check=non_negative)
    block: int = option(10, "passes between the checks of --until", check=positive)
    gpt2_like_n: int = option(0, "also run Theorem 5.1's setting (causal, V = I, two heads, a new Gaussian weight "
                              "set every unit of time, 4 initial conditions) with this many tokens (GPT-2 small's "
                              "prompts: 200); 0: not run", check=non_negative)
    gpt2_like_d: int = option(768, "token dimension of that setting (GPT-2 small: 768)", check=_on_sphere)

    def check(self) -> None:
        """Every option checked against its declaration, and none that changes nothing (:meth:`inert`), before
        any work (one :class:`ConfigError` line)."""
        check_options(self)
        refuse_inert(self, self.inert())

    def inert(self) -> dict[str, str]:
        """The options that change nothing with the others, each with the reason (refused when set)."""
        # without until the passes run in one call: block is only the passes between until's checks
        inert = {} if self.until > 0 else {"block": "until = 0 (the passes run at once, not in blocks between checks)"}
        if self.synthetic:
            return inert
        return inert | dict.fromkeys(("synthetic_d", "synthetic_n", "synthetic_num", "t1"),
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
    # (c) causal, one head, symmetric V with a simple top eigenvalue: random starts, and starts in the
    # hemisphere of v1 (Theorem 5.2's domain); the extra is every token's signed <x_i, v1> at the end
    spec = np.linspace(1.0, -0.5, d)
    m = random_model(jax.random.fold_in(key, 5), d, 1, 1, mask="causal", value="symmetric", spectrum=spec,
                     dtype=jnp.float32)
    _, vec = np.linalg.eigh(np.asarray(jnp.einsum("hdk,hke->de", m.layers.o[0], repeat_kv(m.layers).v[0]), np.float64))
    v1 = vec[:, -1]
    X0 = init_tokens(jax.random.fold_in(key, 6), B, n, d)
    sol = solve(m, X0, cfg.t1, save=Save(ts=ts, observe=consensus))
    out["causal_symmetric_V"] = (sol, np.asarray(sol.final, np.float64) @ v1)
    X0 = hemisphere_tokens(jax.random.fold_in(key, 9), B, n, d, pole=v1)
    sol = solve(m, X0, cfg.t1, save=Save(ts=ts, observe=consensus))
    out["causal_symmetric_V_hemisphere"] = (sol, np.asarray(sol.final, np.float64) @ v1)
    if cfg.gpt2_like_n:
        # (b) at a transformer's size (GPT-2 small: 200 tokens in d = 768): two heads, causal, V = I, a new Gaussian
        # weight set every unit of time (10 cycled)
        gn, gd = cfg.gpt2_like_n, cfg.gpt2_like_d
        m = random_model(jax.random.fold_in(key, 10), gd + gd % 2, 2, 10, shared=False, mask="causal",
                         value="identity", dtype=jnp.float32)
        X0 = init_tokens(jax.random.fold_in(key, 11), 4, gn, m.d_model)
        out["causal_gpt2_like"] = (solve(m, X0, cfg.t1, save=Save(ts=ts, observe=consensus)), X0)
    return out


def _with_dtype(fn, dtype):
    return lambda *a, **k: fn(*a, dtype=dtype, rtol=1e-9 if dtype == jnp.float64 else 1e-6,
                              atol=1e-11 if dtype == jnp.float64 else 1e-8, **k)


#: How the weights of a run vary from pass to pass: the model's own every pass (periodic), redrawn with the
#: model's initialisation before every pass (aperiodic), or drawn once that way and kept (random periodic).
MODES = ("periodic", "redrawn", "random_periodic")


def _runs(model: Model, random_periodic: bool = True) -> list[tuple[str, Dynamics, str]]:
    """``(name, dynamics, mode)`` of every run: with and without the FFN, in every weight mode."""
    if model.layers.ln1_w is None:
        raise ConfigError("repeated passes of a real model need a converted checkpoint (LayerNorm and FFN weights); "
                          "this model is attention-only")
    no_ffn = NO_FFN if model.norm_style == "pre" else Dynamics(norm="layernorm", ffn=False, biases=True)
    modes = MODES if random_periodic else MODES[:2]
    return [(f"{ffn}_{mode}", dyn, mode) for ffn, dyn in (("ffn", FAITHFUL), ("no_ffn", no_ffn)) for mode in modes]


def passes_until(model: Model, X0, passes: int, *, dynamics: Dynamics, mode: str, key, until: float = 0.0,
                 block: int = 10, precision: str = "highest", dtype=None) -> dict[str, np.ndarray]:
    """The consensus measures after every block of ``passes`` passes of ``model`` from ``X0: [B, n, d]`` (every
    ``mode`` of :data:`MODES`); with ``until > 0`` the passes run ``block`` at a time and stop once every prompt's
    first-token measure is below ``until`` (prompts whose measure is not finite aside: they never come back), not
    the mean, which would leave the prompts behind it above ``until``. Returns ``{measure: [B, layers + 1]}``.

    One call runs the passes when ``until`` is 0; in blocks, the redrawn weights of block ``b`` come from
    ``fold_in(key, b)`` (pass ``j`` of it from ``fold_in(fold_in(key, b), j)``).
    """
    base = redraw_weights(model, jax.random.fold_in(key, 1_000_000)) if mode == "random_periodic" else model
    redraw = mode == "redrawn"
    run = lambda X, p, k: repeated_passes(base, X, p, dynamics=dynamics, redraw=redraw, key=k,
                                          save=Save(observe=consensus), batch=Batch(precision=precision), dtype=dtype)
    if until <= 0:
        res = run(X0, passes, key)
        return {k: np.asarray(v, np.float64) for k, v in res.observables.items()}
    parts, X, done = [], X0, 0
    while done < passes:
        p = min(block, passes - done)
        res = run(X, p, jax.random.fold_in(key, done // block))
        obs = {k: np.asarray(v, np.float64) for k, v in res.observables.items()}
        parts.append(obs if done == 0 else {k: v[:, 1:] for k, v in obs.items()})  # a block starts where one ended
        X, done = res.final, done + p
        last = obs["first_token"][:, -1]
        if np.all(last[np.isfinite(last)] < until):  # also when every prompt blew up: nothing left to run
            break
    return {k: np.concatenate([q[k] for q in parts], axis=1) for k in parts[0]}


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



def _run(model: Model, out: Path, cfg: ConsensusConfig, model_name: str, say) -> dict:
    runs = _runs(model, cfg.random_periodic)
    key = jax.random.key(cfg.seed)
    ids = random_prompts(jax.random.fold_in(key, 7), model, cfg.prompts, cfg.tokens)
    X0 = embed_prompts(model, ids, dtype=named_dtype(cfg.dtype))
    tables: dict = {"passes": [], "synthetic": [], "summary": [], "prompts": [], "synthetic_end": []}
    for name, dyn, mode in runs:
        say(f"{name}: {cfg.prompts} prompts x {cfg.tokens} tokens, {cfg.passes} passes of {model.depth} blocks"
            + (f" (until every prompt's first-token measure is below {cfg.until:g})" if cfg.until > 0 else ""))
        obs = passes_until(model, X0, cfg.passes, dynamics=dyn, mode=mode, key=jax.random.fold_in(key, 8),
                           until=cfg.until, block=cfg.block, precision=cfg.matmul_precision, dtype=cfg.dtype)
        ft = obs["first_token"]  # [B, passes*depth + 1]
        cc = obs["cos_consensus"]
        for b in range(ft.shape[0]):  # every prompt at every pass boundary: per-prompt rates and intervals
            for layer in range(0, ft.shape[1], model.depth):
                tables["prompts"].append({"run": name, "prompt": b, "pass": layer // model.depth, "layer": layer,
                                          "first_token": float(ft[b, layer]), "cos_consensus": float(cc[b, layer])})
        for layer in range(ft.shape[1]):
            tables["passes"].append({"run": name, "layer": layer,
                                     "pass": (layer - 1) // model.depth + 1 if layer else 0,
                                     "first_token_mean": float(np.nanmean(ft[:, layer])),
                                     "first_token_std": float(np.nanstd(ft[:, layer])),
                                     "cos_consensus_mean": float(np.nanmean(cc[:, layer]))})
        tables["summary"].append({"run": name, "mode": mode, "ffn": dyn.ffn, "passes": (ft.shape[1] - 1) // model.depth,
                                  "layers": ft.shape[1] - 1, "first_token_start": float(np.nanmean(ft[:, 0])),
                                  "first_token_end": float(np.nanmean(ft[:, -1])),
                                  "first_token_end_std": float(np.nanstd(ft[:, -1])),
                                  "nonfinite_prompts": int(np.sum(~np.isfinite(ft[:, -1])))})
    syn = {}
    if cfg.synthetic:
        say("synthetic settings (continuous time, sphere)")
        syn = synthetic_settings(cfg)
        for name, (sol, extra) in syn.items():
            obs = {k: np.asarray(v, np.float64) for k, v in sol.observables.items()}
            for i, t in enumerate(sol.ts):
                row = {"setting": name, "t": float(t), "first_token_mean": float(obs["first_token"][:, i].mean()),
                       "cos_consensus_mean": float(obs["cos_consensus"][:, i].mean()),
                       "diameter_mean": float(obs["diameter"][:, i].mean())}
                if "hemisphere" in obs:
                    row["hemisphere_min"] = float(obs["hemisphere"][:, i].min())
                tables["synthetic"].append(row)
            tables["synthetic_end"] += synthetic_end_rows(name, sol, extra)
    _write(out, model, model_name, cfg, tables, syn)
    return tables


def synthetic_end_rows(name: str, sol, extra) -> list[dict]:
    """One row per initial condition of a theorem setting at its final time: the consensus measures, how far the
    first token moved (causal settings with ``V = I``: ``extra`` is the initial state), and for the symmetric-V
    settings (``extra``: every token's signed ``<x_i, v1>``) whether every token ends on the same side."""
    obs = {k: np.asarray(v, np.float64) for k, v in sol.observables.items()}
    result = np.asarray(sol.result)
    rows = []
    for b in range(obs["first_token"].shape[0]):
        row = {"setting": name, "condition": b, "solver_ok": bool(result[b] == 0),
               "first_token_end": float(obs["first_token"][b, -1]),
               "cos_consensus_end": float(obs["cos_consensus"][b, -1]),
               "first_token_moved": float("nan"), "min_abs_v1": float("nan"), "same_sign": ""}
        if name.startswith("causal_symmetric_V"):
            c = np.asarray(extra)[b]
            row.update(min_abs_v1=float(np.abs(c).min()), same_sign=bool(np.all(c > 0) or np.all(c < 0)))
        elif name.startswith("causal_"):
            row["first_token_moved"] = float(np.abs(np.asarray(sol.final)[b, 0] - np.asarray(extra)[b, 0]).max())
        rows.append(row)
    return rows


def _write(out: Path, model: Model, model_name: str, cfg: ConsensusConfig, tables, syn) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "passes.csv", csv_text(tables["passes"]))
    atomic_write_text(out / "summary.csv", csv_text(tables["summary"]))
    atomic_write_text(out / "prompts.csv", csv_text(tables["prompts"]))
    if tables["synthetic_end"]:
        atomic_write_text(out / "synthetic_end.csv", csv_text(tables["synthetic_end"]))
    if tables["synthetic"]:
        keys = sorted({k for r in tables["synthetic"] for k in r}, key=lambda k: list(tables["synthetic"][0]).index(k)
                      if k in tables["synthetic"][0] else 99)
        atomic_write_text(out / "synthetic.csv", csv_text([{k: r.get(k, float("nan")) for k in keys}
                                                       for r in tables["synthetic"]]))
    write_json(out / "config.json", {"command": "consensus", "model": model_name, "config": dataclasses.asdict(cfg),
                                     "model_summary": model.summary().splitlines(), **provenance()})
    figs = []
    if cfg.figures:
        figs = _figures(out, model, tables, syn)
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
            if name.startswith("causal_symmetric_V"):
                same = [r["same_sign"] for r in tables["synthetic_end"] if r["setting"] == name]
                line += (f"; |<x_i, v_1>| at the end: median {np.median(np.abs(extra)):.6f}; every token on one side "
                         f"of v_1's hyperplane in {sum(same)}/{len(same)} conditions")
            if name in ("causal_two_heads", "causal_gpt2_like"):
                drift = np.abs(np.asarray(sol.final)[:, 0] - np.asarray(extra)[:, 0]).max()
                line += f"; first token moved by at most {drift:.1e}"
            lines.append(line)
    write_report(out, lines, figs)


#: The most pass boundaries :func:`passes_figure` marks (every k-th pass beyond: a thousand passes would grey the axes).
MARKED_PASSES = 20


def passes_figure(path: Path, passes_rows: list[dict], prompt_rows: list[dict], depth: int) -> bool:
    """``passes.png`` from the study's tables (``passes.csv``, ``prompts.csv``; rows of numbers or of CSV text): the
    mean first-token measure of every run after every layer, and the range over the prompts (smallest to largest) at
    every pass boundary, on a log axis; at most :data:`MARKED_PASSES` pass boundaries are marked. A range rather
    than the mean ± one standard deviation, whose lower edge falls below 0 (off a log axis) as soon as one prompt
    lags. Returns whether a figure was written (matplotlib may be missing)."""
    plt = plots.pyplot()
    if plt is None:
        return False
    curves: dict[str, list[dict]] = {}
    for r in passes_rows:
        curves.setdefault(r["run"], []).append(r)
    at_passes: dict[str, dict[int, list[float]]] = {}  # run -> pass boundary layer -> every prompt's value
    for r in prompt_rows:
        at_passes.setdefault(r["run"], {}).setdefault(int(r["layer"]), []).append(float(r["first_token"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    floor = 1e-16  # where nothing is positive
    last = 0
    for i, (run, mine) in enumerate(curves.items()):
        x = np.array([int(r["layer"]) for r in mine])
        m = np.array([float(r["first_token_mean"]) for r in mine])
        line, = ax.plot(x, np.maximum(m, floor), label=run, color=f"C{i}")
        by_layer = at_passes.get(run, {})
        if by_layer:
            xs = np.array(sorted(by_layer))
            # a prompt at consensus reads round-off, often exactly 0 or just below: the smallest positive value
            lo = np.array([min((v for v in by_layer[k] if v > 0), default=floor) for k in xs])
            hi = np.array([np.nanmax(by_layer[k]) for k in xs])
            ax.fill_between(xs, lo, np.maximum(hi, floor), color=line.get_color(), alpha=0.15, lw=0)
        last = max(last, int(x.max()) if x.size else 0)
    passes = last // depth
    every = max(1, -(-passes // MARKED_PASSES))
    for p in range(every, passes + 1, every):
        ax.axvline(p * depth, color="0.85", lw=0.5, zorder=0)
    ax.set_yscale("log")
    ax.set_xlabel("layer" + (" (passes marked)" if every == 1 else f" (a line every {every} passes)"))
    ax.set_ylabel("1 − mean cos(x_1, x_j): mean, range over prompts")
    ax.legend(fontsize=8)
    fig.tight_layout()
    plots.save(fig, path, 120)
    return True


def _figures(out: Path, model: Model, tables, syn) -> list[str]:
    plt = plots.pyplot()
    if plt is None:
        return []
    names = []
    if passes_figure(out / "passes.png", tables["passes"], tables["prompts"], model.depth):
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
