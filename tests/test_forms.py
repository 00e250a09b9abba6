"""Issue 29: the exact forms of an attention layer (jaxattn.model.forms) — identity members read as reshapes,
the bilinear form of the papers, broadcast products, the online softmax over key chunks. Every form gives the
numbers of the general per-head form and of the NumPy reference to <= 1e-12 in float64, and each is chosen
where it should be."""

import dataclasses
import functools
import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.dynamics import _runner, discrete
from jaxattn.dynamics.discrete import form_of
from jaxattn.errors import ConfigError
from jaxattn.model import forms
from jaxattn.model.attention import attend, probabilities
from jaxattn.model.backend import arranged_as

from . import reference as ref
from .test_discrete import weight_sets

GENERAL = forms.Form()


@functools.cache
def _models():
    """(name, model): the papers' models and the generic ones, every structure the chooser distinguishes."""
    key = jax.random.key(7)
    rng = np.random.default_rng(3)
    V = rng.normal(size=(3, 3))
    return {
        "sphere-d3": ja.random_model(key, 3, weights="identity", value="identity", scale=1.0),
        "sphere-d4-2heads-causal": ja.random_model(key, 4, heads=2, weights="identity", value="identity",
                                                   mask="causal", depth=2, shared=False),
        "clusters-d16": ja.random_model(key, 16, weights="identity", value="random", scale=1.0),
        "symmetric-d4": ja.random_model(key, 4, weights="identity", value="symmetric",
                                        spectrum=[1.5, 1.0, -0.5, 0.2]),
        "paper-d3": ja.analysis.clusters.paper_model(V),
        "gaussian-d6": ja.random_model(key, 6, depth=3, shared=False),
        "gaussian-d16-causal": ja.random_model(key, 16, mask="causal"),
        "gaussian-d6-3heads-local-biases": ja.random_model(key, 6, heads=3, mask="local:2", biases=True),
        "unit-output-d5": ja.random_model(key, 5, unit_output=True),
    }


class _Models(Mapping):
    """The models above by name, built on first use (in the test that needs them, not at collection, where building
    them compiled their random draws in every worker); the names are known without building anything."""

    NAMES = ("sphere-d3", "sphere-d4-2heads-causal", "clusters-d16", "symmetric-d4", "paper-d3", "gaussian-d6",
             "gaussian-d16-causal", "gaussian-d6-3heads-local-biases", "unit-output-d5")

    def __getitem__(self, name):
        return _models()[name]

    def __iter__(self):
        return iter(self.NAMES)

    def __len__(self):
        return len(self.NAMES)


MODELS = _Models()


@pytest.mark.e2e
def test_the_model_names_are_the_models():
    assert tuple(_models()) == _Models.NAMES
DYNAMICS = {"D1": (ja.D1, "l2"), "D3": (ja.D3, "l2"), "D4": (ja.D4, "none"), "D5": (ja.D5, "ellipsoid")}


def _forms(model):
    """Every form that can compute this model's layers exactly (identity members only where they are)."""
    ids = forms.identity_members(model.layers)
    out = [GENERAL, forms.Form(products="broadcast"), forms.Form(key_chunk=2),
           forms.Form(key_chunk=3, products="broadcast")]
    if ids:
        out += [forms.Form(identity=ids), forms.Form(identity=ids, products="broadcast", key_chunk=4)]
    if forms.unmasked(model.layers):
        out += [forms.Form(masked=False), forms.Form(identity=ids, key_chunk=3, masked=False)]
    if model.layers.bq is None:
        out += [forms.Form(scores="bilinear", values="bilinear"),
                forms.Form(scores="bilinear", values="heads", identity=tuple(m for m in ids if m in "vo"), key_chunk=3)]
    return out


def _setting(model, dyn_name, n=7, batch=3):
    dyn, norm = DYNAMICS[dyn_name]
    biases = model.layers.bq is not None
    if biases:
        dyn = dataclasses.replace(dyn, biases=True)
    d = model.d_model
    S = None
    if norm == "ellipsoid":
        A = np.random.default_rng(1).normal(size=(d, d))
        S = A @ A.T / d + np.eye(d)
    X0 = np.asarray(ja.init_tokens(jax.random.key(2), batch, n, d, kind="ellipsoid" if S is not None else "sphere",
                                   S=S, dtype=jnp.float64))
    return dyn, norm, S, X0, biases


