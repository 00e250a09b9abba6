"""Repeated passes of real models against transformers called pass after pass, and the consensus theory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jaxattn as ja  # noqa: E402
from jaxattn.analysis import observables  # noqa: E402
from jaxattn.dynamics import prompts  # noqa: E402
from jaxattn.dynamics.passes import redraw_weights, repeated_passes  # noqa: E402
from jaxattn.errors import ConfigError  # noqa: E402

from . import hf_models  # noqa: E402


def _tiny(family, tmp_path):
    tm = hf_models.build(family, tmp_path / family)
    with torch.no_grad():  # the HF model adds position embeddings to inputs_embeds at every call
        tm.wpe.weight.zero_()
    tm.save_pretrained(tmp_path / family)
    return tm, ja.convert(str(tmp_path / family), str(tmp_path / f"{family}.safetensors"))


def _states(t, X, ctx):
    return X


@pytest.mark.fast_cases('gpt2-1e-10')
@pytest.mark.parametrize("family,tol", [("gpt2", 1e-10), ("gpt_neo", 1e-10)])
def test_passes_equal_transformers_called_pass_after_pass(family, tol, tmp_path, gpt_neo_exact):
    tm, path = _tiny(family, tmp_path)
    model = ja.load(path)
    ids = prompts.random_prompts(jax.random.key(0), model, 3, 11)
    X0 = prompts.embed_prompts(model, ids, dtype=jnp.float64)
    res = repeated_passes(model, X0, 3, save=ja.Save(observe=_states), dtype="float64")
    depth = model.depth
    for b in range(3):
        with torch.no_grad():
            h = torch.from_numpy(np.array(X0[b]))[None]
            for p in range(3):
                out = tm(inputs_embeds=h, output_hidden_states=True)
                hs = out.hidden_states  # [input, block 1, ..., block L-1, after ln_f]
                for k in range(1, depth + 1):
                    got = np.asarray(res.observables[b, p * depth + k])
                    np.testing.assert_allclose(got, hs[k][0].numpy(), rtol=0, atol=tol)
                h = out.last_hidden_state
        np.testing.assert_allclose(np.asarray(res.final[b]), h[0].numpy(), rtol=0, atol=tol)


@pytest.mark.e2e
def test_ffn_removed_block_equals_hf_block_without_mlp(tmp_path):
    tm, path = _tiny("gpt2", tmp_path)
    with torch.no_grad():
        for blk in tm.h:  # MLP output exactly zero: the block is x + attn(ln_1 x), ln_2 plays no part
            blk.mlp.c_proj.weight.zero_()
            blk.mlp.c_proj.bias.zero_()
            blk.ln_2.weight.mul_(7.0)
    model = ja.load(path)
    X0 = prompts.embed_prompts(model, prompts.random_prompts(jax.random.key(1), model, 2, 9), dtype=jnp.float64)
    res = repeated_passes(model, X0, 1, dynamics=ja.NO_FFN, final_norm=False, save=ja.Save(observe=_states),
                          dtype="float64")
    with torch.no_grad():
        hs = tm(inputs_embeds=torch.from_numpy(np.array(X0)), output_hidden_states=True).hidden_states
    for k in range(1, model.depth):
        np.testing.assert_allclose(np.asarray(res.observables[:, k]), hs[k].numpy(), rtol=0, atol=1e-10)


@pytest.mark.e2e
def test_first_token_fixed_and_others_converge_under_causal_identity_values():
    d, n = 6, 5
    model = ja.random_model(jax.random.key(2), d, 2, 4, shared=False, mask="causal", value="identity")
    X0 = ja.init_tokens(jax.random.key(3), 6, n, d, dtype=jnp.float64)
    res = repeated_passes(model, X0, 40, dynamics=ja.D1, save=ja.Save(observe=_states), dtype="float64")
    traj = np.asarray(res.observables)
    # token 1 attends only to itself: x_1 + x_1 renormalised. It stays where the first step put it (that step
    # only rounds its norm to 1, within an ulp of the input), to round-off: how XLA fuses the normalisation
    # (a division by the norm or a product with its reciprocal square root) moves it by an ulp or two
    np.testing.assert_allclose(traj[:, 1:, 0], np.broadcast_to(traj[:, 1:2, 0], traj[:, 1:, 0].shape), rtol=0,
                               atol=1e-15)
    np.testing.assert_allclose(traj[:, 1, 0], np.asarray(X0)[:, 0], rtol=0, atol=2.3e-16)
    first = np.array([[1 - np.mean((x / np.linalg.norm(x, axis=-1, keepdims=True)) @ (x[0] / np.linalg.norm(x[0])))
                       for x in tr] for tr in traj])
    assert np.all(first[:, -1] < 1e-3) and np.all(first[:, -1] < first[:, 0])
    obs = repeated_passes(model, X0, 40, dynamics=ja.D1, save=ja.Save(observe=observables.consensus),
                          dtype="float64").observables
    np.testing.assert_allclose(np.asarray(obs["first_token"]), first, rtol=0, atol=1e-12)


@pytest.mark.e2e
def test_hemisphere_lyapunov_never_decreases_on_the_flow():
    d, n = 4, 6
    model = ja.random_model(jax.random.key(4), d, 2, 1, value="identity")
    X0 = prompts.hemisphere_tokens(jax.random.key(5), 10, n, d, dtype=jnp.float64)
    w = jnp.zeros(d).at[0].set(1.0)
    assert float((X0 @ w).min()) > 0
    sol = ja.solve(model, X0, 8.0, save=ja.Save(observe=observables.consensus_hemisphere, aux={"w": w},
                                                ts=np.linspace(0, 8, 33)), rtol=1e-10, atol=1e-12)
    L = np.asarray(sol.observables["hemisphere"])
    assert np.all(np.diff(L, axis=1) > -1e-10)
    cosc = np.asarray(sol.observables["cos_consensus"])
    assert np.all(cosc[:, -1] < cosc[:, 0])


@pytest.mark.e2e
def test_symmetric_value_with_simple_top_eigenvalue_converges_to_its_eigenvector():
    d, n = 4, 5
    model = ja.random_model(jax.random.key(6), d, 1, 1, mask="causal", value="symmetric",
                            spectrum=[1.0, 0.3, -0.2, -0.5])
    F = np.asarray(ja.layer_matrices(model)[0])
    _lam, vec = np.linalg.eigh(F)
    v1 = vec[:, -1]
    X0 = ja.init_tokens(jax.random.key(7), 8, n, d, dtype=jnp.float64)
    sol = ja.solve(model, X0, 60.0, rtol=1e-9, atol=1e-11)
    align = np.abs(np.asarray(sol.final) @ v1)
    assert np.median(align) > 1 - 1e-6 and np.mean(align > 1 - 1e-4) > 0.9


@pytest.mark.e2e
def test_redraw_weights_uses_the_init_scale_and_changes_every_pass(tmp_path):
    _, path = _tiny("gpt2", tmp_path)
    model = ja.load(path)
    a = redraw_weights(model, jax.random.key(0))
    b = redraw_weights(model, jax.random.key(1))
    assert abs(float(jnp.std(a.layers.q)) - 0.02) < 0.003
    assert abs(float(jnp.std(a.layers.o)) - 0.02 / np.sqrt(2 * model.depth)) < 0.002
    assert float(jnp.abs(a.layers.bq).max()) == 0 and float(jnp.abs(a.layers.ln1_w - 1).max()) == 0
    assert float(jnp.abs(a.layers.q - b.layers.q).max()) > 0
    X0 = prompts.embed_prompts(model, prompts.random_prompts(jax.random.key(2), model, 2, 7), dtype=jnp.float64)
    per = repeated_passes(model, X0, 2, dtype="float64")
    ape = repeated_passes(model, X0, 2, redraw=True, key=jax.random.key(3), dtype="float64")
    assert np.abs(np.asarray(per.final) - np.asarray(ape.final)).max() > 1e-3
    for dt in ("float32", "bfloat16", "float16"):
        out = repeated_passes(model, X0, 1, dtype=dt)
        assert out.final.dtype == jnp.dtype(dt) and np.all(np.isfinite(np.asarray(out.final, np.float32)))


def test_bad_prompts_and_options(tmp_path):
    _, path = _tiny("gpt2", tmp_path)
    model = ja.load(path)
    vocab = model.embeddings.word.shape[0]
    for ids, match in (([[vocab]], "must be in"), ([[-1, 2]], "must be in"), (np.zeros((1, 0), int), "non-empty"),
                       ([[1.5, 2.0]], "integers"), ([[1] * 500], "exceed")):
        with pytest.raises(ConfigError, match=match):
            prompts.embed_prompts(model, ids)
    synthetic = ja.random_model(jax.random.key(0), 8, 2, 2)
    with pytest.raises(ConfigError, match="no embeddings"):
        prompts.random_prompts(jax.random.key(0), synthetic, 2, 3)
    X0 = ja.init_tokens(jax.random.key(0), 2, 3, 8)
    with pytest.raises(ConfigError, match="needs a PRNG key"):
        repeated_passes(synthetic, X0, 2, dynamics=ja.D1, redraw=True)
    with pytest.raises(ConfigError, match="no LayerNorm"):
        repeated_passes(synthetic, X0, 2, dynamics=ja.Dynamics(norm="layernorm"))
    with pytest.raises(ConfigError, match="no FFN"):
        repeated_passes(synthetic, X0, 2)
    with pytest.raises(ConfigError, match="passes must be"):
        repeated_passes(synthetic, X0, 0, dynamics=ja.D1)
    with pytest.raises(ConfigError, match="drop_ln2"):
        repeated_passes(synthetic, X0, 1, dynamics=ja.Dynamics(drop_ln2=True))
