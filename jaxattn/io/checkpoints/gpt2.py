"""GPT-2: Conv1D weights stored ``[in, out]``, fused ``c_attn``, pre-norm, causal, final ``ln_f``."""

from __future__ import annotations

import numpy as np

from jaxattn.errors import CheckpointError
from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, check_heads, find_prefix, per_head

IGNORE = [r"(.*\.)?h\.\d+\.attn\.(bias|masked_bias)", r"lm_head\..*", r"score\..*", r"multiple_choice_head\..*"]


def convert(config: dict, tensors: dict):
    d = cfg_int(config, "n_embd", "hidden_size")
    H = cfg_int(config, "n_head", "num_attention_heads")
    L = cfg_int(config, "n_layer", "num_hidden_layers")
    f = cfg_int(config, "n_inner", default=4 * d)
    dh = check_heads(d, H)
    if config.get("add_cross_attention"):
        raise CheckpointError("GPT-2 with cross-attention is not supported")
    t = Tensors(tensors, find_prefix(tensors, "wte.weight"))
    sets, scales = [], []
    for layer in range(L):
        p = f"h.{layer}."
        Wqkv = t.get(p + "attn.c_attn.weight", (d, 3 * d)).T  # Conv1D [in, out] -> column convention [out, in]
        bqkv = t.get(p + "attn.c_attn.bias", (3 * d,))
        q, k, v = Wqkv[:d], Wqkv[d:2 * d], Wqkv[2 * d:]
        bq, bk, bv = bqkv[:d], bqkv[d:2 * d], bqkv[2 * d:]
        o = t.get(p + "attn.c_proj.weight", (d, d)).T
        sets.append(dict(**per_head(H, q=q, k=k, v=v, o=o, bq=bq, bk=bk, bv=bv),
                         bo=t.get(p + "attn.c_proj.bias", (d,)),
                         ln1_w=t.get(p + "ln_1.weight", (d,)), ln1_b=t.get(p + "ln_1.bias", (d,)),
                         ln2_w=t.get(p + "ln_2.weight", (d,)), ln2_b=t.get(p + "ln_2.bias", (d,)),
                         w1=t.get(p + "mlp.c_fc.weight", (d, f)).T, b1=t.get(p + "mlp.c_fc.bias", (f,)),
                         w2=t.get(p + "mlp.c_proj.weight", (f, d)).T, b2=t.get(p + "mlp.c_proj.bias", (d,))))
        s = 1 / np.sqrt(dh) if config.get("scale_attn_weights", True) else 1.0
        if config.get("scale_attn_by_inverse_layer_idx", False):
            s /= layer + 1
        scales.append(s)
    V = cfg_int(config, "vocab_size")
    P = cfg_int(config, "n_positions", "max_position_embeddings")
    emb = dict(word=t.get("wte.weight", (V, d)), position=t.get("wpe.weight", (P, d)))
    final = (t.get("ln_f.weight", (d,)), t.get("ln_f.bias", (d,)))
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[True] * L, window=[0] * L, scale=scales, embeddings=emb,
                 final_ln=final, norm_style="pre", activation=config.get("activation_function", "gelu_new"),
                 ln_eps=config.get("layer_norm_epsilon", 1e-5), family="gpt2")
