"""The ``jaxattn`` command line.

Every subcommand prints one clear line and exits with status 2 on bad input; results go to a
run directory (resolved configuration with seed, versions and device, arrays, summary).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from jaxattn.cli._study import formatter
from jaxattn.errors import JaxattnError, positive_int, real
from jaxattn.model.attention import KERNELS as ATTENTION_KERNELS

EXIT_BAD_INPUT = 2

#: Subcommands that live in their own module of this package: each exposes ``register(sub)``, which
#: adds its parser to the ``argparse`` sub-parsers and sets ``func=run`` (``run(args, cfg) -> int``).
COMMAND_MODULES = ("solve", "sweep", "consensus", "clusters", "stability")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, non-zero exit
        self.exit(EXIT_BAD_INPUT, f"jaxattn: error: {message}\n")


# ---------------------------------------------------------------- configuration files
def _load_config(path: str) -> dict:
    from jaxattn.io.configfile import load_config

    return {k.replace("-", "_"): v for k, v in load_config(path).items()}


def _check_type(key: str, value, default):
    """Config-file values must have the type of the option's default (no silent coercion)."""
    if value is None or default is None:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            raise JaxattnError(f"config value {key} must be finite, got {value!r}")
    elif isinstance(default, str) and isinstance(value, list):
        # a list option (gammas, tokens, ...) is one comma-separated string on the command line; config files and
        # replayed config.json files may hold it as a list
        ok = all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value)
        value = ",".join(map(str, value))
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise JaxattnError(f"config value {key} must be {type(default).__name__}, got {value!r}")
    return value


def _resolve(args: argparse.Namespace, defaults: dict) -> dict:
    """Command line > config file > defaults. Unknown config keys are refused; values are type-checked.
    A finished run's own ``config.json`` is accepted as a config (its ``config`` table is replayed)."""
    cfg = _load_config(args.config) if getattr(args, "config", None) else {}
    if "command" in cfg and isinstance(cfg.get("config"), dict):  # a run directory's config.json
        if cfg["command"] != args.command:
            raise JaxattnError(f"{args.config} is the config of a `{cfg['command']}` run, not `{args.command}`")
        cfg = _replayed(cfg, defaults)
    known = set(defaults)
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise JaxattnError(f"unknown option(s) in config file: {', '.join(unknown)}")
    cfg = {k: _check_type(k, v, defaults[k]) for k, v in cfg.items()}
    out = {}
    for k, default in defaults.items():
        v = getattr(args, k, None)
        out[k] = v if v is not None else cfg.get(k, default)
    out["_given"] = {k for k in defaults if getattr(args, k, None) is not None or k in cfg}
    return out


def _replayed(run: dict, defaults: dict) -> dict:
    """The options of a finished run's ``config.json``: its ``config`` table and the model it ran on (the studies
    record the model beside the table; ``analyze`` a random model's dimensions in ``model_dims``). A converted
    model brings its own dimensions, so the random-model options that ``simulate`` records are not replayed."""
    cfg = {k: v for k, v in run["config"].items() if k in defaults}
    if "model" in defaults and isinstance(run.get("model"), str):
        cfg.setdefault("model", run["model"])
    dims = run.get("model_dims")
    if run["config"].get("uniform_attention") and "attention" in defaults:  # runs before --attention
        cfg.setdefault("attention", "uniform")
    if cfg.get("model", "random") != "random":
        cfg = {k: v for k, v in cfg.items() if k not in RANDOM_ONLY}
    elif isinstance(dims, dict):
        cfg.update({k: dims[k] for k in ("d", "heads", "depth", "shared") if k in dims and k in defaults})
        masks = set(dims.get("masks", ()))
        if len(masks) == 1 and "mask" in defaults:  # recorded per weight set as 'full', 'causal', 'causal/local:W'
            cfg["mask"] = masks.pop().replace("causal/local:", "local:")
    return cfg


def _start_run(cfg: dict, command: str, own: tuple[str, ...]):
    """``--out`` of a resumable command, checked and prepared before any computation: new, empty, an unfinished
    run of the command (resumed) or, with ``--overwrite``, a finished one (see :mod:`jaxattn.io.rundir`)."""
    from jaxattn.io import rundir

    return rundir.start(cfg["out"], command, overwrite=cfg["overwrite"], resumable=True, own=own)


