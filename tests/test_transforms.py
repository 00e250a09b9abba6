"""Every driver composes with jax.jit, jax.vmap and jax.grad / jax.jvp: the same numbers as the plain
call (float64, 1e-12), gradients against central finite differences, forward mode against reverse
mode, and value checks that survive jit with a message naming the option."""

import functools

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.io import checkpoints as ck

TIGHT = dict(rtol=1e-12, atol=1e-12)


def _model(shared=False, mask="full", heads=2, d=4, depth=2, **kw):
    return ja.random_model(jax.random.key(0), d=d, heads=heads, depth=depth, shared=shared, mask=mask,
                           dtype=jnp.float64, **kw)


def _tokens(B=2, n=3, d=4, seed=1):
    return ja.init_tokens(jax.random.key(seed), B, n, d, dtype=jnp.float64)


@functools.cache
def _converted(family):
    """A tiny converted HF model of ``family`` (GPT-2: pre-norm, causal; BERT: post-norm) in float64."""
    import tempfile

    from .hf_models import build

    tmp = tempfile.mkdtemp()
    build(family, tmp, num_hidden_layers=2) if family == "bert" else build(family, tmp, n_layer=2)
    return ck.load(ck.convert(tmp, f"{tmp}/m.safetensors", dtype="float64"))


def _fd(f, x, eps=1e-3):
    """Five-point central finite difference of a scalar function of a scalar (error O(eps⁴), so the
    round-off of the loss stays far below the tolerance)."""
    return (8 * (f(x + eps) - f(x - eps)) - (f(x + 2 * eps) - f(x - 2 * eps))) / (12 * eps)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# ------------------------------------------------------------------ maps: D1–D6
MAPS = {
    "D1": (ja.D1, {}),
    "D1-causal": (ja.D1, dict(mask="causal")),
    "D3": (ja.D3, {}),
    "D4": (ja.D4, dict(scale=1.0)),
    "D5": (ja.D5, {}),
    "unnormalised": (ja.Dynamics(attention="unnormalised"), {}),
}


def _S(d=4):
    A = np.random.default_rng(3).normal(size=(d, d))
    return jnp.asarray(A @ A.T / d + np.eye(d))


def _map_case(name):
    dyn, opts = MAPS[name]
    scale = opts.get("scale")
    kw = {k: v for k, v in opts.items() if k != "scale"}
    model = _model(**kw)
    if scale is not None:
        model = model.replace(layers=model.layers.replace(scale=jnp.full_like(model.layers.scale, scale)))
    S = _S() if dyn.norm == "ellipsoid" else None
    X0 = _tokens()
    if S is not None:  # on the ellipsoid x^T S x = 1
        X0 = X0 / jnp.sqrt(jnp.einsum("bni,ij,bnj->bn", X0, S, X0))[..., None]
    return dyn, model, S, X0


@pytest.mark.fast_cases('D1-causal')
@pytest.mark.parametrize("name", list(MAPS))
def test_simulate_under_jit_and_vmap(name):
    dyn, model, S, X0 = _map_case(name)
    sim = lambda X, a, b: ja.simulate(model, X, 3, dynamics=dyn, alpha=a, beta=b, S=S, batch=ja.Batch(size=2))
    plain = sim(X0, 0.7, 1.3)
    jitted = jax.jit(sim)(X0, 0.7, 1.3)
    np.testing.assert_allclose(jitted.final, plain.final, **TIGHT)
    np.testing.assert_allclose(jitted.observables["diameter"], plain.observables["diameter"], **TIGHT)
    # vmap over α and over β: one call per value
    alphas, betas = jnp.asarray([0.3, 0.7]), jnp.asarray([0.5, 2.0])
    va = jax.vmap(lambda a: sim(X0, a, 1.3).final)(alphas)
    vb = jax.vmap(lambda b: sim(X0, 0.7, b).final)(betas)
    for i in range(2):
        np.testing.assert_allclose(va[i], sim(X0, float(alphas[i]), 1.3).final, **TIGHT)
        np.testing.assert_allclose(vb[i], sim(X0, 0.7, float(betas[i])).final, **TIGHT)
    # vmap over several batches of initial conditions
    Xs = jnp.stack([X0, _tokens(seed=5)])
    if S is not None:
        Xs = Xs / jnp.sqrt(jnp.einsum("cbni,ij,cbnj->cbn", Xs, S, Xs))[..., None]
    vx = jax.vmap(lambda X: sim(X, 0.7, 1.3).final)(Xs)
    np.testing.assert_allclose(vx[1], sim(Xs[1], 0.7, 1.3).final, **TIGHT)


