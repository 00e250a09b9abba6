"""The families of issue 23 (Llama/Mistral/Qwen2, GPT-NeoX, Gemma, OPT, Phi): conversion checked against
transformers hidden state by hidden state, GQA layer matrices, RoPE dynamics, bad input."""

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxattn as ja  # noqa: E402
import jaxattn.io.checkpoints as ck  # noqa: E402
from jaxattn.cli import main  # noqa: E402
from jaxattn.dynamics.faithful import hidden_states  # noqa: E402
from jaxattn.errors import CheckpointError  # noqa: E402

from . import hf_models  # noqa: E402
from .test_forms import assert_forms_agree_on  # noqa: E402

# the fast tier converts one Llama-style model (GQA, YaRN RoPE) and one GPT-NeoX (parallel block, partial rotary) and
# checks RoPE against NumPy; make test-all every variant of every family (BERT and GPT-2: test_checkpoints)

# longer than the sliding windows (3) and than the dynamic-RoPE variant's 8 positions
PROMPT = np.array([3, 17, 5, 88, 42, 7, 1, 60, 33, 2, 9])

LLAMA3 = dict(rope_type="llama3", rope_theta=500.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=16)
YARN = dict(rope_type="yarn", rope_theta=100.0, factor=4.0, original_max_position_embeddings=16)
#: (family, config overrides): GQA ratios 1, 2 and 4 (4 query heads), every RoPE scaling variant Llama's
#: config allows, biases everywhere Llama allows them, Mistral's and Qwen2's sliding windows.
VARIANTS = {
    "llama-gqa2": ("llama", {}),
    "llama-gqa1-linear-biases": ("llama", dict(num_key_value_heads=4, attention_bias=True, mlp_bias=True,
                                               rope_parameters=dict(rope_type="linear", rope_theta=100.0,
                                                                    factor=2.0))),
    "llama-gqa4-llama3": ("llama", dict(num_key_value_heads=1, rope_parameters=LLAMA3)),
    "llama-gqa1-yarn": ("llama", dict(num_key_value_heads=4, rope_parameters=YARN)),
    # 8 positions < 11 tokens: the NTK base grows with the sequence
    "llama-dynamic": ("llama", dict(max_position_embeddings=8,
                                    rope_parameters=dict(rope_type="dynamic", rope_theta=100.0, factor=2.0))),
    "mistral-window": ("mistral", {}),
    "mistral-gqa4-nowindow": ("mistral", dict(num_key_value_heads=1, sliding_window=None)),
    "qwen2-window": ("qwen2", {}),
    "gpt_neox-parallel-quarter": ("gpt_neox", {}),  # rotary fraction 1/4 (2 of 8 dimensions), parallel block
    "gpt_neox-sequential-full": ("gpt_neox", dict(use_parallel_residual=False, rope_parameters=dict(
        rope_type="linear", rope_theta=10000.0, partial_rotary_factor=1.0, factor=2.0))),
    "gemma-gqa2": ("gemma", {}),
    "gemma-gqa4-bias": ("gemma", dict(num_key_value_heads=1, attention_bias=True)),
    "opt-pre": ("opt", {}),
    "opt-post": ("opt", dict(do_layer_norm_before=False)),
    "phi-gqa2": ("phi", {}),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{variant: (folder, converted model, float64 transformers reference)} built lazily, once per module."""
    cache = {}

    def get(variant):
        if variant not in cache:
            family, over = VARIANTS[variant]
            folder = tmp_path_factory.mktemp(variant)
            hf_models.build(family, folder, **over)
            with hf_models.exact_float64():
                ref = hf_models.reference(folder)
            cache[variant] = (folder, ck.load_any(str(folder)), ref)
        return cache[variant]

    return get


def hf_run(ref, ids, full: bool):
    """transformers' hidden states and attentions; ``full``: a 4-D all-zero additive mask (no causal mask)."""
    n = len(ids)
    kw = {"attention_mask": torch.zeros(1, 1, n, n, dtype=torch.float64)} if full else {}
    with hf_models.exact_float64(), torch.no_grad():  # positions given: OPT would derive them from a 2-D mask
        o = ref(torch.tensor(ids)[None], position_ids=torch.arange(n)[None], output_hidden_states=True,
                output_attentions=True, **kw)
    return [h[0].numpy() for h in o.hidden_states], [a[0].numpy() for a in o.attentions]


def full_mask(model):
    lay = model.layers
    return model.replace(layers=lay.replace(causal=np.zeros_like(lay.causal), window=np.zeros_like(lay.window)))


def errors(model, ids, hs_ref, att_ref):
    hs, A = hidden_states(model, ids, dtype="float64")
    assert hs.shape[0] == len(hs_ref) and A.shape[0] == len(att_ref)
    eh = max(float(np.abs(np.asarray(hs[i]) - hs_ref[i]).max()) for i in range(len(hs_ref)))
    ea = max(float(np.abs(np.asarray(A[i]) - att_ref[i]).max()) for i in range(len(att_ref)))
    return eh, ea


@pytest.mark.fast_cases('gpt_neox-parallel-quarter', 'llama-gqa1-yarn')
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_faithful_matches_transformers(tiny, variant):
    """Every hidden state and attention map equals transformers' to 1e-10, causal (with the family's
    sliding windows) and with a full mask."""
    _, model, ref = tiny(variant)
    for full in (False, True):
        hs_ref, att_ref = hf_run(ref, PROMPT, full)
        eh, ea = errors(full_mask(model) if full else model, PROMPT, hs_ref, att_ref)
        assert eh <= 1e-10 and ea <= 1e-10, (full, eh, ea)


@pytest.mark.e2e
def test_configuration_facts(tiny):
    llama = tiny("llama-gqa4-llama3")[1]
    assert llama.layers.n_kv_heads == 1 and llama.layers.kv_group == 4 and llama.norm_kind == "rmsnorm"
    assert llama.rope.kind == "llama3" and llama.rope.dim == 8 and llama.embeddings.position is None
    assert llama.layers.wg is not None and llama.layers.bq is None and llama.layers.ln1_b is None
    np.testing.assert_array_equal(np.asarray(tiny("mistral-window")[1].layers.window), [3, 3])
    np.testing.assert_array_equal(np.asarray(tiny("mistral-gqa4-nowindow")[1].layers.window), [0, 0])
    qwen = tiny("qwen2-window")[1]
    np.testing.assert_array_equal(np.asarray(qwen.layers.window), [0, 3])
    assert qwen.layers.bq is not None and qwen.layers.bk.shape == (2, 2, 8) and qwen.layers.bo is None
    neox = tiny("gpt_neox-parallel-quarter")[1]
    assert neox.parallel and neox.rope.dim == 2 and neox.norm_kind == "layernorm" and neox.layers.bq is not None
    assert not tiny("gpt_neox-sequential-full")[1].parallel and tiny("gpt_neox-sequential-full")[1].rope.dim == 8
    gemma = tiny("gemma-gqa2")[1]
    assert gemma.embed_scale == 32 ** 0.5 and gemma.activation == "gelu_pytorch_tanh"
    assert gemma.layers.ln1_w.dtype == np.float64  # the gain 1 + w, exact
    phi = tiny("phi-gqa2")[1]
    assert phi.parallel and phi.layers.ln2_w is None and phi.rope.dim == 4 and phi.layers.kv_group == 2
    assert tiny("opt-post")[1].norm_style == "post" and tiny("opt-post")[1].final_ln_w is None
    assert tiny("opt-pre")[1].embeddings.position.shape == (64, 32)  # the offset rows dropped


@pytest.mark.e2e
def test_float32_forward_is_close(tiny):
    _, model, ref = tiny("llama-gqa2")
    hs_ref, _ = hf_run(ref, PROMPT, False)
    hs, _ = hidden_states(model, PROMPT, dtype="float32")
    assert max(float(np.abs(np.asarray(hs[i], np.float64) - hs_ref[i]).max()) for i in range(len(hs_ref))) < 1e-4


@pytest.mark.e2e
@pytest.mark.parametrize("variant", ["llama-gqa2", "llama-gqa4-llama3", "llama-gqa1-yarn", "gemma-gqa4-bias",
                                     "phi-gqa2"])
def test_gqa_layer_matrix_is_a_sum_over_heads_with_repeated_value_heads(tiny, variant):
    """F = Σ_h O_h V_{g(h)} from the raw tensors: o_proj's columns of head h times the rows of value head
    h // (H / H_kv) (transformers' repeat_kv), by a NumPy loop over heads."""
    from safetensors.numpy import load_file

    folder, model, _ = tiny(variant)
    t = load_file(str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh = cfg.get("head_dim") or cfg["hidden_size"] // H
    out = "dense" if cfg["model_type"] == "phi" else "o_proj"
    F = ja.layer_matrices(model)
    for layer in range(cfg["num_hidden_layers"]):
        Wo = t[f"layers.{layer}.self_attn.{out}.weight"].astype(np.float64)
        Wv = t[f"layers.{layer}.self_attn.v_proj.weight"].astype(np.float64)
        g = [h // (H // Hkv) for h in range(H)]
        want = sum(Wo[:, h * dh:(h + 1) * dh] @ Wv[g[h] * dh:(g[h] + 1) * dh] for h in range(H))
        np.testing.assert_allclose(F[layer], want, rtol=0, atol=1e-12)


@pytest.mark.e2e
def test_convert_round_trips_and_old_files_read(tiny, tmp_path):
    """A version-2 file round-trips (GQA, RoPE, gates, RMSNorm); a version-1 file (no new metadata) still reads."""
    import jax

    folder, model, _ = tiny("qwen2-window")
    path = ck.convert(folder, tmp_path / "q.safetensors")
    back = ck.load(path)
    assert back.rope == model.rope and back.norm_kind == "rmsnorm" and ck.read_meta(path)["format_version"] == 2
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(model), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # a version-1 file: what jaxattn wrote before the new fields existed
    gpt2 = tmp_path / "gpt2"
    hf_models.build("gpt2", gpt2)
    new = ck.load(ck.convert(gpt2, tmp_path / "g.safetensors"))
    old_meta = {k: v for k, v in ck.read_meta(tmp_path / "g.safetensors").items()
                if k not in ("norm_kind", "parallel", "rope", "embed_scale")}
    old_meta["format_version"] = 1
    from safetensors.numpy import load_file, save_file

    arrays = load_file(str(tmp_path / "g.safetensors"))
    save_file(arrays, str(tmp_path / "v1.safetensors"), metadata={"jaxattn": json.dumps(old_meta)})
    old = ck.load(tmp_path / "v1.safetensors")
    assert (old.norm_kind, old.parallel, old.rope, old.embed_scale) == ("layernorm", False, None, 1.0)
    np.testing.assert_array_equal(np.asarray(hidden_states(old, PROMPT[:5], dtype="float64")[0]),
                                  np.asarray(hidden_states(new, PROMPT[:5], dtype="float64")[0]))


# ---------------------------------------------------------------- bad input
def edited_copy(tiny, variant, tmp_path, config=None, tensors=None):
    from safetensors.numpy import load_file, save_file

    dst = tmp_path / "ckpt"
    shutil.copytree(tiny(variant)[0], dst)
    if config is not None:
        cfg = json.loads((dst / "config.json").read_text())
        config(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    if tensors is not None:
        t = load_file(str(dst / "model.safetensors"))
        tensors(t)
        save_file(t, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.mark.parametrize("config,tensors,match", [
    (lambda c: c["rope_parameters"].update(rope_type="su-scaled", factor=2.0), None,
     "unsupported RoPE scaling type 'su-scaled'"),
    (lambda c: c.update(num_key_value_heads=3), None, "4 attention heads cannot be grouped over 3 key/value heads"),
    (None, lambda t: t.pop("layers.1.mlp.gate_proj.weight"), "missing tensor 'layers.1.mlp.gate_proj.weight'"),
    (lambda c: c["rope_parameters"].update(rope_type="llama3", factor=8.0), None, "'llama3' lacks low_freq_factor"),
])
def test_bad_input_one_line_and_no_output(tiny, tmp_path, config, tensors, match, capsys):
    folder = edited_copy(tiny, "llama-gqa2", tmp_path, config, tensors)
    with pytest.raises(CheckpointError, match=match):
        ck.convert_source(folder)
    out = tmp_path / "out.safetensors"
    capsys.readouterr()  # building the fixture prints transformers' progress bars
    assert main(["convert", str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxattn: error:") and match.split("'")[0] in err[0]
    assert not out.exists() and not list(tmp_path.glob(".out.safetensors*"))


# ---------------------------------------------------------------- D1 with RoPE, analyze, consensus
def numpy_rope_d1_step(X, q, k, v, o, scale, dim, theta, alpha=1.0, beta=1.0):
    """One causal D1 step with RoPE by explicit loops: a^h_ij = softmax_j(β s <R_i Q_h x_i, R_j K_g(h) x_j>),
    x_i <- N(x_i + α Σ_h O_h Σ_j a^h_ij V_g(h) x_j), R_i rotating coordinate pairs (k, k + dim/2) of a head
    by the angle i θ^(-2k/dim); g(h) = h // (H / H_kv)."""
    n, _ = X.shape
    H, dh, Hkv = q.shape[0], q.shape[1], k.shape[0]

    def R(i):
        M = np.eye(dh)
        for m in range(dim // 2):
            a = i * theta ** (-2 * m / dim)
            c, s = np.cos(a), np.sin(a)
            M[m, m], M[m, m + dim // 2], M[m + dim // 2, m], M[m + dim // 2, m + dim // 2] = c, -s, s, c
        return M

    Y = X.copy()
    for i in range(n):
        upd = np.zeros(X.shape[1])
        for h in range(H):
            g = h // (H // Hkv)
            e = np.array([beta * scale * (R(i) @ q[h] @ X[i]) @ (R(j) @ k[g] @ X[j]) for j in range(i + 1)])
            a = np.exp(e - e.max())
            a /= a.sum()
            upd += o[h] @ sum(a[j] * (v[g] @ X[j]) for j in range(i + 1))
        y = X[i] + alpha * upd
        Y[i] = y / np.linalg.norm(y)
    return Y


@pytest.mark.parametrize("dim,rope", [(4, "model"), (6, "on")])
def test_d1_with_rope_equals_numpy_reference(dim, rope):
    """A one-layer model, 4 query heads over 2 key/value heads of 6 dimensions: RoPE on 4 of them (the model's
    own, θ = 100) or, for a model without RoPE, the standard one on all 6 (θ = 10⁴)."""
    rng = np.random.default_rng(3)
    d, H, Hkv, dh = 12, 4, 2, 6
    q, k, v = (rng.normal(size=(1, h, dh, d)) / np.sqrt(d) for h in (H, Hkv, Hkv))
    o = rng.normal(size=(1, H, d, dh)) / np.sqrt(dh)
    own = ja.model.rope.Rope(dim=4, theta=100.0) if rope == "model" else None
    model = ja.model.params.from_heads(q, k, v, o, masks="causal", rope=own)
    X = rng.normal(size=(7, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    got = ja.simulate(model, X[None], 1, dynamics=ja.Dynamics(rope=rope), save=ja.Save(trajectory=True), alpha=0.7,
                      beta=1.3).final[0]
    want = numpy_rope_d1_step(X, q[0], k[0], v[0], o[0], 1 / np.sqrt(dh), dim, 100.0 if own else 1e4, 0.7, 1.3)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-12)
    plain = ja.simulate(model, X[None], 1, save=ja.Save(trajectory=True), alpha=0.7,
                        beta=1.3).final[0]  # default: position-free
    assert np.abs(np.asarray(plain) - want).max() > 1e-3
    np.testing.assert_allclose(np.asarray(plain), np.asarray(ja.simulate(
        model.replace(rope=None), X[None], 1, alpha=0.7, beta=1.3).final[0]), rtol=0, atol=1e-14)


def test_rmsnorm_is_a_scaled_l2_normalisation_with_gains():
    """RMSNorm(y) = g ⊙ √d · y/‖y‖ (ε = 0): the sphere of radius √d, then the diagonal gain."""
    rng = np.random.default_rng(5)
    y, g = rng.normal(size=(3, 16)), rng.normal(size=16)
    want = g * np.sqrt(16) * y / np.linalg.norm(y, axis=-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(ja.model.nn.rms_norm(y, g, 0.0)), want, rtol=1e-13, atol=0)
    np.testing.assert_allclose(np.asarray(ja.model.nn.rms_norm(y, None, 0.0)) / 4.0, np.asarray(ja.model.nn.l2(y)),
                               atol=1e-15)


@pytest.mark.e2e
@pytest.mark.parametrize("variant,rope", [("llama-gqa2", "none"), ("gpt_neox-parallel-quarter", "model")])
def test_analyze_and_consensus_end_to_end(tiny, variant, rope, tmp_path, capsys):
    """analyze (position-free D1 on Llama, D1 with the model's RoPE on GPT-NeoX) and consensus, on the command
    line; the report states the reading of the architecture it used."""
    import csv

    folder = tiny(variant)[0]
    out = tmp_path / "a"
    capsys.readouterr()
    assert main(["analyze", str(folder), "--num-init", "16", "--n", "4", "--gammas", "10", "--steer-target", "0",
                 "--rope", rope, "--out", str(out), "--no-progress", "--no-figures"]) == 0
    assert "power-method analogy holds in" in capsys.readouterr().out
    report = (out / "report.md").read_text()
    assert "## Reading of the architecture" in report
    assert ("position-free (RoPE dropped" in report) == (rope == "none")
    assert ("RoPE on queries and keys by token index 0..n-1 (2 of 8" in report) == (rope == "model")
    assert ("RMSNorm" in report) == variant.startswith("llama")
    assert ("Grouped-query attention: 4 query heads share 2" in report) == variant.startswith("llama")
    assert ("in parallel" in report) == variant.startswith("gpt_neox")
    with (out / "layers.csv").open() as f:
        assert "ffn_layernorm" in {r["run"] for r in csv.DictReader(f)}
    c = tmp_path / "c"
    assert main(["consensus", str(folder), "--passes", "2", "--prompts", "3", "--tokens", "6", "--synthetic-num", "2",
                 "--t1", "2", "--out", str(c), "--no-progress", "--no-figures"]) == 0
    assert (c / "summary.csv").is_file() and (c / "report.md").is_file()


def test_rope_model_refused_on_a_model_without_rope(tmp_path, capsys):
    assert main(["simulate", "--rope", "model", "--num-init", "2", "--d", "8", "--heads", "2", "--depth", "1",
                 "--out", str(tmp_path / "s"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "this model has no RoPE" in err[0] and not (tmp_path / "s").exists()


@pytest.mark.e2e
def test_text_prompts_through_a_converted_llama(tiny, tmp_path):
    """A tokenizer saved next to the checkpoint turns text into ids, the ids into initial conditions (the
    embeddings: no position table, RoPE acts in attention), and the faithful pass matches transformers."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    _, model, ref = tiny("llama-gqa2")
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(97)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(tmp_path / "tok")
    ids = ja.dynamics.prompts.text_prompts(tmp_path / "tok", ["w3 w17 w5 w88 w42 w7"])[0]
    np.testing.assert_array_equal(ids, [3, 17, 5, 88, 42, 7])
    X0 = ja.dynamics.prompts.embed_prompts(model, ids, dtype="float64")
    np.testing.assert_array_equal(np.asarray(X0[0]), np.asarray(model.embeddings.word)[ids].astype(np.float64))
    hs_ref, _ = hf_run(ref, ids, False)
    final = ja.dynamics.faithful.forward(model, X0[0], dtype="float64")[0][-1]
    np.testing.assert_allclose(np.asarray(final), hs_ref[-1], rtol=0, atol=1e-10)


@pytest.mark.e2e
@pytest.mark.parametrize("variant", ["qwen2-window", "gemma-gqa2", "gpt_neox-sequential-full", "opt-post", "phi-gqa2"])
def test_repeated_passes_run_on_every_new_family(tiny, variant):
    """One FAITHFUL pass is the faithful forward pass (final norm included); NO_FFN passes run."""
    _, model, _ = tiny(variant)
    X0 = ja.dynamics.prompts.embed_prompts(model, PROMPT[:6], dtype="float64")
    res = ja.repeated_passes(model, X0, passes=1, dtype="float64")
    want = hidden_states(model, PROMPT[:6], dtype="float64")[0][-1]
    np.testing.assert_allclose(np.asarray(res.final[0]), np.asarray(want), rtol=0, atol=1e-12)
    if model.norm_style == "pre":
        two = ja.repeated_passes(model, X0, passes=2, dynamics=ja.NO_FFN, dtype="float64")
        assert two.observables["diameter"].shape == (1, 2 * model.depth + 1)
        assert np.all(np.isfinite(np.asarray(two.final)))


@pytest.mark.e2e
def test_against_unpatched_transformers(tmp_path):
    """Without exact_float64, transformers computes RMSNorm, RoPE and the softmax in float32 inside a float64
    Llama: agreement is then at float32's level, which is what the patch removes (and nothing more)."""
    tm = hf_models.build("llama", tmp_path / "m")  # float64 weights, float32 internals
    with torch.no_grad():
        o = tm(torch.tensor(PROMPT)[None], output_hidden_states=True)
    hs, _ = hidden_states(ck.load_any(str(tmp_path / "m")), PROMPT, dtype="float64")
    err = max(float(np.abs(np.asarray(hs[i]) - o.hidden_states[i][0].numpy()).max()) for i in range(len(hs)))
    assert 1e-10 < err < 1e-5, err


@pytest.mark.e2e
@pytest.mark.parametrize("variant", ["llama-gqa2", "llama-gqa1-linear-biases", "mistral-window", "qwen2-window",
                                     "gpt_neox-parallel-quarter", "gemma-gqa4-bias", "opt-post", "phi-gqa2"])
def test_every_attention_form_gives_the_general_numbers(tiny, variant):
    """Issue 29: the forms of jaxattn.model.forms on the newer families (RoPE, grouped-query heads, sliding
    windows, q/k/v biases, parallel blocks, post-norm OPT)."""
    assert_forms_agree_on(tiny(variant)[1])