def _check_number(name: str, v) -> None:
    real(f"--{name}", v, error=JaxattnError)


# ---------------------------------------------------------------- simulate
SIM_DEFAULTS = dict(
    model="random", n=10, d=64, heads=4, depth=12, shared=True, weights="gaussian", value="random", mask="full",
    steps=None, num_init=1000, seed=0, alpha=1.0, beta=1.0, init="sphere", norm="l2", ffn=False, pre_ln=False,
    biases=False, attention="softmax", scale=None, rope="none", dtype="float32", matmul_precision="highest", chunk=None,
    out="runs/simulate", progress=True, keep_final=False, overwrite=False,
)
#: Options that only describe a random model (refused with a converted one: it brings its own).
RANDOM_ONLY = ("d", "heads", "depth", "shared", "weights", "value", "mask", "scale")


def _add_simulate(sub):
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
                        f"exp(scores)/n (the clustering papers' code) [{d['attention']}]")
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
    p.set_defaults(func=cmd_simulate, defaults=SIM_DEFAULTS)


def _dtype(name: str):
    import jax
    import jax.numpy as jnp

    if name == "float64":
        jax.config.update("jax_enable_x64", True)
        return jnp.float64
    if name != "float32":
        raise JaxattnError(f"dtype must be float32 or float64, got {name!r}")
    return jnp.float32


def load_model_arg(spec: str, cfg: dict):
    """Resolve ``--model``: 'random', 'minilm' or a converted file."""
    from jaxattn.model.sampling import seeded_model

    if spec == "random":
        for k in ("d", "heads", "depth"):
            positive_int(f"--{k}", cfg.get(k), JaxattnError)
        if not isinstance(cfg["seed"], int) or isinstance(cfg["seed"], bool) or not 0 <= cfg["seed"] < 2**63:
            raise JaxattnError(f"--seed must be an integer in [0, 2^63), got {cfg['seed']!r}")
        return seeded_model(cfg["seed"], cfg["d"], cfg["heads"], cfg["depth"], shared=cfg["shared"],
                            weights=cfg["weights"], value=cfg["value"], mask=cfg["mask"], scale=cfg.get("scale"))
    given = sorted(k for k in RANDOM_ONLY if k in cfg.get("_given", ()))
    if given:
        raise JaxattnError(f"--{given[0]} only applies to --model random (a converted model brings its own "
                           "dimensions, heads, depth and masks)")
    from jaxattn.io.checkpoints import load_any

    return load_any(spec)


def _check_rope(model, rope: str) -> None:
    if rope == "model" and model.rope is None:
        raise JaxattnError("--rope model: this model has no RoPE (its positions, if any, are embeddings); "
                           "--rope on applies the standard one")


def model_dims(model) -> dict:
    """What a converted model brings instead of the random-model options (recorded in config.json)."""
    lay = model.layers
    masks = [("causal" if bool(lay.causal[g]) else "full") + (f"/local:{int(lay.window[g])}" if int(lay.window[g])
                                                              else "") for g in range(lay.n_sets)]
    return {"d": model.d_model, "heads": model.n_heads, "depth": model.depth, "shared": model.shared,
            "masks": masks, "family": model.family}


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


def cmd_simulate(args, cfg) -> int:
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
        f"alpha={cfg['alpha']:g} beta={cfg['beta']:g} norm={cfg['norm']} dtype={cfg['dtype']} "
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


# ---------------------------------------------------------------- convert / inspect
def _add_convert(sub):
    p = sub.add_parser("convert", formatter_class=formatter,
                       help="convert a Hugging Face checkpoint to canonical safetensors",
                       description="Convert a Hugging Face checkpoint (ALBERT, BERT-family, GPT-2, GPT-Neo) to "
                                   "jaxattn's canonical safetensors layout. SOURCE is a local folder with config.json "
                                   "and model.safetensors (sharded or not) or pytorch_model.bin, or a hub model id "
                                   "when online.")
    p.add_argument("source", help="checkpoint folder or hub model id")
    p.add_argument("--out", required=True, help="output .safetensors file (written atomically)")
    p.add_argument("--dtype", choices=["source", "float32", "float64"], default="source",
                   help="stored precision [source: keep the checkpoint's]")
    p.add_argument("--revision", help="hub revision (branch, tag or commit) for a hub id")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=cmd_convert)


