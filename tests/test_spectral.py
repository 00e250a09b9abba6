"""Spectral kernels against closed forms and hand-built spectra; Theorem 1 of the power-method paper."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.analysis.spectral import cumulative_products, eig_sorted, layer_matrices, lyapunov_exponents, spectrum
from jaxattn.errors import ConfigError


def similar(diag_or_block, seed=0):
    """P M P⁻¹ with a random well-conditioned P: a non-symmetric matrix with M's spectrum."""
    M = np.asarray(diag_or_block, float)
    d = M.shape[0]
    rng = np.random.default_rng(seed)
    P = np.eye(d) + 0.3 * rng.normal(size=(d, d))
    return P @ M @ np.linalg.inv(P)


def test_trace_determinant_and_eigenpairs():
    F = np.random.default_rng(1).normal(size=(5, 12, 12))
    s = spectrum(F)
    np.testing.assert_allclose(s.eigvals.sum(1).real, np.trace(F, axis1=1, axis2=2), atol=1e-10)
    np.testing.assert_allclose(s.eigvals.sum(1).imag, 0, atol=1e-10)
    np.testing.assert_allclose(np.prod(s.eigvals, axis=1).real, np.linalg.det(F), rtol=1e-9)
    resid = np.einsum("gij,gjk->gik", F, s.eigvecs) - s.eigvecs * s.eigvals[:, None, :]
    assert np.abs(resid).max() < 1e-10
    np.testing.assert_allclose(np.linalg.norm(s.eigvecs, axis=1), 1, atol=1e-12)
    # sorted by real part, conjugate pairs adjacent with the positive imaginary part first
    assert np.all(np.diff(s.eigvals.real, axis=1) <= 1e-12)


def test_real_dominant_case_and_orderings():
    F = similar(np.diag([3.0, 1.0, 0.5, -4.0]))
    s = spectrum(F)
    assert s.case[0] == 1 and np.isclose(s.lambda1[0], 3.0) and np.isclose(s.gap[0], 2.0)
    np.testing.assert_allclose(F @ s.v1[0], 3.0 * s.v1[0], atol=1e-10)
    assert np.isclose(spectrum(F, order="modulus").lambda1[0], -4.0)
    # |1 + αλ|: α = 1 gives |1+3| = 4 > |1-4| = 3; α = 3 gives |1-12| = 11 > |1+9| = 10
    assert np.isclose(spectrum(F, order="step", alpha=1.0).lambda1[0], 3.0)
    assert np.isclose(eig_sorted(F, "step", alpha=3.0)[0][0], -4.0)
    with pytest.raises(ConfigError, match="order must be"):
        spectrum(F, order="size")


def test_complex_dominant_pair_case_and_subspace():
    a, b = 2.0, 1.0
    M = np.zeros((5, 5))
    M[:2, :2] = [[a, -b], [b, a]]
    M[2:, 2:] = np.diag([1.0, 0.5, -1.0])
    F = similar(M, seed=3)
    s = spectrum(F)
    assert s.case[0] == 2 and np.isclose(s.lambda1[0], a + 1j * b)
    np.testing.assert_allclose(s.gap[0], a - 1.0)
    # the 2-D subspace is invariant under F
    U = s.subspace[0]
    proj = U @ U.T
    np.testing.assert_allclose(proj @ F @ U, F @ U, atol=1e-10)
    assert s.n_directions[0] == 4  # the pair counts once


def test_near_degenerate_cases():
    F = similar(np.diag([1.0, 1.0 - 1e-7, 0.2, -0.3]))
    assert spectrum(F).case[0] == 3
    # strict gap but nearly collinear eigenvectors (non-normal): case 3 through |<v1, v2>|
    F2 = np.array([[2.0, 50.0, 0], [0, 1.5, 0], [0, 0, 0.1]])
    s = spectrum(F2)
    assert s.collinearity[0] > 0.9 and s.case[0] == 3
    assert spectrum(F2, collinear_tol=0.99999).case[0] == 1


@pytest.mark.e2e
def test_layer_matrices_from_heads():
    m = ja.random_model(jax.random.key(0), 8, 2, 3, shared=False)
    F = layer_matrices(m)
    o, v = np.asarray(m.layers.o), np.asarray(m.layers.v)
    for g in range(3):
        want = sum(o[g, h] @ v[g, h] for h in range(2))
        np.testing.assert_allclose(F[g], want, atol=1e-14)


