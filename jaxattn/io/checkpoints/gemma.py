"""Gemma: Llama's layout (RMSNorm, GQA, RoPE, gated MLP, causal) with three differences, all taken at
conversion: RMSNorm multiplies by ``1 + w`` (the stored gain is ``1 + weight``, computed and kept in float64:
exact for float32 and bfloat16 weights, as transformers' ``1.0 + weight.float()`` in a float64 model), token
embeddings are multiplied by ``sqrt(hidden_size)`` (``embed_scale``), and the MLP's activation is
``gelu_pytorch_tanh`` (GeGLU; a legacy ``"gelu"`` means the tanh form too).
Embeddings are tied (the LM head is not used)."""

from __future__ import annotations

import numpy as np

from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, find_prefix
from jaxattn.io.checkpoints.llama import IGNORE, attention, gated_mlp, heads, rope


def gain(w: np.ndarray) -> np.ndarray:
    """Gemma's RMSNorm gain ``1 + w`` in float64 (rounding it to a float32 checkpoint's precision would
    move a float64 forward pass by ~1e-7)."""
    return 1.0 + w.astype(np.float64)


def convert(config: dict, tensors: dict):
    d, H, Hkv, dh = heads({**config, "head_dim": config.get("head_dim", 256)})
    L = cfg_int(config, "num_hidden_layers")
    f = cfg_int(config, "intermediate_size")
    bias = bool(config.get("attention_bias", False))
    act = config.get("hidden_act") or config.get("hidden_activation") or "gelu_pytorch_tanh"
    act = "gelu_pytorch_tanh" if act == "gelu" else act  # transformers' GemmaConfig does the same
    r = rope(config, dh)
    t = Tensors(tensors, find_prefix(tensors, "embed_tokens.weight"))
    sets = []
    for layer in range(L):
        p = f"layers.{layer}."
        s = attention(t, p + "self_attn.", d, H, Hkv, dh, bias_qkv=bias, bias_o=bias)
        s.update(gated_mlp(t, p + "mlp.", d, f))
        s.update(ln1_w=gain(t.get(p + "input_layernorm.weight", (d,))), ln1_b=None,
                 ln2_w=gain(t.get(p + "post_attention_layernorm.weight", (d,))), ln2_b=None)
        sets.append(s)
    V = cfg_int(config, "vocab_size")
    emb = dict(word=t.get("embed_tokens.weight", (V, d)))
    final = (gain(t.get("norm.weight", (d,))), None)
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[True] * L, window=[0] * L, scale=[dh ** -0.5] * L, embeddings=emb,
                 final_ln=final, norm_style="pre", activation=act, ln_eps=config.get("rms_norm_eps", 1e-6),
                 family="gemma", norm_kind="rmsnorm", rope=r, embed_scale=float(d ** 0.5))
