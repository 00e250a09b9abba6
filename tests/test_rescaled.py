"""The rescaled clustering flow C3_RESCALED: no LAPACK call in the solver loop (issue 22: a d = 64 solve
deadlocked XLA's CPU thread pool) and no loss of accuracy with the conditioning of e^{tV} (issue 24)."""

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla

import jaxattn as ja
from jaxattn.analysis import clusters as cl
from jaxattn.cli import main
from jaxattn.dynamics.fields import MAX_SQUARINGS, expm
from jaxattn.errors import ConfigError
from jaxattn.sweeps._schema import validate_config

from .subprocess_env import one_device_env

ROOT = Path(__file__).resolve().parents[1]


def _similar(M, seed=0):
    """``S M S⁻¹`` for a random well-conditioned ``S``: same spectrum, non-orthogonal eigenvectors."""
    rng = np.random.default_rng(seed)
    S = np.eye(M.shape[0]) + 0.3 * rng.normal(size=M.shape)
    return S @ M @ np.linalg.inv(S)


# ----------------------------------------------------------------------------- e^{tF} by matrix products


@pytest.mark.e2e
def test_expm_matches_scipy_and_differentiates():
    rng = np.random.default_rng(0)
    for d in (2, 8, 64):
        F = rng.normal(size=(d, d)) / np.sqrt(d)
        A = np.stack([t * F for t in (0.0, 0.3, 2.0, 15.0, -15.0)])
        want = np.stack([sla.expm(a) for a in A])
        got = np.asarray(expm(jnp.asarray(A)))
        rel = np.abs(got - want).max(axis=(1, 2)) / np.abs(want).max(axis=(1, 2))
        assert rel.max() < 1e-13, rel
    # too many squarings needed: NaN (as jax.scipy.linalg.expm), not a silently wrong matrix
    assert np.isnan(np.asarray(expm(jnp.asarray(1e5 * np.eye(2))))).all()
    assert MAX_SQUARINGS >= 16
    # reverse mode, finite also at t = 0 (zero norm) and where squarings are masked off
    F = jnp.asarray(rng.normal(size=(4, 4)) / 2)
    g = jax.grad(lambda a: expm(a).sum())(F)
    E = np.zeros((4, 4))
    E[1, 2] = 1e-6
    fd = (sla.expm(np.asarray(F) + E).sum() - sla.expm(np.asarray(F) - E).sum()) / 2e-6
    np.testing.assert_allclose(float(g[1, 2]), fd, rtol=1e-7)
    dt0 = jax.grad(lambda t: expm(t * F).sum())(0.0)
    np.testing.assert_allclose(float(dt0), float(F.sum()), rtol=1e-12)


def test_rescaled_field_compiles_to_matrix_products_only():
    """No custom call (LAPACK's getrf of jax.scipy.linalg.expm) in the field: batched over the lanes of a
    vmapped solve, two of them waited on XLA's CPU thread pool for each other and the solve never returned."""
    model = ja.random_model(jax.random.key(0), d=16, heads=4, depth=2, shared=True)
    Z = ja.init_tokens(jax.random.key(1), 1, 5, 16)[0]
    for flow in (ja.C3_RESCALED, ja.Flow(space="flat", rescaled=True, attention="unnormalised")):
        hlo = jax.jit(lambda t, z, f=flow: ja.velocity(model, z, t, flow=f)).lower(2.0, Z).as_text()
        assert "custom_call" not in hlo
        hlo = jax.jit(jax.vmap(lambda t, z, f=flow: ja.velocity(model, z, t, flow=f))).lower(
            jnp.ones(3), jnp.stack([Z] * 3)).as_text()
        assert "custom_call" not in hlo


_ISSUE_22 = textwrap.dedent("""
    import os
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # XLA's CPU pool: two threads, as where it hung
    import jax, jaxattn as ja
    jax.config.update("jax_enable_x64", True)  # the rescaled flow runs in float64 only (issue 49)
    model = ja.random_model(jax.random.key(0), d=64, heads=4, depth=2, shared=True)
    X0 = ja.init_tokens(jax.random.key(1), 2, 10, 64, dtype="float64")
    sol = ja.solve(model, X0, t1=0.1, flow=ja.C3_RESCALED)
    print("ok", bool(sol.ok.all()))
""")