@pytest.mark.fast_cases('D1-causal')
@pytest.mark.parametrize("name", list(MAPS))
def test_simulate_gradients_against_finite_differences(name):
    dyn, model, S, X0 = _map_case(name)

    def loss(X=X0, a=0.7, b=1.3, m=model, S_=S):
        res = ja.simulate(m, X, 3, dynamics=dyn, alpha=a, beta=b, S=S_, batch=ja.Batch(size=2))
        return jnp.sum(res.final * jnp.arange(1.0, 1.0 + res.final.size).reshape(res.final.shape)) \
            + res.observables["diameter"][:, -1].sum()

    f = lambda **kw: float(loss(**kw))
    g_alpha = jax.grad(lambda a: loss(a=a))(0.7)
    g_beta = jax.grad(lambda b: loss(b=b))(1.3)
    assert _rel(g_alpha, _fd(lambda a: f(a=a), 0.7)) < 1e-6
    assert _rel(g_beta, _fd(lambda b: f(b=b), 1.3)) < 1e-6
    # forward mode agrees with reverse mode
    _, t_beta = jax.jvp(lambda b: loss(b=b), (1.3,), (1.0,))
    np.testing.assert_allclose(t_beta, g_beta, rtol=1e-10)
    # one entry of each weight kind, through the whole Model pytree
    g_model = jax.grad(lambda m: loss(m=m))(model)
    for member in ("q", "k", "v", "o"):
        idx = (0, 1, 0, 2) if member != "o" else (0, 1, 2, 0)
        W = getattr(model.layers, member)

        def along(eps, member=member, idx=idx, W=W):
            return f(m=model.replace(layers=model.layers.replace(**{member: W.at[idx].add(eps)})))

        assert _rel(getattr(g_model.layers, member)[idx], _fd(along, 0.0)) < 1e-6, member
    # the initial tokens
    gX = jax.grad(lambda X: loss(X=X))(X0)
    e = jnp.zeros_like(X0).at[1, 2, 3].set(1.0)
    assert _rel(gX[1, 2, 3], _fd(lambda t: f(X=X0 + t * e), 0.0)) < 1e-6
    if S is not None:  # the ellipsoid's matrix (kept symmetric along the perturbation)
        E = jnp.zeros_like(S).at[0, 1].set(1.0).at[1, 0].set(1.0)
        gS = jax.grad(lambda S_: loss(S_=S_))(S)
        assert _rel(jnp.sum(gS * E), _fd(lambda t: f(S_=S + t * E), 0.0)) < 1e-6


