"""Dynamic metastability (issue 33): the interaction energy and its Riemannian Hessian against NumPy and finite
differences, the plateau detector and the duration statistics against constructed signals, and the study
(``jaxattn metastability``) at tiny sizes."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.analysis import energy as en
from jaxattn.analysis.plateaus import kaplan_meier_median, plateaus, power_fit, rate_fit
from jaxattn.cli import main
from jaxattn.errors import ConfigError
from jaxattn.model.paper import paper_model
from jaxattn.studies import metastability as ms
from jaxattn.studies.verdicts import VERDICTS

from .x64 import x64_off


def _sphere(rng, *shape):
    X = rng.normal(size=shape)
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


# ---------------------------------------------------------------- NumPy references
def np_energy(X, beta):
    n = X.shape[-2]
    G = X @ np.swapaxes(X, -1, -2)
    return np.exp(beta * (G - 1)).sum((-1, -2)) / (2 * beta * n * n)


def np_hessian(X, beta):
    """The Riemannian Hessian from the closed form of the Euclidean one:
    ``∂²E/∂x_i∂x_k = (1/n²) e_ik (I + β x_k x_iᵀ)`` (k ≠ i),
    ``∂²E/∂x_i² = (1/n²) [β Σ_{j≠i} e_ij x_j x_jᵀ + e_ii (I + 2β x_i x_iᵀ)]``, ``e_ij = exp(β(⟨x_i, x_j⟩ − 1))``."""
    n, d = X.shape
    e = np.exp(beta * (X @ X.T - 1))
    H = np.zeros((n, d, n, d))
    for i in range(n):
        for k in range(n):
            if i == k:
                H[i, :, i, :] = (beta * sum(e[i, j] * np.outer(X[j], X[j]) for j in range(n) if j != i)
                                 + e[i, i] * (np.eye(d) + 2 * beta * np.outer(X[i], X[i]))) / n**2
            else:
                H[i, :, k, :] = e[i, k] * (np.eye(d) + beta * np.outer(X[k], X[i])) / n**2
    g = e @ X / n**2
    out = np.zeros_like(H)
    for i in range(n):
        Pi = np.eye(d) - np.outer(X[i], X[i])
        for k in range(n):
            Pk = np.eye(d) - np.outer(X[k], X[k])
            out[i, :, k, :] = Pi @ H[i, :, k, :] @ Pk
        out[i, :, i, :] -= (X[i] @ g[i]) * Pi
    return out.reshape(n * d, n * d)


def _geodesic(X, V, s):
    nv = np.linalg.norm(V, axis=-1, keepdims=True)
    return X * np.cos(s * nv) + V / np.where(nv > 0, nv, 1) * np.sin(s * nv)


# ---------------------------------------------------------------- the energy
def test_energy_and_its_gradients_against_numpy_and_finite_differences():
    rng = np.random.default_rng(0)
    X = _sphere(rng, 4, 6, 3)
    for beta in (0.5, 4.0, 30.0):
        np.testing.assert_allclose(np.asarray(en.energy(X, beta)), np_energy(X, beta), rtol=1e-13)
        # the Euclidean gradient against central differences of the extended energy
        g = np.asarray(en.euclidean_gradient(X[0], beta))
        h = 1e-6
        fd = np.zeros_like(X[0])
        for i in range(6):
            for a in range(3):
                E = np.zeros_like(X[0])
                E[i, a] = h
                fd[i, a] = (np_energy(X[0] + E, beta) - np_energy(X[0] - E, beta)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9 * np.abs(g).max())
        rg = np.asarray(en.riemannian_gradient(X, beta))
        np.testing.assert_allclose(np.sum(rg * X, -1), 0, atol=1e-15)  # tangent
    assert float(en.energy(np.tile([1.0, 0.0], (5, 1)), 3.0)) == pytest.approx(1 / 6, rel=1e-15)  # one point: 1/(2β)


def test_riemannian_hessian_against_the_closed_form_and_geodesic_differences():
    rng = np.random.default_rng(1)
    for n, d, beta in ((5, 2, 3.0), (4, 3, 1.0), (3, 5, 8.0)):
        X = _sphere(rng, n, d)
        H = np.asarray(en.riemannian_hessian(X, beta))
        np.testing.assert_allclose(H, np_hessian(X, beta), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(H, H.T, atol=1e-15)
        normals = np.zeros((n * d, n))  # the normal directions x_i: the Hessian vanishes on them
        for i in range(n):
            normals[i * d:(i + 1) * d, i] = X[i]
        np.testing.assert_allclose(H @ normals, 0, atol=1e-14)
        # <v, Hess v> is the second derivative of E along the geodesic through X with velocity v
        for _ in range(3):
            V = rng.normal(size=X.shape)
            V -= X * np.sum(X * V, -1, keepdims=True)
            s = 1e-4
            fd = (np_energy(_geodesic(X, V, s), beta) - 2 * np_energy(X, beta) + np_energy(_geodesic(X, V, -s), beta))
            fd /= s * s
            assert V.reshape(-1) @ H @ V.reshape(-1) == pytest.approx(fd, rel=2e-5, abs=1e-9)


def test_the_spectrum_removes_exactly_the_rotations():
    """At two antipodal clusters on the circle (a critical point) the Hessian with the rotation has one eigenvalue,
    zero, more than without it, and its eigenvalues are those of the NumPy reference in tangent coordinates."""
    m, beta = 3, 2.0
    n = 2 * m
    X = np.array([[1.0, 0.0]] * m + [[-1.0, 0.0]] * m)
    full = en.hessian_spectrum(X, beta, rotations=True)
    quot = en.hessian_spectrum(X, beta)
    assert full.shape == (n,) and quot.shape == (n - 1,)
    zero = np.argmin(np.abs(full))
    assert abs(full[zero]) < 1e-15
    np.testing.assert_allclose(np.delete(full, zero), quot, atol=1e-15)
    # the reference: eigenvalues of the NumPy Hessian in tangent coordinates (the tangent of (±1, 0) is (0, 1))
    T = np.zeros((2 * n, n))
    for i in range(n):
        T[2 * i + 1, i] = 1.0
    ref = np.linalg.eigvalsh(T.T @ np_hessian(X, beta) @ T)
    np.testing.assert_allclose(full, ref, atol=1e-15)
    assert quot[-1] > 0 and quot[0] < 0  # a strict saddle: the clusters attract each other, tokens leave theirs


@pytest.mark.e2e
def test_classify_tells_saddles_from_maxima():
    rng = np.random.default_rng(2)
    two = np.array([[1.0, 0, 0]] * 3 + [[0.0, 1, 0]] * 2)  # two clusters at a right angle
    one = np.array([[0.0, 0.0, 1.0]] * 5)
    spread = _sphere(rng, 5, 3)
    kind = en.classify(np.stack([two, one, spread]), 4.0)
    assert kind.strict_saddle.tolist()[:2] == [True, False]
    assert kind.positive[1] == 0 and kind.negative[1] == 8  # one point: a local maximum, 5*2 - 2 rotations
    assert kind.gradient[1] == 0 and kind.gradient[2] > 1e-3  # a random configuration is not critical
    with pytest.raises(ConfigError, match="tol"):
        en.classify(two, 4.0, tol=2.0)
    with pytest.raises(ConfigError, match="d >= 2"):
        en.energy(np.ones((3, 1)), 1.0)
    with pytest.raises(ConfigError, match="beta"):
        en.energy(two, 0.0)


@pytest.mark.e2e
def test_classify_normalises_a_solver_state_first():
    """Two nearly antipodal clusters at β = 12 attract each other with a curvature 1e-10 of the largest: tokens
    whose norms are off by 4e-8 (a solver's tolerance) would turn it negative were they not normalised."""
    rng = np.random.default_rng(6)
    angles = np.r_[np.full(20, 0.0), np.full(12, np.radians(172.4))] + rng.normal(0, 1e-9, 32)
    X = np.stack([np.cos(angles), np.sin(angles)], 1)
    exact = en.classify(X, 12.0)
    assert exact.strict_saddle and 1e-11 < exact.lambda_max / -exact.lambda_min < 1e-9
    off = X * (1 + 4e-8 * rng.uniform(-1, 1, (32, 1)))
    kind = en.classify(off, 12.0)
    assert kind.strict_saddle and kind.lambda_max == pytest.approx(exact.lambda_max, rel=1e-3)


@pytest.mark.e2e
def test_energy_never_decreases_along_the_flow():
    X0 = ja.init_tokens(jax.random.key(0), 4, 6, 3, dtype=np.float64)
    ts = np.geomspace(0.01, 30.0, 40)
    sol = ja.solve(paper_model(np.eye(3)), X0, 30.0, beta=4.0, save=ja.Save(ts=ts, trajectory=True), rtol=1e-9,
                   atol=1e-11, dtype=np.float64)
    E = np.asarray(en.energy(np.asarray(sol.trajectory), 4.0))
    assert np.min(np.diff(E, axis=1)) > -1e-12 and np.all(E[:, -1] > E[:, 0])


# ---------------------------------------------------------------- plateaus and durations
TS = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 101)])  # 20 saved times per decade


