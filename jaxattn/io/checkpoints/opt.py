"""OPT: learned positions with an offset of 2 (position ``i`` is row ``i + 2`` of ``embed_positions``; the
converted table drops the first two rows), q/k/v/out projections with biases (``enable_bias``), pre-norm
(``do_layer_norm_before``, with a final LayerNorm) or post-norm (OPT-350m's layout, no final norm),
``fc1``/``fc2`` MLP with ``relu``, causal, score scale ``head_dim ** -0.5`` (transformers scales the queries
before the product; the same number up to rounding)."""

from __future__ import annotations

from jaxattn.errors import CheckpointError
from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, check_heads, find_prefix
from jaxattn.io.checkpoints.llama import attention

IGNORE = [r"lm_head\..*", r"score\..*", r"qa_outputs\..*"]
OFFSET = 2  # OPTLearnedPositionalEmbedding


def convert(config: dict, tensors: dict):
    d = cfg_int(config, "hidden_size")
    H = cfg_int(config, "num_attention_heads")
    L = cfg_int(config, "num_hidden_layers")
    f = cfg_int(config, "ffn_dim")
    dh = check_heads(d, H)
    if config.get("word_embed_proj_dim", d) != d:
        raise CheckpointError("OPT with word_embed_proj_dim != hidden_size (project_in/project_out) is not supported")
    bias = bool(config.get("enable_bias", True))
    affine = bool(config.get("layer_norm_elementwise_affine", True))
    pre = bool(config.get("do_layer_norm_before", True))
    t = Tensors(tensors, find_prefix(tensors, "embed_tokens.weight"))

    def ln(name):
        return (t.get(name + ".weight", (d,)), t.get(name + ".bias", (d,))) if affine else (None, None)

    sets = []
    for layer in range(L):
        p = f"layers.{layer}."
        s = attention(t, p + "self_attn.", d, H, H, dh, bias_qkv=bias, bias_o=bias,
                      names=("q_proj", "k_proj", "v_proj", "out_proj"))
        (l1w, l1b), (l2w, l2b) = ln(p + "self_attn_layer_norm"), ln(p + "final_layer_norm")
        s.update(ln1_w=l1w, ln1_b=l1b, ln2_w=l2w, ln2_b=l2b,
                 w1=t.get(p + "fc1.weight", (f, d)), b1=t.get(p + "fc1.bias", (f,)) if bias else None,
                 w2=t.get(p + "fc2.weight", (d, f)), b2=t.get(p + "fc2.bias", (d,)) if bias else None)
        sets.append(s)
    V = cfg_int(config, "vocab_size")
    P = cfg_int(config, "max_position_embeddings")
    emb = dict(word=t.get("embed_tokens.weight", (V, d)),
               position=t.get("embed_positions.weight", (P + OFFSET, d))[OFFSET:])
    remove_final = config.get("_remove_final_layer_norm", False)
    final = ln("final_layer_norm") if pre and not remove_final else (None, None)
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[True] * L, window=[0] * L, scale=[dh ** -0.5] * L, embeddings=emb,
                 final_ln=final, norm_style="pre" if pre else "post",
                 activation=config.get("activation_function", "relu"), ln_eps=1e-5, family="opt")
