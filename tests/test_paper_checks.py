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


def test_the_papers_pbar_is_not_the_probability_that_rhobar_grows():
    """Mean of the per-direction probabilities against the probability of increment of the mean: different
    numbers in general (what the study reported as P̄ before)."""
    d, n, B = 6, 4, 64
    model = ja.random_model(jax.random.key(5), d, 2, 2, shared=False, dtype=jnp.float64)
    X0 = ja.init_tokens(jax.random.key(6), B, n, d, dtype=jnp.float64)
    rows = direction_rows(direction_increments(model, X0))
    table = ja.alignment(model, X0)
    assert [r["drhobar"] for r in rows] == pytest.approx([r["drhobar"] for r in table], abs=1e-12)
    assert any(abs(a["Pbar"] - b["Pbar"]) > 1e-3 for a, b in zip(rows, table, strict=True))
