"""Cluster analysis, good triples and `jaxattn clusters` (Geshkovski et al., emergence of clusters)."""

import csv
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla

import jaxattn as ja
from jaxattn.analysis import clusters as cl
from jaxattn.cli import main
from jaxattn.studies.clusters import solve_rescaled

from .x64 import x64_off


def _csv_rows(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _similar(M, seed=0):
    """``S M S⁻¹`` for a random well-conditioned ``S``: same spectrum, non-orthogonal eigenvectors."""
    rng = np.random.default_rng(seed)
    S = np.eye(M.shape[0]) + 0.3 * rng.normal(size=M.shape)
    return S @ M @ np.linalg.inv(S)


# ----------------------------------------------------------------------------- the rescaling


@pytest.mark.e2e
def test_rescaled_flow_matches_mapped_unrescaled_flow():
    """Solving x and mapping z = e^{-tV} x afterwards equals solving z directly, to the tolerance."""
    V = np.array([[0.9, 0.3], [-0.2, 0.5]])
    m = cl.paper_model(V, Q=np.array([[1.0, 0.2], [0.0, 1.0]]))
    # n = 6, d = 2, 61 saved times: the shapes of the command's 2-D pictures (one compiled program)
    X0 = ja.init_tokens(jax.random.key(1), 3, 6, 2, kind="gaussian", dtype=jnp.float64)
    ts = np.linspace(0.0, 3.0, 61)
    x = ja.solve(m, X0, 3.0, flow=ja.C3, save=ja.Save(ts=ts, trajectory=True, observe=lambda t, X, ctx: {}),
                 rtol=1e-10, atol=1e-10)
    z = solve_rescaled(m, X0, ts, observe=cl.cluster_observables(1e-3), trajectory=True, rtol=1e-10, atol=1e-10)
    assert bool(np.all(np.asarray(x.ok))) and bool(np.all(np.asarray(z.ok)))
    E = np.stack([sla.expm(-t * V) for t in ts])
    mapped = np.einsum("tde,btne->btnd", E, np.asarray(x.trajectory))
    err = np.abs(mapped - np.asarray(z.trajectory)).max()
    assert err < 1e-7, err
    # and the flow did something: the tokens moved by O(1)
    assert np.abs(np.asarray(z.trajectory)[:, -1] - np.asarray(X0)).max() > 0.1


# ----------------------------------------------------------------------------- hand-built configurations


def _simplex_config(noise=1e-8, seed=0):
    """4 vertices of a 3-simplex, each held by 3 tokens within `noise`, plus 3 interior tokens."""
    rng = np.random.default_rng(seed)
    S = np.array([[0, 0, 0], [2, 0, 0], [0, 2, 0], [0, 0, 2.0]])
    inner = np.array([[0.3, 0.3, 0.3], [0.5, 0.2, 0.1], [0.1, 0.6, 0.4]])
    X = np.concatenate([np.repeat(S, 3, axis=0) + noise * rng.normal(size=(12, 3)), inner])
    return X


@pytest.mark.e2e
def test_clusters_of_a_simplex_with_interior_points():
    X = _simplex_config()
    c = cl.clusters(X, 1e-4)
    assert int(c.count) == 7
    lab = np.asarray(c.labels)
    assert lab[:12].tolist() == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9] and lab[12:].tolist() == [12, 13, 14]
    sizes = np.asarray(c.sizes)
    assert sizes[[0, 3, 6, 9]].tolist() == [3, 3, 3, 3] and sizes[12:].tolist() == [1, 1, 1] and sizes.sum() == 15
    np.testing.assert_allclose(np.asarray(c.centres)[3], [2, 0, 0], atol=1e-7)
    assert int(cl.gap_clusters(X).count) == 7
    p = cl.polytope(X, 1e-4)
    assert (p.clusters, p.vertices, p.vertex_tokens, p.inside) == (7, 4, 12, True) and p.max_outside == 0.0
    # a token pushed outside the hull of the vertices becomes a vertex itself: 5 vertices
    Y = X.copy()
    Y[12] = [1.5, 1.5, 1.5]
    assert cl.polytope(Y, 1e-4).vertices == 5
    # batched over leading axes
    B = np.stack([X, Y, X[::-1]])
    assert np.asarray(cl.count_clusters(B, 1e-4)).tolist() == [7, 7, 7]
    assert cl.merge_heights(B).shape == (3, 14)