@pytest.mark.fast_cases('D1-gaussian-d6-3heads-local-biases', 'D1-paper-d3', 'D3-clusters-d16',
                        'D3-gaussian-d16-causal', 'D3-gaussian-d6', 'D3-gaussian-d6-3heads-local-biases',
                        'D3-paper-d3', 'D3-sphere-d3', 'D3-sphere-d4-2heads-causal', 'D3-symmetric-d4',
                        'D3-unit-output-d5', 'D4-clusters-d16', 'D4-gaussian-d16-causal', 'D4-gaussian-d6',
                        'D4-gaussian-d6-3heads-local-biases', 'D4-paper-d3', 'D4-sphere-d3',
                        'D4-sphere-d4-2heads-causal', 'D4-symmetric-d4', 'D4-unit-output-d5', 'D5-clusters-d16',
                        'D5-gaussian-d16-causal', 'D5-gaussian-d6', 'D5-gaussian-d6-3heads-local-biases',
                        'D5-paper-d3', 'D5-sphere-d3', 'D5-sphere-d4-2heads-causal', 'D5-symmetric-d4',
                        'D5-unit-output-d5')
@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("dyn_name", list(DYNAMICS))
def test_every_form_of_a_block_equals_the_general_form_and_the_numpy_reference(name, dyn_name):
    """One block, every form that applies (eagerly: no program to compile per form), against the general form
    and the NumPy loops of tests/reference.py."""
    model = MODELS[name]
    dyn, norm, S, X0, biases = _setting(model, dyn_name)
    sets = weight_sets(model)
    for g in range(model.layers.n_sets):
        lw = model.layers.take(g)
        X = jnp.asarray(X0[g % X0.shape[0]])
        general = np.asarray(ja.dynamics.discrete.block(X, lw, model, dyn, 0.7, 1.3, S, form=GENERAL))
        want = ref.step(np.asarray(X), sets[g], alpha=0.7, beta=1.3, norm=norm, S=S, biases=biases,
                        uniform=dyn.attention == "uniform")
        np.testing.assert_allclose(general, want, rtol=0, atol=1e-13)
        for form in _forms(model):
            got = np.asarray(ja.dynamics.discrete.block(X, lw, model, dyn, 0.7, 1.3, S, form=form))
            np.testing.assert_allclose(got, general, rtol=0, atol=1e-13, err_msg=repr(form))


@pytest.mark.parametrize("name", ["sphere-d4-2heads-causal", "clusters-d16", "gaussian-d6-3heads-local-biases"])
def test_every_form_applies_the_normalised_weights_beyond_exps_overflow(name):
    """The property the max shift exists for, in float32 where ``exp`` overflows past 88.7: at scores of several
    hundred, every form's update (the divided-after-the-sum softmax, the key chunks' online softmax, bilinear and
    broadcast products) equals the normalised weights applied, computed in float64 by the NumPy loops."""
    model = MODELS[name]
    dyn, _, _, X0, biases = _setting(model, "D4")  # no norm: the update itself is compared
    beta = 400.0 / max(float(np.abs(np.asarray(model.layers.scale)).min()), 1e-3)  # scores of several hundred
    sets = weight_sets(model)
    lw64 = model.layers.take(0)
    lw = jax.tree.map(lambda a: a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a, lw64)
    X = X0[0]
    update, A = ref.attention_update(X, sets[0], beta, biases=biases)
    assert np.abs(A).max() > 0.5  # the weights are far from uniform: the scores are large
    want = X + 0.5 * update
    model32 = model.astype(jnp.float32)
    for form in [GENERAL, *_forms(model)]:  # one program per form (op by op, each form compiled dozens)
        step = jax.jit(lambda X, form=form: ja.dynamics.discrete.block(X, lw, model32, dyn, 0.5, beta, None,
                                                                       form=form))
        got = np.asarray(step(jnp.asarray(X, jnp.float32)))
        assert np.isfinite(got).all(), repr(form)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * np.abs(want).max(), err_msg=repr(form))


def _n_by_n_divisions(f, X) -> list[str]:
    """The divisions of an ``[..., n, n]`` array in the program of ``f(X)`` (``X: [n, d]``)."""
    n = X.shape[0]
    text = jax.jit(f).lower(X).as_text()
    return re.findall(rf"stablehlo\.divide .*tensor<(?:\d+x)*{n}x{n}xf64>", text)


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["sphere-d3", "sphere-d4-2heads-causal", "clusters-d16",
                                  "gaussian-d6-3heads-local-biases"])