def _staircase(levels, jumps, width=0.0):
    """A staircase on TS: ``levels[k]`` after ``jumps[k-1]``; the jumps smoothed over ``width`` (in ln t)."""
    y = np.full(TS.shape, float(levels[0]))
    lt = np.log(np.maximum(TS, 1e-300))
    for lo, hi, t in zip(levels[:-1], levels[1:], jumps, strict=True):
        y += (hi - lo) * (0.5 * (1 + np.tanh((lt - math.log(t)) / width)) if width else (t <= TS))
    return y


def test_plateaus_of_a_step_function():
    y = _staircase([0.2, 0.5, 1.0], [12.0, 1200.0])
    got = plateaus(TS, y, tol=1e-3)
    assert [round(p.level, 12) for p in got] == [0.2, 0.5, 1.0]
    assert [p.censored for p in got] == [False, False, True]
    first_after = lambda t: TS[t <= TS][0]
    last_before = lambda t: TS[t > TS][-1]
    assert [(p.t_start, p.t_end) for p in got] == [(0.0, last_before(12.0)), (first_after(12.0), last_before(1200.0)),
                                                   (first_after(1200.0), 1e4)]
    assert got[1].duration == last_before(1200.0) - first_after(12.0)


def test_plateaus_of_a_smooth_noisy_staircase_and_of_a_short_step():
    rng = np.random.default_rng(3)
    y = _staircase([0.1, 0.3, 0.35, 0.8], [3.0, 100.0, 2000.0], width=0.15) + rng.uniform(-2e-4, 2e-4, TS.shape)
    got = plateaus(TS, y, tol=1e-3, min_ratio=2.0)
    assert [round(p.level, 2) for p in got] == [0.1, 0.3, 0.35, 0.8]
    # a step lasting less than min_ratio in time is not a plateau
    short = _staircase([0.1, 0.3, 0.6], [10.5, 15.5])  # saved at 11.2, 12.6 and 14.1: a factor 1.26
    assert [round(p.level, 1) for p in plateaus(TS, short, tol=1e-3, min_ratio=2.0)] == [0.1, 0.6]
    assert [round(p.level, 1) for p in plateaus(TS, short, tol=1e-3, min_ratio=1.2)] == [0.1, 0.3, 0.6]
    # a steady climb has none; a NaN ends a run; tol 0 takes an exactly constant signal
    assert plateaus(TS[1:], np.log(TS[1:]), tol=1e-3) == []
    nan = np.where((TS > 50) & (TS < 60), np.nan, 0.5)
    assert len(plateaus(TS, nan, tol=0.0)) == 2
    for bad in (dict(tol=-1.0), dict(tol=1e-3, min_ratio=0.5)):
        with pytest.raises(ConfigError):
            plateaus(TS, y, **bad)
    with pytest.raises(ConfigError, match="increasing"):
        plateaus(TS[::-1], y, tol=1e-3)


