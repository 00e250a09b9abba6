"""The library and the command line agree: one home for each check, one error type, and the command line
reaches what the library does (issue 20)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.cli import main
from jaxattn.errors import ConfigError, JaxattnError, real
from jaxattn.io.results import load_arrays
from jaxattn.model import attention


def _tiny():
    return ja.random_model(jax.random.key(0), 4, 1, 2), ja.init_tokens(jax.random.key(1), 2, 3, 4)


@pytest.mark.parametrize("dyn,what", [
    (ja.Dynamics(norm="layernorm"), "LayerNorm"),
    (ja.Dynamics(biases=True), "no biases"),
    (ja.Dynamics(pre_ln=True), "pre-norm models"),
])
def test_simulate_refuses_what_the_model_lacks(dyn, what):
    """The random model has no LayerNorm, biases or pre-norm: the library refuses as the command line does."""
    model, X0 = _tiny()
    with pytest.raises(ConfigError, match=what):
        ja.simulate(model, X0, 2, dynamics=dyn)


def test_attention_kind_errors_are_config_errors(tmp_path, capsys, monkeypatch):
    model, X0 = _tiny()
    with pytest.raises(ConfigError, match="attention must be one of"):
        attention.probabilities(X0[0], model.layers.take(0), attention="sparsemax")
    # the command line's handler catches it: one line, exit 2

    def bad(*a, **k):
        return attention.probabilities(X0[0], model.layers.take(0), attention="sparsemax")

    monkeypatch.setattr("jaxattn.cli.simulate.load_model_arg", bad)
    assert main(["simulate", "--num-init", "2", "--n", "3", "--d", "4", "--heads", "1", "--depth", "1",
                 "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jaxattn: error: attention must be one of"), err


@pytest.mark.parametrize("value,positive,ok", [
    (1.5, False, True), (np.float32(2.0), True, True), (jnp.asarray(3.0), True, True), (0.0, False, True),
    (0.0, True, False), (-1.0, True, False), (float("nan"), False, False), (float("inf"), True, False),
    (True, False, False), ("1.5", False, False), (np.ones(2), False, False), (None, False, False),
])
def test_real_is_the_one_number_check(value, positive, ok):
    if ok:
        assert real("x", value, positive=positive) == float(value)
    else:
        with pytest.raises(ConfigError, match="x must be a finite number"):
            real("x", value, positive=positive)
    with pytest.raises(JaxattnError, match="--y must be a finite number > 0, got -2"):
        real("--y", -2, positive=True, error=JaxattnError)


@pytest.mark.parametrize("make,match", [
    (lambda: ja.model.rope.Rope(dim=2, theta=-1.0), "RoPE theta must be a finite number > 0"),
    (lambda: ja.model.rope.Rope(dim=2, kind="linear", factor=float("nan")),
     "RoPE scaling 'linear' must be a finite number > 0"),
    (lambda: ja.spectrum(np.eye(2), alpha=float("inf")), "alpha must be a finite number"),
])
def test_checks_written_once_say_the_same(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


@pytest.mark.e2e
def test_simulate_command_reaches_the_kernel_and_scale(tmp_path, capsys):
    """``--attention unnormalised --scale 1``: the numbers are the library's with the same kernel and scale, and
    differ from the default run's."""
    common = ["--num-init", "3", "--n", "4", "--d", "4", "--heads", "1", "--depth", "2", "--seed", "5",
              "--dtype", "float64", "--no-progress", "--keep-final"]
    assert main(["simulate", *common, "--attention", "unnormalised", "--scale", "1", "--out", str(tmp_path / "a")]) == 0
    assert main(["simulate", *common, "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert "attention=unnormalised" in (tmp_path / "a" / "summary.txt").read_text()
    assert "attention=" not in (tmp_path / "b" / "summary.txt").read_text()
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())["config"]
    assert cfg["attention"] == "unnormalised" and cfg["scale"] == 1.0
    got = load_arrays(tmp_path / "a" / "observables.safetensors")["final"]
    default = load_arrays(tmp_path / "b" / "observables.safetensors")["final"]
    model = ja.model.sampling.seeded_model(5, 4, 1, 2, scale=1.0)
    assert float(model.layers.scale[0]) == 1.0
    X0 = ja.init_tokens(jax.random.key(5), 3, 4, 4, dtype=jnp.float64)
    want = ja.simulate(model, X0, 2, dynamics=ja.Dynamics(attention="unnormalised"), dtype=jnp.float64).final
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-12)
    assert not np.allclose(got, default)


@pytest.mark.parametrize("argv,msg", [
    (["--scale", "0"], "--scale: must be > 0, got 0"),
    (["--attention", "sparsemax"], "invalid choice"),
    (["--norm", "layernorm"], "no LayerNorm weights"),
    (["--attention", "uniform", "--scale", "1"], "--scale does nothing with --attention uniform"),
])
def test_simulate_command_refuses_in_one_line(argv, msg, tmp_path, capsys):
    try:
        rc = main(["simulate", *argv, "--num-init", "2", "--n", "3", "--out", str(tmp_path / "o")])
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err, err
    assert not (tmp_path / "o").exists()


def test_replayed_uniform_attention_runs_stay_uniform():
    """A config.json written before --attention (``uniform_attention: true``) replays as ``--attention uniform``."""
    from jaxattn.cli._config import replayed
    from jaxattn.cli.simulate import SIM_DEFAULTS

    cfg = replayed({"config": {"uniform_attention": True, "model": "random"}}, SIM_DEFAULTS)
    assert cfg["attention"] == "uniform"