def test_hull_vertices_in_a_degenerate_plane():
    """Points on a plane in 3-D (no full-dimensional hull): the LP path finds the square's corners."""
    P = np.array([[0, 0, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1], [0.5, 0.5, 1], [0.2, 0.7, 1.0]])
    assert cl.hull_vertices(P).tolist() == [True, True, True, True, False, False]
    far = np.array([[2.0, 0.5, 1.0], [0.5, 0.5, 1.0]])
    np.testing.assert_allclose(cl.hull_distance(P[:4], far), [1.0, 0.0], atol=1e-9)


@pytest.mark.e2e
def test_tolerance_free_count_is_stable_under_perturbations():
    rng = np.random.default_rng(3)
    centres = np.array([[0, 0], [1, 0], [0, 1], [-1, -1], [3, 2.0]])
    X = np.repeat(centres, 4, axis=0) + 1e-9 * rng.normal(size=(20, 2))
    assert int(cl.gap_clusters(X).count) == 5
    counts = [int(cl.gap_clusters(X + 1e-5 * rng.normal(size=X.shape)).count) for _ in range(20)]
    assert counts == [5] * 20
    # a tolerance below the perturbation breaks the clusters, the tolerance-free count does not
    assert int(cl.count_clusters(X + 1e-5 * rng.normal(size=X.shape), 1e-7)) == 20
    # one tight cluster away from the origin counts as 1; exact duplicates of 2 points as 2
    assert int(cl.gap_clusters(np.ones((6, 2)) + 1e-9 * rng.normal(size=(6, 2))).count) == 1
    assert int(cl.gap_clusters(np.array([[1.0, 0], [1, 0], [-1, 0], [-1, 0]])).count) == 2
    assert int(cl.gap_clusters(np.ones((1, 3))).count) == 1


@pytest.mark.e2e
def test_two_hyperplanes_along_the_top_eigenvector():
    V = _similar(np.diag([2.0, 0.5, -0.3]), seed=1)
    top = cl.top_eigen(V)
    assert abs(top.value - 2.0) < 1e-12 and abs(top.left @ top.right - 1) < 1e-12
    # the coordinate is 1 on φ_1 and 0 on the other eigenvectors
    lam, R = np.linalg.eig(V)
    others = R[:, np.argsort(-lam.real)[1:]].real.T
    np.testing.assert_allclose(np.asarray(cl.coordinate(np.vstack([top.right, others]), V)), [1, 0, 0], atol=1e-12)
    rng = np.random.default_rng(2)
    # tokens = (value along φ_1) φ_1 + anything in the other eigendirections
    vals = np.array([-1.0] * 5 + [1.5] * 7) + 1e-9 * rng.normal(size=12)
    X = vals[:, None] * top.right[None, :] + rng.normal(size=(12, 2)) @ others
    h = cl.hyperplanes(X, V, 1e-6)
    assert int(h.count) == 2 and int(h.gap_count) == 2
    np.testing.assert_allclose(np.sort(np.asarray(h.values)), np.sort(vals), atol=1e-10)


