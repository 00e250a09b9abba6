"""Assemble a validated :class:`~jaxattn.model.params.Model` from per-set numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxattn.io.checkpoints._common import stack
from jaxattn.model.params import MASK_DTYPE, Embeddings, Layers, Model, validate


def build(sets: list[dict], *, schedule, causal, window, scale, embeddings: dict | None, final_ln=(None, None),
          norm_style: str, activation: str, ln_eps: float, family: str, norm_kind: str = "layernorm",
          parallel: bool = False, rope=None, embed_scale: float = 1.0) -> Model:
    """``sets``: one dict per weight set with the :class:`Layers` field names (numpy arrays).

    The model keeps numpy arrays (no JAX dtype truncation when float64 is off); JAX converts
    them when they enter a jitted function.
    """
    st = stack(sets)
    arr = lambda a: None if a is None else np.ascontiguousarray(a)
    members: dict[str, Any] = {k: arr(v) for k, v in st.items()}  # validate() checks the required ones
    layers = Layers(**members, causal=np.asarray(causal, dtype=MASK_DTYPE),
                    window=np.asarray(window, dtype=MASK_DTYPE),
                    scale=np.asarray(scale, dtype=np.float64))  # exact; cast at use
    emb = None
    if embeddings is not None:
        emb_members: dict[str, Any] = {k: arr(v) for k, v in embeddings.items()}
        emb = Embeddings(**emb_members)
    return validate(Model(layers=layers, schedule=tuple(int(s) for s in schedule), embeddings=emb,
                          final_ln_w=arr(final_ln[0]), final_ln_b=arr(final_ln[1]), norm_style=norm_style,
                          activation=activation, ln_eps=float(ln_eps), family=family, norm_kind=norm_kind,
                          parallel=parallel, rope=rope, embed_scale=float(embed_scale)))
