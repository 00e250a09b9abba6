"""The consensus paper's Theorems 3.1, 5.2 and 5.3 as the reproductions measure them (jaxattn.studies.co_theorems):
the models, observables and closed forms the study is built from."""

from __future__ import annotations

import functools
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.analysis.spectral import layer_matrices
from jaxattn.dynamics.fields import Flow, field
from jaxattn.dynamics.geometry import Geometry
from jaxattn.model.nn import ellipsoid
from jaxattn.model.params import Layers, from_heads
from jaxattn.studies import co_theorems as ct


def _ctx(**aux):
    return types.SimpleNamespace(aux={k: jnp.asarray(v) for k, v in aux.items()})


def test_the_potential_model_has_the_asked_qk_and_identity_values(rng):
    """``QᵀK = A`` (the scores are ``x_iᵀ A x_j``, scale 1), ``V = O = I``; ``A`` symmetric positive definite in the
    theorem's setting, with a skew part in the control; ``S`` its symmetric part."""
    for symmetric in (True, False):
        model, A, S = ct.potential_model(rng, 4, symmetric)
        lw = model.layers.take(0)
        np.testing.assert_allclose(np.asarray(lw.q[0]).T @ np.asarray(lw.k[0]), A, atol=1e-12)
        np.testing.assert_allclose(np.asarray(layer_matrices(model)[0]), np.eye(4), atol=0)
        assert float(lw.scale) == 1.0
        np.testing.assert_allclose(S, S.T)
        assert np.linalg.eigvalsh(S).min() >= 0.5 - 1e-12
        np.testing.assert_allclose((A + A.T) / 2, S, atol=1e-12)
        assert np.allclose(A, A.T) == symmetric


def test_tokens_scaled_onto_the_ellipsoid(rng):
    S = ct.random_spd(rng, 3)
    X = np.asarray(ellipsoid(jnp.asarray(rng.normal(size=(2, 5, 3))), jnp.asarray(S)))
    np.testing.assert_allclose(np.einsum("bni,ij,bnj->bn", X, S, X), 1.0, atol=1e-12)


def test_the_potential_observable_is_the_papers_sum():
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    A = np.diag([2.0, 0.5])
    E = float(ct.potential(0.0, jnp.asarray(X), _ctx(A=A, beta=3.0))["E"])
    # pairs (i, j): x_iᵀ A x_j = 2, 0, 0, 0.5
    np.testing.assert_allclose(E, (math.exp(6.0) + 2.0 + math.exp(1.5)) / 6.0, rtol=1e-14)


def test_largest_fall_is_relative_and_negative_when_always_rising():
    E = np.array([[1.0, 2.0, 4.0], [2.0, 1.0, 1.5]])
    np.testing.assert_allclose(ct.largest_fall(E), [-1.0, 0.5])


@functools.partial(jax.jit, static_argnames="kernel")
def _ascent(lw, A, S, X, beta, kernel):
    """``dE/dt = Σ_i <∂E/∂x_i, ẋ_i>`` at ``X`` along the flow on ``E_S`` (the field :func:`jaxattn.solve`
    integrates)."""
    E = lambda Y: jnp.sum(jnp.exp(beta * (Y @ A @ Y.T))) / (2.0 * beta)
    v = field(0.0, X, lw, Flow(space="ellipsoid", attention=kernel), beta, Geometry("ellipsoid", S))
    return jnp.sum(jax.grad(E)(X) * v)


def test_the_flow_climbs_the_potential_only_under_the_hypothesis(rng):
    """Theorem 3.1: with ``QᵀK = S`` symmetric positive definite, ``V = I`` and the tokens on ``E_S``, the velocity
    of either kernel is an ascent direction of E at every configuration; with a skew part in ``QᵀK`` (the control)
    some configuration has E falling."""
    d, n, beta = 3, 6, 2.0
    signs: dict[bool, list[float]] = {True: [], False: []}
    for symmetric in (True, False):
        for _ in range(20):
            model, A, S = ct.potential_model(rng, d, symmetric)
            X = np.asarray(ellipsoid(jnp.asarray(rng.normal(size=(n, d))), jnp.asarray(S)))
            args = (model.layers.take(0), *(jnp.asarray(a) for a in (A, S, X)), jnp.asarray(beta))
            signs[symmetric] += [float(_ascent(*args, kernel=k)) for k in ct.KERNELS]
    assert min(signs[True]) > 0
    assert min(signs[False]) < 0


def _causal_layers(rng, d: int = 3) -> tuple[Layers, np.ndarray, np.ndarray]:
    """One causal weight set with ``O = I`` and a symmetric ``V`` of :data:`SPECTRUM` (``v1, v2`` its top two
    eigenvectors), built from NumPy draws."""
    U, _ = np.linalg.qr(rng.normal(size=(d, d)))
    one = lambda M: jnp.asarray(M)[None, None]
    lw = from_heads(one(rng.uniform(-1, 1, (d, d))), one(rng.uniform(-1, 1, (d, d))),
                    one((U * np.asarray(ct.SPECTRUM)) @ U.T), one(np.eye(d)), masks="causal").layers.take(0)
    return lw, U[:, 0], U[:, 1]


