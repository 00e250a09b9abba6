"""Phi (phi-1, phi-1.5, phi-2): one LayerNorm feeds a parallel block ``x + Attn(LN x) + MLP(LN x)``
(``ln2`` is absent: the FFN reads the attention's input), separate q/k/v projections with biases (GQA when
``num_key_value_heads`` < heads), partial RoPE (``partial_rotary_factor``, 0.5 by default), causal, score
scale ``head_dim ** -0.5``, ``fc1``/``fc2`` MLP, final LayerNorm, no position embeddings."""

from __future__ import annotations

from jaxattn.errors import CheckpointError
from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, find_prefix
from jaxattn.io.checkpoints.llama import attention, heads, rope

IGNORE = [r"lm_head\..*", r"score\..*", r"(.*\.)?rotary_emb\.inv_freq"]


def convert(config: dict, tensors: dict):
    if config.get("qk_layernorm"):
        raise CheckpointError("Phi with qk_layernorm (LayerNorm on queries and keys) is not supported")
    d, H, Hkv, dh = heads(config)
    L = cfg_int(config, "num_hidden_layers")
    f = cfg_int(config, "intermediate_size")
    params = config.get("rope_parameters") or {}
    r = rope(config, dh, partial=params.get("partial_rotary_factor", config.get("partial_rotary_factor", 0.5)))
    t = Tensors(tensors, find_prefix(tensors, "embed_tokens.weight"))
    sets = []
    for layer in range(L):
        p = f"layers.{layer}."
        s = attention(t, p + "self_attn.", d, H, Hkv, dh, bias_qkv=True, bias_o=True,
                      names=("q_proj", "k_proj", "v_proj", "dense"))
        s.update(ln1_w=t.get(p + "input_layernorm.weight", (d,)), ln1_b=t.get(p + "input_layernorm.bias", (d,)),
                 ln2_w=None, ln2_b=None,
                 w1=t.get(p + "mlp.fc1.weight", (f, d)), b1=t.get(p + "mlp.fc1.bias", (f,)),
                 w2=t.get(p + "mlp.fc2.weight", (d, f)), b2=t.get(p + "mlp.fc2.bias", (d,)))
        sets.append(s)
    V = cfg_int(config, "vocab_size")
    emb = dict(word=t.get("embed_tokens.weight", (V, d)))
    final = (t.get("final_layernorm.weight", (d,)), t.get("final_layernorm.bias", (d,)))
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[True] * L, window=[0] * L, scale=[dh ** -0.5] * L, embeddings=emb,
                 final_ln=final, norm_style="pre", activation=config.get("hidden_act", "gelu_new"),
                 ln_eps=config.get("layer_norm_eps", 1e-5), family="phi", parallel=True, rope=r)
