"""The consensus paper's own architectures (GPT-2 small to XL, GPT-Neo 125M to 2.7B) with random weights, built
from ``transformers`` configurations: no checkpoint, no network.

``transformers`` draws the weights with the family's own initialisation (GPT-2: ``N(0, 0.02²)``, the two
output projections of every block scaled by ``1/sqrt(2·n_layer)``, zero biases, unit LayerNorm gains), as a
model built from its configuration before training; jaxattn converts the tensors as it converts a checkpoint.
These are the paper's "random" models (§6.2, Figs. 9–10): with the same weights every pass they are its
*random periodic* weights.

    python -m jaxattn.studies.architectures gpt2-xl --out runs/gpt2-xl --prompts 100 --tokens 200 --passes 100

runs the consensus study (:mod:`jaxattn.studies.consensus`, the passes only) on one of them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from jaxattn.errors import ConfigError
from jaxattn.io.checkpoints import FAMILIES
from jaxattn.model.params import Model
from jaxattn.studies import consensus

_NEO = dict(vocab_size=50257, max_position_embeddings=2048, window_size=256)
#: The architectures of the papers (Table 1 of the power-method paper): transformers config class and fields.
ARCHITECTURES: dict[str, tuple[str, dict]] = {
    "gpt2": ("GPT2Config", dict(n_embd=768, n_layer=12, n_head=12)),
    "gpt2-medium": ("GPT2Config", dict(n_embd=1024, n_layer=24, n_head=16)),
    "gpt2-large": ("GPT2Config", dict(n_embd=1280, n_layer=36, n_head=20)),
    "gpt2-xl": ("GPT2Config", dict(n_embd=1600, n_layer=48, n_head=25)),
    "gpt-neo-125M": ("GPTNeoConfig", dict(_NEO, hidden_size=768, num_layers=12, num_heads=12,
                                          attention_types=[[["global", "local"], 6]])),
    "gpt-neo-1.3B": ("GPTNeoConfig", dict(_NEO, hidden_size=2048, num_layers=24, num_heads=16,
                                          attention_types=[[["global", "local"], 12]])),
    "gpt-neo-2.7B": ("GPTNeoConfig", dict(_NEO, hidden_size=2560, num_layers=32, num_heads=20,
                                          attention_types=[[["global", "local"], 16]])),
    # tiny stand-ins of the two families (the reproductions' reduced mode)
    "gpt2-tiny": ("GPT2Config", dict(n_embd=24, n_layer=2, n_head=4, vocab_size=97, n_positions=64, bos_token_id=0,
                                     eos_token_id=0)),
    "gpt-neo-tiny": ("GPTNeoConfig", dict(vocab_size=97, max_position_embeddings=64, window_size=4, hidden_size=24,
                                          num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                                          bos_token_id=0, eos_token_id=0)),
}


def random_architecture(name: str, seed: int = 0) -> Model:
    """The architecture ``name`` (a key of :data:`ARCHITECTURES`) with weights drawn by ``transformers`` from
    ``torch.manual_seed(seed)``, converted to a :class:`~jaxattn.model.params.Model` (float32).

    Examples:
        >>> from jaxattn.studies.architectures import random_architecture
        >>> m = random_architecture("gpt2")                              # doctest: +SKIP
        >>> m.d_model, m.n_heads, m.depth, m.family                      # doctest: +SKIP
        (768, 12, 12, 'gpt2')
    """
    if name not in ARCHITECTURES:
        raise ConfigError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}")
    import torch  # optional dependencies: only this function needs them
    import transformers

    cls, fields = ARCHITECTURES[name]
    config = getattr(transformers, cls)(**fields)
    torch.manual_seed(seed)
    with torch.no_grad():
        hf = transformers.AutoModel.from_config(config)
        tensors = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in hf.state_dict().items()}
    del hf
    return FAMILIES[config.model_type](config.to_dict(), tensors)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxattn.studies.architectures NAME --out DIR [consensus options]``."""
    p = argparse.ArgumentParser(prog="python -m jaxattn.studies.architectures",
                                description="the consensus study's passes on a paper architecture with random "
                                            "weights (transformers' initialisation)")
    p.add_argument("name", choices=list(ARCHITECTURES))
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0, help="torch seed of the weights [0]")
    p.add_argument("--prompts", type=int, default=100)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--passes", type=int, default=100)
    p.add_argument("--until", type=float, default=0.0)
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--dtype", default="float32")
    a = p.parse_args(argv)
    model = random_architecture(a.name, a.seed)
    cfg = consensus.Config(prompts=a.prompts, tokens=a.tokens, passes=a.passes, until=a.until, block=a.block,
                           dtype=a.dtype, synthetic=False, random_periodic=False, seed=a.seed)
    tables = consensus.run(Path(a.out), cfg, model=model, model_name=f"{a.name} (random weights, seed {a.seed})",
                           progress=lambda m: print(m, file=sys.stderr, flush=True))
    for r in tables["summary"]:
        print(f"{r['run']:<16} first-token measure {r['first_token_start']:.4f} -> {r['first_token_end']:.4g} "
              f"after {r['passes']} passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
