"""Llama and the families that differ from it by configuration only: Mistral (a sliding window on
every layer) and Qwen2 (q/k/v biases, sliding windows on the layers ``layer_types`` names).

Pre-norm RMSNorm blocks ``x + Attn(RMS1 x)``, ``x + MLP(RMS2 x)`` with a final RMSNorm; grouped-query
attention (``num_key_value_heads``), RoPE on queries and keys (with the scaling variants of
:mod:`jaxattn.model.rope`), a gated MLP ``down(act(gate y) * up y)`` (SwiGLU with ``silu``); causal;
score scale ``head_dim ** -0.5``; no position embeddings; the LM head (tied or not) is not used.
"""

from __future__ import annotations

from jaxattn.errors import CheckpointError, ConfigError, is_integer, positive_int
from jaxattn.io.checkpoints._build import build
from jaxattn.io.checkpoints._common import Tensors, cfg_int, find_prefix, split_bias, split_cols, split_rows
from jaxattn.model import rope as rope_mod

IGNORE = [r"lm_head\..*", r"score\..*", r"(.*\.)?rotary_emb\.inv_freq"]
#: model_type -> (q/k/v biases, o bias) when the family fixes them (Llama reads attention_bias)
BIASES = {"mistral": (False, False), "qwen2": (True, False)}


def heads(config: dict) -> tuple[int, int, int, int]:
    """``(d, H, H_kv, d_h)`` of a Llama-style config; refuses head counts that cannot be grouped."""
    d = cfg_int(config, "hidden_size")
    H = cfg_int(config, "num_attention_heads")
    Hkv = cfg_int(config, "num_key_value_heads", default=H)
    if H % Hkv:
        raise CheckpointError(f"config.json: {H} attention heads cannot be grouped over {Hkv} key/value heads "
                              "(num_key_value_heads must divide num_attention_heads)")
    dh = config.get("head_dim") or (d // H if d % H == 0 else 0)
    if not is_integer(dh, 1):
        raise CheckpointError(f"config.json: hidden size {d} is not divisible by {H} attention heads "
                              "and no head_dim is given")
    return d, H, Hkv, dh


def rope(config: dict, dh: int, **kw) -> rope_mod.Rope:
    try:
        return rope_mod.from_hf_config(config, dh, **kw)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def attention(t: Tensors, a: str, d: int, H: int, Hkv: int, dh: int, *, bias_qkv: bool, bias_o: bool,
              names=("q_proj", "k_proj", "v_proj", "o_proj")) -> dict:
    """q, k, v, o (and their biases) of one layer from separate ``nn.Linear`` projections."""
    qn, kn, vn, on = names
    bias = lambda n, size: t.get(a + n + ".bias", (size,)) if bias_qkv else None
    return dict(q=split_rows(t.get(a + qn + ".weight", (H * dh, d)), H),
                k=split_rows(t.get(a + kn + ".weight", (Hkv * dh, d)), Hkv),
                v=split_rows(t.get(a + vn + ".weight", (Hkv * dh, d)), Hkv),
                o=split_cols(t.get(a + on + ".weight", (d, H * dh)), H),
                bq=split_bias(bias(qn, H * dh), H), bk=split_bias(bias(kn, Hkv * dh), Hkv),
                bv=split_bias(bias(vn, Hkv * dh), Hkv),
                bo=t.get(a + on + ".bias", (d,)) if bias_o else None)


def gated_mlp(t: Tensors, m: str, d: int, f: int, bias: bool = False) -> dict:
    """``down(act(gate y) * up y)``: up -> w1, down -> w2, gate -> wg."""
    if not t.has(m + "gate_proj.weight"):
        raise CheckpointError(f"missing tensor '{t.prefix}{m}gate_proj.weight' (the gate of the gated MLP)")
    b = lambda n, size: t.get(m + n + ".bias", (size,)) if bias else None
    return dict(w1=t.get(m + "up_proj.weight", (f, d)), b1=b("up_proj", f),
                w2=t.get(m + "down_proj.weight", (d, f)), b2=b("down_proj", d),
                wg=t.get(m + "gate_proj.weight", (f, d)), bg=b("gate_proj", f))


def windows(config: dict, L: int) -> list[int]:
    """Sliding window of every layer (0 = none): Mistral's on every layer, Qwen2's where ``layer_types``
    (or, in older configs, ``use_sliding_window`` and ``max_window_layers``) says so."""
    w = config.get("sliding_window")
    mt = config.get("model_type")
    if mt == "qwen2" and not config.get("layer_types"):
        use = config.get("use_sliding_window", False) and w is not None
        start = config.get("max_window_layers", L)
        kinds = ["sliding_attention" if use and i >= start else "full_attention" for i in range(L)]
    else:
        kinds = config.get("layer_types") or ["sliding_attention" if w is not None and mt != "llama"
                                              else "full_attention"] * L
    if len(kinds) != L or any(k not in ("full_attention", "sliding_attention") for k in kinds):
        raise CheckpointError(f"config.json: layer_types {kinds} do not give 'full_attention'/'sliding_attention' "
                              f"for {L} layers")
    if "sliding_attention" in kinds:
        positive_int("config.json: sliding_window", w, CheckpointError)
    return [int(w) if k == "sliding_attention" and w else 0 for k in kinds]


def convert(config: dict, tensors: dict):
    mt = config.get("model_type", "llama")
    d, H, Hkv, dh = heads(config)
    L = cfg_int(config, "num_hidden_layers")
    f = cfg_int(config, "intermediate_size")
    if config.get("pretraining_tp", 1) not in (1, None):
        raise CheckpointError("config.json: pretraining_tp > 1 is not supported")
    bias_qkv, bias_o = BIASES.get(mt, (bool(config.get("attention_bias", False)),) * 2)
    r = rope(config, dh)
    win = windows(config, L)
    t = Tensors(tensors, find_prefix(tensors, "embed_tokens.weight"))
    sets = []
    for layer in range(L):
        p = f"layers.{layer}."
        s = attention(t, p + "self_attn.", d, H, Hkv, dh, bias_qkv=bias_qkv, bias_o=bias_o)
        s.update(gated_mlp(t, p + "mlp.", d, f, bool(config.get("mlp_bias", False))))
        s.update(ln1_w=t.get(p + "input_layernorm.weight", (d,)), ln1_b=None,
                 ln2_w=t.get(p + "post_attention_layernorm.weight", (d,)), ln2_b=None)
        sets.append(s)
    V = cfg_int(config, "vocab_size")
    emb = dict(word=t.get("embed_tokens.weight", (V, d)))
    final = (t.get("norm.weight", (d,)), None)
    t.check_all_used(IGNORE)
    return build(sets, schedule=range(L), causal=[True] * L, window=win, scale=[dh ** -0.5] * L, embeddings=emb,
                 final_ln=final, norm_style="pre", activation=config.get("hidden_act", "silu"),
                 ln_eps=config.get("rms_norm_eps", 1e-6), family=mt, norm_kind="rmsnorm", rope=r)
