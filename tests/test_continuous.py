"""Continuous-time models C1–C3 (diffrax) against closed forms, the discrete maps and invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxattn as ja
from jaxattn.analysis.observables import consensus_energy
from jaxattn.dynamics.discrete import saved_steps
from jaxattn.errors import ConfigError


def _shared_model(key, d, heads=1, **kw):
    return ja.random_model(key, d, heads, 1, **kw)


def _mean_field_exact(model, X0, t):
    """Uniform attention in flat space: ẋ_i = F x̄, so x̄(t) = e^{tF} x̄(0) and every token moves by
    the same amount, x_i(t) = x_i(0) + x̄(t) − x̄(0)."""
    F = np.asarray(ja.layer_matrices(model)[0])
    xbar = X0.mean(axis=-2)  # [B, d]
    moved = xbar @ scipy.linalg.expm(t * F).T - xbar
    return X0 + moved[:, None, :]


def _oja_single_exact(model, x0, t):
    F = np.asarray(ja.layer_matrices(model)[0])
    y = x0 @ scipy.linalg.expm(t * F).T
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def _fitted_order(dts, errs):
    return np.polyfit(np.log(dts), np.log(errs), 1)[0]


@pytest.mark.fast_cases('dopri5-5-dts3', 'euler-1-dts0')
@pytest.mark.parametrize("solver,order,dts", [
    ("euler", 1, (0.05, 0.025, 0.0125)),
    ("heun", 2, (0.1, 0.05, 0.025)),
    ("bosh3", 3, (0.2, 0.1, 0.05)),
    ("dopri5", 5, (0.05, 0.025, 0.0125)),
])
def test_convergence_order_against_closed_forms(solver, order, dts):
    d, n, t1 = 4, 5, 2.0
    model = _shared_model(jax.random.key(0), d)
    X0 = np.asarray(ja.init_tokens(jax.random.key(1), 3, n, d, kind="gaussian", dtype=jnp.float64))
    flat = ja.Flow(space="flat", attention="uniform")
    exact = _mean_field_exact(model, X0, t1)
    errs = [np.abs(np.asarray(ja.solve(model, X0, t1, flow=flat, solver=solver, dt=dt,
                                       save=ja.Save(ts=[t1])).final) - exact).max()
            for dt in dts]
    assert abs(_fitted_order(dts, errs) - order) < 0.3, errs
    # a single token's Oja flow on the sphere: x(t) = e^{tF} x0 / ||e^{tF} x0||
    x0 = np.asarray(ja.init_tokens(jax.random.key(2), 4, 1, d, dtype=jnp.float64))
    exact = _oja_single_exact(model, x0[:, 0], t1)
    errs = [np.abs(np.asarray(ja.solve(model, x0, t1, flow=ja.C2_OJA, solver=solver, dt=dt,
                                       save=ja.Save(ts=[t1])).final[:, 0])
                   - exact).max() for dt in dts]
    assert abs(_fitted_order(dts, errs) - order) < 0.3, errs


@pytest.mark.e2e
def test_adaptive_default_meets_its_tolerance():
    d = 6
    model = _shared_model(jax.random.key(3), d)
    X0 = np.asarray(ja.init_tokens(jax.random.key(4), 5, 7, d, kind="gaussian", dtype=jnp.float64))
    flat = ja.Flow(space="flat", attention="uniform")
    for t1 in (0.5, 2.0):
        sol = ja.solve(model, X0, t1, flow=flat, rtol=1e-10, atol=1e-12)
        assert np.all(np.asarray(sol.result) == 0)
        np.testing.assert_allclose(np.asarray(sol.final), _mean_field_exact(model, X0, t1), atol=1e-8)


@pytest.mark.e2e
@pytest.mark.parametrize("space", ["sphere", "ellipsoid"])
def test_discrete_map_converges_to_flow_at_first_order(space):
    """D1 (D5) with step α is a retraction-Euler step of C2 (C1): at t = kα the error is O(α)."""
    d, n, T = 5, 4, 1.0
    model = _shared_model(jax.random.key(5), d, heads=1)
    S = None
    if space == "ellipsoid":
        A = np.random.default_rng(0).normal(size=(d, d))
        S = A @ A.T / d + np.eye(d)
    X0 = ja.init_tokens(jax.random.key(6), 3, n, d, kind="ellipsoid" if S is not None else "sphere", S=S,
                        dtype=jnp.float64)
    flow = ja.C1 if S is not None else ja.C2
    ref = np.asarray(ja.solve(model, X0, T, flow=flow, S=S, rtol=1e-12, atol=1e-13, save=ja.Save(ts=[T])).final)
    dyn = ja.D5 if S is not None else ja.D1
    alphas = np.array([0.1, 0.05, 0.025, 0.0125])
    errs = [np.abs(np.asarray(ja.simulate(model, X0, round(T / a), dynamics=dyn, alpha=a, S=S,
                                          save=ja.Save(every="last")).final) - ref).max() for a in alphas]
    assert abs(_fitted_order(alphas, errs) - 1.0) < 0.2, errs


@pytest.mark.e2e
@pytest.mark.parametrize("space", ["sphere", "ellipsoid"])
def test_tokens_stay_on_the_manifold(space):
    d, n = 6, 5
    model = ja.random_model(jax.random.key(7), d, 2, 3, shared=False, mask="causal")
    S = None
    if space == "ellipsoid":
        A = np.random.default_rng(1).normal(size=(d, d))
        S = A @ A.T / d + 0.5 * np.eye(d)
    X0 = ja.init_tokens(jax.random.key(8), 4, n, d, kind="ellipsoid" if S is not None else "sphere", S=S,
                        dtype=jnp.float64)
    flow = ja.C1 if S is not None else ja.C2
    sol = ja.solve(model, X0, 6.0, flow=flow, S=S, rtol=1e-8, atol=1e-10, save=ja.Save(trajectory=True))
    geom = ja.dynamics.geometry.geometry(space, S, d)
    off = np.abs(np.asarray(geom.constraint(sol.trajectory))).max()
    assert off < 1e-7


@pytest.mark.parametrize("space", ["sphere", "ellipsoid"])
def test_the_projection_is_tangent_off_the_manifold_too(space):
    """``project(x, v)`` is S-orthogonal to ``x`` for any ``x``, not only on the manifold (it divides by ``xᵀ S x``
    rather than assuming 1): the flow keeps ``xᵀ S x`` constant wherever the solver's error has put a token, so the
    error does not grow. Tokens of norms 0.5 to 3, against a NumPy reference of the projection."""
    d, n = 5, 4
    rng = np.random.default_rng(2)
    A = rng.normal(size=(d, d))
    S = A @ A.T / d + 0.5 * np.eye(d) if space == "ellipsoid" else np.eye(d)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=(n, 1))
    V = rng.normal(size=(n, d))
    geom = ja.dynamics.geometry.geometry(space, S if space == "ellipsoid" else None, d)
    P = np.asarray(geom.project(jnp.asarray(X), jnp.asarray(V)))
    np.testing.assert_allclose(np.einsum("id,de,ie->i", X, S, P), 0.0, atol=1e-12)
    want = V - (np.einsum("id,de,ie->i", X, S, V) / np.einsum("id,de,ie->i", X, S, X))[:, None] * X
    np.testing.assert_allclose(P, want, rtol=1e-12, atol=1e-12)


@pytest.mark.e2e
def test_causal_first_token_fixed_and_others_converge_to_it():
    """Causal attention with V = I: token 1 attends only to itself and does not move."""
    d, n = 4, 6
    model = ja.random_model(jax.random.key(9), d, 2, 1, mask="causal", value="identity")
    X0 = ja.init_tokens(jax.random.key(10), 8, n, d, dtype=jnp.float64)
    sol = ja.solve(model, X0, 60.0, flow=ja.C2, save=ja.Save(trajectory=True, ts=np.linspace(0, 60, 7)))
    traj = np.asarray(sol.trajectory)
    # its velocity is zero up to the rounding of the tangent projection: it stays put to an ulp over t = 60
    np.testing.assert_allclose(traj[:, :, 0], np.broadcast_to(np.asarray(X0)[:, None, 0], traj[:, :, 0].shape),
                               rtol=0, atol=5e-16)
    first = np.asarray(sol.observables["cos_consensus"])
    assert np.all(first[:, -1] < first[:, 0]) and np.median(first[:, -1]) < 1e-3


def _energy(t, X, ctx):
    """The consensus paper's interaction energy Σ_ij exp(β s <Qx_i, Kx_j>) / (2βs), as the library's observable."""
    return consensus_energy(t, X, ctx)["energy"]


@pytest.mark.e2e
@pytest.mark.parametrize("attention", ["softmax", "unnormalised"])
def test_gradient_flow_energy_is_monotone(attention):
    """With V = QᵀK symmetric the unnormalised flow is the projected gradient flow of the energy, and
    the softmax flow a gradient flow in a metric weighted by the row sums: the energy never decreases."""
    d, n, beta = 5, 6, 2.0
    q = np.asarray(ja.random_model(jax.random.key(11), d, 1, 1).layers.q)  # [1, 1, d, d]
    v = np.einsum("ghkd,ghke->ghde", q, q)  # QᵀK with K = Q
    model = ja.model.params.from_heads(q, q, v, np.eye(d)[None, None], scale=1.0)
    X0 = ja.init_tokens(jax.random.key(12), 16, n, d, dtype=jnp.float64)
    aux = {"q": q[0, 0], "k": q[0, 0], "beta_s": jnp.asarray(beta)}
    save = ja.Save(observe=_energy, aux=aux, ts=np.linspace(0, 5, 41))
    sol = ja.solve(model, X0, 5.0, flow=ja.Flow(attention=attention), beta=beta, save=save, rtol=1e-9, atol=1e-11)
    E = np.asarray(sol.observables)
    assert np.all(np.diff(E, axis=1) > -1e-9 * np.abs(E[:, 1:])), np.diff(E, axis=1).min()
    assert np.all(E[:, -1] > E[:, 0])
    # a generic V (not QᵀK) is not a gradient flow of this energy: it does decrease somewhere
    other = ja.model.params.from_heads(q, q, np.asarray(ja.random_model(jax.random.key(13), d, 1, 1).layers.v),
                          np.eye(d)[None, None], scale=1.0)
    E2 = np.asarray(ja.solve(other, X0, 5.0, flow=ja.Flow(attention=attention), beta=beta, save=save).observables)
    assert np.diff(E2, axis=1).min() < -1e-6


@pytest.mark.e2e
def test_rescaled_flow_matches_mapped_unrescaled_solution():
    """Solving x and mapping z = e^{-tV} x afterwards agrees with solving z directly."""
    d, n = 3, 5
    model = ja.random_model(jax.random.key(13), d, 1, 1, unit_output=True, scale=1.0)
    V = np.asarray(ja.layer_matrices(model)[0])
    X0 = ja.init_tokens(jax.random.key(14), 4, n, d, kind="gaussian", dtype=jnp.float64)
    ts = np.linspace(0, 2.0, 5)
    xs = ja.solve(model, X0, 2.0, flow=ja.C3, save=ja.Save(ts=ts, trajectory=True), rtol=1e-10, atol=1e-12).trajectory
    zs = ja.solve(model, X0, 2.0, flow=ja.C3_RESCALED, save=ja.Save(ts=ts, trajectory=True), rtol=1e-10,
                  atol=1e-12).trajectory
    for i, t in enumerate(ts):
        mapped = np.asarray(xs[:, i]) @ scipy.linalg.expm(-t * V).T
        np.testing.assert_allclose(np.asarray(zs[:, i]), mapped, atol=1e-8)
    # the paper's single-head form Σ_j P_ij V (z_j − z_i) equals the general one
    z = np.asarray(zs[0, 2])
    t = ts[2]
    E = scipy.linalg.expm(t * V)
    lw = model.layers.take(0)
    P = np.asarray(ja.model.attention.probabilities(jnp.asarray(z @ E.T), lw))[0]
    want = np.einsum("ij,jd->id", P, z) @ V.T - z @ V.T
    got = np.asarray(ja.velocity(model, z, t, flow=ja.C3_RESCALED))
    np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.e2e
def test_layered_weights_jump_exactly_at_layer_boundaries():
    """Piecewise-constant weights: uniform attention in flat space gives x̄(3) = e^{F2} e^{F1} e^{F0} x̄(0)."""
    d, n = 4, 3
    model = ja.random_model(jax.random.key(15), d, 2, 3, shared=False)
    Fs = np.asarray(ja.layer_matrices(model))
    X0 = np.asarray(ja.init_tokens(jax.random.key(16), 2, n, d, kind="gaussian", dtype=jnp.float64))
    xbar = X0.mean(axis=1)
    P = scipy.linalg.expm(Fs[2]) @ scipy.linalg.expm(Fs[1]) @ scipy.linalg.expm(Fs[0])
    want = X0 + (xbar @ P.T - xbar)[:, None]
    flat = ja.Flow(space="flat", attention="uniform")
    sol = ja.solve(model, X0, 3.0, flow=flat, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sol.final), want, atol=1e-8)
    for solver, dt, tol in (("tsit5", 0.3, 1e-5), ("euler", 0.001, 2e-2)):  # fixed steps stop at 1 and 2 too
        fixed = ja.solve(model, X0, 3.0, flow=flat, solver=solver, dt=dt)
        np.testing.assert_allclose(np.asarray(fixed.final), want, atol=tol)
    # periodic repeated passes: t in [3, 4) uses layer 0 again
    sol4 = ja.solve(model, X0, 4.0, flow=flat, rtol=1e-10, atol=1e-12)
    want4 = X0 + (xbar @ (scipy.linalg.expm(Fs[0]) @ P).T - xbar)[:, None]
    np.testing.assert_allclose(np.asarray(sol4.final), want4, atol=1e-8)


@pytest.mark.e2e
def test_smooth_weight_function():
    """V(t) = c(t) V0 with c(t) = 1 + sin(t)/2: x̄(t) = exp((t + (1 − cos t)/2) V0) x̄(0)."""
    d, n, t1 = 4, 3, 2.0
    model = _shared_model(jax.random.key(17), d)
    lw0 = model.layers.take(0)
    fn = lambda t: lw0.replace(v=lw0.v * (1 + jnp.sin(t) / 2))
    V0 = np.asarray(ja.layer_matrices(model)[0])
    X0 = np.asarray(ja.init_tokens(jax.random.key(18), 2, n, d, kind="gaussian", dtype=jnp.float64))
    xbar = X0.mean(axis=1)
    want = X0 + (xbar @ scipy.linalg.expm((t1 + (1 - np.cos(t1)) / 2) * V0).T - xbar)[:, None]
    sol = ja.solve(model, X0, t1, flow=ja.Flow(space="flat", attention="uniform"), weights_fn=fn,
                   rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sol.final), want, atol=1e-8)


@pytest.mark.e2e
@pytest.mark.standard_dtypes("the user's weight function multiplies float64 weights by a function of a float32 time")
def test_weight_function_in_another_precision_runs_in_the_tokens_precision():
    """A float64 ``weights_fn`` with float32 tokens: the weights are cast to the state's precision
    (it used to fail inside diffrax with a dtype mismatch of the solver's state)."""
    d, n = 4, 3
    model = _shared_model(jax.random.key(17), d)
    lw0 = model.layers.take(0)
    assert lw0.v.dtype == jnp.float64
    fn = lambda t: lw0.replace(v=lw0.v * (1 + jnp.sin(t) / 2))
    X0 = ja.init_tokens(jax.random.key(18), 2, n, d, kind="gaussian", dtype=jnp.float32)
    flat = ja.Flow(space="flat", attention="uniform")
    sol = ja.solve(model, X0, 1.0, flow=flat, weights_fn=fn)
    ref = ja.solve(model, np.asarray(X0, np.float64), 1.0, flow=flat, weights_fn=fn)
    assert sol.final.dtype == jnp.float32 and np.all(np.asarray(sol.result) == 0)
    np.testing.assert_allclose(np.asarray(sol.final), np.asarray(ref.final), atol=1e-4)


@pytest.mark.e2e
def test_batch_split_does_not_change_results():
    """The two promises of ``Batch``: the same bits for a fixed ``Batch(size=...)`` however the batch is split, and
    the same to round-off (1e-6 in float32) at the default width, which follows each split's size."""
    model = ja.random_model(jax.random.key(19), 8, 2, 3, shared=False, mask="causal")
    X0 = ja.init_tokens(jax.random.key(20), 70, 5, 8)  # float32
    fixed = ja.Batch(size=8)
    whole = ja.solve(model, X0, 4.0, batch=fixed)
    parts = [ja.solve(model, X0[i:i + 23], 4.0, batch=fixed) for i in range(0, 70, 23)]
    one = ja.solve(model, X0[41], 4.0, batch=fixed)
    np.testing.assert_array_equal(np.asarray(whole.final), np.concatenate([np.asarray(p.final) for p in parts]))
    np.testing.assert_array_equal(np.asarray(whole.final[41]), np.asarray(one.final[0]))
    np.testing.assert_array_equal(np.asarray(whole.num_steps[41]), np.asarray(one.num_steps[0]))
    default = [ja.solve(model, X0[i:i + 23], 4.0) for i in range(0, 70, 23)]
    np.testing.assert_allclose(np.concatenate([np.asarray(p.final) for p in default]), np.asarray(whole.final),
                               rtol=0, atol=1e-6)


_TRACES = []


def _counting_observable(t, X, ctx):
    _TRACES.append(1)  # runs once per trace, not per call
    return ja.metrics.diameter(X)


@pytest.mark.e2e
def test_beta_t1_tolerances_and_ts_do_not_recompile():
    model = ja.random_model(jax.random.key(21), 4, 1, 1)
    X0 = ja.init_tokens(jax.random.key(22), 5, 3, 4, dtype=jnp.float64)
    _TRACES.clear()
    ja.solve(model, X0, 2.0, save=ja.Save(observe=_counting_observable, ts=np.linspace(0, 2, 5)))
    first = len(_TRACES)
    assert first > 0
    ja.solve(model, X0, 3.5, beta=2.5, rtol=1e-5, atol=1e-7, save=ja.Save(observe=_counting_observable,
                                                                          ts=np.linspace(0, 3, 5)))
    ja.solve(model, X0, 1.0, beta=0.5, save=ja.Save(observe=_counting_observable, ts=np.linspace(0.5, 1, 5)))
    assert len(_TRACES) == first
    ja.simulate(model, X0, 4, alpha=0.5, beta=1.0, save=ja.Save(observe=_counting_observable))
    mid = len(_TRACES)
    ja.simulate(model, X0, 4, alpha=0.25, beta=3.0, save=ja.Save(observe=_counting_observable))
    assert len(_TRACES) == mid


@pytest.mark.e2e
def test_failed_condition_is_flagged_and_others_intact():
    d, n = 4, 5
    model = ja.random_model(jax.random.key(23), d, 1, 1)
    X0 = np.array(ja.init_tokens(jax.random.key(24), 6, n, d, dtype=jnp.float64))
    X0[2] = X0[2, :1]  # condition 2 starts at consensus: a fixed point, few steps
    free = ja.solve(model, X0, 20.0, rtol=1e-9, atol=1e-11)
    steps = np.asarray(free.num_steps)
    limit = int(steps[2]) + 2
    assert steps.max() > limit
    capped = ja.solve(model, X0, 20.0, rtol=1e-9, atol=1e-11, max_steps=limit)
    res = np.asarray(capped.result)
    assert res[2] == 0 and np.all(res[steps > limit] == 1)
    np.testing.assert_array_equal(np.asarray(capped.final[2]), np.asarray(free.final[2]))
    assert capped.ok.shape == (6,)


@pytest.mark.e2e
def test_a_solve_stopped_by_its_step_budget_says_so(tmp_path, capsys):
    """``solve --max-steps 1`` blamed its failed solves on non-finite values and advised a smaller step or float64:
    the cause is the step budget. diffrax's own result is reported per condition, in the Solution and the message."""
    from jaxattn.cli import main
    from jaxattn.dynamics.continuous import failures

    model = ja.random_model(jax.random.key(0), 4, 1, 1)
    X0 = ja.init_tokens(jax.random.key(1), 3, 3, 4)
    sol = ja.solve(model, X0, 1.0, max_steps=1, save=ja.Save(ts=[0.0, 1.0]))
    assert sol.result_names.tolist() == ["max_steps_reached"] * 3
    assert failures(sol.result) == {"max_steps_reached": 3} and failures([0, 0]) == {}
    assert main(["solve", "--d", "4", "--heads", "1", "--depth", "1", "--n", "3", "--num-init", "3", "--t1", "1",
                 "--saves", "2", "--max-steps", "1", "--no-progress", "--out", str(tmp_path / "r")]) == 0
    cap = capsys.readouterr()
    assert "0 of 3 solves succeeded (3 max_steps_reached)" in cap.out
    assert "jaxattn: warning: 3 of 3 solves stopped before t = 1 (3 max_steps_reached: raise --max-steps (now 1))" \
        in cap.err
    assert "non-finite" not in cap.out + cap.err and "float64" not in cap.out + cap.err


@pytest.mark.e2e
def test_observables_receive_the_attention_weights():
    model = ja.random_model(jax.random.key(25), 6, 2, 2, shared=False, mask="local:2")
    X0 = ja.init_tokens(jax.random.key(26), 3, 4, 6, dtype=jnp.float64)
    sim = ja.simulate(model, X0, 3, save=ja.Save(observe=_attention_obs, trajectory=True))
    for k in range(4):
        lw = model.layers.take(model.schedule[k % 2])
        want = jax.vmap(ja.model.attention.probabilities, in_axes=(0, None))(sim.trajectory[:, k], lw)
        np.testing.assert_allclose(np.asarray(sim.observables[:, k]), np.asarray(want), atol=1e-14)
    d3 = ja.simulate(model, X0, 2, dynamics=ja.D3, save=ja.Save(observe=_attention_obs))
    np.testing.assert_allclose(np.asarray(d3.observables[..., 1, :2]), 0.5, atol=1e-15)  # uniform over j in {0, 1}
    sol = ja.solve(model, X0, 1.5, save=ja.Save(observe=_attention_obs, ts=[0.0, 1.5], trajectory=True))
    lw = model.layers.take(1)
    want = jax.vmap(lambda X: ja.model.attention.probabilities(X, lw))(sol.trajectory[:, 1])
    np.testing.assert_allclose(np.asarray(sol.observables[:, 1]), np.asarray(want), atol=1e-14)


def _attention_obs(t, X, ctx):
    return ctx.attention()


@pytest.mark.e2e
def test_unnormalised_kernel():
    model = ja.random_model(jax.random.key(27), 4, 1, 1, scale=1.0, mask="causal")
    X = np.asarray(ja.init_tokens(jax.random.key(28), 1, 5, 4, dtype=jnp.float64))[0]
    lw = model.layers.take(0)
    q, k = np.asarray(lw.q[0]), np.asarray(lw.k[0])
    want = np.tril(np.exp(1.7 * (X @ q.T) @ (X @ k.T).T)) / 5
    got = np.asarray(ja.model.attention.probabilities(jnp.asarray(X), lw, 1.7, attention="unnormalised"))[0]
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_save_every_and_last():
    model = ja.random_model(jax.random.key(29), 6, 2, 3, shared=False)
    X0 = ja.init_tokens(jax.random.key(30), 4, 5, 6, dtype=jnp.float64)
    full = ja.simulate(model, X0, 10, save=ja.Save(trajectory=True))
    every3 = ja.simulate(model, X0, 10, save=ja.Save(every=3, trajectory=True))
    assert list(saved_steps(10, 3)) == [0, 3, 6, 9, 10]
    np.testing.assert_array_equal(np.asarray(every3.trajectory), np.asarray(full.trajectory[:, [0, 3, 6, 9, 10]]))
    np.testing.assert_allclose(np.asarray(every3.observables["diameter"]),
                               np.asarray(full.observables["diameter"][:, [0, 3, 6, 9, 10]]), rtol=0, atol=1e-15)
    last = ja.simulate(model, X0, 10, save=ja.Save(every="last"))
    np.testing.assert_array_equal(np.asarray(last.final), np.asarray(full.final))
    assert last.observables["diameter"].shape == (4, 1)


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
@pytest.mark.parametrize("kwargs,match", [
    (dict(t1=-1.0), "greater than t0"),
    (dict(rtol=0.0), "rtol"),
    (dict(atol=float("nan")), "atol"),
    (dict(solver="euler"), "fixed step size"),
    (dict(solver="rk99"), "solver must be"),
    (dict(flow=ja.C1, S=np.array([[1.0, 2.0], [0.0, 1.0]])), "S must be"),
    (dict(flow=ja.C1, S=np.diag([1.0, -1.0, 1.0, 1.0])), "positive definite"),
    (dict(flow=ja.C1, S=np.array([[1.0, 0.5, 0, 0], [0.4, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])), "symmetric"),
    (dict(save=ja.Save(ts=[0.0, 5.0])), "within"),
    (dict(max_steps=0), "max_steps"),
    (dict(weights_fn=lambda t: 3.0), "Layers"),
    (dict(save=ja.Save(every=2)), r"Save\(every=...\) gives steps of a map"),
])
def test_bad_input_is_refused(kwargs, match):
    model = ja.random_model(jax.random.key(0), 4, 2, 1)
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4, dtype=jnp.float64)
    kw = dict(t1=1.0)
    kw.update(kwargs)
    t1 = kw.pop("t1")
    with pytest.raises(ConfigError, match=match):
        ja.solve(model, X0, t1, **kw)


def test_weight_function_with_wrong_shapes_is_refused():
    model = ja.random_model(jax.random.key(0), 4, 2, 1)
    lw = model.layers.take(0)
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4, dtype=jnp.float64)
    with pytest.raises(ConfigError, match="shape"):
        ja.solve(model, X0, 1.0, weights_fn=lambda t: lw.replace(q=jnp.zeros((2, 2, 3))))