def test_the_softmax_divides_after_the_weighted_sum(name):
    """A step that does not return its weights divides the weighted sum by the row sums (``n d_h`` divisions per
    head) instead of normalising the ``n × n`` weights first, in every form but the key chunks (which never form
    them); its numbers are those of the normalised weights applied, to round-off."""
    model = MODELS[name]
    dyn, _, S, X0, biases = _setting(model, "D1")
    lw = model.layers.take(0)
    X = jnp.asarray(X0[0])
    for form in _forms(model):
        if form.key_chunk is not None:
            continue
        step = functools.partial(ja.dynamics.discrete.block, lw=lw, model=model, dyn=dyn, alpha=0.7, beta=1.3, S=S,
                                 form=form)
        assert not _n_by_n_divisions(step, X), form
        # the check sees what it checks
        assert _n_by_n_divisions(functools.partial(step, return_probs=True), X), form
        A = probabilities(X, lw, 1.3, biases=biases, form=form)
        np.testing.assert_allclose(np.asarray(step(X)), np.asarray(step(X, probs=A)), rtol=0, atol=1e-14,
                                   err_msg=repr(form))


@pytest.mark.e2e
def test_observed_steps_form_the_weights_only_when_the_observable_asks():
    """An observable that does not read the attention weights (the defaults) leaves every step unnormalised, as an
    unobserved one; one that reads them gets them formed once, shared with the step it observes."""
    model = MODELS["sphere-d4-2heads-causal"]
    dyn, _, S, X0, _ = _setting(model, "D1")
    X = jnp.asarray(X0[0])
    form = form_of(model, dyn, X.shape[0], "float64")

    def run(observe):
        return lambda X: discrete._evolve(X, model, 0.7, 1.3, S, None, 0, dyn=dyn, steps=4, every=1, observe=observe,
                                          trajectory=False, pass_norm=False, form=form)[:2]

    defaults = discrete.consensus_observables
    assert not _n_by_n_divisions(run(defaults), X)
    assert _n_by_n_divisions(run(lambda k, X, ctx: ctx.attention().max(-1)), X)
    shared = run(lambda k, X, ctx: (ctx.attention().max(-1), ctx.attention().min(-1)))
    assert len(_n_by_n_divisions(shared, X)) == len(_n_by_n_divisions(run(lambda k, X, ctx: ctx.attention()), X))
    # the same numbers either way, to round-off
    plain, seen = run(defaults)(X), run(lambda k, X, ctx: ctx.attention())(X)
    np.testing.assert_allclose(np.asarray(seen[1]), np.asarray(plain[1]), rtol=0, atol=1e-14)


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(MODELS))
def test_simulate_takes_the_chosen_form_with_the_same_numbers(name):
    """The driver's automatic choice, over several steps and weight sets, against the general form and the
    NumPy reference (trajectory and observables)."""
    model = MODELS[name]
    dyn_name = "D5" if name == "paper-d3" else "D1"
    dyn, norm, S, X0, biases = _setting(model, dyn_name)
    steps = 4
    kw = dict(dynamics=dyn, alpha=0.7, beta=1.3, S=S, dtype=jnp.float64, save=ja.Save(trajectory=True))
    general = ja.simulate(model, X0, steps, batch=ja.Batch(form=GENERAL), **kw)
    auto = ja.simulate(model, X0, steps, **kw)
    assert form_of(model, dyn, X0.shape[1], jnp.float64) != GENERAL or name.startswith("gaussian-d6-3heads")
    np.testing.assert_allclose(np.asarray(auto.trajectory), np.asarray(general.trajectory), rtol=0, atol=1e-12)
    for key in ("diameter", "cos_consensus"):
        np.testing.assert_allclose(np.asarray(auto.observables[key]), np.asarray(general.observables[key]),
                                   rtol=0, atol=1e-12)
    sets = weight_sets(model)
    for b in range(X0.shape[0]):
        want = ref.simulate(X0[b], sets, model.schedule, steps, alpha=0.7, beta=1.3, norm=norm, S=S, biases=biases,
                            uniform=dyn.attention == "uniform")
        np.testing.assert_allclose(np.asarray(auto.trajectory[b]), want, rtol=0, atol=1e-12)