@pytest.mark.e2e  # the first random_model of a process compiles its draws: about 2 s
def test_the_causal_model_keeps_v_constant_and_varies_qk():
    model = ct.causal_symmetric_model(jax.random.key(0), 3, 2)
    F = np.asarray(layer_matrices(model))
    np.testing.assert_allclose(F, np.broadcast_to(F[0], F.shape), atol=0)
    np.testing.assert_allclose(np.linalg.eigvalsh(F[0]), sorted(ct.SPECTRUM), atol=1e-12)
    assert not np.allclose(np.asarray(model.layers.q[0]), np.asarray(model.layers.q[1]))
    assert bool(np.all(np.asarray(model.layers.causal) == 1))
    v1, _, gap = ct.top_eigenvectors(model)
    assert gap == pytest.approx(ct.SPECTRUM[0] - ct.SPECTRUM[1])
    np.testing.assert_allclose(F[0] @ v1, ct.SPECTRUM[0] * v1, atol=1e-12)


def test_smooth_qk_scales_the_columns_by_bounded_factors(rng):
    lw, _, _ = _causal_layers(rng)
    phases = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    at = ct.smooth_qk(lw, phases)(jnp.asarray(0.7))
    np.testing.assert_allclose(np.asarray(at.q), np.asarray(lw.q) * (1 + np.sin(0.7 + phases[0]) / 2), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(at.k), np.asarray(lw.k) * (1 + np.sin(0.7 + phases[1]) / 2), rtol=1e-14)
    np.testing.assert_array_equal(np.asarray(at.v), np.asarray(lw.v))


def test_the_rotating_value_matrix_moves_its_top_eigenvector_at_speed_omega(rng):
    """``V(t) = R(t) V0 R(t)ᵀ``: symmetric, the same spectrum, top eigenvector ``cos(ωt) v1 + sin(ωt) v2``."""
    lw, v1, v2 = _causal_layers(rng)
    omega, t = 0.3, 2.0
    V = np.asarray(ct.rotating_value(lw, v1, v2, omega)(jnp.asarray(t)).v[0])
    np.testing.assert_allclose(V, V.T, atol=1e-14)
    lam, U = np.linalg.eigh(V)
    np.testing.assert_allclose(lam, sorted(ct.SPECTRUM), atol=1e-12)
    assert abs(U[:, -1] @ (math.cos(omega * t) * v1 + math.sin(omega * t) * v2)) == pytest.approx(1.0, abs=1e-12)


def test_alignment_normalises_the_tokens_and_follows_v1_of_t():
    v1, v2 = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
    X = jnp.asarray([[2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    c = ct.alignment(jnp.asarray(math.pi / 2), X, _ctx(v1=v1, v2=v2, omega=1.0))["c"]
    np.testing.assert_allclose(np.asarray(c), [0.0, 0.0], atol=1e-15)  # v1(π/2) = v2
    c = ct.alignment(jnp.asarray(0.0), X, _ctx(v1=v1, v2=v2, omega=1.0))["c"]
    np.testing.assert_allclose(np.asarray(c), [1.0, 0.0], atol=1e-15)


def test_pole_reads_the_side_of_every_token():
    assert ct.pole(np.array([0.1, 0.9])) == "+v1"
    assert ct.pole(np.array([-0.1, -0.9])) == "-v1"
    assert ct.pole(np.array([[0.1, 0.9], [0.2, -0.1]])) == "split"


def test_the_lag_and_the_basin_edge_of_a_lone_token():
    """``θ̇ = ω − (gap/2) sin 2θ``: the steady lag ``θ*`` (stable) and ``90° − θ*`` (unstable) have ``sin 2θ =
    2ω/gap``; none past ``ω = gap/2``; no lag at ``ω = 0``."""
    assert ct.first_token_lag(0.0, 0.75) == 0.0 and ct.basin_edge(0.0, 0.75) == 0.0
    theta = math.acos(1 - ct.first_token_lag(0.2, 0.75))
    assert math.sin(2 * theta) == pytest.approx(2 * 0.2 / 0.75, rel=1e-12)
    assert ct.basin_edge(0.2, 0.75) == pytest.approx(math.sin(theta), rel=1e-12)
    assert math.isnan(ct.first_token_lag(0.5, 0.75)) and ct.basin_edge(0.5, 0.75) == 1.0


@pytest.mark.e2e
def test_a_lone_token_trails_the_rotating_eigenvector_at_the_predicted_lag():
    """One token (causal: it attends to itself alone, its flow is Oja's with ``V(t)``), started at ``v1(0)``: by
    ``t = 40`` it trails ``v1(t)`` at the steady angle of the lag equation."""
    model = ct.causal_symmetric_model(jax.random.key(3), 3, 1)
    v1, v2, gap = ct.top_eigenvectors(model)
    omega, t1 = 0.1, 40.0
    X0 = jnp.asarray(v1)[None, None, :]
    save = ja.Save(ts=np.array([t1]), observe=ct.alignment,
                   aux={"v1": jnp.asarray(v1), "v2": jnp.asarray(v2), "omega": jnp.asarray(omega)})
    sol = ja.solve(model, X0, t1, save=save, weights_fn=ct.rotating_value(model.layers.take(0), v1, v2, omega),
                   rtol=ct.RTOL, atol=ct.ATOL, dtype=jnp.float64)
    lag = 1.0 - float(np.asarray(sol.observables["c"])[0, -1, 0])
    assert lag == pytest.approx(ct.first_token_lag(omega, gap), rel=1e-6)