@pytest.mark.e2e
@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_faithful_drivers_under_transformations(family):
    """D6 on converted models: simulate, forward, hidden_states and repeated_passes under jit and grad."""
    model = _converted(family)
    ids = jnp.asarray([3, 17, 5, 60, 2])
    hs, att = ja.hidden_states(model, ids)
    hs_j, att_j = jax.jit(lambda i: ja.hidden_states(model, i))(ids)
    np.testing.assert_allclose(hs_j, hs, **TIGHT)
    np.testing.assert_allclose(att_j, att, **TIGHT)
    X = ja.dynamics.faithful.embed(model, ids)
    sim = lambda Xb, m=model: ja.simulate(m, Xb, model.depth, dynamics=ja.FAITHFUL, batch=ja.Batch(size=1),
                                          dtype="float64")
    np.testing.assert_allclose(jax.jit(sim)(X[None]).final, sim(X[None]).final, **TIGHT)
    passes = lambda Xb, m=model: ja.repeated_passes(m, Xb, 2, dtype=jnp.float64).final
    np.testing.assert_allclose(jax.jit(passes)(X[None]), passes(X[None]), **TIGHT)
    # gradients with respect to a LayerNorm gain, an FFN weight and a bias of the model
    loss = lambda m: jnp.sum(ja.dynamics.faithful.forward(m, X)[0][-1] ** 2)
    g = jax.grad(loss)(model)
    for member, idx in (("ln1_w", (1, 3)), ("w1", (0, 2, 5)), ("bv", (1, 0, 1))):
        W = getattr(model.layers, member)
        along = lambda eps, member=member, idx=idx, W=W: float(loss(model.replace(
            layers=model.layers.replace(**{member: jnp.asarray(W).at[idx].add(eps)}))))
        assert _rel(getattr(g.layers, member)[idx], _fd(along, 0.0)) < 1e-6, member
    gp = jax.grad(lambda Xb: jnp.sum(passes(Xb) ** 2))(X[None])
    e = jnp.zeros_like(X[None]).at[0, 1, 2].set(1.0)
    assert _rel(gp[0, 1, 2], _fd(lambda t: float(jnp.sum(passes(X[None] + t * e) ** 2)), 0.0)) < 1e-6


# ------------------------------------------------------------------ flows: C1–C3
FLOWS = {"C1": ja.C1, "C2": ja.C2, "C3": ja.C3, "C3_RESCALED": ja.C3_RESCALED}


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(FLOWS))
def test_solve_under_transformations(name):
    """Every flow: jit, and gradients with respect to the tokens, a weight (and S) against finite differences,
    what goes through its own vector field. C2 also: vmap, the gradients with respect to β and t1 and forward
    mode, which go through what every flow shares (the solver, the saving, the adjoint): once is enough.

    (This test used to run in a fresh interpreter after XLA's CPU compiler crashed twice while compiling these
    gradients in a long-lived xdist worker. The cause was the worker's count of memory mappings reaching the
    kernel's limit, about three per compiled program; tests/conftest.py now keeps every worker under it.)"""
    flow = FLOWS[name]
    full = name == "C2"
    model = _model(shared=True, depth=1)
    S = _S() if flow.space == "ellipsoid" else None
    X0 = _tokens()
    if S is not None:
        X0 = X0 / jnp.sqrt(jnp.einsum("bni,ij,bnj->bn", X0, S, X0))[..., None]
    kw = dict(flow=flow, S=S, rtol=1e-11, atol=1e-11, batch=ja.Batch(size=2), save=ja.Save(ts=jnp.asarray([0.0, 0.25])))

    def loss(b=1.3, X=X0, t1=0.5, S_=S, m=model):
        sol = ja.solve(m, X, t1, beta=b, **{**kw, "S": S_})
        return jnp.sum(sol.final ** 2 * jnp.arange(1.0, 1.0 + sol.final[0].size).reshape((1, *sol.final.shape[1:])))

    plain = ja.solve(model, X0, 0.5, beta=1.3, **kw)
    jitted = jax.jit(lambda X, b: ja.solve(model, X, 0.5, beta=b, **kw))(X0, 1.3)
    np.testing.assert_allclose(jitted.final, plain.final, **TIGHT)
    f = lambda **a: float(loss(**a))
    # every gradient of the test from one program (a compiled adjoint costs seconds; the partials are those of
    # separate gradients): with respect to the tokens, the model, S where the flow has one, and for C2 β and t1
    wrt = {"X": X0, "m": model, **({"S_": S} if S is not None else {}), **({"b": 1.3, "t1": 0.5} if full else {})}
    g = jax.grad(lambda a: loss(**a))(wrt)
    if full:
        vb = jax.vmap(lambda b: ja.solve(model, X0, 0.5, beta=b, **kw).final)(jnp.asarray([0.5, 1.3]))
        np.testing.assert_allclose(vb[1], plain.final, **TIGHT)
        assert _rel(g["b"], _fd(lambda b: f(b=b), 1.3)) < 1e-6
        assert _rel(g["t1"], _fd(lambda t: f(t1=t), 0.5)) < 1e-6
        # forward mode through diffrax needs its forward-mode adjoint (reverse-mode checkpointing cannot be jvp-ed)
        fwd = lambda b: jnp.sum(ja.solve(model, X0, 0.5, beta=b, adjoint=diffrax.ForwardMode(), **kw).final ** 2
                                * jnp.arange(1.0, 1.0 + X0[0].size).reshape((1, *X0.shape[1:])))
        _, tb = jax.jvp(fwd, (1.3,), (1.0,))
        np.testing.assert_allclose(tb, g["b"], rtol=1e-8)
    e = jnp.zeros_like(X0).at[0, 1, 2].set(1.0)
    assert _rel(g["X"][0, 1, 2], _fd(lambda t: f(X=X0 + t * e), 0.0)) < 1e-6
    W = model.layers.v
    along = lambda eps: f(m=model.replace(layers=model.layers.replace(v=W.at[0, 1, 0, 2].add(eps))))
    assert _rel(g["m"].layers.v[0, 1, 0, 2], _fd(along, 0.0)) < 1e-6
    if S is not None:
        E = jnp.zeros_like(S).at[0, 1].set(1.0).at[1, 0].set(1.0)
        assert _rel(jnp.sum(g["S_"] * E), _fd(lambda t: f(S_=S + t * E), 0.0)) < 1e-6


