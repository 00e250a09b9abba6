"""The discrete models D1–D5 against the NumPy reference, and their invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.errors import ConfigError

from . import reference as ref


def weight_sets(model):
    lay = model.layers
    sets = []
    for g in range(lay.n_sets):
        w = {name: np.asarray(getattr(lay, name)[g]) for name in ("q", "k", "v", "o")}
        for name in ("bq", "bk", "bv", "bo"):
            a = getattr(lay, name)
            w[name] = None if a is None else np.asarray(a[g])
        w["scale"] = float(lay.scale[g])
        w["causal"] = bool(lay.causal[g])
        w["window"] = int(lay.window[g])
        sets.append(w)
    return sets


CASES = [
    # (mask, heads, shared, biases)
    ("full", 1, True, False),
    ("full", 3, True, True),
    ("causal", 2, False, False),
    ("causal", 3, False, True),
    ("local:2", 1, False, True),
    ("local:3", 3, True, False),
]


@pytest.mark.parametrize("mask,heads,shared,biases", CASES)
@pytest.mark.parametrize("dyn,norm", [(ja.D1, "l2"), (ja.D3, "l2"), (ja.D4, "none"), (ja.D5, "ellipsoid")])
def test_matches_numpy_reference(mask, heads, shared, biases, dyn, norm):
    d, n, depth, steps = 6, 5, 3, 5
    key = jax.random.key(100 + CASES.index((mask, heads, shared, biases)))  # the same model in every process
    model = ja.random_model(key, d, heads, depth, shared=shared, mask=mask, biases=biases)
    if biases:
        dyn = ja.Dynamics(norm=dyn.norm, attention=dyn.attention, biases=True)
    S = None
    if norm == "ellipsoid":
        A = np.random.default_rng(1).normal(size=(d, d))
        S = A @ A.T / d + np.eye(d)
    X0 = np.asarray(ja.init_tokens(jax.random.key(2), 3, n, d, kind="ellipsoid" if S is not None else "sphere",
                                   S=S, dtype=jnp.float64))
    alpha, beta = 0.7, 1.3
    res = ja.simulate(model, X0, steps, dynamics=dyn, alpha=alpha, beta=beta, S=S, save=ja.Save(trajectory=True),
                      dtype=jnp.float64)
    sets = weight_sets(model)
    for b in range(X0.shape[0]):
        want = ref.simulate(X0[b], sets, model.schedule, steps, alpha=alpha, beta=beta, norm=norm, S=S,
                            biases=biases, uniform=dyn.attention == "uniform")
        np.testing.assert_allclose(np.asarray(res.trajectory[b]), want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(res.final), np.asarray(res.trajectory[:, -1]))


def test_attention_probabilities_match_reference():
    model = ja.random_model(jax.random.key(3), 8, 2, 1, mask="local:3", biases=True)
    X = np.asarray(ja.init_tokens(jax.random.key(4), 1, 7, 8, dtype=jnp.float64))[0]
    lw = model.layers.take(0)
    got = ja.model.attention.probabilities(jnp.asarray(X), lw, 0.8, biases=True)
    w = weight_sets(model)[0]
    want = ref.attention_probs(X, w["q"], w["k"], w["scale"], 0.8, True, 3, w["bq"], w["bk"])
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-14)
    # local causal: token i attends exactly to j in (i - 3, i]
    assert np.all((np.asarray(got) > 0) == np.tril(np.triu(np.ones((7, 7)), -2))[None])


@pytest.mark.e2e
def test_single_head_unit_output_is_D2():
    d = 5
    model = ja.random_model(jax.random.key(5), d, 1, 2, unit_output=True)
    np.testing.assert_array_equal(np.asarray(model.layers.o[0, 0]), np.eye(d))
    X0 = ja.init_tokens(jax.random.key(6), 2, 4, d, dtype=jnp.float64)
    res = ja.simulate(model, X0, 3, save=ja.Save(trajectory=True))
    V = np.asarray(model.layers.v[0, 0])
    Q = np.asarray(model.layers.q[0, 0])
    K = np.asarray(model.layers.k[0, 0])
    X = np.asarray(X0[0])
    for _ in range(3):  # x_i <- N(x_i + Σ_j a_ij V x_j), a = softmax(<Qx_i, Kx_j>/sqrt(d))
        S = (X @ Q.T) @ (X @ K.T).T / np.sqrt(d)
        A = np.exp(S - S.max(1, keepdims=True))
        A /= A.sum(1, keepdims=True)
        Y = X + A @ X @ V.T
        X = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(res.final[0]), X, atol=1e-13)


@pytest.mark.e2e
@pytest.mark.parametrize("mask", ["full", "causal", "local:2"])
def test_unit_norm_after_every_step(mask):
    model = ja.random_model(jax.random.key(7), 12, 3, 4, shared=False, mask=mask)
    X0 = ja.init_tokens(jax.random.key(8), 16, 6, 12, kind="gaussian", dtype=jnp.float64)
    res = ja.simulate(model, X0, 9, save=ja.Save(trajectory=True))
    norms = np.linalg.norm(np.asarray(res.trajectory[:, 1:]), axis=-1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-14)


@pytest.mark.e2e
def test_ellipsoid_invariant():
    d = 6
    A = np.random.default_rng(2).normal(size=(d, d))
    S = A @ A.T / d + 0.5 * np.eye(d)
    model = ja.random_model(jax.random.key(9), d, 2, 3, shared=False)
    X0 = ja.init_tokens(jax.random.key(10), 8, 5, d, kind="ellipsoid", S=S, dtype=jnp.float64)
    res = ja.simulate(model, X0, 6, dynamics=ja.D5, S=S, save=ja.Save(trajectory=True))
    X = np.asarray(res.trajectory)
    np.testing.assert_allclose(np.einsum("...d,de,...e->...", X, S, X), 1.0, atol=1e-13)


@pytest.mark.e2e
@pytest.mark.parametrize("heads", [1, 3])
def test_principal_consensus_is_fixed_point(heads):
    d, n = 6, 5
    spectrum = [2.0, 1.0, 0.5, -0.1, -0.3, -0.6]
    model = ja.random_model(jax.random.key(11), d, heads, 1, value="symmetric", spectrum=spectrum)
    F = np.einsum("hdk,hke->de", np.asarray(model.layers.o[0]), np.asarray(model.layers.v[0]))
    np.testing.assert_allclose(F, F.T, atol=1e-14)
    lam, U = np.linalg.eigh(F)
    np.testing.assert_allclose(lam, sorted(spectrum), atol=1e-12)
    v1 = U[:, -1]
    for sign in (1.0, -1.0):
        X0 = np.tile(sign * v1, (n, 1))
        res = ja.simulate(model, X0, 10, save=ja.Save(trajectory=True))
        np.testing.assert_allclose(np.asarray(res.trajectory[0]), np.broadcast_to(X0, (11, n, d)), atol=1e-14)


@pytest.mark.e2e
@pytest.mark.parametrize("mask", ["causal", "local:3"])
def test_causality(mask):
    d, n, t = 8, 7, 3
    model = ja.random_model(jax.random.key(12), d, 2, 3, shared=False, mask=mask, biases=True)
    X0 = np.asarray(ja.init_tokens(jax.random.key(13), 2, n, d, dtype=jnp.float64))
    X1 = X0.copy()
    X1[:, t + 1:] = np.asarray(ja.init_tokens(jax.random.key(14), 2, n, d, dtype=jnp.float64))[:, t + 1:]
    a = ja.simulate(model, X0, 5, save=ja.Save(trajectory=True), dynamics=ja.Dynamics(biases=True)).trajectory
    b = ja.simulate(model, X1, 5, save=ja.Save(trajectory=True), dynamics=ja.Dynamics(biases=True)).trajectory
    np.testing.assert_array_equal(np.asarray(a[:, :, : t + 1]), np.asarray(b[:, :, : t + 1]))
    assert np.abs(np.asarray(a[:, 1:, t + 1:] - b[:, 1:, t + 1:])).max() > 1e-3


def test_batch_split_independence():
    key = jax.random.key(15)
    full = ja.init_tokens(key, 50, 4, 8)
    parts = jnp.concatenate([ja.init_tokens(key, 20, 4, 8), ja.init_tokens(key, 30, 4, 8, start=20)])
    np.testing.assert_array_equal(np.asarray(full), np.asarray(parts))
    model = ja.random_model(jax.random.key(16), 8, 2, 3, shared=False, mask="causal")
    X0 = ja.init_tokens(key, 50, 4, 8, dtype=jnp.float64)
    whole = ja.simulate(model, X0, 7)
    chunked = ja.simulate(model, X0, 7, batch=ja.Batch(size=16))  # 3 chunks of 16 and a remainder of 2
    single = ja.simulate(model, X0[37:38], 7)
    np.testing.assert_allclose(np.asarray(chunked.final), np.asarray(whole.final), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(single.final[0]), np.asarray(whole.final[37]), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(chunked.observables["diameter"]),
                               np.asarray(whole.observables["diameter"]), atol=1e-13)


@pytest.mark.e2e
def test_prolonged_shared_model_cycles_schedule():
    model = ja.random_model(jax.random.key(17), 6, 2, 3, shared=False)
    X0 = ja.init_tokens(jax.random.key(18), 2, 4, 6, dtype=jnp.float64)
    long = ja.simulate(model, X0, 6, save=ja.Save(trajectory=True)).trajectory
    once = ja.simulate(model, X0, 3).final
    twice = ja.simulate(model, once, 3).final
    np.testing.assert_allclose(np.asarray(long[:, 6]), np.asarray(twice), atol=1e-14)


@pytest.mark.e2e
def test_float32_default_and_loose_agreement():
    model = ja.random_model(jax.random.key(19), 16, 4, 4, shared=False, mask="causal")
    X0 = ja.init_tokens(jax.random.key(20), 8, 6, 16)
    assert X0.dtype == jnp.float32
    r32 = ja.simulate(model, X0, 8)
    r64 = ja.simulate(model, X0, 8, dtype=jnp.float64)
    assert r32.final.dtype == jnp.float32 and r64.final.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(r32.final), np.asarray(r64.final), atol=1e-4)


@pytest.mark.e2e
def test_observables_only_kept():
    model = ja.random_model(jax.random.key(21), 8, 2, 2, shared=False)

    X0 = ja.init_tokens(jax.random.key(22), 5, 3, 8, dtype=jnp.float64)
    res = ja.simulate(model, X0, 4, save=ja.Save(observe=_first_coord))
    assert res.trajectory is None
    # the observable at every saved step is the first coordinate of the state the NumPy reference reaches
    want = np.stack([ref.simulate(np.asarray(X0[b]), weight_sets(model), model.schedule, 4)[:, :, 0] for b in range(5)])
    np.testing.assert_allclose(np.asarray(res.observables), want, rtol=0, atol=1e-12)
    every2 = ja.simulate(model, X0, 4, save=ja.Save(observe=_first_coord, every=2)).observables  # steps 0, 2, 4
    np.testing.assert_allclose(np.asarray(every2), want[:, [0, 2, 4]], rtol=0, atol=1e-12)


def _first_coord(t, X, ctx):
    return X[:, 0]


@pytest.mark.parametrize("steps,every", [(8, 3), (11, 4), (7, 5), (13, 5)])  # remainders 2, 3, 2, 3
def test_save_every_with_a_last_partial_segment_matches_numpy_reference(steps, every):
    """``Save(every=m)`` where ``m`` does not divide the steps: the last, shorter segment (``r ≥ 2`` steps) runs
    the weight sets of its own steps and is observed at its start, as the reference's trajectory says. Three
    distinct layers, so a segment starting one layer early changes the numbers."""
    d, n, depth, B = 6, 4, 3, 2
    model = ja.random_model(jax.random.key(23), d, 2, depth, shared=False)
    X0 = ja.init_tokens(jax.random.key(24), B, n, d, dtype=jnp.float64)
    save = ja.Save(every=every, trajectory=True, observe=_first_coord_and_attention)
    res = ja.simulate(model, X0, steps, alpha=0.9, beta=1.7, save=save)
    saved = ja.dynamics.discrete.saved_steps(steps, every)
    assert saved[-2] == steps - steps % every and steps % every >= 2
    sets = weight_sets(model)
    for b in range(B):
        want = ref.simulate(np.asarray(X0[b]), sets, model.schedule, steps, alpha=0.9, beta=1.7)
        np.testing.assert_allclose(np.asarray(res.trajectory[b]), want[saved], rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(res.final[b]), want[-1], rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(res.observables["x0"][b]), want[saved][:, :, 0], rtol=0, atol=1e-12)
        # the attention weights a saved step sees: those of the step that follows it
        at = [sets[model.schedule[k % len(model.schedule)]] for k in saved]
        A = np.stack([ref.attention_probs(want[k], w["q"], w["k"], w["scale"], 1.7, w["causal"], w["window"])
                      for k, w in zip(saved, at, strict=True)])
        np.testing.assert_allclose(np.asarray(res.observables["attention"][b]), A, rtol=0, atol=1e-12)


def test_save_every_is_every_step_saving_subsampled():
    """``Save(every=m)`` keeps exactly what saving every step keeps at steps 0, m, 2m, … and the last step, for every
    remainder ``steps % m`` (0 and 1 included: a one-step last segment is a segment, not none). Three distinct layers,
    so a segment that runs the wrong layers changes the numbers."""
    d, n, depth, B = 6, 4, 3, 2
    model = ja.random_model(jax.random.key(25), d, 2, depth, shared=False)
    X0 = ja.init_tokens(jax.random.key(26), B, n, d, dtype=jnp.float64)
    full = ja.simulate(model, X0, 8, alpha=0.8, beta=1.3,
                       save=ja.Save(every=1, trajectory=True, observe=_first_coord_and_attention))
    for every, steps in [(1, 2), (2, 4), (2, 5), (3, 6), (3, 7), (3, 8)]:  # every remainder 0 .. m-1
        res = ja.simulate(model, X0, steps, alpha=0.8, beta=1.3,
                          save=ja.Save(every=every, trajectory=True, observe=_first_coord_and_attention))
        want = sorted({*range(0, steps + 1, every), steps})
        assert list(ja.dynamics.discrete.saved_steps(steps, every)) == want
        at = f"every={every}, steps={steps}"
        np.testing.assert_allclose(np.asarray(res.trajectory), np.asarray(full.trajectory)[:, want], rtol=0,
                                   atol=1e-13, err_msg=at)
        np.testing.assert_allclose(np.asarray(res.final), np.asarray(full.trajectory)[:, steps], rtol=0, atol=1e-13)
        for name in ("x0", "attention"):
            np.testing.assert_allclose(np.asarray(res.observables[name]),
                                       np.asarray(full.observables[name])[:, want], rtol=0, atol=1e-13,
                                       err_msg=f"{name}, {at}")


def _first_coord_and_attention(t, X, ctx):
    return {"x0": X[:, 0], "attention": ctx.attention()}


@pytest.mark.fast_cases("0-3-4-8")
@pytest.mark.parametrize("listed", [(0,), (8,), (0, 8), (1, 2, 3), (0, 3, 4, 7), (0, 3, 4, 8), tuple(range(9))],
                         ids=lambda v: "-".join(map(str, v)))
def test_save_steps_is_every_step_saving_at_the_listed_steps(listed):
    """``Save(steps=[...])`` keeps exactly what saving every step keeps at the listed steps — the first, the last,
    neighbours, gaps, all of them — the observable seeing the attention weights of the step that follows, with the
    layers of the steps run (three distinct layers); through ``simulate`` and ``simulate_one``."""
    d, n, depth, B, steps = 6, 4, 3, 2, 8
    model = ja.random_model(jax.random.key(25), d, 2, depth, shared=False)
    X0 = ja.init_tokens(jax.random.key(26), B, n, d, dtype=jnp.float64)
    kw = dict(alpha=0.8, beta=1.3)
    full = ja.simulate(model, X0, steps, **kw, save=ja.Save(trajectory=True, observe=_first_coord_and_attention))
    want = list(listed)
    save = ja.Save(steps=listed[::-1], trajectory=True, observe=_first_coord_and_attention)  # any order
    assert list(ja.dynamics.discrete.saved_steps(steps, save.when)) == want
    res = ja.simulate(model, X0, steps, **kw, save=save)
    one = ja.simulate_one(model, X0[1], steps, **kw, save=save)
    expect = lambda a, b=None: np.take(np.asarray(a) if b is None else np.asarray(a)[b], want, axis=0 if b else 1)
    for got, b in ((res, None), (one, 1)):
        np.testing.assert_allclose(np.asarray(got.trajectory), expect(full.trajectory, b), rtol=0, atol=1e-13)
        np.testing.assert_allclose(np.asarray(got.final), np.asarray(full.final if b is None else full.final[b]),
                                   rtol=0, atol=1e-13)
        for name in ("x0", "attention"):
            np.testing.assert_allclose(np.asarray(got.observables[name]), expect(full.observables[name], b), rtol=0,
                                       atol=1e-13, err_msg=name)


@pytest.mark.e2e
def test_save_steps_in_repeated_passes_and_under_grad():
    """``repeated_passes`` keeps the listed steps of its every-step run, and the derivative of a listed step's record
    is the every-step run's (the record sits in a branch of the scan, which reverse mode goes through)."""
    model = ja.random_model(jax.random.key(25), 6, 2, 3, shared=False)
    X0 = ja.init_tokens(jax.random.key(26), 2, 4, 6, dtype=jnp.float64)
    listed = (0, 2, 3, 7)
    passes = ja.repeated_passes(model, X0, passes=3, dynamics=ja.D1, save=ja.Save(steps=listed, trajectory=True))
    full = ja.repeated_passes(model, X0, passes=3, dynamics=ja.D1, save=ja.Save(trajectory=True))
    np.testing.assert_array_equal(np.asarray(passes.trajectory), np.asarray(full.trajectory)[:, list(listed)])
    grad = lambda save, t: jax.grad(lambda beta: ja.simulate_one(model, X0[0], 8, alpha=0.8, beta=beta,
                                                                  save=save).observables["diameter"][t])(1.3)
    np.testing.assert_allclose(grad(ja.Save(steps=listed), -1), grad(ja.Save(), 7), rtol=1e-12, atol=1e-15)