def cmd_convert(args, cfg) -> int:
    from jaxattn.io.checkpoints import convert_source, inspect, save
    from jaxattn.io.rundir import file_out

    target = file_out(args.out, args.overwrite)
    model, info = convert_source(args.source, dtype=args.dtype, revision=args.revision)
    try:
        out = save(model, target, info)
    except OSError as e:  # written through a temporary file beside --out: name the user's path, not that one
        raise JaxattnError(f"writing --out {args.out} failed: {e.strerror or e}") from None
    print(inspect(out))
    print(f"written      {out}")
    return 0


def _add_inspect(sub):
    p = sub.add_parser("inspect", formatter_class=formatter, help="print the architecture summary of a converted file",
                       description="Print the architecture summary and provenance of a converted .safetensors file.")
    p.add_argument("path", help="converted .safetensors file")
    p.set_defaults(func=cmd_inspect)


def cmd_inspect(args, cfg) -> int:
    from jaxattn.io.checkpoints import inspect

    print(inspect(args.path))
    return 0


# ---------------------------------------------------------------- analyze / spectrum
def _analyze_defaults() -> dict:
    from jaxattn.studies.power_method import StudyConfig
    from jaxattn.studies.skeleton import config_defaults

    gammas = ",".join(f"{g:g}" for g in StudyConfig().gammas)  # the command line takes them as one list
    return config_defaults(StudyConfig, model="minilm", gammas=gammas, out="runs/analyze", overwrite=False)


ANALYZE_DEFAULTS = _analyze_defaults()


def _add_analyze(sub):
    p = sub.add_parser("analyze", formatter_class=formatter,
                       help="run the power-method study on a model (the main job)",
                       description="The power-method study: spectra of every layer matrix F = Σ O_h V_h, "
                                   "simplified D1 dynamics from many random initial conditions, per-layer ρ1, Δρ1, P1 "
                                   "against the baselines over all eigendirections, a prolonged run for shared-weight "
                                   "models, the same with FFN and affine LayerNorm, and rank-1 steering. Writes tables "
                                   "(CSV), figures (PNG) and report.md into the output directory.")
    d = ANALYZE_DEFAULTS
    p.add_argument("model", nargs="?", help=f"'minilm' (built-in all-MiniLM-L6-v2), 'random', a converted .safetensors "
                                            f"file or a checkpoint folder [{d['model']}]")
    p.add_argument("--num-init", type=int, help=f"random initial conditions [{d['num_init']}]")
    p.add_argument("--n", type=int, help=f"tokens per initial condition [{d['n']}]")
    p.add_argument("--seed", type=int, help=f"random seed [{d['seed']}]")
    p.add_argument("--init", choices=["gaussian", "sphere"], help=f"initial token distribution [{d['init']}]")
    p.add_argument("--alpha", type=float, help=f"step size α [{d['alpha']}]")
    p.add_argument("--beta", type=float, help=f"inverse temperature β [{d['beta']}]")
    p.add_argument("--order", choices=["real", "modulus", "step"], help=f"principal eigenvalue: largest real part, "
                                                                         f"modulus or |1+αλ| [{d['order']}]")
    p.add_argument("--prolong", type=int, help=f"shared-weight models: also run PROLONG × depth steps [{d['prolong']}]")
    p.add_argument("--gammas", help=f"comma-separated steering gains γ [{d['gammas']}]")
    p.add_argument("--steer-target", type=float, help=f"also find, by bisection in log γ, the smallest gain whose mean "
                                                      f"alignment with the steering direction reaches this value; "
                                                      f"0: no search [{d['steer_target']}]")
    p.add_argument("--ffn-study", action=argparse.BooleanOptionalAction, default=None,
                   help=f"also run with FFN and affine LayerNorm (models that have them) [{d['ffn_study']}]")
    p.add_argument("--sensitivity", action=argparse.BooleanOptionalAction, default=None,
                   help=f"also report which layer matters: d(mean ρ1)/d(log F_k) for every block, by jax.grad "
                        f"[{d['sensitivity']}]")
    p.add_argument("--rope", choices=["none", "model", "on"],
                   help=f"D1's positions: 'none' position-free (the plain reading), 'model' the model's own RoPE, "
                        f"'on' the model's or the standard RoPE (θ = 10⁴) [{d['rope']}]")
    p.add_argument("--dtype", choices=["float32", "float64"],
                   help=f"simulation precision (spectra are float64) [{d['dtype']}]")
    p.add_argument("--matmul-precision", choices=["highest", "tf32", "bf16"],
                   help=f"matrix products of float32 runs (docs/gpu.md) [{d['matmul_precision']}]")
    p.add_argument("--chunk", type=int, help=f"initial conditions per chunk [{d['chunk']}]")
    p.add_argument("--out", help=f"output run directory [{d['out']}]")
    p.add_argument("--figures", action=argparse.BooleanOptionalAction, default=None,
                   help=f"write PNG figures [{d['figures']}]")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help=f"show progress bars [{d['progress']}]")
    p.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=None,
                   help=f"replace a finished run in --out (only the files jaxattn wrote) [{d['overwrite']}]")
    p.add_argument("--config", help="JSON or TOML file of option = value (command-line options win)")
    # random-model options, used when MODEL is 'random'
    for k, v in (("d", 64), ("heads", 4), ("depth", 12)):
        p.add_argument(f"--{k}", type=int, help=f"MODEL=random: {k} [{v}]")
    p.add_argument("--shared", action=argparse.BooleanOptionalAction, default=None,
                   help="MODEL=random: one weight set for every block [True]")
    p.add_argument("--mask", help="MODEL=random: 'full', 'causal' or 'local:W' [full]")
    p.set_defaults(func=cmd_analyze, defaults={**ANALYZE_DEFAULTS, "d": 64, "heads": 4, "depth": 12, "shared": True,
                                               "mask": "full", "weights": "gaussian", "value": "random"})