@pytest.mark.e2e
def test_boolean_distance_and_rank_of_a_noisy_zero_one_matrix():
    n = 6
    P = np.zeros((n, n))
    P[:3, 0] = 1  # attend to the first token
    P[3:, -1] = 1  # or to the last one: rank 2
    noise = 1e-3 * np.random.default_rng(4).uniform(-1, 1, size=(n, n))
    A = np.abs(P + noise)
    b = cl.boolean_attention(A, rtol=1e-2)
    assert abs(float(b.distance) - np.abs(A - P).max()) < 1e-15 and float(b.distance) < 1e-3
    assert int(b.rank) == 2
    assert int(cl.boolean_attention(A, rtol=1e-12).rank) == n  # the noise is full rank
    assert int(cl.boolean_attention(P).rank) == 2 and float(cl.boolean_attention(P).distance) == 0.0
    half = np.full((2, 2), 0.5)
    assert float(cl.boolean_attention(half).distance) == 0.5 and int(cl.boolean_attention(half).rank) == 1


@pytest.mark.e2e
def test_one_dimensional_attention_becomes_boolean_of_low_rank():
    """d = 1, Q = K = V = 1: P(t) converges to a Boolean matrix of rank <= 2 (the paper's theorem)."""
    # n = 5, 61 saved times: the shapes of the command's 1-D run (one compiled program)
    X0 = ja.init_tokens(jax.random.key(7), 8, 5, 1, kind="gaussian", dtype=jnp.float64)
    ts = np.linspace(0.0, 8.0, 61)
    sol = solve_rescaled(cl.paper_model(np.ones((1, 1))), X0, ts, observe=cl.boolean_observables(1))
    dist = np.asarray(sol.observables["boolean_distance"])
    rank = np.asarray(sol.observables["rank"])
    assert dist[:, 0].min() > 0.05 and dist[:, -1].max() < 1e-8
    assert rank[:, -1].max() <= 2 and rank[:, 0].min() >= 3
    A = np.asarray(sol.observables["attention"])[:, -1]
    np.testing.assert_allclose(A.sum(-1), 1.0, atol=1e-12)


# ----------------------------------------------------------------------------- good triples


@pytest.mark.parametrize("spectrum,cls", [
    ([3.0, 1.0, -2.0], "good"),
    ([-3.0, 1.0, 2.0], "negative"),
    ([2.0, 2.0, 1.0], "repeated"),
    ([2.0, -2.0, 1.0], "repeated"),
    ("complex", "complex"),
])
def test_known_spectra_are_classified(spectrum, cls):
    # "complex": 1 ± 2i above 0.5
    M = sla.block_diag(np.array([[1.0, -2.0], [2.0, 1.0]]), [[0.5]]) if spectrum == "complex" else np.diag(spectrum)
    q, _ = np.linalg.qr(np.random.default_rng(5).normal(size=(3, 3)))
    for V in (M, q @ M @ q.T, _similar(M, 6)):
        assert cl.TOP_CLASSES[int(cl.classify_top(V))] == cls


@pytest.mark.e2e
def test_good_triple_fraction_closed_forms_and_interval_width():
    key = jax.random.key(11)
    # d = 1: a Gaussian scalar is positive half of the time
    e1 = cl.good_triple_fraction(key, 1, 4000)
    assert e1.lo < 0.5 < e1.hi and e1.classes["complex"] == 0
    # d = 2 real Ginibre: real eigenvalues with probability 1/sqrt(2), then the top one is positive
    # half of the time (V -> -V): 1 / (2 sqrt 2)
    small = cl.good_triple_fraction(key, 2, 2500)
    big = cl.good_triple_fraction(jax.random.fold_in(key, 1), 2, 40000)
    exact = 1 / (2 * math.sqrt(2))
    assert small.lo < exact < small.hi and big.lo < exact < big.hi
    assert abs(big.classes["complex"] / 40000 - (1 - 1 / math.sqrt(2))) < 0.01
    ratio = (big.hi - big.lo) / (small.hi - small.lo)
    assert abs(ratio - 0.25) < 0.02, ratio  # 16x the samples, 1/4 of the width
    # Perron-Frobenius: positive matrices are always good; symmetric ones never have complex tops
    assert cl.good_triple_fraction(key, 5, 300, ensemble="positive").fraction == 1.0
    assert cl.good_triple_fraction(key, 5, 300, ensemble="symmetric").classes["complex"] == 0
    lo, hi = cl.wilson(50, 100)
    assert abs((lo + hi) / 2 - 0.5) < 1e-12 and abs(hi - lo - 0.19) < 0.005