@pytest.mark.e2e
def test_backsolve_adjoint_agrees_with_recursive_checkpoint():
    model = _model(shared=True, depth=1)
    X0 = _tokens()
    loss = lambda b, adj: jnp.sum(ja.solve(model, X0, 1.0, beta=b, rtol=1e-10, atol=1e-10, adjoint=adj).final ** 3)
    g_ck = jax.grad(loss)(1.3, diffrax.RecursiveCheckpointAdjoint())
    g_bs = jax.grad(loss)(1.3, diffrax.BacksolveAdjoint(stepsize_controller=diffrax.PIDController(rtol=1e-10,
                                                                                                   atol=1e-10)))
    assert _rel(g_bs, g_ck) < 1e-6


@pytest.mark.e2e
def test_layered_flow_differentiates_with_concrete_times():
    model = _model(shared=False, depth=2)
    X0 = _tokens()
    w = jnp.arange(1.0, 1.0 + X0[0].size).reshape((1, *X0.shape[1:]))  # not a norm: tokens stay on the sphere
    loss = lambda b: jnp.sum(ja.solve(model, X0, 1.5, beta=b, rtol=1e-11, atol=1e-11).final * w)
    assert _rel(jax.grad(loss)(1.3), _fd(lambda b: float(loss(b)), 1.3)) < 1e-6
    with pytest.raises(ja.ConfigError, match="concrete"):
        jax.grad(lambda t: ja.solve(model, X0, t).final.sum())(1.5)


# ------------------------------------------------------------------ the core, observables, steering
@pytest.mark.e2e
def test_simulate_one_is_the_core_of_simulate():
    model = _model(depth=3)
    X0 = _tokens()
    batched = ja.simulate(model, X0, 7, save=ja.Save(every=3, trajectory=True), batch=ja.Batch(size=2))
    one = jax.vmap(lambda X: ja.simulate_one(model, X, 7, save=ja.Save(every=3, trajectory=True)))(X0)
    np.testing.assert_allclose(one.final, batched.final, **TIGHT)
    np.testing.assert_allclose(one.trajectory, batched.trajectory, **TIGHT)
    np.testing.assert_allclose(one.observables["diameter"], batched.observables["diameter"], **TIGHT)