def cmd_analyze(args, cfg) -> int:
    from jaxattn.io import rundir
    from jaxattn.studies.power_method import STORE, StudyConfig, run_study

    _dtype(cfg["dtype"])
    try:
        gammas = tuple(float(g) for g in str(cfg["gammas"]).split(",") if g.strip())
    except ValueError:
        raise JaxattnError(f"--gammas must be comma-separated numbers, got {cfg['gammas']!r}") from None
    study = StudyConfig(num_init=cfg["num_init"], n=cfg["n"], seed=cfg["seed"], init=cfg["init"], alpha=cfg["alpha"],
                        beta=cfg["beta"], order=cfg["order"], prolong=cfg["prolong"], gammas=gammas,
                        steer_target=cfg["steer_target"],
                        ffn_study=cfg["ffn_study"], sensitivity=cfg["sensitivity"], dtype=cfg["dtype"],
                        matmul_precision=cfg["matmul_precision"],
                        chunk=cfg["chunk"], progress=cfg["progress"],
                        figures=cfg["figures"], rope=cfg["rope"])
    study.check()
    for k in ("alpha", "beta"):
        _check_number(k, cfg[k])
    model = load_model_arg(cfg["model"], cfg)
    _check_rope(model, cfg["rope"])
    out = Path(cfg["out"])
    run = _start_run(cfg, "analyze", own=(STORE,))
    with rundir.undone_if_refused(run):
        tables = run_study(model, out, study, model_name=str(cfg["model"]))
    rundir.finish(run)
    main_rows = tables["main"]
    holds = sum(r["holds"] for r in main_rows)
    print(model.summary())
    print(f"power-method analogy holds in {holds} of {len(main_rows)} layers "
          f"(mean Δρ1 {sum(r['drho1'] for r in main_rows) / len(main_rows):+.4f}, "
          f"mean P1 {sum(r['P1'] for r in main_rows) / len(main_rows):.3f})")
    if "steer_target" in tables:
        t = tables["steer_target"][0]
        if t["reached"]:
            print(f"steering: smallest gain reaching mean alignment {t['target']:g}: γ = {t['gamma']:.6g} "
                  f"(β = {t['beta']:.4g}), measured mean alignment {t['align_mean']:.4f}, spectral gap "
                  f"{t['gap_after']:.4g}")
        else:
            print(f"steering: mean alignment {t['target']:g} not reached; γ = {t['gamma']:.6g} gives "
                  f"{t['align_mean']:.4f}")
    else:
        best = max(tables["steering"], key=lambda r: r["gamma"])
        print(f"steering: γ = {best['gamma']:g} gives mean alignment {best['align_mean']:.4f} "
              "with the target direction")
    print(f"report       {out / 'report.md'}")
    return 0