@pytest.mark.e2e
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")
def test_d64_solve_returns():
    """Issue 22's reproduction in a subprocess with a timeout: a regression fails instead of hanging."""
    env = one_device_env()
    try:
        proc = subprocess.run([sys.executable, "-c", _ISSUE_22], capture_output=True, text=True, timeout=180,
                              env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the d = 64 rescaled solve did not return within 180 s (issue 22: thread-pool deadlock)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ok", "True"], proc.stdout


# ----------------------------------------------------------------------------- accuracy at long horizons


def _euler(rhs, Z0, dt, steps, keep):
    Z, out = np.array(Z0, np.float64), {}
    for k in range(steps):
        Z = Z + dt * rhs(k * dt, Z)
        if k + 1 in keep:
            out[k + 1] = Z.copy()
    return out


def _paper_rhs(expm_t, V, Q, K, kernel):
    """The clustering paper's rescaled field (its eq. (4)), evaluated directly in float64:
    ż_i = Σ_j P_ij V z_j − V z_i (= Σ_j P_ij V (z_j − z_i) for softmax), P_ij = softmax_j <Q e^{tV} z_i,
    K e^{tV} z_j> or exp(<...>) / n (unnormalised)."""

    def rhs(t, Z):
        X = Z @ expm_t(t).T
        S = (X @ Q.T) @ (X @ K.T).T
        if kernel == "softmax":
            P = np.exp(S - S.max(1, keepdims=True))
            P /= P.sum(1, keepdims=True)
        else:
            P = np.exp(S) / len(Z)
        return (P @ Z - Z) @ V.T

    return rhs


def _departure(model, V, Q, K, Z0, dt, Ts, kernel, expm_t=None):
    """Largest |z_ours − z_direct| / max |z_direct| at each T of a fixed-step Euler run of both."""
    expm_t = expm_t or (lambda t: sla.expm(t * V))
    steps = [round(T / dt) for T in Ts]
    ref = _euler(_paper_rhs(expm_t, V, Q, K, kernel), Z0, dt, steps[-1], set(steps))
    flow = ja.Flow(space="flat", rescaled=True, attention=kernel)
    sol = ja.solve(model, Z0[None], Ts[-1], flow=flow, solver="euler", dt=dt,
                   save=ja.Save(ts=Ts, trajectory=True, observe=lambda t, X, ctx: {}), batch=ja.Batch(size=1))
    assert bool(sol.ok.all())
    got = np.asarray(sol.trajectory[0])
    return [np.abs(got[i] - ref[s]).max() / np.abs(ref[s]).max() for i, s in enumerate(steps)]


@pytest.mark.e2e
@pytest.mark.parametrize("kernel,qk", [("softmax", 1.0), ("unnormalised", 1e-9)])
def test_matches_direct_evaluation_at_t15_d2(kernel, qk):
    """The paper's 2-D value matrix (spectrum {1.35, −0.07}, cond e^{15V} ~ 1e9): the departure was 4e-9
    (softmax) and 2e-10 (unnormalised, Q = K = 1e-9 I so that exp of the scores stays finite) at T = 15,
    growing with ‖e^{tV}‖ ‖e^{−tV}‖; now rounding only."""
    V = _similar(np.diag([1.35, -0.07]))
    Q = K = qk * np.eye(2)
    Z0 = np.random.default_rng(1).normal(size=(8, 2))
    dep = _departure(cl.paper_model(V, Q, K), V, Q, K, Z0, 0.01, [5.0, 10.0, 15.0], kernel)
    assert max(dep) < 1e-13, dep


@pytest.mark.e2e
def test_matches_direct_evaluation_at_t15_d128():
    """The paper's notebook setting (d = 128, random Q, K, symmetric V) at T = 15: cond e^{15V} ~ 1e13."""
    d, n = 128, 12
    rng = np.random.default_rng(2)
    G = rng.normal(size=(d, d)) / np.sqrt(d)
    V = (G + G.T) / (2 * np.sqrt(2))  # spectrum about [−1, 1]
    Q, K = (rng.normal(size=(d, d)) / np.sqrt(d) for _ in range(2))
    lam, U = np.linalg.eigh(V)  # e^{tV} = U e^{tΛ} Uᵀ: exact to rounding for a symmetric V, and cheap
    dep = _departure(cl.paper_model(V, Q, K), V, Q, K, rng.normal(size=(n, d)), 0.25, [5.0, 10.0, 15.0],
                     "softmax", expm_t=lambda t: (U * np.exp(t * lam)) @ U.T)
    assert max(dep) < 5e-12, dep


@pytest.mark.e2e
def test_heads_that_attend_alike_lose_nothing():
    """Several heads with the same scores: ż_i = F (Σ_j a_ij z_j − z_i) exactly (the heads' difference
    term vanishes), whatever the value and output blocks of each head; T = 15, cond e^{15F} ~ 1e9."""
    F = _similar(np.diag([1.35, -0.07]), seed=3)
    q = np.array([[[[1.0, 0.3]], [[1.0, 0.3]]]])  # [G=1, H=2, d_h=1, d=2], the same for both heads
    v = F.reshape(1, 2, 1, 2)  # head h: row h of F
    o = np.eye(2).reshape(2, 2, 1)[None].transpose(0, 2, 1, 3)  # head h: column h of I, so Σ_h O_h V_h = F
    model = ja.model.params.from_heads(q, q, v, o, scale=1.0)
    np.testing.assert_allclose(np.asarray(ja.layer_matrices(model)[0]), F, atol=1e-15)
    Z0 = np.random.default_rng(4).normal(size=(8, 2))
    dep = _departure(model, F, q[0, 0], q[0, 0], Z0, 0.01, [5.0, 10.0, 15.0], "softmax")
    assert max(dep) < 1e-13, dep


@pytest.mark.e2e
def test_multi_head_with_biases_matches_the_general_form():
    """Several heads, biases, unnormalised kernel, small t (well conditioned): the rearranged field equals
    e^{−tF} u(e^{tF} z) − F z evaluated literally."""
    d, n, t = 6, 5, 0.7
    model = ja.random_model(jax.random.key(5), d, 3, 1, biases=True)
    lw = model.layers.take(0)
    F = np.asarray(ja.layer_matrices(model)[0])
    Z = np.asarray(ja.init_tokens(jax.random.key(6), 1, n, d, kind="gaussian", dtype=jnp.float64)[0])
    for kernel in ("softmax", "unnormalised"):
        flow = ja.Flow(space="flat", rescaled=True, attention=kernel, biases=True)
        X = Z @ sla.expm(t * F).T
        U = np.asarray(ja.model.attention.attend(jnp.asarray(X), lw, biases=True, attention=kernel))
        want = U @ sla.expm(-t * F).T - Z @ F.T
        got = np.asarray(ja.velocity(model, Z, t, flow=flow))
        np.testing.assert_allclose(got, want, atol=1e-12 * np.abs(want).max())


@pytest.mark.e2e
def test_field_is_differentiable_at_long_horizons():
    """jax.grad through the field w.r.t. the weights at t = 15 (masked squarings, scores ~1e9): finite and
    equal to central differences."""
    V = _similar(np.diag([1.35, -0.07]))
    Z = jnp.asarray(np.random.default_rng(7).normal(size=(6, 2)))
    model = cl.paper_model(V)

    def loss(scale):
        scaled = model.replace(layers=model.layers.replace(v=model.layers.v * scale))
        return jnp.sum(ja.velocity(scaled, Z, 15.0, flow=ja.C3_RESCALED) ** 2)

    g = float(jax.grad(loss)(1.0))
    fd = (float(loss(1.0 + 1e-7)) - float(loss(1.0 - 1e-7))) / 2e-7
    assert np.isfinite(g)
    np.testing.assert_allclose(g, fd, rtol=1e-5)


# ----------------------------------------------------------------------------- float32 refused, progress in time


@pytest.mark.e2e
def test_float32_is_refused_at_once():
    """Issue 49: in float32 the adaptive step of the rescaled flow shrank until max_steps (a random d = 8 model
    stalled near t = 7, minutes at the default max_steps = 100000): refused before anything is compiled, in one line
    saying why and what to give instead, whatever the kernel or the solver."""
    model = ja.random_model(jax.random.key(0), d=8, heads=4, depth=1, shared=True)
    X0 = ja.init_tokens(jax.random.key(1), 8, 10, 8)  # float32, as by default
    unnormalised = ja.Flow(space="flat", rescaled=True, attention="unnormalised")
    for flow, dtype, kw in ((ja.C3_RESCALED, None, {}), (ja.C3_RESCALED, "bfloat16", {}),
                            (unnormalised, "float32", {"solver": "euler", "dt": 0.1})):
        start = time.perf_counter()
        with pytest.raises(ConfigError, match=r"runs in float64 only \((float32|bfloat16) given\): .* max_steps; "
                                              r"pass dtype='float64'") as e:
            ja.solve(model, X0, 10.0, flow=flow, dtype=dtype, **kw)
        assert time.perf_counter() - start < 2.0
        assert "\n" not in str(e.value)
    # a configuration (solve's, a sweep's): any float32 point is refused before a store is written
    with pytest.raises(ConfigError, match=r"dynamics.rescaled runs in float64 only: .*; set dtype = 'float64'"):
        validate_config({"dtype": ["float64", "float32"], "dynamics": {"kind": "continuous", "space": "flat",
                                                                       "rescaled": True}})


def test_cli_refuses_float32_in_one_line(tmp_path, capsys):
    """`jaxattn solve --space flat --rescaled` (float32 by default) printed nothing for minutes; now one line naming
    --dtype float64, exit status 2, nothing written."""
    start = time.perf_counter()
    argv = ["solve", "--space", "flat", "--rescaled", "--d", "8", "--num-init", "8", "--out", str(tmp_path / "c3")]
    assert main(argv) == 2
    assert time.perf_counter() - start < 5.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxattn: error: --rescaled runs in float64 only: in float32 "), err
    assert err[0].endswith("set --dtype 'float64'") and "dynamics." not in err[0], err
    assert not (tmp_path / "c3").exists()


@pytest.mark.e2e
def test_readme_command_runs_and_shows_the_time_reached(tmp_path, capsys):
    """The README's command for the rescaled flow (it gives --dtype float64), made tiny, runs; its progress bar shows
    how far in time the solver has come, not only the chunks finished."""
    line = next(c for c in (ROOT / "README.md").read_text().splitlines() if "--rescaled" in c and "jaxattn" in c)
    argv = line.split("#")[0].split()[1:]
    assert argv[argv.index("--dtype") + 1] == "float64"
    argv[argv.index("--out") + 1] = str(tmp_path / "c3")
    tiny = ["--num-init", "4", "--n", "3", "--d", "4", "--heads", "2", "--t1", "2", "--saves", "3", "--progress"]
    assert main(argv + tiny) == 0
    err = capsys.readouterr().err
    assert re.search(r"t=[0-9.e-]+ of 2\b", err), err[-2000:]
    assert (tmp_path / "c3" / "summary.txt").read_text().count("4 of 4 solves succeeded") == 1


@pytest.mark.e2e
@pytest.mark.unchecked_types("progress=True on purpose: the user's one-line error")
def test_progress_reports_the_time_reached_and_changes_no_bit():
    """solve(progress=f): f gets the time reached (diffrax's progress meter, every 20 steps, the slowest condition of
    a block; a layered model: where each layer interval starts), and the numbers are the same bits without it."""
    model = ja.random_model(jax.random.key(2), d=4, heads=2, depth=3, shared=True)
    X0 = ja.init_tokens(jax.random.key(3), 3, 4, 4, dtype=jnp.float64)
    kw = dict(rtol=1e-10, atol=1e-10, batch=ja.Batch(size=2))  # two blocks of two
    seen: list[float] = []
    plain = ja.solve(model, X0, 3.0, **kw)
    shown = ja.solve(model, X0, 3.0, progress=seen.append, **kw)
    for a, b in zip(jax.tree_util.tree_leaves(plain), jax.tree_util.tree_leaves(shown), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(plain.num_steps.max()) > 40 and len(seen) >= 4, (plain.num_steps, seen)
    assert all(0.0 < t <= 3.0 for t in seen) and max(seen) > 1.0, seen
    # a layered model (solved interval by interval): the start of each interval
    layered = ja.random_model(jax.random.key(4), d=4, heads=2, depth=3, shared=False)
    seen.clear()
    ja.solve(layered, X0, 2.5, progress=seen.append, batch=ja.Batch(size=4))
    assert sorted(set(seen)) == [0.0, 1.0, 2.0, 2.5], seen  # 2.5: the padding intervals, empty
    # under jit the program runs after solve returns: nothing to report to, the program is the one without progress
    lowered = [jax.jit(lambda X, f=f: ja.solve(model, X, 3.0, progress=f, **kw).final).lower(X0).as_text()
               for f in (None, seen.append)]
    assert lowered[0] == lowered[1]
    with pytest.raises(ConfigError, match="progress must be a function"):
        ja.solve(model, X0, 1.0, progress=True)