@pytest.mark.e2e
def test_float32_forms_agree_within_round_off():
    for model in (MODELS["sphere-d3"], MODELS["clusters-d16"], MODELS["gaussian-d6"]):
        m32 = model.astype(jnp.float32)
        X0 = ja.init_tokens(jax.random.key(4), 40, 9, model.d_model)
        auto = ja.simulate(m32, X0, 6, alpha=0.5, beta=2.0)
        for form in _forms(model)[:3]:
            other = ja.simulate(m32, X0, 6, alpha=0.5, beta=2.0, batch=ja.Batch(form=form))
            np.testing.assert_allclose(np.asarray(other.final), np.asarray(auto.final), rtol=0, atol=2e-6,
                                       err_msg=repr(form))


FLOWS = {"C1": ja.C1, "C2": ja.C2, "C2_OJA": ja.C2_OJA, "C3": ja.C3}


@pytest.mark.e2e
@pytest.mark.parametrize("flow_name,name", [("C2", "sphere-d3"), ("C2", "clusters-d16"), ("C1", "sphere-d3"),
                                            ("C2", "gaussian-d6-3heads-local-biases"), ("C3", "paper-d3"),
                                            ("C2_OJA", "clusters-d16")])
def test_flows_take_the_same_forms(flow_name, name):
    flow = FLOWS[flow_name]
    model = MODELS[name]
    d = model.d_model
    S = np.diag(np.linspace(1.0, 2.0, d)) if flow.space == "ellipsoid" else None
    if model.layers.bq is not None:
        flow = dataclasses.replace(flow, biases=True)
    X0 = ja.init_tokens(jax.random.key(5), 2, 6, d, kind="ellipsoid" if S is not None else "sphere", S=S,
                        dtype=jnp.float64)
    kw = dict(flow=flow, beta=1.5, S=S, rtol=1e-10, atol=1e-10, save=ja.Save(ts=[0.0, 0.5, 1.0], trajectory=True))
    general = ja.solve(model, X0, 1.0, batch=ja.Batch(form=GENERAL), **kw)
    for form in [None, forms.Form(key_chunk=4, products="broadcast")]:
        other = ja.solve(model, X0, 1.0, batch=ja.Batch(form=form or "auto"), **kw)
        np.testing.assert_allclose(np.asarray(other.trajectory), np.asarray(general.trajectory), rtol=0, atol=1e-12)
        np.testing.assert_array_equal(np.asarray(other.num_steps), np.asarray(general.num_steps))


@pytest.mark.fast_cases('causal-softmax', 'causal-uniform', 'causal-unnormalised')
@pytest.mark.parametrize("kernel", ["softmax", "uniform", "unnormalised"])
@pytest.mark.parametrize("mask", ["full", "causal", "local:3"])
def test_key_chunks_equal_the_formed_attention(kernel, mask):
    """The online softmax over key chunks (chunks that do not divide n, a chunk with no allowed key for some rows)."""
    cases = [ja.random_model(jax.random.key(1), 8, heads=2, mask=mask, biases=True),
             ja.random_model(jax.random.key(1), 4, weights="identity", value="identity", mask=mask)]
    X = ja.init_tokens(jax.random.key(3), 1, 13, 8, dtype=jnp.float64)[0]
    for model in cases:
        lw = model.layers.take(0)
        Xm = X[:, : model.d_model] / np.linalg.norm(X[:, : model.d_model], axis=-1, keepdims=True)
        formed = attend(Xm, lw, 1.7, biases=True, attention=kernel)
        for chunk in (1, 2, 5, 13, 40):
            chunked = attend(Xm, lw, 1.7, biases=True, attention=kernel, form=forms.Form(key_chunk=chunk))
            np.testing.assert_allclose(np.asarray(chunked), np.asarray(formed), rtol=0, atol=1e-13)
        # a large score (beta = 60): the running maximum keeps exp from overflowing as the formed softmax does
        big = attend(Xm, lw, 60.0, attention=kernel, form=forms.Form(key_chunk=4))
        assert np.all(np.isfinite(big)) or kernel == "unnormalised"


