"""The consensus paper's own architectures (GPT-2 small to XL, GPT-Neo 125M to 2.7B) with random weights, built
from ``transformers`` configurations: no checkpoint, no network.

``transformers`` draws the weights with the family's own initialisation (GPT-2: ``N(0, 0.02²)``, the two
output projections of every block scaled by ``1/sqrt(2·n_layer)``, zero biases, unit LayerNorm gains), as a
model built from its configuration before training; jaxattn converts the tensors as it converts a checkpoint.
These are the paper's "random" models (§6.2, Figs. 9–10): with the same weights every pass they are its
*random periodic* weights.

    jaxattn architectures gpt2-xl --out runs/gpt2-xl --prompts 100 --tokens 200 --passes 100

runs the consensus study (:mod:`jaxattn.studies.consensus`, the passes only) on one of them
(:mod:`jaxattn.cli.architectures`).
"""

from __future__ import annotations

from collections.abc import Callable

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
    try:  # optional dependencies (the [hf] extra): only this function needs them
        import torch
        import transformers
    except ImportError:
        raise ConfigError("random architectures are built by transformers from torch draws: pip install "
                          "'jaxattn[hf]' (torch first, see pyproject.toml)") from None

    cls, fields = ARCHITECTURES[name]
    config = getattr(transformers, cls)(**fields)
    torch.manual_seed(seed)
    with torch.no_grad():
        hf = transformers.AutoModel.from_config(config)
        tensors = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in hf.state_dict().items()}
    del hf
    return FAMILIES[config.model_type](config.to_dict(), tensors)


def run(out_dir, name: str, config: consensus.ConsensusConfig, *,
        progress: Callable[[str], None] | None = None) -> dict:
    """The consensus study (:func:`jaxattn.studies.consensus.run`) of the architecture ``name`` with the weights
    of ``random_architecture(name, config.seed)``, into ``out_dir``; returns its tables. ``jaxattn architectures``
    runs its passes only (``synthetic=False``; ``random_periodic=False``: the weights are random already)."""
    model = random_architecture(name, config.seed)
    return consensus.run(out_dir, config, model=model, model_name=f"{name} (random weights, seed {config.seed})",
                         progress=progress)


__all__ = ["ARCHITECTURES", "random_architecture", "run"]
