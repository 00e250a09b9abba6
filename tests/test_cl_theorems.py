"""The pieces of the clusters paper's discrete-time and R³ checks (:mod:`jaxattn.studies.cl_theorems`): Remark 4's
rescaled iteration, the shrinking-hull measure, the settled test, the end state of Theorem 3.1 and the random good
triples."""

from __future__ import annotations

import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from jaxattn.analysis.clusters import classify_top
from jaxattn.model.sampling import init_tokens
from jaxattn.studies import cl_theorems as ct
from jaxattn.studies.skeleton import csv_text


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


def _discrete_row(setting: str, dt: float, condition: int, remaining: float = 1e-6, **values) -> dict:
    """One row of ``discrete.csv`` as :func:`ct.identity_rows` (``V = I``) or :func:`ct.good_triple_rows` writes it,
    a settled condition at Theorem 3.1's (Theorem 4.1's) end unless ``values`` say otherwise."""
    ident = setting == "V = I"
    row = {"setting": setting, "dt": dt, "steps": math.ceil(20 / dt), "n": 5 if ident else 6, "d": 2,
           "condition": condition, "finite": True, "tol": 1e-3, "remaining": remaining,
           "at_vertices": 5 if ident else -1, "at_origin": 0 if ident else -1, "vertices": 3 if ident else -1,
           "all_at_vertices": ident, "hull_excursion": 1e-16 if ident else math.nan,
           "hyperplanes": -1 if ident else 2, "gap_hyperplanes": -1 if ident else 2}
    return {**row, **values}


def _check_png(path) -> None:
    with Image.open(path) as im:
        im.verify()
        assert im.format == "PNG" and im.width > 300 and im.height > 200, im.size


def test_the_discrete_figure_is_drawn_from_a_runs_table(tmp_path):
    """``discrete.png`` from ``discrete.csv`` into another folder (the run left as it was), with conditions that have
    not settled, one that overflowed and one on four hyperplanes; without the table (or with an empty one) none."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [_discrete_row(s, dt, b) for s in ("V = I", "good triple") for dt in (1.0, 0.5) for b in range(3)]
    rows += [_discrete_row("V = I", 0.1, 0, remaining=0.5),
             _discrete_row("V = I", 0.1, 1, finite=False, remaining=math.inf, all_at_vertices=False,
                           hull_excursion=math.inf),
             _discrete_row("good triple", 0.1, 0, hyperplanes=4, gap_hyperplanes=4),
             _discrete_row("V = I", 1.0, 3, hull_excursion=0.0)]
    (run / "discrete.csv").write_text(csv_text(rows))
    assert ct.claim_figures(run, tmp_path / "drawn") == ["discrete.png"]
    _check_png(tmp_path / "drawn" / "discrete.png")
    assert [p.name for p in run.iterdir()] == ["discrete.csv"]
    (run / "discrete.csv").write_text("")
    assert ct.claim_figures(run, tmp_path / "empty") == []
    (run / "discrete.csv").unlink()
    assert ct.claim_figures(run, tmp_path / "missing") == [] and not (tmp_path / "missing").exists()


@pytest.mark.e2e  # a tiny study: the compiled maps and flows of both parts (about 10 s)
def test_the_study_draws_its_claims_figure_and_a_copy_without_figures_draws_the_same(tmp_path):
    """The study writes ``discrete.png`` from the table it has just written; drawn again from a copy of the run made
    without its PNGs, the same claims' figure (``good_triples_3d.png`` is drawn from a solve, not from a table)."""
    out = tmp_path / "run"
    ct.study(out, dts="1", horizon=3.0, num=2, table_n="4", table_d="2", triple_n=4, good_num=2, triples=1,
             triple_num=1, triple_horizons=0.05)
    wrote = {p.name for p in out.glob("*.png")}
    assert wrote == {"discrete.png", "good_triples_3d.png"}
    _check_png(out / "discrete.png")
    old = tmp_path / "old"
    shutil.copytree(out, old, ignore=shutil.ignore_patterns("*.png"))
    assert set(ct.claim_figures(old)) == wrote - {"good_triples_3d.png"}
    assert {p.name for p in old.glob("*.png")} == {"discrete.png"}