def test_kaplan_meier_median():
    assert kaplan_meier_median([1.0, 2.0, 3.0, 4.0], [False] * 4) == 2.0  # S(2) = 1/2
    # 1: S = 3/4; 2 censored; 3: S = 3/4 * 1/2 = 3/8
    assert kaplan_meier_median([1.0, 2.0, 3.0, 4.0], [False, True, False, False]) == 3.0
    assert kaplan_meier_median([5.0, 5.0, 1.0], [True, True, False]) == math.inf
    assert math.isnan(kaplan_meier_median([], []))
    rng = np.random.default_rng(4)
    d = rng.exponential(10.0, 20001)
    assert kaplan_meier_median(d, np.zeros(d.size, bool)) == pytest.approx(np.median(d), rel=1e-3)
    # censoring at a fixed horizon beyond the median changes nothing
    assert kaplan_meier_median(np.minimum(d, 30.0), d > 30.0) == pytest.approx(np.median(d), rel=1e-3)


def test_rate_fit_recovers_an_exponential_and_prefers_it_to_a_power_law():
    rng = np.random.default_rng(5)
    rate = 0.7
    groups = []
    for b in (2.0, 4.0, 6.0, 8.0):
        d = rng.exponential(math.exp(rate * b), 400)
        groups.append((b, np.minimum(d, 300.0), d > 300.0))  # censored at 300 from beta = 8 on
    fit = rate_fit(groups, boot=200)
    assert fit.lo < rate < fit.hi and abs(fit.rate - rate) < 0.1 and fit.hi - fit.lo < 0.3
    assert fit.rss_exponential < fit.rss_power
    powers = [(b, rng.exponential(b**3, 400), np.zeros(400, bool)) for b in (1.0, 2.0, 4.0, 8.0, 16.0)]
    pf = rate_fit(powers, boot=50)
    assert pf.rss_power < pf.rss_exponential  # a power law is told from an exponential
    assert rate_fit(groups[:1]) is None
    p = power_fit([(b, rng.poisson(3 * b**0.5, 300) + 1e-9) for b in (1.0, 4.0, 16.0, 64.0)], boot=100)
    assert p.lo < 0.5 < p.hi


