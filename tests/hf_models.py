"""Tiny random-initialised Hugging Face models of every supported family, built offline."""

import contextlib
import importlib
import os
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FAMILY_CONFIGS = {
    "bert": dict(cls="BertConfig", kw=dict(vocab_size=97, hidden_size=24, num_hidden_layers=3, num_attention_heads=4,
                                          intermediate_size=40, max_position_embeddings=40, type_vocab_size=2)),
    # embedding_size != hidden_size; 4 layers in 2 groups of 2 inner layers: schedule 0,1,0,1,2,3,2,3
    "albert": dict(cls="AlbertConfig", kw=dict(vocab_size=97, embedding_size=12, hidden_size=24, num_hidden_layers=4,
                                              num_attention_heads=4, intermediate_size=40, num_hidden_groups=2,
                                              inner_group_num=2, max_position_embeddings=40)),
    "gpt2": dict(cls="GPT2Config", kw=dict(vocab_size=97, n_embd=24, n_layer=3, n_head=4, n_positions=40,
                                          bos_token_id=0, eos_token_id=0)),
    # alternating global/local layers with a window (3) shorter than the test sequences
    "gpt_neo": dict(cls="GPTNeoConfig", kw=dict(vocab_size=97, hidden_size=24, num_layers=4, num_heads=4,
                                               attention_types=[[["global", "local"], 2]], window_size=3,
                                               max_position_embeddings=40, bos_token_id=0, eos_token_id=0)),
}


_LLAMA = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=40, max_position_embeddings=64, bos_token_id=0, eos_token_id=0)
#: The families of issue 23 (RoPE, RMSNorm, GQA, gated MLPs, parallel blocks): hidden size <= 64, 2 layers.
NEW_FAMILY_CONFIGS = {
    "llama": dict(cls="LlamaConfig", kw=_LLAMA),
    "mistral": dict(cls="MistralConfig", kw={**_LLAMA, "sliding_window": 3}),
    # layer 0 full, layer 1 sliding (window 3), q/k/v biases
    "qwen2": dict(cls="Qwen2Config", kw={**_LLAMA, "use_sliding_window": True, "sliding_window": 3,
                                         "max_window_layers": 1}),
    "gemma": dict(cls="GemmaConfig", kw={**_LLAMA, "head_dim": 8}),
    # rotary fraction 1/4 of 8 head dimensions: 2 rotated; parallel block
    "gpt_neox": dict(cls="GPTNeoXConfig", kw=dict(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=4, intermediate_size=40,
                                                  max_position_embeddings=64,
                                                  rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                                       partial_rotary_factor=0.25))),
    "opt": dict(cls="OPTConfig", kw=dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         ffn_dim=40, max_position_embeddings=64, word_embed_proj_dim=32,
                                         bos_token_id=0, eos_token_id=0, pad_token_id=1)),
    "phi": dict(cls="PhiConfig", kw=dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=40, max_position_embeddings=64,
                                         bos_token_id=0, eos_token_id=0)),
}
FAMILY_CONFIGS_ALL = {**FAMILY_CONFIGS, **NEW_FAMILY_CONFIGS}
#: transformers modules whose own float32 casts (RMSNorm, RoPE tables, softmax) become float64 casts
EXACT_MODULES = ["transformers.modeling_rope_utils", "transformers.models.llama.modeling_llama",
                 "transformers.models.mistral.modeling_mistral", "transformers.models.qwen2.modeling_qwen2",
                 "transformers.models.gemma.modeling_gemma", "transformers.models.gpt_neox.modeling_gpt_neox",
                 "transformers.models.opt.modeling_opt", "transformers.models.phi.modeling_phi"]


@contextlib.contextmanager
def exact_float64():
    """transformers computes RMSNorm, the RoPE tables and the softmax in float32 even in a float64 model
    (``.to(torch.float32)``, ``dtype=torch.float``, ``x.float()``, integer tensors times Python floats).
    Inside this context those casts of the modules above are float64 casts, so a float64 model is float64
    throughout and the reference is exact to ~1e-15 (the code run is still transformers' own). Build the
    reference model inside it too: the RoPE inverse frequencies are computed at construction."""
    import torch

    proxy = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    proxy.float32 = proxy.float = torch.float64
    saved = []
    for name in EXACT_MODULES:
        mod = importlib.import_module(name)
        saved.append((mod, mod.torch))
        mod.torch = proxy
    tensor_float, default = torch.Tensor.float, torch.get_default_dtype()
    torch.Tensor.float = torch.Tensor.double
    torch.set_default_dtype(torch.float64)  # dynamic RoPE: an integer tensor times a Python float
    try:
        yield
    finally:
        torch.Tensor.float = tensor_float
        torch.set_default_dtype(default)
        for mod, orig in saved:
            mod.torch = orig


def reference(folder):
    """The float64 transformers model saved in ``folder``, loaded inside :func:`exact_float64` (use it there)."""
    import torch
    import transformers

    return transformers.AutoModel.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()


def build(family: str, folder, seed: int = 0, **overrides):
    """Save a random-initialised model of ``family`` to ``folder``; return the torch model (eager, float64)."""
    import torch
    import transformers

    spec = FAMILY_CONFIGS_ALL[family]
    cfg = getattr(transformers, spec["cls"])(**{**spec["kw"], **overrides})
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(cfg, attn_implementation="eager").eval()
    # LayerNorm weights start at exactly 1 and 0: perturb them so the test sees their use.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "ln_" in name or "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    return model.double()