@pytest.mark.e2e
def test_observables_compose():
    X = _tokens(B=1, n=5)[0]
    for fn in (ja.metrics.diameter, ja.metrics.cos_consensus, ja.metrics.mean_distance,
               ja.metrics.first_token_consensus):
        np.testing.assert_allclose(jax.jit(fn)(X), fn(X), rtol=1e-8)  # XLA fuses the jitted Gram form differently
        g = jax.grad(fn)(X)
        assert _rel(g[2, 1], _fd(lambda t, fn=fn: float(fn(X.at[2, 1].add(t))), 0.0)) < 1e-6, fn.__name__
    v = jnp.asarray([1.0, 0.0, 0.0, 0.0])
    g = jax.grad(lambda X: ja.metrics.rho(X, v).mean())(X)
    e = jnp.zeros_like(X).at[0, 0].set(1.0)
    assert _rel(g[0, 0], _fd(lambda t: float(ja.metrics.rho(X + t * e, v).mean()), 0.0)) < 1e-6


@pytest.mark.e2e
def test_steer_differentiates_with_respect_to_the_gain():
    model = _model(d=4, depth=2)
    X0 = _tokens()
    u = np.eye(4)[0]

    def alignment(gamma):
        steered, _ = ja.steer(model, u, gamma=gamma)
        final = ja.simulate(steered, X0, 2, batch=ja.Batch(size=2)).final
        return jnp.mean(jnp.abs(final @ u))

    g = jax.grad(alignment)(2.0)
    assert _rel(g, _fd(lambda t: float(alignment(t)), 2.0)) < 1e-6
    np.testing.assert_allclose(jax.jit(alignment)(2.0), alignment(2.0), **TIGHT)

    # and with respect to the direction u: a traced u makes the steering plan's z traced too
    e = np.array([0.0, 1.0, 0.0, 0.0])

    def along(t):
        steered, info = ja.steer(model, u + t * e, gamma=2.0)
        final = ja.simulate(steered, X0, 2, batch=ja.Batch(size=2)).final
        return jnp.mean(jnp.abs(final @ u)) + jnp.sum(info.z)

    assert _rel(jax.grad(along)(0.0), _fd(lambda t: float(along(t)), 0.0)) < 1e-6


# ------------------------------------------------------------------ value checks inside transformations
@pytest.mark.parametrize("call, name", [
    (lambda m, X, v: ja.simulate(m, X, 2, alpha=v).final, "alpha"),
    (lambda m, X, v: ja.simulate(m, X, 2, beta=v).final, "beta"),
    (lambda m, X, v: ja.solve(m, X, 0.5, beta=v).final, "beta"),
    (lambda m, X, v: ja.solve(m, X, 0.5, rtol=v).final, "rtol"),
])
def test_value_checks_survive_jit(call, name):
    model, X0 = _model(shared=True, depth=1), _tokens()
    f = jax.jit(lambda v: call(model, X0, v))
    f(1e-3)  # a good value runs
    with pytest.raises(Exception, match=f"{name} must be finite"):
        jax.block_until_ready(f(jnp.nan))
    with pytest.raises(ja.ConfigError, match=f"{name} must be"):  # outside jit: today's one-line error
        call(model, X0, float("nan"))


def test_traced_initial_states_are_checked_inside_the_program():
    model = _model()
    f = jax.jit(lambda X: ja.simulate(model, X, 2).final)
    with pytest.raises(Exception, match="non-finite"):
        jax.block_until_ready(f(_tokens().at[0, 0, 0].set(jnp.nan)))
    with pytest.raises(ja.ConfigError, match="real scalar"):  # a static fact: refused while tracing
        jax.vmap(lambda a: ja.simulate(model, _tokens(), 2, alpha=a).final)(jnp.ones((2, 2)))