def test_condition_summary_of_a_constructed_run():
    n = 8
    y = _staircase([0.13, 0.25, 0.5, 1.0], [5.0, 80.0, 900.0])  # 2βE: clusters form, then 4 -> 2 -> 1 clusters
    counts = np.select([TS < 5.0, TS < 80.0, TS < 900.0], [8, 4, 2], 1)
    s = ms.condition_summary(TS, y, counts, n, flat_tol=0.1, min_ratio=2.0)
    assert [p[4] for p in s["plateaus"]] == [4, 2]  # the metastable plateaus and their clusters
    assert s["steps"] == [(4, 2), (2, 1)]
    t5, t900 = TS[TS >= 5.0][0], TS[TS >= 900.0][0]
    assert s["t_single"] == t900
    assert s["metastable_time"] == pytest.approx(t900 - t5) and not s["metastable_censored"]
    assert s["first_clusters"] == 4 and s["max_decrease"] == 0.0
    # without the last merge: censored at the last saved time
    s = ms.condition_summary(TS, np.minimum(y, 0.5), np.maximum(counts, 2), n, flat_tol=0.1, min_ratio=2.0)
    assert s["metastable_censored"] and s["metastable_time"] == pytest.approx(1e4 - t5) and s["t_single"] == math.inf


def test_linear_mode_against_a_direct_maximisation():
    from scipy.special import iv

    for beta in (0.5, 1.0, 3.0, 10.0, 40.0):
        k = np.arange(1, 60)
        assert ms.linear_mode(beta) == k[np.argmax(k * k * iv(k, beta))]
    assert abs(ms.linear_mode(800.0) - math.sqrt(1600)) <= 2  # k* ~ sqrt(2 beta)


# ---------------------------------------------------------------- the study
TINY = dict(dims=[2, 3], n=[5], betas=[2.0, 6.0], num=6, t1=60.0, saves=40, boot=20, classify=8, movie_beta=6.0)


