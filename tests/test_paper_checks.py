"""The computations behind the reproductions page's checks, against NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.analysis.directions import direction_increments, direction_rows

from . import reference as ref
from .test_discrete import weight_sets


def _np_directions(lam, vec):
    """Every eigendirection's real orthonormal basis (a complex pair: span(Re v, Im v)), NumPy only."""
    out, j = [], 0
    scale = np.abs(lam).max()
    while j < len(lam):
        if abs(lam[j].imag) > 1e-9 * scale:
            Q, _ = np.linalg.qr(np.stack([vec[:, j].real, vec[:, j].imag], 1))
            out.append((lam[j], Q))
            j += 2
        else:
            v = vec[:, j].real
            out.append((lam[j], (v / np.linalg.norm(v))[:, None]))
            j += 1
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("shared,mask", [(True, "full"), (False, "causal")])
def test_direction_increments_match_a_numpy_reference(shared, mask):
    """P_k and Δρ_k of every eigendirection from the reference D1 trajectory and NumPy's own eigendecomposition
    sorted by real part; the paper's P̄ is the mean of the P_k."""
    d, n, B, L = 6, 4, 24, 3
    model = ja.random_model(jax.random.key(2), d, 2, L, shared=shared, mask=mask, dtype=jnp.float64)
    X0 = np.asarray(ja.init_tokens(jax.random.key(3), B, n, d, dtype=jnp.float64))
    inc = direction_increments(model, X0, chunk=7)  # chunks that do not divide B
    sets = weight_sets(model)
    traj = np.stack([ref.simulate(x, sets, model.schedule, L) for x in X0])  # [B, L+1, n, d]
    F = np.asarray(ja.layer_matrices(model), np.float64)
    rows = direction_rows(inc)
    for k in range(L):
        lam, vec = np.linalg.eig(F[model.schedule[k]])
        idx = np.lexsort((-lam.imag, -np.round(lam.real, 10)))
        dirs = _np_directions(lam[idx], vec[:, idx])
        assert inc.n_dirs[k] == len(dirs)
        P, dr = [], []
        for j, (lj, U) in enumerate(dirs):
            rho = lambda X, U=U: np.linalg.norm(X @ U, axis=-1) / np.linalg.norm(X, axis=-1)
            delta = rho(traj[:, k + 1]) - rho(traj[:, k])
            P.append(np.mean(delta > 0))
            dr.append(delta.mean())
            assert inc.lam[k, j] == pytest.approx(lj, abs=1e-9)
        np.testing.assert_allclose(inc.P[k, :len(dirs)], P, atol=1e-12)
        np.testing.assert_allclose(inc.drho[k, :len(dirs)], dr, atol=1e-12)
        assert rows[k]["Pbar"] == pytest.approx(np.mean(P), abs=1e-12)
        assert rows[k]["P1"] == pytest.approx(P[0], abs=1e-12)
        assert rows[k]["drhobar"] == pytest.approx(np.mean(dr), abs=1e-12)
        assert rows[k]["P1_rank"] == 1 + sum(p > P[0] for p in P)
    assert inc.tokens == B * n


@pytest.mark.e2e
def test_the_papers_pbar_is_not_the_probability_that_rhobar_grows():
    """Mean of the per-direction probabilities against the probability of increment of the mean: different
    numbers in general (what the study reported as P̄ before)."""
    d, n, B = 6, 4, 64
    model = ja.random_model(jax.random.key(5), d, 2, 2, shared=False, dtype=jnp.float64)
    X0 = ja.init_tokens(jax.random.key(6), B, n, d, dtype=jnp.float64)
    rows = direction_rows(direction_increments(model, X0))
    table = ja.alignment(model, X0)
    assert [r["drhobar"] for r in rows] == pytest.approx([r["drhobar"] for r in table], abs=1e-12)
    assert any(abs(a["Pbar"] - b["P_rhobar"]) > 1e-3 for a, b in zip(rows, table, strict=True))
    assert all("Pbar" not in r for r in table)  # one P̄: the layers' table names its own number apart


def test_boundary_or_origin_places_every_point():
    """A square's corners are vertices, a point on an edge is on the boundary, the origin counts as the limit
    set's 0, a point strictly inside (not at 0) is inside."""
    from jaxattn.studies.cluster_checks import boundary_or_origin

    P = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, 0.2], [0.0, 0.0], [0.3, 0.4]])
    vert, bnd, inside = boundary_or_origin(P, 1e-6)
    assert (vert, bnd, inside) == (4, 6, 1)


def test_near_degenerate_layer_matrices_have_the_asked_spectrum():
    from jaxattn.studies.pm_cases import near_degenerate

    F, Fc = near_degenerate(jax.random.key(0), 7, lam1=1.0, lam2=0.97, cos12=0.99, rest=0.5)
    lam, vec = np.linalg.eig(F)
    i = np.argsort(-lam.real)
    lam, vec = lam[i], vec[:, i]
    assert lam[:2].real == pytest.approx([1.0, 0.97], abs=1e-10)
    assert np.all(np.abs(lam[2:].real) <= 0.5 + 1e-12)
    assert abs(np.vdot(vec[:, 0], vec[:, 1])) == pytest.approx(0.99, abs=1e-10)
    lc, vc = np.linalg.eig(Fc)
    j = np.argsort(-lc.real)
    assert lc[j][:2].real == pytest.approx([1.0, 0.5], abs=1e-10)
    assert abs(np.vdot(vc[:, j[0]], vc[:, j[1]])) == pytest.approx(0.0, abs=1e-10)
    assert np.abs(vc[:, j[0]]) == pytest.approx(np.abs(vec[:, 0]), abs=1e-10)  # the same v1