# ----------------------------------------------------------------------------- bad input


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
@pytest.mark.parametrize("call,match", [
    (lambda: cl.paper_model(np.ones((2, 3))), "square"),
    (lambda: cl.paper_model(np.array([[1.0, np.nan], [0, 1]])), "non-finite"),
    (lambda: cl.paper_model(np.eye(2), Q=np.eye(3)), "dimension d=2"),
    (lambda: cl.coordinate(np.ones((4, 3)), np.eye(2)), "dimension d=3"),
    (lambda: cl.coordinate(np.ones((4, 2)), np.array([[0.0, -1], [1, 0]])), "complex"),
    (lambda: cl.boolean_observables(2), "d = 1"),
    (lambda: cl.clusters(np.array([[0.0, np.inf]]), 0.1), "non-finite"),
    (lambda: cl.clusters(np.ones((3, 2)), -1.0), "tol"),
    (lambda: cl.classify_top(np.ones((2, 3))), "d, d"),
    (lambda: cl.good_triple_fraction(jax.random.key(0), 3, 10, ensemble="gue"), "ensemble"),
])
def test_bad_input_is_refused_with_one_line(call, match):
    with pytest.raises(ja.ConfigError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- the command


def test_clusters_command_writes_a_complete_run(tmp_path, capsys):
    """Tiny sizes, plus the V = I bound over 1000 initial conditions: at large t the number of
    clusters never exceeds the number of vertices of the initial convex hull."""
    out = tmp_path / "c"
    with x64_off():
        rc = main(["clusters", "--out", str(out), "--no-progress", "--n", "6", "--n-1d", "5", "--t1", "10",
                   "--num", "1000", "--table-n", "5", "--table-d", "2", "--table-beta", "2", "--good-d", "1,2",
                   "--good-samples", "400", "--ensembles", "ginibre,positive"])
    assert rc == 0
    names = {p.name for p in out.iterdir()} - {".jaxattn-run.json"}  # the run-directory marker
    pngs = {"polytope.png", "hyperplanes.png", "other_spectra.png", "boolean.png", "counts.png"}
    assert {"config.json", "report.md", "pictures.csv", "counts.csv", "good_triples.csv", "boolean.csv"} | pngs == names
    for png in pngs:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    counts = _csv_rows(out / "counts.csv")
    assert len(counts) == 1
    r = counts[0]
    assert int(r["conditions"]) == 1000 and int(r["solver_failures"]) == 0
    assert float(r["le_hull_fraction"]) == 1.0  # clusters <= vertices of the initial hull, every time
    assert float(r["agree_fraction"]) > 0.99 and float(r["inside_fraction"]) == 1.0
    assert 1.0 <= float(r["gap_clusters_mean"]) < float(r["hull_vertices_mean"]) <= 5.0
    assert (f"| 5 | 2 | 2 | {float(r['clusters_mean']):.3f} | {float(r['gap_clusters_mean']):.3f} | "
            f"{r['gap_clusters_min']} | {r['gap_clusters_max']} | {float(r['hull_vertices_mean']):.3f} |") in report
    pics = {p["setting"]: p for p in _csv_rows(out / "pictures.csv")}
    assert set(pics) == {"identity_2d", "identity_3d", "good", "complex", "negative"}
    for name in ("identity_2d", "identity_3d"):
        p = pics[name]
        assert int(p["clusters"]) == int(p["polytope_vertices"]) <= int(p["initial_hull_vertices"])
        assert f"| {name} | {p['d']} | 1 | {p['clusters']} | {p['gap_clusters']} |" in report
    assert 1 <= int(pics["good"]["hyperplanes"]) <= 3
    assert float(pics["negative"]["max_norm"]) > 100 * float(pics["good"]["max_norm"])  # repulsion along φ_1
    good = {(g["ensemble"], int(g["d"])): g for g in _csv_rows(out / "good_triples.csv")}
    assert float(good[("positive", 2)]["fraction"]) == 1.0
    g2 = good[("ginibre", 2)]
    assert float(g2["ci_low"]) < 1 / (2 * math.sqrt(2)) < float(g2["ci_high"])
    assert (f"| ginibre | 2 | {float(g2['fraction']):.4f} | [{float(g2['ci_low']):.4f}, "
            f"{float(g2['ci_high']):.4f}] |") in report
    boolean = _csv_rows(out / "boolean.csv")
    assert float(boolean[-1]["distance_max"]) < 1e-8 and int(boolean[-1]["rank_max"]) <= 2
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["command"] == "clusters" and cfg["config"]["num"] == 1000 and "versions" in cfg
    stdout = capsys.readouterr().out
    assert "report" in stdout and "identity_2d" in stdout


@pytest.mark.parametrize("args,match", [
    (["--n", "1"], "--n: must be >= 2 (clusters need several tokens)"),
    (["--tol", "nan"], "--tol: must be finite"),
    (["--table-n", "8,x"], "argument --table-n: expected int, got 'x'"),
    (["--table-d", "1"], "--table-d[0]: must be >= 2 (the polytope analysis needs a hull)"),
    (["--table-beta", "0"], "--table-beta[0]: must be > 0"),
    (["--ensembles", "ginibre,gue"], "--ensembles[1]: must be one of ginibre, symmetric, positive, uniform"),
    (["--good-samples", "0"], "--good-samples: must be > 0"),
    (["--seed", "-1"], "--seed: must be in [0, 2^63)"),
])
def test_clusters_command_bad_input(tmp_path, capsys, args, match):
    out = tmp_path / "c"
    try:
        rc = main(["clusters", "--out", str(out), "--no-progress", *args])
    except SystemExit as e:  # argparse: a value that is not of the option's type
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("jaxattn: error:") and match in err and err.count("\n") == 1
    assert not out.exists()


def test_clusters_command_refuses_a_used_out_dir(tmp_path, capsys):
    out = tmp_path / "c"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    rc = main(["clusters", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "not an empty directory" in err and err.count("\n") == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.e2e
def test_the_hull_check_solves_below_the_excursion_it_judges():
    """Proposition C.2 (V = I: the hull never grows) is judged on excursions above 1e-9 of the configuration's size;
    solved at the study's usual rtol of 1e-8 the solver's error alone exceeded that (5e-8), so the check solves at
    HULL_RTOL and a hull that cannot grow shows no excursion above round-off."""
    import jax

    from jaxattn.studies import cluster_checks as cc

    assert cc.HULL_RTOL <= 1e-11
    rows = cc.hull_shrinks(jax.random.key(7), 16, 40, 2, 15.0)  # at rtol 1e-8: 5.7e-9
    assert all(r["solver_ok"] for r in rows)
    assert max(r["max_outside_relative"] for r in rows) < 1e-12
    assert all(r["volume_increases"] == 0 and r["volume_end"] < r["volume_0"] for r in rows)


def test_the_theorem_checks_figures_are_drawn_from_their_rows(tmp_path):
    """Fig. 7(b) and Fig. 11 from the check rows, as the study makes them or as read back from their CSV files
    (text); no rows, no figure."""
    from jaxattn.studies.clusters import check_figures

    high = _high_dim_rows([(0.5, 1.0, 4.0), (0.1, 1.0, 1.0)])
    rate = [{"n": n, "condition": i, "points": 10, "slope": 1.0 + 0.01 * i, "r2": 0.99, "r2_single_exponential": 0.9,
             "t_start": 1.0, "t_end": 3.0} for n in (5, 8) for i in range(4)]
    assert check_figures(tmp_path / "a", {"high_dim": high, "rate": rate}) == ["high_dim.png", "rate.png"]
    as_text = [{k: str(v) for k, v in r.items()} for r in high]
    assert check_figures(tmp_path / "b", {"high_dim": as_text}) == ["high_dim.png"]
    for png in ("a/high_dim.png", "a/rate.png", "b/high_dim.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert check_figures(tmp_path / "c", {}) == []


def _high_dim_rows(coords, conditions: int = 2, ts=(0.0, 10.0, 20.0), clusters: int = 2, joint: int = 2,
                   failed: int = -1) -> list[dict]:
    """Fig. 7(b)'s rows: ``coords`` = (eigenvalue, variance at 0, gap in decades at the end) per coordinate; the gap
    grows linearly from 0, the variance falls by 1e6 where the gap is 3 decades or more; on the span of the judged
    coordinates ``joint`` clusters, 4 decades apart at the end; condition ``failed``'s solve failed."""
    rows = []
    for c in range(conditions):
        for t in ts:
            for j, (lam, var, gap) in enumerate(coords):
                f = t / ts[-1]
                rows.append({"condition": c, "t": t, "n": 8, "d": 4, "positive_dims": len(coords), "negative_dims": 2,
                             "solver_ok": c != failed, "coordinate": j, "lambda": lam,
                             "horizon": 3 * np.log(10) / lam, "mean": 0.5,
                             "variance": var * (1e-6 if gap >= 3 and t else 1.0) ** f, "gap_clusters": clusters,
                             "gap_decades": gap * f, "joint_clusters": joint, "joint_gap": 4.0 * f,
                             "negative_spread": np.exp(t / 10)})
    return rows


def test_fig7b_is_judged_on_the_coordinates_whose_eigenvalue_has_had_the_time():
    """At t = 20 a coordinate of eigenvalue λ has had the time to cluster by 3 decades when λ t ≥ 3 ln 10
    (λ ≥ 0.345): the one at λ = 0.5 is judged (both conditions, its gap and the rate a quarter earlier), the one at
    λ = 0.1 (which needs t = 69) is not; rows read back as text give the same."""
    from jaxattn.studies.cluster_checks import high_dim_summary

    rows = _high_dim_rows([(0.5, 1.0, 4.0), (0.1, 1.0, 1.0)])
    for rs in (rows, [{k: str(v) for k, v in r.items()} for r in rows]):
        h = high_dim_summary(rs)
        assert (h["t"], h["dt"], h["conditions"], h["positive_dims"]) == (20.0, 10.0, 2, 2)
        assert h["lambda_needed"] == pytest.approx(3 * np.log(10) / 20)
        assert (h["judged"], h["pairs"], h["clear"], h["more_than_three"], h["failed"]) == (1, 2, 2, 0, 0)
        assert (h["joint_conditions"], h["joint_clear"], h["joint_more_than_three"]) == (2, 2, 0)
        assert h["ends"] == [4.0, 4.0] and h["mids"] == [2.0, 2.0] and h["lambda_min_judged"] == 0.5
        assert h["variance_ratio"] == pytest.approx(1e-6)
        assert h["negative_growth"] == pytest.approx(np.exp(2.0))
        assert h["longest_horizon"] == pytest.approx(3 * np.log(10) / 0.1)
    many = high_dim_summary(_high_dim_rows([(0.5, 1.0, 4.0)], clusters=5, joint=4))
    assert (many["clear"], many["more_than_three"], many["joint_more_than_three"]) == (2, 2, 2)
    one = high_dim_summary(_high_dim_rows([(0.5, 1.0, 4.0)], failed=1))  # a failed solve: counted, left out
    assert (one["conditions"], one["failed"], one["pairs"]) == (2, 1, 1)
    early = high_dim_summary(_high_dim_rows([(0.5, 1.0, 4.0)], ts=(0.0, 2.0)))  # λ t = 1 < 3 ln 10: none judged
    assert (early["judged"], early["pairs"]) == (0, 0)
