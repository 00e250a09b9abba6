"""``jaxattn simulate``: the discrete dynamics of a random or converted model over many initial conditions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jaxattn.cli._config import RANDOM_ONLY
from jaxattn.cli._shared import _check_number, _check_rope, _dtype, _start_run, load_model_arg, model_dims
from jaxattn.cli._study import formatter
from jaxattn.errors import JaxattnError, positive_int, real
from jaxattn.model.attention import KERNELS as ATTENTION_KERNELS

SIM_DEFAULTS = dict(
    model="random", n=10, d=64, heads=4, depth=12, shared=True, weights="gaussian", value="random", mask="full",
    steps=None, num_init=1000, seed=0, alpha=1.0, beta=1.0, init="sphere", norm="l2", ffn=False, pre_ln=False,
    biases=False, attention="softmax", scale=None, rope="none", dtype="float32", matmul_precision="highest", chunk=None,
    out="runs/simulate", progress=True, keep_final=False, overwrite=False,
)


def register(sub):
    p = sub.add_parser("simulate", formatter_class=formatter,
                       help="simulate token dynamics over many random initial conditions",
                       description="Simulate the discrete dynamics D1-D6 (docs/models.md) of a random or converted "
                                   "model over many random initial conditions and keep consensus observables per step.")
    d = SIM_DEFAULTS
    g = p.add_argument_group("model")
    g.add_argument("--model", help=f"'random', 'minilm' (built-in all-MiniLM-L6-v2) or a converted .safetensors "
                                   f"file [{d['model']}]")
    g.add_argument("--d", type=int, help=f"random model: token dimension [{d['d']}]")
    g.add_argument("--heads", type=int, help=f"random model: number of heads H (d %% H == 0) [{d['heads']}]")
    g.add_argument("--depth", type=int, help=f"random model: number of blocks [{d['depth']}]")
    g.add_argument("--shared", action=argparse.BooleanOptionalAction, default=None,
                   help=f"random model: one weight set for every block (ALBERT-like) or one per block [{d['shared']}]")
    g.add_argument("--weights", choices=["gaussian", "uniform", "identity"],
                   help=f"random model: law of the entries of Q, K (and V, O unless --value identity): gaussian "
                        f"N(0, 1/d), uniform in [-1, 1], identity (Q = K = I) [{d['weights']}]")
    g.add_argument("--value", choices=["random", "identity"],
                   help=f"random model: value/output matrices [{d['value']}]")
    g.add_argument("--mask", help=f"random model: 'full', 'causal' or 'local:W' [{d['mask']}]")
    g.add_argument("--scale", type=float, help="random model: score scale s of <Q x_i, K x_j> (the clustering papers "
                                               "use 1) [1/sqrt(d_h)]")
    g = p.add_argument_group("dynamics")
    g.add_argument("--steps", type=int, help="number of steps (default: the model's depth; more prolongs it)")
    g.add_argument("--alpha", type=float, help=f"step size α [{d['alpha']}]")
    g.add_argument("--beta", type=float, help=f"inverse temperature β multiplying the scores [{d['beta']}]")
    g.add_argument("--norm", choices=["l2", "none", "layernorm"], help=f"normalisation after the update [{d['norm']}]")
    g.add_argument("--ffn", action=argparse.BooleanOptionalAction, default=None,
                   help=f"keep the FFN (converted models) [{d['ffn']}]")
    g.add_argument("--pre-ln", action=argparse.BooleanOptionalAction, default=None,
                   help=f"pre-norm models (GPT-2, GPT-Neo): keep ln_1 before attention [{d['pre_ln']}]")
    g.add_argument("--biases", action=argparse.BooleanOptionalAction, default=None,
                   help=f"include biases (converted models) [{d['biases']}]")
    g.add_argument("--attention", choices=ATTENTION_KERNELS,
                   help=f"attention kernel: softmax, uniform a_ij = 1/n (the Oja model D3) or unnormalised "
                        f"exp(scores)/n (rows not normalised) [{d['attention']}]")
    g.add_argument("--rope", choices=["none", "model", "on"],
                   help=f"positions in attention: 'none' position-free (tokens exchangeable), 'model' the model's own "
                        f"RoPE (Llama, GPT-NeoX...), 'on' the model's or the standard RoPE (θ = 10⁴) [{d['rope']}]")
    g = p.add_argument_group("initial conditions and run")
    g.add_argument("--n", type=int, help=f"tokens per initial condition [{d['n']}]")
    g.add_argument("--num-init", type=int, help=f"number of random initial conditions [{d['num_init']}]")
    g.add_argument("--init", choices=["sphere", "gaussian"], help=f"distribution of initial tokens [{d['init']}]")
    g.add_argument("--seed", type=int, help=f"random seed (model and initial conditions) [{d['seed']}]")
    g.add_argument("--dtype", choices=["float32", "float64"], help=f"precision [{d['dtype']}]")
    g.add_argument("--matmul-precision", choices=["highest", "tf32", "bf16"],
                   help=f"matrix products of float32 runs: full float32, or TF32/bf16 (faster on GPUs, about "
                        f"1e-3 off after 24 layers; docs/gpu.md) [{d['matmul_precision']}]")
    g.add_argument("--chunk", type=int, help="initial conditions per stored chunk (memory, resume granularity) "
                                             "[auto: from a 256 MiB budget for the chunk's arrays]")
    g.add_argument("--out", help=f"output run directory [{d['out']}]")
    g.add_argument("--keep-final", action=argparse.BooleanOptionalAction, default=None,
                   help=f"also store the final states [B, n, d] [{d['keep_final']}]")
    g.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=None,
                   help=f"replace a finished run in --out (only the files jaxattn wrote) [{d['overwrite']}]")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help=f"show a progress bar [{d['progress']}]")
    g.add_argument("--config", help="JSON or TOML file of option = value, or a finished run's config.json "
                                    "(command-line options win)")
    p.set_defaults(func=run, defaults=SIM_DEFAULTS)


def consensus_lines(diam, cosc, ok, steps: int) -> list[str]:
    """The summary's statistics of the diameter and 1 - cos over the finite conditions ``ok``."""
    import numpy as np

    if not ok.any():
        return ["diameter     n/a: no initial condition stayed finite"]
    final = diam[ok, -1]
    q = np.quantile(final, [0.0, 0.5, 0.9, 1.0])
    return [f"diameter     step 0 mean {diam[ok, 0].mean():.4g}  ->  step {steps}: min {q[0]:.3g}  median {q[1]:.3g}  "
            f"90% {q[2]:.3g}  max {q[3]:.3g}",
            f"consensus    diameter < 1e-2 in {np.mean(final < 1e-2) * 100:.1f}%, "
            f"< 1e-4 in {np.mean(final < 1e-4) * 100:.1f}% of {'the finite ' if not ok.all() else ''}initial "
            f"conditions; mean 1-cos {cosc[ok, -1].mean():.3g}"]


