"""GPT-NeoX (Pythia): fused per-head ``query_key_value``, partial RoPE (``rotary_pct``, a quarter of each
head by default), LayerNorm, the parallel block ``x + Attn(LN1 x) + MLP(LN2 x)`` (``use_parallel_residual``;
sequential otherwise), causal, score scale ``head_dim ** -0.5``, final LayerNorm, no position embeddings."""

from __future__ import annotations

from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, check_heads, find_prefix, split_cols
from jaxattn.io.checkpoints.llama import rope

IGNORE = [r"embed_out\..*", r"lm_head\..*", r"score\..*", r"(.*\.)?rotary_emb\.inv_freq",
          r"(.*\.)?attention\.(bias|masked_bias)"]


def fused_qkv(W, b, H: int, dh: int):
    """``query_key_value`` ``[3d, d]`` is laid out head by head, ``[H, (q|k|v), d_h, d]`` (transformers views
    its output as ``[..., H, 3 d_h]`` and chunks the last axis in three)."""
    d = W.shape[1]
    Wh = W.reshape(H, 3, dh, d)
    bh = None if b is None else b.reshape(H, 3, dh)
    parts = [(Wh[:, i], None if bh is None else bh[:, i]) for i in range(3)]
    return parts


def convert(config: dict, tensors: dict):
    d = cfg_int(config, "hidden_size")
    H = cfg_int(config, "num_attention_heads")
    L = cfg_int(config, "num_hidden_layers")
    f = cfg_int(config, "intermediate_size", default=4 * d)
    dh = check_heads(d, H)
    bias = bool(config.get("attention_bias", True))
    params = config.get("rope_parameters") or {}
    r = rope(config, dh, partial=params.get("partial_rotary_factor", config.get("rotary_pct", 0.25)))
    t = Tensors(tensors, find_prefix(tensors, "embed_in.weight"))
    sets = []
    for layer in range(L):
        p = f"layers.{layer}."
        a = p + "attention."
        W = t.get(a + "query_key_value.weight", (3 * d, d))
        b = t.get(a + "query_key_value.bias", (3 * d,)) if bias else None
        (q, bq), (k, bk), (v, bv) = fused_qkv(W, b, H, dh)
        sets.append(dict(q=q, k=k, v=v, o=split_cols(t.get(a + "dense.weight", (d, d)), H), bq=bq, bk=bk, bv=bv,
                         bo=t.get(a + "dense.bias", (d,)) if bias else None,
                         ln1_w=t.get(p + "input_layernorm.weight", (d,)), ln1_b=t.get(p + "input_layernorm.bias", (d,)),
                         ln2_w=t.get(p + "post_attention_layernorm.weight", (d,)),
                         ln2_b=t.get(p + "post_attention_layernorm.bias", (d,)),
                         w1=t.get(p + "mlp.dense_h_to_4h.weight", (f, d)), b1=t.get(p + "mlp.dense_h_to_4h.bias", (f,)),
                         w2=t.get(p + "mlp.dense_4h_to_h.weight", (d, f)),
                         b2=t.get(p + "mlp.dense_4h_to_h.bias", (d,))))
    V = cfg_int(config, "vocab_size")
    emb = dict(word=t.get("embed_in.weight", (V, d)))
    final = (t.get("final_layer_norm.weight", (d,)), t.get("final_layer_norm.bias", (d,)))
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[True] * L, window=[0] * L, scale=[dh ** -0.5] * L, embeddings=emb,
                 final_ln=final, norm_style="pre", activation=config.get("hidden_act", "gelu"),
                 ln_eps=config.get("layer_norm_eps", 1e-5), family="gpt_neox",
                 parallel=bool(config.get("use_parallel_residual", True)), rope=r)