@pytest.mark.e2e
def test_passes_in_blocks_are_the_passes_in_one_call():
    """Periodic passes run block by block give the numbers of one call; --until stops at the first block after
    which every prompt's first-token measure is below it (not the mean: the prompts behind it would stay above)."""
    from jaxattn.studies.consensus import passes_until

    model = ja.random_model(jax.random.key(0), 8, 2, 2, shared=False, biases=True, dtype=jnp.float64)
    lay = model.layers
    model = model.replace(layers=lay.replace(ln1_w=jnp.ones((lay.n_sets, 8)), ln1_b=jnp.zeros((lay.n_sets, 8))),
                          norm_style="pre")
    X0 = ja.init_tokens(jax.random.key(1), 3, 5, 8, dtype=jnp.float64)
    one = passes_until(model, X0, 6, dynamics=ja.NO_FFN, mode="periodic", key=jax.random.key(2))
    blocks = passes_until(model, X0, 6, dynamics=ja.NO_FFN, mode="periodic", key=jax.random.key(2), until=1e-300,
                          block=4)
    np.testing.assert_allclose(blocks["first_token"], one["first_token"], rtol=0, atol=1e-13)
    after2 = one["first_token"][:, 2 * 2]
    early = passes_until(model, X0, 6, dynamics=ja.NO_FFN, mode="periodic", key=jax.random.key(2),
                         until=float(np.max(after2)) * 1.0001, block=2)
    assert early["first_token"].shape[1] == 2 * 2 + 1
    # between the mean and the largest prompt: the mean is below, a prompt is not, so the passes go on
    assert np.mean(after2) < np.max(after2) * 0.9999
    later = passes_until(model, X0, 6, dynamics=ja.NO_FFN, mode="periodic", key=jax.random.key(2),
                         until=float(np.max(after2)) * 0.9999, block=2)
    assert later["first_token"].shape[1] > 2 * 2 + 1


@pytest.mark.unchecked_types("no model (None): the passes it would run are replaced")
def test_passes_until_sets_aside_prompts_that_blew_up(monkeypatch):
    """--until stops once every finite prompt is below it (a prompt that blew up never comes back), also when
    every prompt blew up; a finite prompt above it keeps the passes going."""
    from jaxattn.dynamics.passes import Passes
    from jaxattn.studies import consensus as cons

    def fake(finals):
        calls = []

        def passes(model, X, p, **kw):  # depth 1: the input, then one record per pass
            calls.append(p)
            ft = np.array([[1.0] + [f] * p for f in finals])
            return Passes({"first_token": ft, "cos_consensus": ft}, X, None)

        return passes, calls

    for finals, blocks in (([1e-4, np.nan], 1), ([np.nan, np.nan], 1), ([1e-4, 2e-3], 3), ([1e-4, 5e-4], 1)):
        passes, calls = fake(finals)
        monkeypatch.setattr(cons, "repeated_passes", passes)
        out = cons.passes_until(None, np.zeros((2, 3, 4)), 6, dynamics=ja.NO_FFN, mode="periodic",
                                key=jax.random.key(0), until=1e-3, block=2)
        assert calls == [2] * blocks and out["first_token"].shape == (2, 2 * blocks + 1), finals


@pytest.mark.e2e
def test_stable_counts_by_eigenvector_add_up():
    from jaxattn.analysis._equilibria import sign_patterns
    from jaxattn.studies.stability import StabilityConfig, count_stable, random_symmetric_single_head

    cfg = StabilityConfig()
    for i in range(3):
        m = random_symmetric_single_head(jax.random.key(i), 3)
        for oja in (False, True):
            row, cand, lin, _ = count_stable(m, 4, "discrete", cfg, sign_patterns(4), oja=oja)
            assert row["stable"] == sum(row[k] for k in ("stable_consensus_v1", "stable_consensus_other",
                                                         "stable_bipartite_v1", "stable_bipartite_other"))
            assert row["stable_consensus_v1"] == int((lin.stable & cand.is_consensus & (cand.k == 0)).sum())
            lam = np.sort(np.linalg.eigvalsh(ja.layer_matrices(m)[0]))
            bound = 2 / (abs(lam[0]) - lam[-1]) if abs(lam[0]) > lam[-1] else np.inf
            assert row["alpha_bound"] == pytest.approx(bound)
            if oja:  # Theorem 2 of the multistability paper: the principal consensus alone is stable
                assert (row["stable"], row["stable_consensus_v1"]) == (1, 1)


def test_a_paper_architecture_is_built_from_its_config():
    from jaxattn.studies.architectures import ARCHITECTURES, random_architecture

    m = random_architecture("gpt2-tiny", seed=3)
    assert (m.d_model, m.n_heads, m.depth, m.family) == (24, 4, 2, "gpt2")
    again = random_architecture("gpt2-tiny", seed=3)
    assert np.array_equal(np.asarray(m.layers.q), np.asarray(again.layers.q))  # the seed decides the weights
    assert ARCHITECTURES["gpt2-xl"][1] == dict(n_embd=1600, n_layer=48, n_head=25)  # Table 1 of the paper
    with pytest.raises(ja.ConfigError, match="unknown architecture"):
        random_architecture("gpt5")