def test_save_steps_beyond_the_run_or_with_every_or_in_a_flow_is_refused():
    model = ja.random_model(jax.random.key(0), 4, 2)
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4, dtype=jnp.float64)
    with pytest.raises(ConfigError, match=r"Save\(steps=...\) lists step 6, beyond the run's 5 steps"):
        ja.simulate(model, X0, 5, save=ja.Save(steps=[0, 6]))
    with pytest.raises(ConfigError, match="beyond the run's 5 steps"):
        ja.simulate_one(model, X0[0], 5, save=ja.Save(steps=[6]))
    with pytest.raises(ConfigError, match="give one of them"):
        ja.Save(steps=[1], every=2)
    for bad in ([], [-1], (-1, 2), [0.5], (0.5, 2), (True,), 3, "12", np.zeros((2, 2), int)):  # tuples are checked too
        with pytest.raises(ConfigError, match="non-empty sequence of non-negative integers"):
            ja.Save(steps=bad)
    with pytest.raises(ConfigError, match=r"Save\(steps=...\) gives steps of a map; solve solves a flow"):
        ja.solve(model, X0, 1.0, save=ja.Save(steps=[1]))


@pytest.mark.parametrize("call,match", [
    (lambda: ja.random_model(jax.random.key(0), 10, 3), "not divisible"),
    (lambda: ja.simulate(ja.random_model(jax.random.key(0), 4, 2), np.zeros((1, 3, 5)), 2), "dimension 5"),
    (lambda: ja.simulate(ja.random_model(jax.random.key(0), 4, 2), np.ones((1, 3, 4)), -1), "non-negative"),
    (lambda: ja.simulate(ja.random_model(jax.random.key(0), 4, 2), np.ones((3, 4, 4, 4)), 1), r"\[B, n, d\]"),
    (lambda: ja.simulate(ja.random_model(jax.random.key(0), 4, 2), np.ones((1, 3, 4)), 1, dynamics=ja.D5),
     "needs the matrix S"),
    (lambda: ja.simulate(ja.random_model(jax.random.key(0), 4, 2), np.ones((1, 3, 4)), 1,
                         dynamics=ja.Dynamics(ffn=True)), "no FFN"),
    (lambda: ja.Dynamics(norm="l3"), "norm must be"),
    (lambda: ja.model.params.parse_mask("local:0"), "positive window"),
    (lambda: ja.model.params.parse_mask("sparse"), "mask must be"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


def test_non_finite_weights_refused():
    m = ja.random_model(jax.random.key(0), 4, 2)
    q = np.array(m.layers.q)
    q[0, 0, 0, 0] = np.nan
    with pytest.raises(ConfigError, match="non-finite"):
        ja.model.params.from_heads(q, m.layers.k, m.layers.v, m.layers.o)


@pytest.mark.e2e
@pytest.mark.parametrize("weights", ["uniform", "identity"])
def test_random_model_weight_kinds(weights):
    d, H = 32, 4
    dh = d // H
    m = ja.random_model(jax.random.key(23), d, H, 2, shared=False, weights=weights, uniform_range=(-0.5, 1.5))
    q, k, v = (np.asarray(getattr(m.layers, n)) for n in ("q", "k", "v"))
    if weights == "identity":  # Q_h = K_h = the rows of the identity that head h owns
        for h in range(H):
            np.testing.assert_array_equal(q[:, h], np.broadcast_to(np.eye(d)[h * dh:(h + 1) * dh], (2, dh, d)))
        np.testing.assert_array_equal(k, q)
        # the value weights stay random (Gaussian N(0, 1/d)) so that F is not the identity
        assert abs(v.std() * np.sqrt(d) - 1) < 0.1 and abs(v.mean()) < 0.05
    else:  # entries uniform in the range: bounds, mean (lo+hi)/2 and variance (hi-lo)²/12, every drawn matrix
        for a in (q, k, v):
            assert a.min() >= -0.5 and a.max() <= 1.5
            assert abs(a.mean() - 0.5) < 0.05 and abs(a.var() - 4 / 12) < 0.03
            assert a.max() - a.min() > 1.9  # fills the range
        assert not np.allclose(q, k)


def _compiles(fn):
    """Number of XLA compilations ``fn()`` triggers (JAX's own compile log)."""
    import logging

    records = []

    class Grab(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if "Compiling" in msg or "Finished XLA compilation" in msg:
                records.append(msg)

    handler = Grab(level=logging.DEBUG)
    loggers = [logging.getLogger(name) for name in ("jax", "jax._src")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        with jax.log_compiles(True):
            fn()
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
    return len(records)


@pytest.mark.e2e
def test_alpha_and_beta_do_not_recompile():
    """α and β are traced (the README's claim): a new value reuses the compiled program; a new step count
    compiles again (so the count below can see a compilation)."""
    model = ja.random_model(jax.random.key(24), 8, 2, 3, shared=False)
    X0 = ja.init_tokens(jax.random.key(25), 4, 5, 8, dtype=jnp.float64)
    run = lambda alpha, beta, steps=3: np.asarray(ja.simulate(model, X0, steps, alpha=alpha, beta=beta).final)
    first = run(0.5, 1.0)
    assert _compiles(lambda: run(0.5, 1.0)) == 0
    assert _compiles(lambda: run(0.8, 2.5)) == 0 and _compiles(lambda: run(1.3, 0.2)) == 0
    assert _compiles(lambda: run(0.5, 1.0, steps=4)) > 0
    assert not np.allclose(run(0.8, 2.5), first)  # the new values are used


@pytest.mark.requires_cpu("the eight CPU devices tests/conftest.py forces")
def test_batch_split_over_eight_cpu_devices():
    """tests/conftest.py gives the process 8 CPU devices: a batch split over them (shard_map) gives the
    numbers of one device."""
    devs = jax.local_devices()
    assert len(devs) == 8
    model = ja.random_model(jax.random.key(26), 8, 2, 3, shared=False, mask="causal")
    X0 = ja.init_tokens(jax.random.key(27), 20, 5, 8, dtype=jnp.float64)
    one = ja.simulate(model, X0, 4, batch=ja.Batch(size=8))
    many = ja.simulate(model, X0, 4, batch=ja.Batch(size=8, devices=devs))
    np.testing.assert_array_equal(np.asarray(many.final), np.asarray(one.final))
    np.testing.assert_array_equal(np.asarray(many.observables["diameter"]), np.asarray(one.observables["diameter"]))


def test_float32_tokens_in_a_float64_model_run_in_float64_with_nothing_promoted():
    """simulate_one and velocity take float32 tokens through a float64 model in float64, the weights and every
    scalar cast first: under the suite's strict promotion a mixed expression would raise instead."""
    model = ja.random_model(jax.random.key(3), d=4, heads=2, depth=2)
    X = ja.init_tokens(jax.random.key(4), 1, 5, 4, dtype=jnp.float32)[0]
    assert model.layers.q.dtype == jnp.float64 and X.dtype == jnp.float32
    one = ja.simulate_one(model, X, 3)
    ref = ja.simulate_one(model, X.astype(jnp.float64), 3)
    assert one.final.dtype == jnp.float64 and np.array_equal(np.asarray(one.final), np.asarray(ref.final))
    for flow in (ja.C2, ja.C3_RESCALED):
        v = ja.velocity(model, X, 0.5, flow=flow)
        assert v.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(v), np.asarray(ja.velocity(model, X.astype(jnp.float64), 0.5,
                                                                             flow=flow)))
