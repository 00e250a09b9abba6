"""BERT and BERT-family encoders (all-MiniLM-L6-v2 ...): post-norm, full attention."""

from __future__ import annotations

import numpy as np

from jaxattn.errors import CheckpointError
from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, check_heads, find_prefix, per_head

IGNORE = [r"(.*\.)?pooler\..*", r"cls\..*", r"(.*\.)?embeddings\.position_ids", r"(.*\.)?embeddings\.token_type_ids",
          r"classifier\..*", r"qa_outputs\..*"]


def linear(t: Tensors, name: str, out_dim: int, in_dim: int, bias: bool = True):
    w = t.get(f"{name}.weight", (out_dim, in_dim))
    b = t.get(f"{name}.bias", (out_dim,)) if bias else None
    return w, b


def attention_set(t: Tensors, names: dict, d: int, H: int, f: int, bias_qkv: bool = True) -> dict:
    """One post-norm block from nn.Linear tensors; ``names`` maps role -> tensor stem."""
    q, bq = linear(t, names["q"], d, d, bias_qkv)
    k, bk = linear(t, names["k"], d, d, bias_qkv)
    v, bv = linear(t, names["v"], d, d, bias_qkv)
    o, bo = linear(t, names["o"], d, d)
    w1, b1 = linear(t, names["w1"], f, d)
    w2, b2 = linear(t, names["w2"], d, f)
    return dict(**per_head(H, q=q, k=k, v=v, o=o, bq=bq, bk=bk, bv=bv), bo=bo,
                ln1_w=t.get(f"{names['ln1']}.weight", (d,)), ln1_b=t.get(f"{names['ln1']}.bias", (d,)),
                ln2_w=t.get(f"{names['ln2']}.weight", (d,)), ln2_b=t.get(f"{names['ln2']}.bias", (d,)),
                w1=w1, b1=b1, w2=w2, b2=b2)


def embeddings(t: Tensors, config: dict, E: int) -> dict:
    V = cfg_int(config, "vocab_size")
    P = cfg_int(config, "max_position_embeddings")
    T = config.get("type_vocab_size", 2)
    return dict(word=t.get("embeddings.word_embeddings.weight", (V, E)),
                position=t.get("embeddings.position_embeddings.weight", (P, E)),
                token_type=t.get("embeddings.token_type_embeddings.weight", (T, E)) if T else None,
                ln_w=t.get("embeddings.LayerNorm.weight", (E,)), ln_b=t.get("embeddings.LayerNorm.bias", (E,)),
                proj_w=None, proj_b=None)


def convert(config: dict, tensors: dict):
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"position_embedding_type {config['position_embedding_type']!r} is not supported "
                              "(only 'absolute')")
    d = cfg_int(config, "hidden_size")
    H = cfg_int(config, "num_attention_heads")
    L = cfg_int(config, "num_hidden_layers")
    f = cfg_int(config, "intermediate_size")
    dh = check_heads(d, H)
    t = Tensors(tensors, find_prefix(tensors, "embeddings.word_embeddings.weight"))
    sets = []
    for layer in range(L):
        p = f"encoder.layer.{layer}."
        sets.append(attention_set(t, dict(q=p + "attention.self.query", k=p + "attention.self.key",
                                          v=p + "attention.self.value", o=p + "attention.output.dense",
                                          ln1=p + "attention.output.LayerNorm", w1=p + "intermediate.dense",
                                          w2=p + "output.dense", ln2=p + "output.LayerNorm"), d, H, f))
    emb = embeddings(t, config, d)
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[False] * L, window=[0] * L, scale=[1 / np.sqrt(dh)] * L,
                 embeddings=emb, norm_style="post", activation=config.get("hidden_act", "gelu"),
                 ln_eps=config.get("layer_norm_eps", 1e-12), family="bert")
