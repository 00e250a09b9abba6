"""The pieces of the clusters paper's discrete-time and R³ checks (:mod:`jaxattn.studies.cl_theorems`): Remark 4's
rescaled iteration, the shrinking-hull measure, the settled test, the end state of Theorem 3.1 and the random good
triples."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxattn.analysis.clusters import classify_top
from jaxattn.model.sampling import init_tokens
from jaxattn.studies import cl_theorems as ct


def _softmax(S: np.ndarray) -> np.ndarray:
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def _remark4(V: np.ndarray, z: np.ndarray, dt: float, steps: int) -> np.ndarray:
    """Remark 4's rescaled iteration written out: ``z_i ← z_i + Δt Σ_j P_ij R^{−1} V (z_j − z_i)``, ``P`` the softmax
    of ``⟨R^k z_i, R^k z_j⟩``, ``R = I + Δt V`` (``Q = K = I``)."""
    R = np.eye(len(V)) + dt * V
    M = np.linalg.solve(R, V)
    out = [z]
    for k in range(steps):
        x = z @ np.linalg.matrix_power(R, k).T
        P = _softmax(x @ x.T)
        z = z + dt * (P @ z - z) @ M.T
        out.append(z)
    return np.stack(out)


@pytest.mark.e2e  # a compiled map per V (seconds)
@pytest.mark.parametrize("V", [np.eye(2), np.array([[1.2, 0.3], [0.3, -0.1]])], ids=["identity", "good"])
def test_the_rescaled_transformer_follows_remark_4(V):
    """jaxattn's D4 map, rescaled by ``R^{−k}``, is Remark 4's iteration of the rescaled tokens (for ``V = I``: the
    convex combination ``(z + Δt P z)/(1 + Δt)``)."""
    X0 = init_tokens(jax.random.key(0), 1, 5, 2, kind="gaussian", dtype=jnp.float64)
    Z = ct.rescale(ct.euler_tokens(V, X0, 0.5, 4), V, 0.5)[0]
    np.testing.assert_allclose(Z, _remark4(V, np.asarray(X0[0]), 0.5, 4), rtol=1e-10, atol=1e-12)


def test_hull_excursion_is_zero_inside_and_the_overshoot_outside():
    square = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    inward = np.stack([square, 0.5 * square + 0.1])
    assert ct.hull_excursion(inward, ct.unit_directions(2)) == 0.0
    out = square.copy()
    out[0, 0] = 1.5  # 0.5 past the facet x = 1, of a configuration of size 1
    assert ct.hull_excursion(np.stack([square, out]), ct.unit_directions(2)) == pytest.approx(0.5)


def test_unit_directions_hold_the_axes():
    U = ct.unit_directions(3, 20)
    assert U.shape == (20, 3)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0)
    np.testing.assert_array_equal(U[:6], np.concatenate([np.eye(3), -np.eye(3)]))


def test_remaining_is_the_last_move_over_the_rate():
    """Under Boolean attention a token's distance to its leader shrinks by ``1/(1 + rate)`` a step: the distance
    left after a move ``m`` is ``m / rate``."""
    lead, z = np.array([1.0, 0.0]), np.array([0.0, 0.0])
    steps = [z]
    for _ in range(3):
        z = (z + 0.5 * lead) / 1.5
        steps.append(z)
    Z = np.stack([np.stack([s, lead]) for s in steps])
    assert ct.remaining(Z, 0.5) == pytest.approx(np.linalg.norm(lead - steps[-1]))


def test_theorem_31s_end_state_counts_vertices_and_the_origin():
    triangle = np.array([[2.0, 0.0], [-1.0, 2.0], [-1.0, -2.0]])
    z = np.concatenate([triangle, triangle[:1] + 1e-5, [[0.0, 0.0]]])
    assert ct.at_vertex_or_origin(z, 1e-3) == (4, 1, 3)
    edge = np.concatenate([triangle, [(triangle[1] + triangle[2]) / 2]])  # the middle of an edge: no vertex
    assert ct.at_vertex_or_origin(edge, 1e-3) == (3, 0, 3)
    assert ct.at_vertex_or_origin(np.zeros((3, 2)), 1e-3) == (0, 3, 0)


def test_good_symmetric_triples_are_good_and_scaled():
    for i in range(3):
        V = ct.good_symmetric(jax.random.key(i), 3)
        lam = np.linalg.eigvalsh(V)
        np.testing.assert_allclose(V, V.T)
        assert int(classify_top(V)) == 0 and lam[-1] == pytest.approx(1.0) and abs(lam[0]) < 1.0


def test_the_triples_horizon_is_the_gap_at_rate_lambda1():
    assert ct.triple_horizon(3.0) == pytest.approx(3 * math.log(10))
    assert ct.triple_horizon(3.0, 2.0) == pytest.approx(1.5 * math.log(10))


@pytest.mark.e2e
def test_identity_rows_end_at_vertices_at_dt_1():
    """Theorem 3.1 in discrete time at the Δt = 1 used in practice: a few conditions settle at the vertices of their
    polytope within 30 steps, and the hull never grows beyond round-off."""
    rows = ct.identity_rows(jax.random.key(0), (1.0,), 30.0, 4, (8,), (2,), 1e-3)
    assert len(rows) == 4
    for r in rows:
        assert r["finite"] and r["remaining"] <= 1e-3 and r["all_at_vertices"], r
        assert r["hull_excursion"] <= 1e-12, r


def test_rescaling_keeps_the_top_coordinate_exact_against_huge_tokens():
    """After 300 steps of Δt = 0.1 along λ1 = 1.35 the tokens are ~1e17: rescaled in V's eigenbasis the coordinate
    along φ1 is exact to round-off (the matrix R^{−300} applied to them moves it by about 5)."""
    lam = np.array([1.35, -0.07])
    Phi = np.array([[np.cos(0.7), -np.sin(0.7)], [np.sin(0.7), np.cos(0.7)]])  # columns φ1, φ2
    V = Phi @ np.diag(lam) @ Phi.T
    k = np.arange(301)
    s, t = 1.83, 0.4  # the coordinates along φ1 and φ2 of one rescaled token
    X = (s * (1 + 0.1 * lam[0]) ** k[:, None] * Phi[:, 0] + t * (1 + 0.1 * lam[1]) ** k[:, None] * Phi[:, 1])
    Z = ct.rescale(X[None, :, None, :], V, 0.1)[0, :, 0]  # [T, d]
    np.testing.assert_allclose(Z @ Phi[:, 0], s, rtol=1e-13)