def _add_spectrum(sub):
    p = sub.add_parser("spectrum", formatter_class=formatter, help="print the spectra of a model's layer matrices",
                       description="Eigenvalues of every layer matrix F = Σ_h O_h V_h (float64), the case analysis "
                                   "(1 real dominant, 2 complex pair, 3 near-degenerate) and the spectral gaps.")
    p.add_argument("model", help="'minilm', a converted .safetensors file or a checkpoint folder")
    p.add_argument("--order", choices=["real", "modulus", "step"], default="real",
                   help="which eigenvalue is principal: 'real' the largest real part (what matters with the skip "
                        "connection), 'modulus' the largest |λ|, 'step' the largest |1 + αλ| (one D1 step) [real]")
    p.add_argument("--alpha", type=float, help="step size α of --order step [1.0]")
    p.set_defaults(func=cmd_spectrum)


def cmd_spectrum(args, cfg) -> int:
    from jaxattn.analysis.spectral import spectrum
    from jaxattn.io.checkpoints import load_any
    from jaxattn.studies.power_method import spectrum_rows

    if args.alpha is not None:  # refused rather than recorded: it would change nothing, or order by NaN
        _check_number("alpha", args.alpha)
        if args.order != "step":
            raise JaxattnError(f"--alpha only applies to --order step (--order {args.order} does not depend on α)")
    alpha = 1.0 if args.alpha is None else args.alpha
    model = load_any(args.model)
    rows = spectrum_rows(spectrum(model, order=args.order, alpha=alpha), alpha)
    print(model.summary())
    print(f"{'set':>4} {'case':>4} {'Re λ1':>10} {'Im λ1':>10} {'Re λ2':>10} {'gap':>10} "
          f"{'|<v1,v2>|':>10} {'radius':>10}")
    for r in rows:
        print(f"{r['weight_set']:>4} {r['case']:>4} {r['lambda1_re']:>10.4g} {r['lambda1_im']:>10.4g} "
              f"{r['lambda2_re']:>10.4g} {r['gap']:>10.4g} {r['v1_v2_collinearity']:>10.3f} "
              f"{r['spectral_radius']:>10.4g}")
    return 0


# ---------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jaxattn", description="Transformers as dynamical systems, simulated fast in JAX.",
                     formatter_class=formatter)
    from jaxattn import __version__

    parser.add_argument("--version", action="version", version=f"jaxattn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_simulate(sub)
    _add_analyze(sub)
    _add_convert(sub)
    _add_inspect(sub)
    _add_spectrum(sub)
    _register_command_modules(sub)
    return parser


def _register_command_modules(sub) -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"jaxattn.cli.{name}").register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = _resolve(args, args.defaults) if hasattr(args, "defaults") else {}
        return int(args.func(args, cfg) or 0)
    except JaxattnError as e:
        print(f"jaxattn: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        print(f"jaxattn: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        if getattr(args, "resumes", True):
            print("jaxattn: interrupted; run the same command again to resume", file=sys.stderr)
        else:
            print("jaxattn: interrupted; nothing was kept, run the same command again to start over", file=sys.stderr)
        return _interrupted(as_program=argv is None)


def _interrupted(as_program: bool) -> int:
    """Exit status 130 after Ctrl-C. As the program (``argv`` from the command line), leave at once: XLA's
    threads may still be running the interrupted computation, and finalising the interpreter under them
    segfaults (status 139 instead of 130)."""
    if as_program:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