def test_uniform_attention_has_one_name():
    """``attention='uniform'`` is the one way to say it: no ``uniform`` synonym on Dynamics or the kernels."""
    with pytest.raises(TypeError):
        ja.Dynamics(uniform=True)  # type: ignore[call-arg]
    model, X0 = _tiny()
    with pytest.raises(TypeError):
        attention.probabilities(X0[0], model.layers.take(0), uniform=True)  # type: ignore[call-arg]
    assert ja.Dynamics(attention="uniform") == ja.D3


@pytest.mark.e2e
def test_sweep_grid_leaves_x64_as_it_found_it(tmp_path):
    """A float64 grid point runs in float64 without switching x64 on for the rest of the caller's process (a
    fresh interpreter: the tests' own process runs with x64 on)."""
    import os
    import subprocess
    import sys

    code = f"""
import jax, numpy as np, jaxattn as ja
cfg = {{"num_init": 2, "chunk": 2, "dtype": "float64", "init": {{"n": 3}},
        "model": {{"source": "random", "d": 4, "heads": 1, "depth": 1}}}}
sw = ja.sweep_grid(cfg, {str(tmp_path / "grid")!r}, progress=False)
print(jax.config.jax_enable_x64, jax.numpy.ones(1).dtype, sw.arrays(0)["observables.diameter"].dtype)
"""
    env = {**os.environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "float32", "float64"]  # the point ran in float64, x64 is off again


def _d2_step(X, Q, K, V, s, alpha, beta):
    """D2 (the power-method paper, Appendix D, eq (8)), loops in NumPy:
    ``x_i <- N(x_i + α Σ_j softmax_j(β s <Q x_i, K x_j>) V x_j)``."""
    n = X.shape[0]
    Y = np.empty_like(X)
    for i in range(n):
        e = np.array([beta * s * (Q @ X[i]) @ (K @ X[j]) for j in range(n)])
        a = np.exp(e - e.max())
        a /= a.sum()
        y = X[i] + alpha * sum(a[j] * (V @ X[j]) for j in range(n))
        Y[i] = y / np.linalg.norm(y)
    return Y


@pytest.mark.e2e
def test_d2_is_named_and_steps_like_the_paper():
    """``ja.D2`` (between D1 and D3) runs the single-head map with ``O = I``, step for step as eq (8), and refuses
    a model that is not single-head with ``O = I``."""
    d, n = 4, 5
    model = ja.random_model(jax.random.key(7), d, heads=1, depth=3, shared=False, unit_output=True,
                            dtype=jnp.float64)
    X0 = ja.init_tokens(jax.random.key(8), 2, n, d, dtype=jnp.float64)
    res = ja.simulate(model, X0, 3, dynamics=ja.D2, alpha=0.7, beta=1.3, save=ja.Save(trajectory=True),
                      dtype=jnp.float64)
    lay = model.layers
    for b in range(2):
        X = np.asarray(X0[b])
        for k in range(3):
            g = model.schedule[k]
            X = _d2_step(X, np.asarray(lay.q[g, 0]), np.asarray(lay.k[g, 0]), np.asarray(lay.v[g, 0]),
                         float(lay.scale[g]), 0.7, 1.3)
            np.testing.assert_allclose(np.asarray(res.trajectory[b, k + 1]), X, rtol=0, atol=1e-12)
    assert ja.D2 != ja.D1 and ja.D2.attention == "softmax" and ja.D2.norm == "l2"
    for other in (ja.random_model(jax.random.key(7), d, heads=2), ja.random_model(jax.random.key(7), d, heads=1)):
        with pytest.raises(ConfigError, match="D2"):
            ja.simulate(other, X0, 1, dynamics=ja.D2)


def test_the_oja_flow_is_named_as_a_c2_variant():
    assert ja.Flow(space="sphere", attention="uniform") == ja.C2_OJA
    assert not hasattr(ja, "OJA")


def test_attention_choices_are_the_library_constant():
    """The command line and the sweep schema offer the library's attention kinds, not a retyped list."""
    import jaxattn.cli as cli
    from jaxattn.sweeps.grid import SCHEMA

    assert SCHEMA["dynamics"]["attention"].choices is attention.ATTENTIONS
    parser = cli.build_parser()
    sim = next(a for a in parser._subparsers._group_actions[0].choices["simulate"]._actions
               if a.dest == "attention")
    assert tuple(sim.choices) == attention.ATTENTIONS


def test_positive_integers_have_one_check():
    """``errors.positive_int`` is the one check of a count: the checkpoint reader's (which let ``true`` through as
    1) and the good-triple estimator's say the same, booleans refused."""
    from jaxattn.analysis._good_triples import good_triple_fraction
    from jaxattn.errors import CheckpointError
    from jaxattn.io.checkpoints._common import cfg_int

    with pytest.raises(CheckpointError, match=r"config.json: num_attention_heads must be a positive integer, got True"):
        cfg_int({"num_attention_heads": True}, "num_attention_heads")
    assert cfg_int({"n_head": 4}, "num_attention_heads", "n_head") == 4
    with pytest.raises(ConfigError, match=r"samples must be a positive integer, got 0"):
        good_triple_fraction(jax.random.key(0), 2, 0)
    with pytest.raises(ConfigError, match=r"d must be a positive integer, got True"):
        good_triple_fraction(jax.random.key(0), True, 10)