def test_key_chunks_with_rope_and_grouped_query_heads():
    key = jax.random.key(2)
    q = jax.random.normal(key, (1, 4, 4, 16), jnp.float64) / 4
    kv = jax.random.normal(jax.random.fold_in(key, 1), (1, 2, 4, 16), jnp.float64) / 4
    o = jax.random.normal(jax.random.fold_in(key, 2), (1, 4, 16, 4), jnp.float64) / 4
    model = ja.model.params.from_heads(q, kv, kv, o, masks="causal", rope=ja.model.rope.Rope(dim=4))
    X0 = ja.init_tokens(jax.random.key(3), 2, 11, 16, dtype=jnp.float64)
    dyn = ja.Dynamics(rope="model")
    formed = ja.simulate(model, X0, 3, dynamics=dyn, batch=ja.Batch(form=GENERAL))
    chunked = ja.simulate(model, X0, 3, dynamics=dyn, batch=ja.Batch(form=forms.Form(key_chunk=3)))
    np.testing.assert_allclose(np.asarray(chunked.final), np.asarray(formed.final), rtol=0, atol=1e-13)
    assert form_of(model, dyn, 11, jnp.float64).scores == "heads"  # RoPE: no bilinear scores


@pytest.mark.e2e
def test_the_choice():
    f = lambda name, n=32, **kw: forms.choose(MODELS[name], n, **kw)
    # the sphere model: X Xᵀ, the softmax and A X, no mask; dot products (broadcast products only when forced)
    assert f("sphere-d3") == forms.Form(identity=("q", "k", "v", "o"), masked=False)
    assert f("sphere-d4-2heads-causal").identity == ("q", "k", "v", "o")
    assert f("sphere-d4-2heads-causal").masked and f("gaussian-d6-3heads-local-biases").masked  # causal, window
    # the clustering model (Q = K = I, V random, O = I): scores from reshapes, values through F = O V
    assert f("clusters-d16") == forms.Form(identity=("q", "k"), values="bilinear", masked=False)
    # value='symmetric' has V = I and O = F: projecting once by O costs what F does: the general form
    assert f("symmetric-d4") == forms.Form(identity=("q", "k", "v"), masked=False)
    assert all(f(name).products == "einsum" for name in MODELS)
    # one full-rank head (d_h = d): the papers' B = s QᵀK and F = O V; several small heads: per-head projections
    assert (f("gaussian-d16-causal").scores, f("gaussian-d16-causal").values) == ("bilinear", "bilinear")
    assert f("gaussian-d16-causal").products == "einsum"
    assert (f("gaussian-d6-3heads-local-biases").scores, f("gaussian-d6-3heads-local-biases").values) == ("heads",
                                                                                                       "heads")
    big = forms.choose(ja.random_model(jax.random.key(0), 64, heads=8), 32)
    assert (big.scores, big.values, big.products) == ("heads", "heads", "einsum")
    # biases in effect keep their side per head (folding them into B or F would be another computation)
    one = ja.random_model(jax.random.key(0), 6, biases=True)
    assert forms.choose(one, 8, biases=True).scores == "heads"
    assert forms.choose(one, 8, biases=False).scores == "bilinear"
    assert forms.choose(one, 8, rope=True).scores == "heads"
    assert forms.choose(one, 8, attention="uniform").scores == "heads"  # no scores to form
    # beyond the budget: key chunks; within it: the n x n attention
    assert f("sphere-d3", n=100, budget=forms.attention_bytes(100, 1, jnp.float32)).key_chunk is None
    assert f("sphere-d3", n=100, budget=forms.attention_bytes(100, 1, jnp.float32) - 1).key_chunk is not None
    assert form_of(MODELS["sphere-d3"], ja.D1, 100_000, jnp.float32).key_chunk is not None
    assert form_of(MODELS["sphere-d3"], ja.D1, 1_000, jnp.float32).key_chunk is None
    for form in (f("sphere-d3"), f("clusters-d16")):
        assert isinstance(forms.describe(form), str) and hash(form) == hash(dataclasses.replace(form))


