"""``jaxattn consensus [MODEL]``: the consensus study (see :mod:`jaxattn.studies.consensus`)."""

from __future__ import annotations

import dataclasses

import jax

from jaxattn.cli._shared import named_model
from jaxattn.cli._study import command, config_of, run_in_out, study_options
from jaxattn.studies import consensus as study
from jaxattn.sweeps.grid import SCHEMA

#: The model the study runs on (the command's own option; a converted model, not 'random').
MODEL = dataclasses.replace(SCHEMA["model"]["source"], default="minilm",
                            help="'minilm' (built-in all-MiniLM-L6-v2), a converted .safetensors file or a checkpoint "
                                 "folder")


def register(sub) -> None:
    p = command(sub, "consensus",
                help="the consensus study: theorem settings in continuous time and a real model run for many "
                     "passes",
                description="Do tokens reach consensus? (1) The consensus theorems' settings integrated in "
                            "continuous time on the sphere: time-varying random weights from a hemisphere, "
                            "causal attention with two heads, causal attention with a symmetric value matrix. "
                            "(2) A converted model run for many passes (every block, then its final LayerNorm) "
                            "on random prompts, with and without the FFN, with the same or redrawn weights each "
                            "pass; the first-token measure 1 - mean_j cos(x_1, x_j) after every layer. Writes "
                            "tables (CSV), figures (PNG) and report.md.")
    p.add_argument("model", nargs="?", help=f"{MODEL.help} [{MODEL.default}]")
    options = {MODEL.dest: MODEL} | study_options(p, study.Config, out="runs/consensus")
    p.set_defaults(func=run, defaults=options)


def run(args, cfg) -> int:
    config = config_of(study.Config, cfg)
    # the command's own process: the theorem settings run in float64 whatever --dtype sets for the passes
    jax.config.update("jax_enable_x64", True)
    model = named_model(cfg["model"], "consensus", "the passes run a real model's blocks (LayerNorm, FFN), which a "
                        "random model has not; the theorem settings draw their own random models")
    tables = run_in_out("consensus", cfg, lambda out, say: study.run(out, config, model=model,
                                                                     model_name=str(cfg["model"]), progress=say))
    say_summary(tables, cfg["out"])
    return 0


def say_summary(tables: dict, out) -> None:
    """What the consensus commands print: each run's first-token measure at its first and last pass, then where the
    report is."""
    for r in tables["summary"]:
        print(f"{r['run']:<16} first-token measure {r['first_token_start']:.4f} -> {r['first_token_end']:.4g} "
              f"after {r['passes']} passes")
    print(f"report       {out}/report.md")
