"""``jaxattn consensus [MODEL]``: the consensus study (see :mod:`jaxattn.studies.consensus`)."""

from __future__ import annotations

import argparse

import jax

from jaxattn.cli._study import add_output_options, config_of, formatter, run_in_out
from jaxattn.dynamics.runner import DTYPES
from jaxattn.io.checkpoints import load_any
from jaxattn.studies import consensus as study
from jaxattn.studies.skeleton import config_defaults

DEFAULTS = config_defaults(study.Config, model="minilm", out="runs/consensus", progress=True, overwrite=False)


def register(sub) -> None:
    d = DEFAULTS
    p = sub.add_parser("consensus", formatter_class=formatter,
                       help="the consensus study: theorem settings in continuous time and a real model run for many "
                            "passes",
                       description="Do tokens reach consensus? (1) The consensus theorems' settings integrated in "
                                   "continuous time on the sphere: time-varying random weights from a hemisphere, "
                                   "causal attention with two heads, causal attention with a symmetric value matrix. "
                                   "(2) A converted model run for many passes (every block, then its final LayerNorm) "
                                   "on random prompts, with and without the FFN, with the same or redrawn weights each "
                                   "pass; the first-token measure 1 - mean_j cos(x_1, x_j) after every layer. Writes "
                                   "tables (CSV), figures (PNG) and report.md.")
    p.add_argument("model", nargs="?", help=f"'minilm' (built-in all-MiniLM-L6-v2), a converted .safetensors file or "
                                            f"a checkpoint folder [{d['model']}]")
    p.add_argument("--passes", type=int, help=f"passes of the model [{d['passes']}]")
    p.add_argument("--prompts", type=int, help=f"random prompts [{d['prompts']}]")
    p.add_argument("--tokens", type=int, help=f"tokens per prompt (the paper: 200) [{d['tokens']}]")
    p.add_argument("--seed", type=int, help=f"random seed [{d['seed']}]")
    p.add_argument("--dtype", choices=list(DTYPES),
                   help=f"precision of the passes [{d['dtype']}]")
    p.add_argument("--matmul-precision", choices=["highest", "tf32", "bf16"],
                   help=f"matrix products of float32 passes (docs/gpu.md) [{d['matmul_precision']}]")
    p.add_argument("--synthetic", action=argparse.BooleanOptionalAction, default=None,
                   help=f"also run the theorem settings in continuous time [{d['synthetic']}]")
    p.add_argument("--synthetic-d", type=int, help=f"token dimension of the theorem settings [{d['synthetic_d']}]")
    p.add_argument("--synthetic-n", type=int, help=f"tokens of the theorem settings [{d['synthetic_n']}]")
    p.add_argument("--synthetic-num", type=int, help=f"initial conditions per theorem setting [{d['synthetic_num']}]")
    p.add_argument("--t1", type=float, help=f"final time of the theorem settings [{d['t1']}]")
    add_output_options(p, d)
    p.set_defaults(func=run, defaults=DEFAULTS)


def run(args, cfg) -> int:
    config = config_of(study.Config, cfg)
    # the command's own process: the theorem settings run in float64 whatever --dtype sets for the passes
    jax.config.update("jax_enable_x64", True)
    model = load_any(cfg["model"])
    tables = run_in_out("consensus", cfg, lambda out, say: study.run(out, config, model=model,
                                                                     model_name=str(cfg["model"]), progress=say))
    for r in tables["summary"]:
        print(f"{r['run']:<16} first-token measure {r['first_token_start']:.4f} -> {r['first_token_end']:.4g} "
              f"after {config.passes} passes")
    print(f"report       {cfg['out']}/report.md")
    return 0