@pytest.mark.e2e
def test_identity_flags_are_verified_before_use():
    model = MODELS["sphere-d3"]
    assert model.identity == ("q", "k", "v", "o")
    # an edited model keeps its static flags, but they are checked against the weights before they are used
    q = model.layers.q.at[0, 0, 0, 1].set(0.3)
    edited = model.replace(layers=model.layers.replace(q=q))
    assert "q" not in form_of(edited, ja.D1, 5, jnp.float64).identity
    X0 = ja.init_tokens(jax.random.key(1), 2, 5, 3, dtype=jnp.float64)
    a = ja.simulate(edited, X0, 3)
    b = ja.simulate(edited, X0, 3, batch=ja.Batch(form=GENERAL))
    np.testing.assert_allclose(np.asarray(a.final), np.asarray(b.final), rtol=0, atol=1e-14)
    with pytest.raises(ConfigError, match="not the identity"):
        ja.simulate(edited, X0, 3, batch=ja.Batch(form=forms.Form(identity=("q",))))
    with pytest.raises(ConfigError, match=r"Batch\(form=\.\.\.\)"):
        ja.Batch(form="bilinear")
    with pytest.raises(ConfigError, match="key_chunk"):
        forms.Form(key_chunk=0)
    # the mask likewise: a model given a causal flag after it was built keeps it
    causal = model.replace(layers=model.layers.replace(causal=jnp.ones_like(model.layers.causal)))
    assert form_of(causal, ja.D1, 5, jnp.float64).masked
    got = ja.simulate(causal, X0, 3)
    want = ja.simulate(causal, X0, 3, batch=ja.Batch(form=GENERAL))
    np.testing.assert_allclose(np.asarray(got.final), np.asarray(want.final), rtol=0, atol=1e-14)
    assert np.abs(np.asarray(got.final) - np.asarray(a.final)).max() > 1e-3  # the mask changes the dynamics
    with pytest.raises(ConfigError, match="masked=False"):
        ja.simulate(causal, X0, 3, batch=ja.Batch(form=forms.Form(masked=False)))
    with pytest.raises(ConfigError, match="masked"):
        forms.Form(masked="no")


@pytest.mark.e2e
def test_gradients_with_respect_to_identity_weights_are_not_lost():
    """A traced weight is never read as a reshape: its derivative flows (the general form's)."""
    model = MODELS["sphere-d3"]
    X0 = ja.init_tokens(jax.random.key(1), 2, 5, 3, dtype=jnp.float64)

    def loss(q, form):
        m = model.replace(layers=model.layers.replace(q=q))
        return ja.simulate(m, X0, 3, alpha=0.5, beta=2.0, batch=ja.Batch(form=form)).final[..., 0].sum()

    g_auto = jax.grad(lambda q: loss(q, "auto"))(model.layers.q)
    g_general = jax.grad(lambda q: loss(q, GENERAL))(model.layers.q)
    assert float(jnp.abs(g_general).max()) > 1e-3
    np.testing.assert_allclose(np.asarray(g_auto), np.asarray(g_general), rtol=0, atol=1e-13)
    # the pure core, whose model a caller closes over: its traced weights take the general form too
    one = jax.grad(lambda q: ja.simulate_one(model.replace(layers=model.layers.replace(q=q)), X0[0], 3,
                                             alpha=0.5, beta=2.0).final[..., 0].sum())(model.layers.q)
    first = jax.grad(lambda q: ja.simulate(model.replace(layers=model.layers.replace(q=q)), X0[:1], 3, alpha=0.5,
                                           beta=2.0, batch=ja.Batch(form=GENERAL)).final[..., 0].sum())(model.layers.q)
    np.testing.assert_allclose(np.asarray(one), np.asarray(first), rtol=0, atol=1e-13)
    assert float(jnp.abs(one).max()) > 1e-3


@pytest.mark.e2e
def test_batch_split_independence_in_the_structured_forms():
    """At a fixed width the same bits however the batch is split; at the default widths, which follow each part,
    the same to float32 round-off."""
    model = MODELS["sphere-d3"].astype(jnp.float32)
    assert not form_of(model, ja.D1, 9, jnp.float32).masked
    X0 = ja.init_tokens(jax.random.key(9), 150, 9, 3)
    form = forms.Form(identity=("q", "k", "v", "o"), products="broadcast", masked=False)
    for batch, tol in ((ja.Batch(size=64, form=form), 0.0), (ja.Batch(form=form), 1e-6)):
        whole = ja.simulate(model, X0, 8, beta=4.0, batch=batch)
        parts = [ja.simulate(model, X0[a:b], 8, beta=4.0, batch=batch) for a, b in ((0, 37), (37, 150))]
        np.testing.assert_allclose(np.concatenate([np.asarray(p.final) for p in parts]), np.asarray(whole.final),
                                   rtol=0, atol=tol)
        np.testing.assert_allclose(np.concatenate([np.asarray(p.observables["diameter"]) for p in parts]),
                                   np.asarray(whole.observables["diameter"]), rtol=0, atol=tol)


