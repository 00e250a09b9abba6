"""Equilibria and stability (jaxattn.analysis.stability) against closed forms, and `jaxattn stability`."""

import csv
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from scipy.optimize import linear_sum_assignment

import jaxattn as ja
from jaxattn.analysis import stability as st
from jaxattn.cli import main
from jaxattn.studies import stability as study
from jaxattn.studies.skeleton import csv_text, md_cell

from .x64 import x64_off


def _csv_rows(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


#: The claims' figures study.claim_figures draws from a run's tables, in its order.
CLAIM_FIGURES = ("oja_starts.png", "beta_sweep.png", "negative_bipartite.png")


def _check_pngs(folder, names) -> None:
    """Every one of ``names`` in ``folder`` is a PNG image that PIL reads, of a figure's size."""
    for name in names:
        with Image.open(folder / name) as im:
            im.verify()
            assert im.format == "PNG" and im.width > 300 and im.height > 200, (name, im.size)


def _match(a, b) -> float:
    """Largest distance between two multisets of complex numbers after optimal pairing."""
    a, b = np.asarray(a, complex), np.asarray(b, complex)
    assert a.shape == b.shape
    cost = np.abs(a[:, None] - b[None, :])
    r, c = linear_sum_assignment(cost)
    return float(cost[r, c].max())


def _single_head(key, V, d):
    """A one-head model with O = I, random Q, K and the given value matrix (D2)."""
    m = ja.random_model(key, d, 1, unit_output=True)
    return m.replace(layers=m.layers.replace(v=jnp.asarray(V, jnp.float64)[None, None]))


def _goe(key, d):
    g = np.asarray(jax.random.normal(key, (d, d), jnp.float64)) / np.sqrt(d)
    return (g + g.T) / 2


def _consensus_errors(system, n, alpha):
    c = st.eigen_equilibria(system.layer_matrix(), n)
    keep = c.is_consensus & (st.residual(system, c.X) < 1e-10)
    lin = st.linearise(system, c.X[keep])
    errs = [_match(lin.eigenvalues[i], st.consensus_eigenvalues(c.eigvals, k, n, alpha=alpha))
            for i, k in enumerate(c.k[keep])]
    return errs, c.k[keep], lin


@pytest.mark.fast_cases('2')
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_consensus_jacobian_matches_closed_form(seed):
    key = jax.random.key(seed)
    d, n = 4, 3
    errs = []
    # random symmetric V: single head D2 (softmax), D3 (uniform), and the flows C2 / C2_OJA
    V = _goe(jax.random.fold_in(key, 1), d)
    m = _single_head(jax.random.fold_in(key, 2), V, d)
    for kind, alpha in [(ja.D1, 0.4), (ja.D3, 0.4), (ja.C2, None), (ja.C2_OJA, None)]:
        e, ks, _ = _consensus_errors(st.System(m, kind, alpha or 1.0, beta=2.0), n, alpha)
        assert len(ks) >= 3
        errs += e
    # non-symmetric F = Σ_h O_h V_h, two heads (D1 multi-head) and the multi-head flow
    m2 = ja.random_model(jax.random.fold_in(key, 3), d, 2)
    for kind, alpha in [(ja.D1, 0.3), (ja.D3, 0.3), (ja.C2, None)]:
        e, ks, _ = _consensus_errors(st.System(m2, kind, alpha or 1.0, beta=1.5), n, alpha)
        assert len(ks) >= 1  # real eigenvectors only
        errs += e
    assert max(errs) < 1e-10


@pytest.mark.e2e
def test_ambient_jacobian_and_extrinsic_modes():
    """At an equilibrium the ambient Jacobian maps into the tangent space (the normalisation, or the
    projection of a flow, removes the normal part), so its spectrum is the intrinsic one plus n zeros."""
    d, n = 3, 3
    m = ja.random_model(jax.random.key(5), d, 1, value="symmetric", spectrum=[1.0, 0.2, -0.4], unit_output=True)
    for kind in (ja.D1, ja.C2):
        sy = st.System(m, kind, 0.5)
        c = st.eigen_equilibria(sy.layer_matrix(), n)
        X = c.X[c.signs[:, 1] < 0][:1]  # a bipartite one
        lin = st.linearise(sy, X)
        assert lin.ambient.shape == (1, n * d, n * d) and lin.intrinsic.shape == (1, n * (d - 1), n * (d - 1))
        normal = np.zeros((n, n * d))
        for i in range(n):
            normal[i, i * d:(i + 1) * d] = X[0, i]
        assert np.abs(normal @ lin.ambient[0]).max() < 1e-12
        assert _match(lin.ambient_eigenvalues[0], np.concatenate([lin.eigenvalues[0], np.zeros(n)])) < 1e-10


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["D1", "D3"])
def test_only_principal_consensus_stable_below_the_step_bound(kind):
    d, n = 3, 3
    spec = np.array([1.0, 0.3, -2.5])
    bound = st.consensus_step_bound(spec)
    assert bound == pytest.approx(2 / 1.5)
    m = ja.random_model(jax.random.key(1), d, 1, value="symmetric", spectrum=spec, unit_output=True)
    dyn = getattr(ja, kind)
    below = st.System(m, dyn, 0.9 * bound)
    errs, ks, lin = _consensus_errors(below, n, 0.9 * bound)
    assert max(errs) < 1e-10
    # consensus at v3 is a 2-cycle (1 + αλ_3 < 0): not a fixed point, so not linearised
    assert set(ks.tolist()) == {0, 1}
    assert lin.stable.tolist() == [k == 0 for k in ks]
    above = st.System(m, dyn, 1.1 * bound)
    errs, ks, lin = _consensus_errors(above, n, 1.1 * bound)
    assert max(errs) < 1e-10 and 0 in ks.tolist()
    assert not lin.stable.any()
    assert lin.growth[ks.tolist().index(0)] > 1  # a common mode (1 + αλ_3)/(1 + αλ_1) < −1
    # the flow: only the principal consensus, for any step
    _, ks, lin = _consensus_errors(st.System(m, ja.C2 if kind == "D1" else ja.C2_OJA), n, None)
    assert lin.stable.tolist() == [k == 0 for k in ks] and len(ks) == d


