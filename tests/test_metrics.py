"""Alignment and consensus metrics against a NumPy reference computed from full trajectories."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.analysis import metrics
from jaxattn.analysis.spectral import cumulative_products, layer_matrices, spectrum
from jaxattn.studies.power_method import layer_table

from . import reference as ref


def np_rho(X, v):
    """|<x, v>| / ||x|| for real or complex unit v (|v^H x|)."""
    return np.abs(X @ np.conj(v)) / np.linalg.norm(X, axis=-1)


def np_rho_sub(X, U):
    return np.linalg.norm(X @ U, axis=-1) / np.linalg.norm(X, axis=-1)


def np_rhobar(X, lam, vec):
    """Mean over eigendirections; a complex pair counts once as span(Re v, Im v)."""
    vals, j = [], 0
    while j < len(lam):
        if abs(lam[j].imag) > 1e-9 * np.abs(lam).max():
            Q, _ = np.linalg.qr(np.stack([vec[:, j].real, vec[:, j].imag], 1))
            vals.append(np_rho_sub(X, Q))
            j += 2
        else:
            vals.append(np_rho(X, vec[:, j].real / np.linalg.norm(vec[:, j].real)))
            j += 1
    return np.mean(vals, axis=0)


@pytest.mark.e2e
@pytest.mark.parametrize("shared,mask", [(True, "full"), (False, "causal")])
def test_layer_table_matches_numpy_reference(shared, mask):
    d, n, B, L = 8, 5, 40, 4
    model = ja.random_model(jax.random.key(0), d, 2, L, shared=shared, mask=mask)
    spec = spectrum(model)
    Fs = layer_matrices(model)[list(model.schedule)]
    _, u1 = cumulative_products(Fs)
    tab = ja.observables.alignment_tables(spec, model.schedule, L, u1, 1.0, jnp.float64)
    X0 = ja.init_tokens(jax.random.key(1), B, n, d, kind="gaussian", dtype=jnp.float64)
    res = ja.simulate(model, X0, L, save=ja.Save(observe=ja.observables.alignment_observables, aux=tab,
                                                 trajectory=True))
    obs = {f"observables.{k}": np.asarray(v) for k, v in res.observables.items()}
    rows = layer_table(obs, spec, model.schedule, L, "main")
    traj = np.asarray(res.trajectory)  # [B, L+1, n, d]
    for k, row in enumerate(rows):
        g = model.schedule[k]
        v1 = spec.eigvecs[g, :, 0]
        v1 = v1 if spec.case[g] == 2 else v1.real / np.linalg.norm(v1.real)
        before, after = np_rho(traj[:, k], v1), np_rho(traj[:, k + 1], v1)
        np.testing.assert_allclose(row["rho1"], after.mean(), atol=1e-12)
        np.testing.assert_allclose(row["rho1_std"], after.std(), atol=1e-12)
        np.testing.assert_allclose(row["drho1"], (after - before).mean(), atol=1e-12)
        np.testing.assert_allclose(row["drho1_std"], (after - before).std(), atol=1e-12)
        assert row["P1"] == pytest.approx(np.mean(after > before), abs=1e-12)
        bb = np_rhobar(traj[:, k], spec.eigvals[g], spec.eigvecs[g])
        ba = np_rhobar(traj[:, k + 1], spec.eigvals[g], spec.eigvecs[g])
        np.testing.assert_allclose(row["rhobar"], ba.mean(), atol=1e-12)
        np.testing.assert_allclose(row["drhobar"], (ba - bb).mean(), atol=1e-12)
        assert row["P_rhobar"] == pytest.approx(np.mean(ba > bb), abs=1e-12)
        np.testing.assert_allclose(row["rho2"], np_rho_sub(traj[:, k + 1], spec.subspace[g]).mean(), atol=1e-12)
        np.testing.assert_allclose(row["rho_phi"], np_rho(traj[:, k + 1], u1[k]).mean(), atol=1e-12)
        diam = np.array([max(np.linalg.norm(x[i] - x[j]) for i in range(n) for j in range(n)) for x in traj[:, k + 1]])
        np.testing.assert_allclose(row["diameter"], diam.mean(), atol=1e-12)
        assert row["holds"] == (row["drho1"] > 0 and row["P1"] > 0.5 and row["drho1"] > row["drhobar"])


@pytest.mark.e2e
def test_consensus_measures():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 4))
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    C = U @ U.T
    assert float(metrics.cos_consensus(jnp.asarray(X))) == pytest.approx(1 - (C.sum() - 6) / 30, abs=1e-14)
    assert float(metrics.first_token_consensus(jnp.asarray(X))) == pytest.approx(1 - C[0].mean(), abs=1e-14)
    D = np.linalg.norm(X[:, None] - X[None], axis=-1)
    assert float(metrics.diameter(jnp.asarray(X))) == pytest.approx(D.max(), abs=1e-14)
    assert float(metrics.mean_distance(jnp.asarray(X))) == pytest.approx(D.sum() / 30, abs=1e-14)
    same = np.tile(X[:1], (6, 1)) * np.arange(1, 7)[:, None]  # parallel tokens: cosine consensus is exactly 0
    assert abs(float(metrics.cos_consensus(jnp.asarray(same)))) < 1e-15
    # a configuration that blew up is not at consensus: NaN stays NaN (the max of the squared distances was
    # turned into 0, exact consensus, by the guard of the square root's derivative)
    blown = X.copy()
    blown[2, 1] = np.nan
    assert np.isnan(float(metrics.diameter(jnp.asarray(blown))))
    assert float(metrics.diameter(jnp.asarray(np.tile(X[:1], (6, 1))))) == 0.0
    # mean-field numbers of tokens: n (n - 1) is beyond a 32-bit integer from n = 46,341 on
    many = rng.normal(size=(50_000, 2))
    u = many / np.linalg.norm(many, axis=1, keepdims=True)
    want = 1 - (np.sum(u.sum(0) ** 2) - 50_000) / (50_000 * 49_999)
    assert float(metrics.cos_consensus(jnp.asarray(many))) == pytest.approx(want, abs=1e-12)
    assert abs(float(metrics.first_token_consensus(jnp.asarray(same)))) < 1e-15


@pytest.mark.e2e
def test_attention_structure():
    A = np.full((5, 5), 0.2)  # consensus: uniform attention, rank 1
    assert int(metrics.numerical_rank(jnp.asarray(A))) == 1
    B = np.zeros((4, 4))
    B[:2, :2] = 0.5
    B[2:, 2:] = 0.5  # bipartite: rank 2, Boolean distance 0.5
    assert int(metrics.numerical_rank(jnp.asarray(B))) == 2
    assert float(metrics.boolean_distance(jnp.asarray(B))) == pytest.approx(0.5)
    assert float(metrics.boolean_distance(jnp.eye(3))) == 0.0
    X = np.random.default_rng(1).normal(size=(3, 8))
    v = np.zeros(8)
    v[0] = 1
    np.testing.assert_allclose(np.asarray(metrics.rho(jnp.asarray(X), jnp.asarray(v))), np_rho(X, v), atol=1e-15)


@pytest.mark.e2e
def test_attn_rank_column_from_the_attention_each_step_applies():
    """Duplicated tokens stay duplicated: under full attention their rows (and columns) of A coincide, so the
    rank drops by the number of copies; a window of 1 gives A = I (rank n). With masks alternating per
    layer, row k of the table must report the attention of layer k at state k."""
    d, n, H = 8, 6, 2
    base = ja.random_model(jax.random.key(3), d, H, 4, shared=False)
    lay = base.layers
    masks = ["full", "local:1", "full", "local:1"]
    model = ja.model.params.from_heads(lay.q, lay.k, lay.v, lay.o, masks=masks)
    X0 = np.array(ja.init_tokens(jax.random.key(4), 3, n, d, kind="gaussian", dtype=jnp.float64))
    X0[1, 1] = X0[1, 0]  # one copy: rank n - 1 under full attention
    X0[2, 2] = X0[2, 0]
    X0[2, 3] = X0[2, 0]  # two copies: rank n - 2
    rows = ja.alignment(model, X0, dtype=jnp.float64)
    closed_form = [np.mean([n, n - 1, n - 2]) if m == "full" else n for m in masks]
    traj = np.asarray(ja.simulate(model, X0, 4, save=ja.Save(trajectory=True)).trajectory)
    for k, row in enumerate(rows):
        w = {"q": np.asarray(lay.q[k]), "k": np.asarray(lay.k[k]), "scale": float(model.layers.scale[k]),
             "causal": False, "window": 1 if masks[k] == "local:1" else 0}
        ranks = []
        for b in range(3):
            A = ref.attention_probs(traj[b, k], w["q"], w["k"], w["scale"], 1.0, w["causal"], w["window"])
            for h in range(H):
                s = np.linalg.svd(A[h], compute_uv=False)
                ranks.append(int(np.sum(s > 1e-6 * s[0])))
        assert row["attn_rank"] == pytest.approx(np.mean(ranks), abs=1e-12)
        assert row["attn_rank"] == pytest.approx(closed_form[k], abs=1e-12)


@pytest.mark.fast_cases('float64-1e-09')
@pytest.mark.parametrize("dtype,eps", [(jnp.float32, 1e-4), (jnp.float64, 1e-9)])
def test_pairwise_distances_accurate_near_consensus(dtype, eps):
    """Tokens x_i = c + ε y_i with ||c|| = 1: the distances ε||y_i − y_j|| are kept to a small relative error
    (the uncentred Gram form loses them to cancellation against ||c||² = 1)."""
    rng = np.random.default_rng(5)
    d, n = 16, 7
    c = rng.normal(size=d)
    c /= np.linalg.norm(c)
    X = jnp.asarray(c[None] + eps * rng.normal(size=(n, d)), dtype)
    Xn = np.asarray(X, np.float64)  # the values the function sees, differences taken exactly in float64
    want = np.linalg.norm(Xn[:, None] - Xn[None], axis=-1)
    got = np.asarray(metrics.pairwise_distances(X), np.float64)
    off = ~np.eye(n, dtype=bool)
    rel = np.abs(got[off] - want[off]) / want[off]
    assert rel.max() < 1e-2, rel.max()
    assert np.all(np.diag(got) < 1e-2 * want[off].min())
    assert float(metrics.diameter(X)) == pytest.approx(want.max(), rel=1e-2)


@pytest.mark.fast_cases('2')
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 20])
def test_diameter_in_each_form_is_the_largest_exact_distance(d):
    """Every form of the diameter (squared differences at d ≤ DIRECT_MAX_D, the centred Gram summed over the
    coordinates, the centred Gram as a dot product) against the NumPy maximum of the pairwise distances: float64 to
    1e-14, float32 near consensus to a small relative error, NaN for a blown-up configuration, and the row-chunked
    evaluation of many tokens equal to the whole one."""
    from jaxattn.dynamics import observables as ob

    rng = np.random.default_rng(d)
    X = rng.normal(size=(9, d))
    want = np.linalg.norm(X[:, None] - X[None], axis=-1).max()
    assert float(metrics.diameter(jnp.asarray(X))) == pytest.approx(want, abs=1e-14)
    near = (X[:1] + 1e-4 * rng.normal(size=(9, d))).astype(np.float32)  # the float32 values the function sees
    exact = np.linalg.norm(near[:, None].astype(np.float64) - near[None], axis=-1).max()
    assert float(metrics.diameter(jnp.asarray(near))) == pytest.approx(exact, rel=1e-2)
    for where, bad in (((4, 0), np.inf), ((7, d - 1), np.nan)):  # any token, any coordinate
        blown = X.copy()
        blown[where] = bad
        assert np.isnan(float(metrics.diameter(jnp.asarray(blown))))
    many = rng.normal(size=(300, d))
    whole = float(metrics.diameter(jnp.asarray(many)))
    assert whole == pytest.approx(np.linalg.norm(many[:, None] - many[None], axis=-1).max(), abs=1e-13)
    old = ob.DIAMETER_BYTES
    try:
        ob.DIAMETER_BYTES = 8 * 300 * 64  # rows in chunks of 64 (the last one padded)
        assert float(metrics.diameter(jnp.asarray(many))) == pytest.approx(whole, abs=1e-13)
    finally:
        ob.DIAMETER_BYTES = old


def test_strict_dtype_marker_is_in_force():
    with pytest.raises(jax.dtypes.TypePromotionError):
        jnp.ones(2, jnp.int32) + jnp.ones(2, jnp.int64)
    with pytest.raises(jax.dtypes.TypePromotionError):
        jnp.ones(2, jnp.float32) * jnp.ones(2, jnp.float64)