@pytest.mark.e2e
def test_many_tokens_run_in_key_chunks(monkeypatch):
    """Beyond the block budget the map evaluates its attention over key chunks, with the same numbers."""
    model = MODELS["sphere-d3"]
    X0 = ja.init_tokens(jax.random.key(1), 3, 300, 3, dtype=jnp.float64)
    formed = ja.simulate(model, X0, 3, beta=4.0)
    assert form_of(model, ja.D1, 300, jnp.float64).key_chunk is None
    monkeypatch.setitem(_runner.LANE_BUDGET, jax.default_backend(), forms.attention_bytes(300, 1, jnp.float64) - 1)
    monkeypatch.setattr(forms, "CHUNK_BYTES", 3 * 300 * 8 * 64)  # 64 keys per chunk: 5 chunks, the last partial
    assert form_of(model, ja.D1, 300, jnp.float64).key_chunk == 64
    chunked = ja.simulate(model, X0, 3, beta=4.0)
    np.testing.assert_allclose(np.asarray(chunked.final), np.asarray(formed.final), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(chunked.observables["diameter"]), np.asarray(formed.observables["diameter"]),
                               rtol=0, atol=1e-13)


@pytest.mark.e2e
def test_probabilities_in_every_form():
    model = MODELS["gaussian-d6"]
    lw = model.layers.take(1)
    X = ja.init_tokens(jax.random.key(1), 1, 7, 6, dtype=jnp.float64)[0]
    A = probabilities(X, lw, 1.3)
    for form in _forms(model):
        np.testing.assert_allclose(np.asarray(probabilities(X, lw, 1.3, form=form)), np.asarray(A), rtol=0, atol=1e-15)


def assert_forms_agree_on(model, n: int = 9) -> None:
    """Every form of every block of a converted model, under FAITHFUL and the papers' D1, equals the general
    per-head form to <= 1e-12 (float64), eagerly; and ``simulate`` with its automatic choice equals it too.
    Used by the family tests (tests/test_checkpoints.py, tests/test_families.py) on their converted models."""
    model = model.astype(jnp.float64)
    X0 = ja.init_tokens(jax.random.key(11), 2, n, model.d_model, kind="gaussian", dtype=jnp.float64)
    for dyn in (ja.FAITHFUL, ja.D1):
        candidates = [forms.Form(products="broadcast"), forms.Form(key_chunk=4),
                      forms.Form(key_chunk=3, products="broadcast")]
        if dyn == ja.D1:  # no biases, no RoPE: the bilinear forms apply
            candidates.append(forms.Form(scores="bilinear", values="bilinear"))
        Xs = jnp.asarray(X0[0]) if dyn == ja.FAITHFUL else jnp.asarray(X0[0] / np.linalg.norm(X0[0], axis=-1,
                                                                                               keepdims=True))
        for g in sorted(set(model.schedule)):
            lw = model.layers.take(g)
            general = np.asarray(ja.dynamics.discrete.block(Xs, lw, model, dyn, 1.0, 1.0, form=GENERAL))
            for form in [form_of(model, dyn, n, jnp.float64), *candidates]:
                got = np.asarray(ja.dynamics.discrete.block(Xs, lw, model, dyn, 1.0, 1.0, form=form))
                np.testing.assert_allclose(got, general, rtol=0, atol=1e-12, err_msg=f"{model.family} {dyn} {form}")
    X = X0 / np.linalg.norm(X0, axis=-1, keepdims=True)
    auto = ja.simulate(model, X, model.depth)
    general = ja.simulate(model, X, model.depth, batch=ja.Batch(form=GENERAL))
    np.testing.assert_allclose(np.asarray(auto.final), np.asarray(general.final), rtol=0, atol=1e-12)


