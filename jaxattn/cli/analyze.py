"""``jaxattn analyze [MODEL]``: the power-method study (:mod:`jaxattn.studies.power_method`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxattn.cli._shared import _check_number, _check_rope, _dtype, _start_run, load_model_arg
from jaxattn.cli._study import formatter
from jaxattn.errors import JaxattnError


def _analyze_defaults() -> dict:
    from jaxattn.studies.power_method import StudyConfig
    from jaxattn.studies.skeleton import config_defaults

    gammas = ",".join(f"{g:g}" for g in StudyConfig().gammas)  # the command line takes them as one list
    return config_defaults(StudyConfig, model="minilm", gammas=gammas, out="runs/analyze", overwrite=False)


ANALYZE_DEFAULTS = _analyze_defaults()


def register(sub):
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
    p.set_defaults(func=run, defaults={**ANALYZE_DEFAULTS, "d": 64, "heads": 4, "depth": 12, "shared": True,
                                               "mask": "full", "weights": "gaussian", "value": "random"})


def run(args, cfg) -> int:
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