def test_cumulative_products_and_lyapunov_closed_forms():
    """Telescoping factors F(k) = A_k A_(k-1)⁻¹ (A_0 = I): the product F(k)⋯F(1) is A_k, whose
    eigenvectors are known by construction (A_k = Q_k diag(μ_k) Q_k⁻¹); the factors do not commute."""
    rng = np.random.default_rng(4)
    d, T = 5, 6
    A, u_want = [np.eye(d)], []
    for k in range(T):
        Q = np.eye(d) + 0.3 * rng.normal(size=(d, d))  # well conditioned, not orthogonal
        mu = rng.uniform(-1.0, 1.0, size=d)
        mu[k % d] = 3.0 + k  # the dominant (largest real part) eigenvalue, with eigenvector Q[:, k % d]
        A.append(Q @ np.diag(mu) @ np.linalg.inv(Q))
        u_want.append(Q[:, k % d] / np.linalg.norm(Q[:, k % d]))
    Fs = np.stack([A[k + 1] @ np.linalg.inv(A[k]) for k in range(T)])
    Phi, u1 = cumulative_products(Fs)
    for k in range(T):
        np.testing.assert_allclose(Phi[k], A[k + 1] / np.linalg.norm(A[k + 1]), atol=1e-11)
        assert abs(abs(np.vdot(u1[k], u_want[k])) - 1) < 1e-9
    # diagonal factors: exponents are the mean log-moduli, sorted
    D = np.array([np.diag([2.0, -0.5, 0.1]), np.diag([4.0, -0.5, 0.2])])
    want = np.sort(np.log(np.abs(np.diag(D[0]) * np.diag(D[1]))) / 2)[::-1]
    np.testing.assert_allclose(lyapunov_exponents(D), want, atol=1e-12)


def test_lyapunov_exponents_of_the_affine_step():
    """affine_alpha: the factors are I + αF; for diagonal F the exponents are the mean log|1 + α f|; for a
    triangular F (non-normal) they are those of its diagonal as well."""
    D = np.array([np.diag([2.0, -0.5, 0.1]), np.diag([4.0, -1.5, 0.2])])
    for alpha in (0.3, 1.0):
        want = np.sort(np.mean(np.log(np.abs(1 + alpha * np.stack([np.diag(x) for x in D]))), axis=0))[::-1]
        np.testing.assert_allclose(lyapunov_exponents(D, affine_alpha=alpha), want, atol=1e-12)
    U = np.triu(np.random.default_rng(6).normal(size=(4, 4)))
    Fs = np.stack([U, U, U])
    want = np.sort(np.log(np.abs(1 + 0.7 * np.diag(U))))[::-1]
    np.testing.assert_allclose(lyapunov_exponents(Fs, affine_alpha=0.7), want, atol=1e-10)


@pytest.mark.e2e
def test_theorem1_shared_symmetric_alignment_and_consensus():
    """Shared weights, symmetric F with a clear gap, full attention: tokens align with ±v1 and reach consensus."""
    d, n = 8, 6
    lam = [2.0, 0.8, 0.5, 0.2, 0.0, -0.1, -0.3, -0.5]
    model = ja.random_model(jax.random.key(1), d, 2, 60, shared=True, value="symmetric", spectrum=lam)
    s = spectrum(model)
    assert s.case[0] == 1 and np.isclose(s.lambda1[0], 2.0)
    X0 = ja.init_tokens(jax.random.key(2), 400, n, d, dtype=jnp.float64)
    res = ja.simulate(model, X0, 60)
    X = np.asarray(res.final)
    rho = np.abs(X @ s.v1[0].real)
    assert np.mean(rho > 1 - 1e-6) > 0.99
    assert np.mean(np.asarray(res.observables["diameter"][:, -1]) < 1e-3) > 0.99


@pytest.mark.e2e
def test_complex_pair_alignment_with_subspace():
    """With a complex dominant pair tokens keep rotating in the pair's 2-D subspace: ρ(2-D) -> 1."""
    d = 6
    M = np.zeros((d, d))
    M[:2, :2] = [[1.5, -0.6], [0.6, 1.5]]
    M[2:, 2:] = np.diag([0.3, 0.0, -0.2, -0.4])
    Q, _ = np.linalg.qr(np.random.default_rng(5).normal(size=(d, d)))
    F = Q @ M @ Q.T
    model = ja.model.params.from_heads(np.eye(d)[None, None], np.eye(d)[None, None], np.eye(d)[None, None],
                          F[None, None], schedule=[0] * 40)
    s = spectrum(model)
    assert s.case[0] == 2
    X0 = ja.init_tokens(jax.random.key(3), 200, 5, d, dtype=jnp.float64)
    X = np.asarray(ja.simulate(model, X0, 40).final)
    rho2 = np.linalg.norm(X @ s.subspace[0], axis=-1)
    assert np.mean(rho2 > 0.999) > 0.95
