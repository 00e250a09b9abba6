"""``jaxattn analyze [MODEL]``: the power-method study (:mod:`jaxattn.studies.power_method`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jaxattn.cli._shared import add_options, check_rope, dtype_arg, load_model_arg, start_run
from jaxattn.cli._study import command, config_of, refuse_given, study_options
from jaxattn.config import specs
from jaxattn.io import rundir
from jaxattn.studies import power_method
from jaxattn.studies.power_method import STORE, PowerMethodConfig
from jaxattn.sweeps.grid import SCHEMA

#: The model the study runs on (the positional MODEL), then the random model's options (the sweep schema's): those
#: with a command-line option, and those a config file may set.
MODEL = dataclasses.replace(SCHEMA["model"]["source"], default="minilm",
                            help="'minilm' (built-in all-MiniLM-L6-v2), 'random', a converted .safetensors file or a "
                                 "checkpoint folder")
RANDOM = [SCHEMA["model"][k] for k in ("d", "heads", "depth", "shared", "mask")]
RANDOM_IN_FILES = [SCHEMA["model"][k] for k in ("weights", "value")]
OUT = "runs/analyze"

#: The defaults of every option, by name (the command line's and a config file's).
ANALYZE_DEFAULTS = {MODEL.dest: MODEL.default, **{k: s.default for k, s in specs(PowerMethodConfig).items()},
                    "out": OUT, "overwrite": False, **{s.dest: s.default for s in RANDOM + RANDOM_IN_FILES}}


def register(sub):
    p = command(sub, "analyze", help="run the power-method study on a model (the main job)",
                description="The power-method study: spectra of every layer matrix F = Σ O_h V_h, "
                            "simplified D1 dynamics from many random initial conditions, per-layer ρ1, Δρ1, P1 "
                            "against the baselines over all eigendirections, a prolonged run for shared-weight "
                            "models, the same with FFN and affine LayerNorm, and rank-1 steering. Writes tables "
                            "(CSV), figures (PNG) and report.md into the output directory.")
    p.add_argument("model", nargs="?", help=f"{MODEL.help} [{MODEL.default}]")
    options = {MODEL.dest: MODEL} | study_options(p, PowerMethodConfig, out=OUT, progress="show progress bars",
                                                  resumes=True)
    options |= add_options(p, {"random model (MODEL = random)": RANDOM})
    p.set_defaults(func=run, defaults=options | {s.dest: s for s in RANDOM_IN_FILES})


def run(args, cfg) -> int:
    study = config_of(PowerMethodConfig, cfg)  # every option checked against its declaration, before the model loads
    dtype_arg(cfg["dtype"])
    model = load_model_arg(cfg["model"], cfg)
    refuse_given(study, study.inert(model), cfg)
    check_rope(model, cfg["rope"])
    out = Path(cfg["out"])
    run = start_run(cfg, "analyze", own=(STORE,))
    with rundir.undone_if_refused(run):
        tables = power_method.run(run.path, study, model=model, model_name=str(cfg["model"]))  # or its replacement
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