def run(args, cfg) -> int:
    from jaxattn.dynamics.discrete import Dynamics, check_dynamics
    from jaxattn.dynamics.options import Batch
    from jaxattn.dynamics.runner import PRECISIONS
    from jaxattn.io import rundir
    from jaxattn.io.results import atomic_write_text, provenance, save_arrays, weights_sha256, write_json
    from jaxattn.io.store import nonfinite_conditions, nonfinite_warning
    from jaxattn.sweeps.chunked import STORE, Timer, finish, sweep

    dtype = _dtype(cfg["dtype"])
    if cfg["matmul_precision"] not in PRECISIONS:  # a config file's value has not met argparse's choices
        raise JaxattnError(f"--matmul-precision must be one of {', '.join(PRECISIONS)}, "
                           f"got {cfg['matmul_precision']!r}")
    for k in ("n", "num_init", "chunk"):
        if not (k == "chunk" and cfg[k] is None):  # no --chunk: chosen from a memory budget
            positive_int(f"--{k.replace('_', '-')}", cfg[k], JaxattnError)
    for k in ("alpha", "beta"):
        _check_number(k, cfg[k])
    if cfg["scale"] is not None:
        real("--scale", cfg["scale"], positive=True, error=JaxattnError)
    out = Path(cfg["out"])
    model = load_model_arg(cfg["model"], cfg)
    steps = model.depth if cfg["steps"] is None else cfg["steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise JaxattnError(f"--steps must be a non-negative integer, got {steps!r}")
    dyn = Dynamics(norm=cfg["norm"], ffn=cfg["ffn"], pre_ln=cfg["pre_ln"], biases=cfg["biases"],
                   attention=cfg["attention"], rope=cfg["rope"])
    # options that would be recorded but change nothing are refused, before anything is written: what no model
    # could run (the library's checks), then what this model would ignore
    check_dynamics(model, dyn)
    if cfg["attention"] == "uniform" and cfg["beta"] != SIM_DEFAULTS["beta"]:
        raise JaxattnError("--beta does nothing with --attention uniform (a_ij = 1/n whatever the scores): remove it")
    if cfg["attention"] == "uniform" and cfg["scale"] is not None:
        raise JaxattnError("--scale does nothing with --attention uniform (no scores): remove it")
    if dyn.biases and model.layers.bq is None and model.layers.bo is None:
        raise JaxattnError("--biases: this model has no biases (random models are drawn without them)")
    if dyn.pre_ln and model.norm_style != "pre":
        raise JaxattnError("--pre-ln only applies to pre-norm models (GPT-2, GPT-Neo)")
    _check_rope(model, cfg["rope"])
    run = _start_run(cfg, "simulate", own=(STORE,))
    resolved = {k: v for k, v in cfg.items() if not k.startswith("_")}
    if cfg["model"] != "random":  # the random model's defaults describe nothing here (and would break a replay)
        for k in RANDOM_ONLY:
            del resolved[k]
        resolved["model_dims"] = model_dims(model)
    resolved.update(steps=steps, model_summary=model.summary().splitlines(), weights_sha256=weights_sha256(model))
    stats: dict = {}
    with rundir.undone_if_refused(run), Timer() as t:
        arrays = sweep(model, num_init=cfg["num_init"], n=cfg["n"], steps=steps, seed=cfg["seed"], out_dir=out,
                       chunk=cfg["chunk"], init=cfg["init"], dynamics=dyn, alpha=cfg["alpha"], beta=cfg["beta"],
                       dtype=dtype, batch=Batch(precision=cfg["matmul_precision"]), progress=cfg["progress"],
                       keep_final=cfg["keep_final"], stats=stats,
                       fingerprint={k: v for k, v in resolved.items() if k not in ("progress", "chunk", "out",
                                                                                   "overwrite", "model_summary")})
    save_arrays(out / "observables.safetensors", arrays, {"config": json.dumps(resolved, sort_keys=True)})
    resumed = stats.get("resumed", 0) > 0
    resolved["chunk"] = stats.get("chunk", cfg["chunk"])  # the chunk size used (auto when not given)
    rate = stats.get("computed", 0) * steps / max(t.seconds, 1e-9)
    bad = nonfinite_conditions(arrays, cfg["num_init"])
    write_json(out / "config.json", {"command": "simulate", "config": resolved, **provenance(),
                                     "seconds": round(t.seconds, 3), "resumed": resumed,
                                     "computed_conditions": stats.get("computed", 0),
                                     "resumed_conditions": stats.get("resumed", 0),
                                     "nonfinite_conditions": int(bad.sum())})
    lines = [
        "jaxattn simulate",
        model.summary(),
        f"run          {cfg['num_init']} initial conditions x {cfg['n']} tokens, {steps} steps, "
        f"alpha={cfg['alpha']:g} beta={cfg['beta']:g} norm={cfg['norm']} "
        + (f"attention={cfg['attention']} " if cfg["attention"] != "softmax" else "")
        + f"dtype={cfg['dtype']} "
        f"matmul={cfg['matmul_precision']} seed={cfg['seed']}",
        f"time         {t.seconds:.2f} s ({rate:,.0f} condition-steps/s computed"
        + (f"; {stats['resumed']} conditions resumed from an interrupted run)" if resumed else ")"),
        *consensus_lines(arrays["observables.diameter"], arrays["observables.cos_consensus"], ~bad, steps),
    ]
    if bad.any():
        warning = nonfinite_warning(int(bad.sum()), len(bad))
        lines.append(f"warning      {warning}")
        print(f"jaxattn: warning: {warning}", file=sys.stderr)
    lines.append(f"output       {out}/ (config.json, observables.safetensors, summary.txt)")
    text = "\n".join(lines) + "\n"
    atomic_write_text(out / "summary.txt", text)
    rundir.finish(run)
    finish(out)
    print(text, end="")
    return 0