def test_the_study_at_tiny_sizes(tmp_path):
    with x64_off():  # a user's session: the study runs in float64 in a scope and leaves the setting as it was
        tables = ms.run(tmp_path / "m", ms.Config(**TINY))
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert {"points.csv", "plateaus.csv", "energy.csv", "fits.csv", "claims.csv", "report.md", "config.json",
            "movie.gif", "trajectory.safetensors", "staircase.png", "dwell.png", "saddles_clusters.png"} <= files
    assert len(tables["points"]) == 4 and len(tables["energy"]) == 4 * 41
    for p in tables["points"]:
        assert p["conditions"] == 6 and p["solver_failures"] == 0
        assert p["max_energy_decrease"] < 1e-9
    # every classified plateau's Hessian, and the clusters counted at its end
    for r in tables["plateaus"]:
        assert 2 <= r["clusters"] < 5 and r["t_end"] > r["t_start"]
        if r["classified"]:
            assert r["lambda_min"] < 0
    assert {c["verdict"] for c in tables["claims"]} <= set(VERDICTS)
    assert ms.load_tables(tmp_path / "m")["claims"] == tables["claims"]
    from PIL import Image

    with Image.open(tmp_path / "m" / "movie.gif") as im:
        assert im.n_frames == 41 and im.size == (2 * 320, 340)


@pytest.mark.e2e
def test_d1_saves_its_logarithmic_grid_in_one_run(tmp_path):
    cfg = ms.Config(dims=[2], n=[4], betas=[4.0], num=3, t1=3000.0, t_min=1.0, saves=30, dynamics="D1", alpha=1.0,
                    boot=10, movie=False, figures=False).check()
    steps = ms.d1_steps(cfg)
    assert steps[0] == 0 and steps[1] == 1 and steps[-1] == 3000 and np.all(np.diff(steps) > 0)
    X0 = ja.init_tokens(jax.random.key(1), 3, 4, 2, dtype=np.float64)
    traj, ok = ms.trajectories(X0, 4.0, ms.time_grid(cfg), cfg)
    for i in (3, len(steps) - 1):  # the state saved at a step is the state simulate ends at after it
        ref = ja.simulate(paper_model(np.eye(2)), X0, int(steps[i]), alpha=1.0, beta=4.0, dtype=np.float64).final
        np.testing.assert_allclose(traj[:, i], np.asarray(ref), atol=1e-12)
    assert ok.all() and traj.shape == (3, len(steps), 4, 2)


def test_claims_can_fail():
    """The verdicts come from the checks (the project's verdicts, as the reproductions page's): tables that
    contradict a claim make it differ; too few plateaus leave it inconclusive; enough agreeing ones reproduce it."""
    point = {"n": 4, "d": 2, "beta": 2.0, "conditions": 10, "solver_failures": 0, "max_energy_decrease": 1e-3,
             "steps": 10, "steps_with_merge": 3, "steps_one_merge": 3, "classified": 10, "strict_saddles": 2,
             "controls": 5, "control_maxima": 5, "single_at_t1": 0.5}
    fits = [{"n": 4, "d": 2, "quantity": "dwell_2_clusters", "model": "exponential", "value": 0.1, "ci_low": -0.2,
             "ci_high": 0.4, "betas_used": "1 2 4", "rss_exponential": 1.0, "rss_power": 0.5},
            {"n": 4, "d": 2, "quantity": "first_clusters", "model": "power", "value": 0.0, "ci_low": -0.1,
             "ci_high": 0.1}]
    rows = ms.claims({"points": [point], "fits": fits})
    assert [c["verdict"] for c in rows] == ["differs"] * 5 + ["inconclusive"]
    assert rows[0]["checks"].startswith("✗ largest decrease of 2βE = 0.001 ≤ 1.00e-06")
    # 10 of 10 is not yet "almost all" at 95% (Wilson's lower end 0.72): undecided, not reproduced
    good = dict(point, max_energy_decrease=0.0, steps_with_merge=10, strict_saddles=10)
    fits = [dict(fits[0], ci_low=0.05), dict(fits[1], ci_low=0.2)]
    assert [c["verdict"] for c in ms.claims({"points": [good], "fits": fits})][:5] == \
        ["reproduced", "reproduced", "inconclusive", "inconclusive", "reproduced"]
    many = dict(good, steps=100, steps_with_merge=100, steps_one_merge=100, classified=100, strict_saddles=99,
                controls=50, control_maxima=50)
    assert [c["verdict"] for c in ms.claims({"points": [many], "fits": fits})][:5] == ["reproduced"] * 5
    # float32 dynamics: the decrease read as none is the float32 solver's
    assert ms.claims({"points": [dict(many, max_energy_decrease=1e-5)], "fits": fits}, dtype="float32")[0][
        "verdict"] == "reproduced"
    # with four betas an exponential must also fit better than a power law
    four = dict(fits[0], betas_used="1 2 4 8")
    assert ms.claims({"points": [many], "fits": [four, fits[1]]})[1]["verdict"] == "differs"
    assert ms.claims({"points": [many], "fits": [dict(four, rss_power=2.0), fits[1]]})[1]["verdict"] == "reproduced"
    # nothing to judge: undecided, with the reason
    empty = ms.claims({"points": [], "fits": []})
    assert [c["verdict"] for c in empty] == ["inconclusive"] * 6 and "no condition finished" in empty[0]["checks"]


