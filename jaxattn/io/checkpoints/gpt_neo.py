"""GPT-Neo: no q/k/v biases, no 1/sqrt(d_h) score scaling, global and local (windowed) layers."""

from __future__ import annotations

from jaxattn.errors import CheckpointError
from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, check_heads, find_prefix, split_cols, split_rows

IGNORE = [r"(.*\.)?h\.\d+\.attn\.attention\.(bias|masked_bias)", r"lm_head\..*", r"score\..*"]


def attention_layers(config: dict, L: int) -> list[str]:
    kinds = config.get("attention_layers")
    if not kinds:
        kinds = [k for pattern, reps in config.get("attention_types", [[["global"], L]]) for _ in range(reps)
                 for k in pattern]
    if len(kinds) != L or any(k not in ("global", "local") for k in kinds):
        raise CheckpointError(f"config.json: attention layers {kinds} do not give 'global'/'local' for {L} layers")
    return kinds


def convert(config: dict, tensors: dict):
    d = cfg_int(config, "hidden_size")
    H = cfg_int(config, "num_heads")
    L = cfg_int(config, "num_layers")
    f = cfg_int(config, "intermediate_size", default=4 * d)
    check_heads(d, H)
    kinds = attention_layers(config, L)
    w = cfg_int(config, "window_size", default=256)
    t = Tensors(tensors, find_prefix(tensors, "wte.weight"))
    sets = []
    for layer in range(L):
        p = f"h.{layer}."
        a = p + "attn.attention."
        sets.append(dict(q=split_rows(t.get(a + "q_proj.weight", (d, d)), H),
                         k=split_rows(t.get(a + "k_proj.weight", (d, d)), H),
                         v=split_rows(t.get(a + "v_proj.weight", (d, d)), H),
                         o=split_cols(t.get(a + "out_proj.weight", (d, d)), H),
                         bq=None, bk=None, bv=None, bo=t.get(a + "out_proj.bias", (d,)),
                         ln1_w=t.get(p + "ln_1.weight", (d,)), ln1_b=t.get(p + "ln_1.bias", (d,)),
                         ln2_w=t.get(p + "ln_2.weight", (d,)), ln2_b=t.get(p + "ln_2.bias", (d,)),
                         w1=t.get(p + "mlp.c_fc.weight", (f, d)), b1=t.get(p + "mlp.c_fc.bias", (f,)),
                         w2=t.get(p + "mlp.c_proj.weight", (d, f)), b2=t.get(p + "mlp.c_proj.bias", (d,))))
    V = cfg_int(config, "vocab_size")
    P = cfg_int(config, "max_position_embeddings")
    emb = dict(word=t.get("wte.weight", (V, d)), position=t.get("wpe.weight", (P, d)))
    final = (t.get("ln_f.weight", (d,)), t.get("ln_f.bias", (d,)))
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[True] * L, window=[w if k == "local" else 0 for k in kinds],
                 scale=[1.0] * L, embeddings=emb, final_ln=final, norm_style="pre",
                 activation=config.get("activation_function", "gelu_new"),
                 ln_eps=config.get("layer_norm_epsilon", 1e-5), family="gpt_neo")
