"""ALBERT: factorised embeddings (size E) mapped to d, shared layer groups, post-norm."""

from __future__ import annotations

import numpy as np

from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, check_heads, find_prefix
from jaxattn.io.checkpoints.bert import IGNORE as BERT_IGNORE
from jaxattn.io.checkpoints.bert import attention_set, embeddings

IGNORE = [*BERT_IGNORE, r"predictions\..*", r"sop_classifier\..*"]


def schedule(num_layers: int, groups: int, inner: int) -> list[int]:
    """Weight set of every block: layer i runs group ``int(i / (L / G))``, whose ``inner``
    sub-layers are sets ``g * inner + j`` (transformers' AlbertTransformer)."""
    out: list[int] = []
    for i in range(num_layers):
        g = int(i / (num_layers / groups))
        out.extend(g * inner + j for j in range(inner))
    return out


def convert(config: dict, tensors: dict):
    d = cfg_int(config, "hidden_size")
    E = cfg_int(config, "embedding_size")
    H = cfg_int(config, "num_attention_heads")
    L = cfg_int(config, "num_hidden_layers")
    f = cfg_int(config, "intermediate_size")
    G = cfg_int(config, "num_hidden_groups", default=1)
    inner = cfg_int(config, "inner_group_num", default=1)
    dh = check_heads(d, H)
    t = Tensors(tensors, find_prefix(tensors, "embeddings.word_embeddings.weight"))
    sets = []
    for g in range(G):
        for j in range(inner):
            p = f"encoder.albert_layer_groups.{g}.albert_layers.{j}."
            sets.append(attention_set(t, dict(q=p + "attention.query", k=p + "attention.key", v=p + "attention.value",
                                              o=p + "attention.dense", ln1=p + "attention.LayerNorm", w1=p + "ffn",
                                              w2=p + "ffn_output", ln2=p + "full_layer_layer_norm"), d, H, f))
    emb = embeddings(t, config, E)
    emb["proj_w"] = t.get("encoder.embedding_hidden_mapping_in.weight", (d, E))
    emb["proj_b"] = t.get("encoder.embedding_hidden_mapping_in.bias", (d,))
    t.check_all_used(IGNORE)
    n = G * inner
    return build(sets, schedule=schedule(L, G, inner), causal=[False] * n, window=[0] * n,
                 scale=[1 / np.sqrt(dh)] * n, embeddings=emb, norm_style="post",
                 activation=config.get("hidden_act", "gelu_new"), ln_eps=config.get("layer_norm_eps", 1e-12),
                 family="albert")
