"""Tiny random-initialised Hugging Face models of every supported family, built offline."""

import os

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


def build(family: str, folder, seed: int = 0, **overrides):
    """Save a random-initialised model of ``family`` to ``folder``; return the torch model (eager, float64)."""
    import torch
    import transformers

    spec = FAMILY_CONFIGS[family]
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