def test_the_gpu_retract_holds_the_overflow_promise_without_a_select():
    """The sphere's normalisation as a GPU arranges it (jaxattn.model.backend): a finite token whose squares overflow
    float32 still gets its direction (the CPU's checked form makes it NaN: its sum overflowed), a token that is not
    finite comes out NaN, never a zero token read as consensus; elsewhere it equals the checked form, and so does
    its derivative."""
    sphere = ja.dynamics.geometry.SPHERE
    big = np.array([[3e30, -4e30], [1.0, 2.0], [np.inf, 1.0], [np.nan, 0.0]], np.float32)

    def retract(Y, where):
        with arranged_as(where):
            return sphere.retract(Y)

    got = np.asarray(retract(jnp.asarray(big), "gpu"))
    want = big[:2].astype(np.float64) / np.linalg.norm(big[:2].astype(np.float64), axis=-1, keepdims=True)
    np.testing.assert_allclose(got[:2], want, rtol=2e-7)
    assert np.isnan(got[2:]).all(axis=-1).all()
    checked = np.asarray(retract(jnp.asarray(big), "cpu"))
    assert np.isnan(checked[0]).all() and not np.isnan(got[0]).any()  # where the two differ, and why
    Y = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)))
    np.testing.assert_allclose(retract(Y, "gpu"), retract(Y, "cpu"), rtol=0, atol=1e-15)
    w = jnp.asarray(np.random.default_rng(1).normal(size=(5, 3)))
    grads = [jax.grad(lambda Y, a=a: jnp.sum(retract(Y, a) * w))(Y) for a in ("gpu", "cpu")]
    np.testing.assert_allclose(grads[0], grads[1], rtol=0, atol=1e-14)


@pytest.mark.parametrize("d", [1, 2, 3, 8])
def test_a_gpus_diameter_is_the_diameter_and_nan_when_blown_up(d):
    """On a GPU the diameter checks for a blown-up configuration inside its one reduction (a non-finite pair counts
    as an infinite distance): the same value as the CPU's arrangement in float64, NaN for a NaN or infinite token."""
    from jaxattn.dynamics.observables import diameter

    X = jnp.asarray(np.random.default_rng(d).normal(size=(9, d)))
    with arranged_as("gpu"):  # the GPU's arrangement, here, eagerly
        got = float(diameter(X))
        blown = [float(diameter(X.at[4, 0].set(v))) for v in (np.nan, np.inf, -np.inf)]
        same = float(diameter(jnp.zeros((5, d))))
    with arranged_as("cpu"):
        want = float(diameter(X))
    assert got == pytest.approx(want, rel=1e-14)
    assert np.isnan(blown).all() and same == 0.0


@pytest.mark.parametrize("name", ["sphere-d3", "sphere-d4-2heads-causal", "clusters-d16", "paper-d3",
                                  "gaussian-d6-3heads-local-biases"])
def test_a_gpus_arrangement_of_every_form_is_the_cpus(name):
    """Every form's block in a GPU's arrangement (the weights normalised before their sum, the sphere normalised by
    its largest coordinate first) equals the CPU's and the NumPy reference, in float64."""
    model = MODELS[name]
    dyn, norm, S, X0, biases = _setting(model, "D1")
    sets = weight_sets(model)
    for g in range(model.layers.n_sets):
        lw = model.layers.take(g)
        X = jnp.asarray(X0[g % X0.shape[0]])
        want = ref.step(np.asarray(X), sets[g], alpha=0.7, beta=1.3, norm=norm, S=S, biases=biases, uniform=False)
        for form in _forms(model):
            with arranged_as("gpu"):
                got = np.asarray(ja.dynamics.discrete.block(X, lw, model, dyn, 0.7, 1.3, S, form=form))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-13, err_msg=repr(form))


@pytest.mark.parametrize("save", [ja.Save(), ja.Save(every="last"), ja.Save(every=3), ja.Save(steps=(0, 4, 9))],
                         ids=["every", "last", "every3", "listed"])
def test_unrolled_loops_compute_the_same_map(save):
    """Batch(unroll=k) runs k steps per loop iteration (a GPU's iteration variant): the same observables and final
    states in float64 to round-off, whatever the period of observation; solve refuses it (nothing to unroll)."""
    model = MODELS["clusters-d16"]
    X0 = ja.init_tokens(jax.random.key(3), 5, 7, 16, dtype=jnp.float64)
    ref = ja.simulate(model, X0, 10, beta=2.0, save=save)
    for k in (2, 4, 16):
        got = ja.simulate(model, X0, 10, beta=2.0, save=save, batch=ja.Batch(unroll=k))
        np.testing.assert_allclose(got.final, ref.final, rtol=0, atol=1e-13)
        for name in ref.observables:
            np.testing.assert_allclose(got.observables[name], ref.observables[name], rtol=0, atol=1e-13)
    with pytest.raises(ConfigError, match="unroll"):
        ja.solve(model, X0, 1.0, batch=ja.Batch(unroll=2))
    with pytest.raises(ConfigError, match="positive integer"):
        ja.Batch(unroll=0)
