"""``jaxattn architectures NAME``: the consensus study's passes on one of the consensus paper's architectures with
random weights (see :mod:`jaxattn.studies.architectures`)."""

from __future__ import annotations

import dataclasses

from jaxattn.cli._shared import add_options, output_options
from jaxattn.cli._study import command, config_of, run_in_out
from jaxattn.cli.consensus import say_summary
from jaxattn.config import Spec, specs
from jaxattn.studies import architectures, consensus

#: The consensus options the command takes: those of the passes (the theorem settings are not run).
FIELDS = ("passes", "prompts", "tokens", "seed", "dtype", "matmul_precision", "until", "block")
#: Their defaults where they differ from ``jaxattn consensus``'s: the paper's prompts.
DEFAULTS = {"passes": 100, "prompts": 100, "tokens": 200}


def _options() -> list[Spec]:
    own = specs(consensus.Config)
    out = [dataclasses.replace(own[k], default=DEFAULTS.get(k, own[k].default)) for k in FIELDS]
    return [dataclasses.replace(s, help="random seed: of the weights (torch) and of the prompts")
            if s.name == "seed" else s for s in out]


def register(sub) -> None:
    p = command(sub, "architectures",
                help="the consensus study's passes on a paper architecture with random weights",
                description="The consensus paper's architectures (GPT-2 small to XL, GPT-Neo 125M to 2.7B, and "
                            "tiny stand-ins of both families) built from their transformers configurations with "
                            "transformers' own initialisation (no checkpoint, no network; needs the [hf] extra), "
                            "run for many passes on random prompts, with and without the FFN, with the same or "
                            "redrawn weights each pass; the first-token measure after every layer. Writes tables "
                            "(CSV), figures (PNG) and report.md, as `jaxattn consensus`.")
    p.add_argument("name", metavar="NAME", choices=list(architectures.ARCHITECTURES),
                   help=f"the architecture: {', '.join(architectures.ARCHITECTURES)}")
    options = add_options(p, {"": _options()})
    options |= output_options(p, out="runs/architectures", figures=True, progress="stage messages on stderr",
                              resumes=False)
    p.set_defaults(func=run, defaults=options)


def run(args, cfg) -> int:
    # the passes only: no theorem settings, and no random periodic runs (the weights are random already)
    passes_only = consensus.Config(synthetic=False, random_periodic=False)
    config = config_of(consensus.Config, dataclasses.asdict(passes_only) | cfg)
    tables = run_in_out("architectures", cfg,
                        lambda out, say: architectures.run(out, args.name, config, progress=say))
    say_summary(tables, cfg["out"])
    return 0
