"""``jaxattn simulate``: the discrete dynamics of a random or converted model over many initial conditions."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from jaxattn.cli._config import RANDOM_ONLY
from jaxattn.cli._shared import (
    add_options,
    as_flags,
    check_rope,
    dtype_arg,
    flag_words,
    load_model_arg,
    model_dims,
    output_options,
    start_run,
    write_summary,
)
from jaxattn.cli._study import command
from jaxattn.cli.movie import movie_option, write_movie
from jaxattn.config import Spec, positive
from jaxattn.dynamics.discrete import check_dynamics
from jaxattn.dynamics.options import Batch
from jaxattn.errors import JaxattnError
from jaxattn.io import rundir
from jaxattn.io.results import provenance, save_arrays, weights_sha256, write_json
from jaxattn.io.store import nonfinite_conditions
from jaxattn.sweeps.chunked import STORE, Timer, finish, sweep
from jaxattn.sweeps.grid import SCHEMA, dynamics_of, fields_of, inert_keys


def _of(section: str, *keys: str) -> list[Spec]:
    return [SCHEMA[section][k] for k in keys]


#: The step size, refused unless > 0 before anything is written (a sweep's key declares a number only; the library
#: refuses it too, but only once the run has started).
ALPHA = dataclasses.replace(SCHEMA["dynamics"]["alpha"], check=positive)


#: simulate's options: the keys of a sweep configuration that a map of one configuration uses (their help, checks
#: and choices come from there; the chunk size is chosen from a memory budget unless given).
GROUPS = {
    "model": _of("model", "source", "d", "heads", "depth", "shared", "weights", "value", "mask", "scale"),
    "dynamics": [*_of("dynamics", "steps"), ALPHA, *_of("dynamics", "beta", "norm", "ffn", "pre_ln", "biases",
                                                        "drop_ln2", "unit_output", "attention", "rope")],
    "initial conditions and run": [*_of("init", "n"), *_of("", "num_init"), *_of("init", "kind"),
                                   *_of("", "seed", "dtype", "matmul_precision"),
                                   dataclasses.replace(SCHEMA[""]["chunk"], default=None,
                                                       help="initial conditions per stored chunk (memory, resume "
                                                            "granularity); default: from a 256 MiB budget for the "
                                                            "chunk's arrays"),
                                   *_of("", "keep_final")],
}


def register(sub):
    p = command(sub, "simulate", help="simulate token dynamics over many random initial conditions",
                description="Simulate the discrete dynamics D1-D6 (docs/models.md) of a random or converted "
                            "model over many random initial conditions and keep consensus observables per step.")
    options = add_options(p, GROUPS)
    options |= output_options(p, out="runs/simulate", progress="show a progress bar")
    options |= movie_option(p.add_argument_group("movie"))
    p.set_defaults(func=run, defaults=options)


#: simulate's options that are keys of a sweep, by key (``dynamics.beta``): the sweep's rules name them so.
OPTIONS = {f"{sec}.{key}" if sec else key: spec for sec, keys in SCHEMA.items() for key, spec in keys.items()
           if any(spec is mine for group in GROUPS.values() for mine in group)} | {"dynamics.alpha": ALPHA}

#: The defaults of every option, by name (the command line's and a config file's).
SIM_DEFAULTS = {k: s.default for k, s in [(sp.dest, sp) for g in GROUPS.values() for sp in g]} | {
    "out": "runs/simulate", "overwrite": False, "progress": True, "movie": False}


def _refuse_inert(cfg: dict) -> None:
    """Options given that would change nothing in this run, refused rather than recorded: the rules of a sweep's
    point (:func:`jaxattn.sweeps.grid.inert_keys`: one home for them), said in the command line's words."""
    point = {"dynamics.kind": "discrete", "dynamics.attention": cfg["attention"], "dynamics.rope": cfg["rope"],
             "dtype": cfg["dtype"], "model.source": "random" if cfg["model"] == "random" else "file",
             "model.shared": cfg["shared"]}
    for key, why in inert_keys(point).items():
        spec = OPTIONS.get(key)
        if spec is not None and cfg[spec.dest] != SIM_DEFAULTS[spec.dest]:
            raise JaxattnError(f"{spec.cli} does nothing with {as_flags(why, OPTIONS, spaced=True)}: remove it")