def test_outside_transformations_nothing_changes():
    """The jittable drivers give the numbers they gave as plain calls (the same compiled programs):
    a NumPy loop of the D1 map agrees to 1e-13 and a concrete NaN is still a one-line ConfigError."""
    model = _model(depth=2)
    X0 = _tokens()
    res = ja.simulate(model, X0, 2, batch=ja.Batch(size=2))
    X = np.asarray(X0)
    for k in range(2):
        lw = model.layers.take(k)
        A = np.asarray(jax.vmap(lambda x, lw=lw: ja.model.attention.probabilities(x, lw))(jnp.asarray(X)))
        Vx = np.einsum("bnd,hkd->bhnk", X, np.asarray(lw.v))
        upd = np.einsum("bhij,bhjk,hdk->bid", A, Vx, np.asarray(lw.o))
        Y = X + upd
        X = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
    np.testing.assert_allclose(res.final, X, rtol=1e-13, atol=1e-13)
    with pytest.raises(ja.ConfigError, match="alpha must be"):
        ja.simulate(model, X0, 2, alpha=float("inf"))


@pytest.mark.e2e
def test_long_map_gradient_is_rematerialised():
    """A 240-step map differentiates (the segments are rematerialised) and agrees with finite differences."""
    model = _model(shared=True, depth=1)
    X0 = _tokens()
    loss = lambda a: ja.simulate(model, X0, 240, alpha=a, save=ja.Save(every="last"),
                                 batch=ja.Batch(size=2)).observables["diameter"].sum()
    assert _rel(jax.grad(loss)(0.05), _fd(lambda a: float(loss(a)), 0.05, eps=1e-4)) < 1e-6


@pytest.mark.e2e
def test_filter_grad_and_jax_grad_agree_on_the_model():
    """The Model pytree holds only inexact leaves (masks are floats), so jax.grad takes it directly and
    equals equinox's filtered gradient."""
    model = _model(mask="causal")
    X0 = _tokens()
    loss = lambda m: ja.simulate(m, X0, 2, batch=ja.Batch(size=2)).final.sum()
    g1 = jax.grad(loss)(model)
    g2 = eqx.filter_grad(loss)(model)
    np.testing.assert_allclose(g1.layers.q, g2.layers.q, **TIGHT)
    assert float(jnp.abs(g1.layers.causal).sum()) == 0.0  # a mask has no gradient


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
def test_velocity_refuses_a_batch_and_a_map():
    model = _model()
    X = _tokens()
    with pytest.raises(ja.ConfigError, match="one configuration"):
        ja.velocity(model, X)
    with pytest.raises(ja.ConfigError, match=r"jaxattn\.Flow"):
        ja.velocity(model, X[0], flow=ja.D1)
    v = jax.vmap(lambda x: ja.velocity(model, x))(X)  # the documented way to batch it
    np.testing.assert_allclose(v[1], ja.velocity(model, X[1]), **TIGHT)


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
def test_repeated_passes_refuses_a_dynamics_name():
    with pytest.raises(ja.ConfigError, match=r"must be a jaxattn\.Dynamics"):
        ja.repeated_passes(_model(), _tokens(), 1, dynamics="NO_FFN")


def test_huge_lane_width_is_refused_with_its_size():
    with pytest.raises(ja.ConfigError, match="GiB"):
        ja.simulate(_model(), _tokens(), 2, batch=ja.Batch(size=10**9))


def test_overflowing_dynamics_are_flagged():
    model = _model()
    with pytest.warns(ja.NonFiniteWarning, match="non-finite"):
        res = ja.simulate(model, _tokens(), 2, alpha=1e308, batch=ja.Batch(size=2))
    assert not bool(res.ok.all())
    assert bool(ja.simulate(model, _tokens(), 2, batch=ja.Batch(size=2)).ok.all())