def test_attention_rank_at_consensus_and_bipartite():
    d, n = 4, 5
    m = _single_head(jax.random.key(3), _goe(jax.random.key(4), d), d)
    sy = st.System(m, ja.D1, 0.5, beta=2.0)
    c = st.eigen_equilibria(sy.layer_matrix(), n)
    for X, cons in zip(c.X, c.is_consensus, strict=True):
        assert st.attention_rank(sy, X).tolist() == [1 if cons else 2]


@pytest.mark.e2e
def test_single_head_conditions_agree_with_the_jacobian():
    """Every consensus and bipartite equilibrium of 100 random symmetric V (d <= 6, several n): the
    closed-form conditions and the numerical Jacobian say the same (and the eigenvalues match)."""
    rng = np.random.default_rng(0)
    shapes = [(2, 3), (3, 4), (4, 2), (5, 3), (3, 6)]
    agree = total = stable = bip_stable = not_fixed = 0
    worst = 0.0
    for idx in range(100):
        n, d = shapes[idx % len(shapes)]
        key = jax.random.key(100 + idx)
        V = _goe(jax.random.fold_in(key, 0), d)
        m = _single_head(jax.random.fold_in(key, 1), V, d)
        discrete = not (idx % 5 in (1, 3) and (idx // 5) % 2)  # a fifth of them as flows (two shapes)
        sy = st.System(m, ja.D1 if discrete else ja.C2, float(rng.uniform(0.2, 1.0)), float(rng.uniform(0.5, 6.0)))
        c = st.eigen_equilibria(sy.layer_matrix(), n)
        r = st.residual(sy, c.X)
        an = [st.single_head_conditions(sy, int(k), s) for k, s in zip(c.k, c.signs, strict=True)]
        fixed = np.array([a.fixed_point for a in an])
        assert np.array_equal(fixed, r < 1e-10)  # the fixed-point condition is exactly the residual test
        not_fixed += int((~fixed).sum())
        lin = st.linearise(sy, c.X[fixed])
        for j, i in enumerate(np.flatnonzero(fixed)):
            worst = max(worst, _match(an[i].eigenvalues, lin.eigenvalues[j]))
            agree += an[i].stable == bool(lin.stable[j])
            total += 1
            stable += bool(lin.stable[j])
            bip_stable += bool(lin.stable[j]) and not c.is_consensus[i]
        assert not np.any(lin.status == "marginal")
    assert agree == total and total > 1000
    assert worst < 1e-8  # repeated eigenvalues of a non-normal Jacobian split by ~sqrt(eps) * scale
    assert bip_stable > 0 and stable > bip_stable  # stable bipartite equilibria exist, and consensus ones
    print(f"agreement {agree}/{total}, stable {stable} (bipartite {bip_stable}), not fixed {not_fixed}, "
          f"max eigenvalue error {worst:.1e}")


@pytest.mark.e2e
def test_refine_returns_to_the_equilibrium():
    d, n = 3, 4
    m = _single_head(jax.random.key(7), _goe(jax.random.key(8), d), d)
    sy = st.System(m, ja.D1, 0.5, beta=2.0)
    c = st.eigen_equilibria(sy.layer_matrix(), n)
    X = np.asarray(c.X[5])
    noisy = X + 1e-3 * np.random.default_rng(1).normal(size=X.shape)
    noisy /= np.linalg.norm(noisy, axis=-1, keepdims=True)
    assert st.residual(sy, noisy)[0] > 1e-5
    res = st.refine(sy, noisy)
    assert res.converged and res.residual < 1e-11 and np.abs(res.X - X).max() < 1e-9
    # a continuum of equilibria (polygons of D3, mean zero): the SVD step still lands on one
    oja = st.System(m, ja.D3, 0.5)
    P = np.asarray(st.polygon(5, np.eye(d)[:, :2]))
    assert st.residual(oja, P)[0] < 1e-12
    noisy = P + 1e-3 * np.random.default_rng(2).normal(size=P.shape)
    noisy /= np.linalg.norm(noisy, axis=-1, keepdims=True)
    res = st.refine(oja, noisy)
    assert res.converged and res.residual < 1e-11  # 1.36e-12 seen (also on 0acc6a6)
    assert st.classify(oja, res.X[None])[0].kind == "polygonal"


@pytest.mark.e2e
def test_constructors_and_classifier_labels():
    d, n = 3, 4
    m = ja.random_model(jax.random.key(2), d, 1, value="symmetric", spectrum=[1.0, 0.4, -0.3], unit_output=True)
    sy = st.System(m, ja.D3, 0.5)
    vec = np.linalg.eigh(sy.layer_matrix())[1]
    v1, v2 = vec[:, -1], vec[:, -2]
    assert sign_flip_free(st.sign_patterns(4))
    labels = [t.kind for t in st.classify(sy, np.stack([
        st.consensus(v1, n), st.consensus(v2, n, -1), st.bipartite(v2, [1, -1, 1, 1]),
        st.polygon(n, vec[:, :2]), st.clustering(np.eye(d)[:2], [0, 1, 0, 1])]))]
    assert labels == ["consensus", "consensus", "bipartite", "polygonal", "not converged"]
    t = st.classify(sy, st.bipartite(v2, [1, -1, 1, 1])[None])[0]
    assert t.k == 2 and t.split == (3, 1) and t.group == "bipartite v2 3|1"


def sign_flip_free(p):
    return p.shape == (8, 4) and np.all(p[:, 0] == 1) and len({tuple(r) for r in p}) == 8


@pytest.mark.e2e
def test_basins_single_attractor_and_chunking():
    d, n = 3, 4
    m = ja.random_model(jax.random.key(4), d, 1, value="symmetric", spectrum=[1.0, 0.2, -0.3], unit_output=True)
    sy = st.System(m, ja.D3, 1.0)
    key = jax.random.key(11)
    a = st.basins(sy, 50, n, key, chunk=7, steps=200)
    b = st.basins(sy, 50, n, key, chunk=50, steps=200)
    assert a.table == b.table
    assert [t.label for t in a.terminals] == [t.label for t in b.terminals]
    top = a.table[0]
    assert top["end"] == "consensus v1" and top["count"] >= 0.99 * 50
    assert top["ci_low"] < top["fraction"] <= top["ci_high"]
    assert {t.label for t in a.terminals} <= {"consensus +v1", "consensus -v1"}


def test_bad_input_is_refused():
    d, n = 3, 3
    m = ja.random_model(jax.random.key(0), d, 1, value="symmetric", spectrum=[1.0, 0.2, -0.3], unit_output=True)
    sy = st.System(m, ja.D1, 0.5)
    X = np.asarray(st.consensus(np.eye(d)[0], n))
    with pytest.raises(ja.ConfigError, match="off the unit sphere"):
        st.linearise(sy, 2 * X)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ja.ConfigError, match="non-finite"):
        st.linearise(sy, bad)
    with pytest.raises(ja.ConfigError, match="not an equilibrium"):
        st.linearise(sy, X)  # e_1 is not an eigenvector of this V
    with pytest.raises(ja.ConfigError, match="time-invariant"):
        st.System(ja.random_model(jax.random.key(0), d, 1, 2, shared=False), ja.D1)
    with pytest.raises(ja.ConfigError, match="unit sphere"):
        st.System(m, ja.D4)
    with pytest.raises(ja.ConfigError, match="finite"):
        st.System(m, ja.D1, float("nan"))


def test_stability_cli_writes_a_complete_run(tmp_path, capsys):
    out = tmp_path / "s"
    with x64_off():
        rc = main(["stability", "--out", str(out), "--tokens", "3,4", "--models", "3", "--basin-num", "12",
                   "--basin-n", "4", "--perturb-num", "3", "--search", "30", "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "counts.csv", "counts_summary.csv", "basins.csv", "trajectories.csv", "report.md"} <= names
    assert any(n.endswith(".png") for n in names)
    for png in (n for n in names if n.endswith(".png")):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    counts = _csv_rows(out / "counts.csv")
    assert len(counts) == 2 * 2 * 3  # time x n x models
    assert all(r["agree"] == r["candidates"] for r in counts)  # analytic == numerical for every equilibrium
    assert all(int(r["stable"]) >= 1 for r in counts)  # the principal consensus at least
    summary = _csv_rows(out / "counts_summary.csv")
    report = (out / "report.md").read_text()
    for r in summary:
        assert f"| {r['time']} | {r['n']} | {r['mode']} | {float(r['mean_stable']):.2f} |" in report
    basins = _csv_rows(out / "basins.csv")
    for t in ("discrete", "continuous"):
        rows = [r for r in basins if r["time"] == t]
        assert sum(int(r["count"]) for r in rows) == 12
        assert sum(int(r["count"]) for r in rows if r["end"] != "not converged") >= 10  # the runs reach their ends
        assert all(float(r["ci_low"]) <= float(r["fraction"]) <= float(r["ci_high"]) for r in rows)
    perturbation = _csv_rows(out / "perturbation.csv")
    assert int(perturbation[0]["returned"]) == int(perturbation[0]["total"])  # a small perturbation returns
    for r in basins:
        assert f"| {r['time']} | {md_cell(r['end'])} | {r['count']} |" in report  # '|' escaped in a cell
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["command"] == "stability" and cfg["config"]["models"] == 3 and "versions" in cfg
    # the claims' figures drawn from the tables (no Oja starts, no β sweep here: the negative bipartite counts only),
    # listed in the report, and the same drawn again from a copy of the run made without its figures
    wrote = names & set(CLAIM_FIGURES)
    assert wrote == {"negative_bipartite.png"} and "![negative_bipartite.png](negative_bipartite.png)" in report
    old = tmp_path / "old"
    shutil.copytree(out, old, ignore=shutil.ignore_patterns("*.png"))
    assert set(study.claim_figures(old)) == wrote and wrote <= {p.name for p in old.iterdir()}


@pytest.mark.e2e
def test_stability_random_starts_and_the_beta_sweep(tmp_path, capsys):
    """The multi-head and Oja models of the counts run from random starts, and the β sweep: near the Oja limit
    (β = 0.01, uniform attention) the principal consensus is the only stable equilibrium of every model (Theorem 2),
    the Oja system's random starts end at ±v1, and the sweep's rows are the counts at each β (count_stable at that
    β, recomputed here)."""
    out = tmp_path / "s"
    with x64_off():
        rc = main(["stability", "--out", str(out), "--tokens", "4", "--models", "3", "--basin-num", "4",
                   "--basin-n", "4", "--perturb-num", "2", "--search", "3", "--time", "discrete", "--steps", "400",
                   "--multi-head-models", "2", "--oja", "--basin-models", "2", "--basin-starts", "16",
                   "--beta-sweep-models", "3", "--beta-sweep", "0.01,16", "--beta-sweep-n", "4", "--no-figures",
                   "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    sweep = _csv_rows(out / "beta_sweep.csv")
    assert [(float(r["beta"]), int(r["model"])) for r in sweep] == [(b, i) for b in (0.01, 16.0) for i in range(3)]
    low = [r for r in sweep if float(r["beta"]) == 0.01]
    assert all(r["stable"] == "1" and r["stable_consensus_v1"] == "1" for r in low), low
    assert all(0 <= int(r["stable_bipartite_negative"]) <= int(r["bipartite_negative"]) for r in sweep)
    cfg = study.StabilityConfig(d=3, tokens=[4], models=3, beta=16.0, time="discrete")  # float64: the conftest's
    pats, _ = study._patterns(4, cfg, jax.random.fold_in(jax.random.key(0), 10_004))
    m = study.random_symmetric_single_head(jax.random.fold_in(jax.random.fold_in(jax.random.key(0), 4), 1), 3)
    row, *_ = study.count_stable(m, 4, "discrete", cfg, pats)
    again = next(r for r in sweep if float(r["beta"]) == 16.0 and r["model"] == "1")
    assert {k: str(v) for k, v in row.items() if k in ("stable", "candidates", "stable_bipartite_other")} == {
        k: again[k] for k in ("stable", "candidates", "stable_bipartite_other")}
    for name, models in (("oja_basins", 2), ("multi_head_basins", 2)):
        ends = _csv_rows(out / f"{name}.csv")
        assert {int(r["model"]) for r in ends} == set(range(models))
        assert all(sum(int(r["count"]) for r in ends if r["model"] == str(i)) == 16 for i in range(models))
    oja = _csv_rows(out / "oja_basins.csv")
    assert sum(int(r["count"]) for r in oja if r["kind"] == "consensus" and r["eigenvector"] == "1") >= 30, oja
    report = (out / "report.md").read_text()
    assert "## The stable equilibria against β" in report and "## Where random starts end in the Oja system" in report
    # --no-figures: none in the run; every claim's figure drawn from its tables into another folder
    assert not list(out.glob("*.png"))
    assert study.claim_figures(out, tmp_path / "drawn") == list(CLAIM_FIGURES)
    _check_pngs(tmp_path / "drawn", CLAIM_FIGURES)
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize("args,match", [
    (["--models", "0"], "--models: must be > 0"),
    (["--tokens", "3,x"], "argument --tokens: expected int, got 'x'"),
    (["--tokens", "3,65"], "--tokens[1]: must be between 2 and 64"),
    (["--d", "1"], "--d: must be >= 2 (tokens on a sphere)"),
    (["--alpha", "nan"], "--alpha: must be finite"),
    (["--time", "sometimes"], "argument --time: invalid choice"),
    (["--multi-head-models", "2", "--heads", "2"], "--heads 2 must divide --d 3 for the multi-head counts"),
    (["--basin-models", "-1"], "--basin-models: must be >= 0"),
    (["--beta-sweep-models", "2", "--beta-sweep", "1,0"], "--beta-sweep[1]: must be > 0"),
    (["--beta-sweep", "1,2"], "--beta-sweep does nothing with --beta-sweep-models 0"),
])
def test_stability_cli_bad_input(tmp_path, capsys, args, match):
    out = tmp_path / "s"
    try:
        rc = main(["stability", "--out", str(out), "--no-progress", *args])
    except SystemExit as e:  # argparse: a value that is not of the option's type or choices
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("jaxattn: error:") and match in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.e2e  # 16 linearisations compiled: about 12 s
def test_a_bipartite_consensus_at_a_negative_eigenvalue_is_stable_only_where_tokens_weigh_the_other_group_more():
    """Remark 10 of the power-method paper's supplement: at a negative eigenvalue λ, 1 + αλc > 1 needs the group's
    net weight c < 0. Where w = β vᵀQᵀKv ≥ 0 the larger group has c > 0, so no such equilibrium is stable (map and
    flow); with w < 0 some are (model 7 below), and the Jacobian says so, not only the closed form."""
    cfg = study.StabilityConfig(d=3, tokens=[4], models=8, alpha=0.5, beta=4.0)
    pats, _ = study._patterns(4, cfg, jax.random.key(0))
    totals = np.zeros(4, int)
    for i in range(8):
        m = study.random_symmetric_single_head(jax.random.fold_in(jax.random.key(0), i), 3)
        for time in ("discrete", "continuous"):
            row, cand, lin, an = study.count_stable(m, 4, time, cfg, pats)
            negative = (cand.eigvals.real[cand.k] < 0) & ~cand.is_consensus
            w = np.array([a.w for a in an])
            assert row["stable_bipartite_negative"] == int((lin.stable & negative).sum())
            assert row["stable_bipartite_negative_w_nonneg"] == int((lin.stable & negative & (w >= 0)).sum())
            totals += [row["bipartite_negative"], row["stable_bipartite_negative"],
                       row["bipartite_negative_w_nonneg"], row["stable_bipartite_negative_w_nonneg"]]
    assert totals[2] > 0 and totals[3] == 0, totals  # w >= 0: counted, never stable
    assert totals[1] > 0, totals  # w < 0: stable ones exist


def _counted(n: int, model: int, lambda_1: float = 1.0, alpha_bound: float = float("inf"), stable: int = 1,
             **counts) -> dict:
    """One row of the counts' tables (count_stable's columns) for the map: the principal consensus stable, ``counts``
    in place of the zeros."""
    row = {"model": model, "mode": "exhaustive", "time": "discrete", "n": n, "lambda_1": lambda_1, "lambda_d": -0.5,
           "alpha_bound": alpha_bound, "candidates": 12, "not_fixed": 0, "stable": stable,
           "stable_consensus": 1, "stable_bipartite": stable - 1, "stable_consensus_v1": 1,
           "stable_consensus_other": 0, "stable_bipartite_v1": 0, "stable_bipartite_other": stable - 1,
           "analytic_stable": stable, "agree": 12, "marginal": 0, "bipartite_negative": 3,
           "stable_bipartite_negative": 0, "bipartite_negative_w_nonneg": 2, "stable_bipartite_negative_w_nonneg": 0}
    return {**row, **counts}


def _tables(run, alpha: float = 0.5, bound: float = float("inf")) -> None:
    """A small finished run's tables, as the study writes them, with the map's step ``alpha`` and step bound ``bound``:
    counts at n = 3, 4 (one model beyond a step bound 0.4, one with a stable bipartite equilibrium at a negative
    eigenvalue where w < 0), the Oja counts and random starts (model 1 at n = 4 beyond a step bound 0.4), and a β sweep
    (one model with λ1 < 0)."""
    run.mkdir(parents=True, exist_ok=True)
    counts = [_counted(3, 0, alpha_bound=bound),
              _counted(3, 1, alpha_bound=bound, stable=2, stable_bipartite_negative=1),
              _counted(4, 0, alpha_bound=bound),
              _counted(4, 1, alpha_bound=0.4, stable=3, stable_bipartite_negative=2)]
    oja = [_counted(n, i, alpha_bound=0.4 if (n, i) == (4, 1) else bound) for n in (3, 4) for i in (0, 1)]
    ends = [{"n": n, "model": i, "heads": 1, "end": end, "kind": kind, "eigenvector": k, "count": c, "starts": 8,
             "fraction": c / 8, "ci_low": 0.0, "ci_high": 1.0}
            for n in (3, 4) for i in (0, 1)
            for end, kind, k, c in (("consensus v1", "consensus", 1, 6), ("bipartite v2 2|1", "bipartite", 2, 1),
                                    ("not converged", "not converged", 0, 1))]
    sweep = [{"beta": b, **_counted(4, i, lambda_1=1.0 if i < 2 else -0.1, alpha_bound=bound,
                                    stable=1 if b < 1 else 1 + i)}
             for b in (0.05, 1.0, 16.0) for i in range(3)]
    for name, rows in (("counts", counts), ("oja_counts", oja), ("oja_basins", ends), ("beta_sweep", sweep)):
        (run / f"{name}.csv").write_text(csv_text(rows))
    (run / "config.json").write_text(json.dumps({"command": "stability", "config": {"alpha": alpha}}))


def test_claim_figures_are_drawn_from_a_runs_tables(tmp_path):
    """Each claim's figure from the tables of a finished run into another folder (the run left as it was); a missing
    table leaves its figure out and draws the others; an earlier version's counts without the negative-eigenvalue
    columns draw no negative_bipartite.png; cases all outside the assumptions draw nothing."""
    run = tmp_path / "run"
    _tables(run)
    before = sorted(p.name for p in run.iterdir())
    assert study.claim_figures(run, tmp_path / "all") == list(CLAIM_FIGURES)
    _check_pngs(tmp_path / "all", CLAIM_FIGURES)
    assert sorted(p.name for p in run.iterdir()) == before
    for table, figure in (("oja_basins.csv", "oja_starts.png"), ("beta_sweep.csv", "beta_sweep.png"),
                          ("counts.csv", "negative_bipartite.png")):
        if figure == "oja_starts.png":
            (run / table).write_text("")  # an empty table: left out as a missing one
        else:
            (run / table).unlink()
        rest = [f for f in CLAIM_FIGURES if f != figure]
        assert study.claim_figures(run, tmp_path / f"without-{figure}") == rest, table
        assert sorted(p.name for p in (tmp_path / f"without-{figure}").iterdir()) == sorted(rest)
        _tables(run)
    earlier = [{k: v for k, v in r.items() if "negative" not in k} for r in _csv_rows(run / "counts.csv")]
    (run / "counts.csv").write_text(csv_text(earlier))
    assert study.claim_figures(run, tmp_path / "earlier") == ["oja_starts.png", "beta_sweep.png"]
    _tables(run, alpha=2.0, bound=1.0)  # every case beyond its step bound: none left to draw
    (run / "beta_sweep.csv").unlink()
    assert study.claim_figures(run, tmp_path / "outside") == []
    assert study.claim_figures(tmp_path / "nothing", tmp_path / "none") == []