@pytest.mark.parametrize("bad,match", [
    (dict(movie_beta=3.0), "movie_beta = 3 is not among betas"),
    (dict(movie=False), "movie_beta does nothing with movie = false"),
    (dict(t_min=100.0), "t_min = 100 must be below t1"),
    (dict(alpha=0.5), "alpha is the step of D1"),
    (dict(betas=[6.0, 6.0]), "betas: 6.0 is given twice"),
    (dict(dims=[1]), r"dims\[0\]: must be >= 2"),
    (dict(hessian_tol=1.0), "hessian_tol: must be in"),
])
def test_config_refusals(bad, match):
    with pytest.raises(ConfigError, match=match):
        ms.Config(**(TINY | bad)).check()


def test_the_summary_says_why_a_point_has_no_dwell(tmp_path, monkeypatch, capsys):
    """Issue 66: a point without a metastable plateau printed ``dwell (median) nan`` (and one whose Kaplan-Meier
    median is beyond the horizon ``inf``): the line says why instead."""
    row = {"n": 4, "d": 2, "beta": 3.0, "plateaus": 0, "dwell_median": math.nan, "strict_saddles": 0,
           "classified": 0, "single_at_t1": 1.0}
    rows = [row, dict(row, beta=1.0, plateaus=3, dwell_median=math.inf), dict(row, beta=2.0, plateaus=3,
                                                                             dwell_median=2.5)]
    monkeypatch.setattr(ms, "run", lambda out, config, progress=None: {"points": rows, "claims": []})
    assert main(["metastability", "--dims", "2", "--n", "4", "--betas", "1,2,3", "--no-figures", "--no-movie",
                 "--no-progress", "--out", str(tmp_path / "r")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "plateaus     0  dwell (median) none (no metastable plateau) " in lines[0]
    assert "dwell (median) longer than observed (censored at t1) " in lines[1]
    assert "dwell (median) 2.5        strict saddles" in lines[2]
    assert not any("nan" in line or "inf" in line for line in lines)


def test_the_command(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["metastability", "--dims", "2", "--n", "4", "--betas", "3", "--num", "3", "--t1", "20", "--saves", "20",
            "--boot", "10", "--no-figures", "--no-movie", "--no-progress", "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "n=4" in text and "report" in text
    assert json.loads((out / "config.json").read_text())["config"]["betas"] == [3.0]
    assert main(args) == 2  # a finished run is not replaced without --overwrite
    assert main([*args[:-2], "--out", str(tmp_path / "r2"), "--movie-beta", "5", "--movie"]) == 2
    assert not (tmp_path / "r2").exists()
    want = "jaxattn: error: --movie-beta 5 is not among betas 3: give one of them"
    assert capsys.readouterr().err.splitlines()[-1] == want
    # issue 66: the movie's beta without a movie changed nothing and was recorded; now it is refused, saying why
    assert main([*args[:-2], "--out", str(tmp_path / "r3"), "--movie-beta", "3"]) == 2
    assert not (tmp_path / "r3").exists()
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("jaxattn: error: --movie-beta does nothing with") and "movie" in err.split("with", 1)[1]