def consensus_lines(diam, cosc, ok, steps: int, n: int | None = None) -> list[str]:
    """The summary's statistics of the diameter and 1 - cos over the finite conditions ``ok``; ``n`` tokens per
    condition (one token is at consensus by definition, which a note says)."""
    import numpy as np

    if not ok.any():
        return ["diameter     n/a: no initial condition stayed finite"]
    final = diam[ok, -1]
    q = np.quantile(final, [0.0, 0.5, 0.9, 1.0])
    trivial = ["note         one token per initial condition (--n 1): its diameter is 0 and 1-cos is 0 by definition, "
               "so the consensus above is trivial; --n 2 or more measures it"] if n == 1 else []
    return [f"diameter     step 0 mean {diam[ok, 0].mean():.4g}  ->  step {steps}: min {q[0]:.3g}  median {q[1]:.3g}  "
            f"90% {q[2]:.3g}  max {q[3]:.3g}",
            f"consensus    diameter < 1e-2 in {np.mean(final < 1e-2) * 100:.1f}%, "
            f"< 1e-4 in {np.mean(final < 1e-4) * 100:.1f}% of {'the finite ' if not ok.all() else ''}initial "
            f"conditions; mean 1-cos {cosc[ok, -1].mean():.3g}", *trivial]


def run(args, cfg) -> int:
    dtype = dtype_arg(cfg["dtype"])  # every option was checked against its declaration (jaxattn.sweeps.grid.SCHEMA)
    out = Path(cfg["out"])
    with flag_words(args.defaults):  # the library's checks speak Python (ffn=True): said as the flags here
        model = load_model_arg(cfg["model"], cfg)
        steps = model.depth if cfg["steps"] is None else cfg["steps"]
        dyn = dynamics_of(cfg)
        # options that would be recorded but change nothing are refused, before anything is written: what no model
        # could run (the library's checks), then what this model would ignore
        check_dynamics(model, dyn)
    if dyn.biases and model.layers.bq is None and model.layers.bo is None:
        raise JaxattnError("--biases: this model has no biases (random models are drawn without them)")
    if dyn.pre_ln and model.norm_style != "pre":
        raise JaxattnError("--pre-ln only applies to pre-norm models (GPT-2, GPT-Neo)")
    check_rope(model, cfg["rope"])
    _refuse_inert(cfg)
    run = start_run(cfg, "simulate", own=(STORE,))
    work = run.path  # --out, or the replacement beside it that rundir.finish swaps in
    resolved = {k: v for k, v in cfg.items() if not k.startswith("_")}
    if cfg["model"] != "random":  # the random model's defaults describe nothing here (and would break a replay)
        for k in RANDOM_ONLY:
            del resolved[k]
        resolved["model_dims"] = model_dims(model)
    resolved.update(steps=steps, model_summary=model.summary().splitlines(), weights_sha256=weights_sha256(model))
    stats: dict = {}
    with rundir.undone_if_refused(run), Timer() as t:
        arrays = sweep(model, num_init=cfg["num_init"], n=cfg["n"], steps=steps, seed=cfg["seed"], out_dir=work,
                       chunk=cfg["chunk"], init=cfg["init"], dynamics=dyn, alpha=cfg["alpha"], beta=cfg["beta"],
                       dtype=dtype, batch=Batch(**fields_of(Batch, cfg)), progress=cfg["progress"],
                       keep_final=cfg["keep_final"], stats=stats, overwrite=cfg["overwrite"],
                       fingerprint={k: v for k, v in resolved.items() if k not in ("progress", "chunk", "out",
                                                                                   "overwrite", "model_summary",
                                                                                   "movie")})
    save_arrays(work / "observables.safetensors", arrays, {"config": json.dumps(resolved, sort_keys=True)})
    resumed = stats.get("resumed", 0) > 0
    resolved["chunk"] = stats.get("chunk", cfg["chunk"])  # the chunk size used (auto when not given)
    rate = stats.get("computed", 0) * steps / max(t.seconds, 1e-9)
    bad = nonfinite_conditions(arrays, cfg["num_init"])
    write_json(work / "config.json", {"command": "simulate", "config": resolved, **provenance(),
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
        *consensus_lines(arrays["observables.diameter"], arrays["observables.cos_consensus"], ~bad, steps,
                         n=cfg["n"]),
    ]
    write_summary(work, lines, bad, "config.json, observables.safetensors, summary.txt", shown=out)
    if cfg["movie"]:
        write_movie(work, progress=cfg["progress"], shown=out)
    rundir.finish(run)
    finish(out)
    return 0
