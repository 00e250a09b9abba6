"""Results that used to be silently wrong: options accepted that changed nothing or picked something
else, precisions that drew other numbers, corrupt stores read as data, non-finite runs reported as
finished."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.errors import ConfigError, NonFiniteWarning

from .subprocess_env import one_device_env

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("q", "k", "v", "o", "bq", "bk", "bv", "bo")


def _layers(model) -> dict:
    return {f: np.asarray(getattr(model.layers, f)) for f in FIELDS}


# ---------------------------------------------------------------- one seed, one model, in every precision
@pytest.mark.e2e
def test_float64_model_and_tokens_are_the_float32_ones():
    key = jax.random.key(0)
    for weights in ("gaussian", "uniform"):
        m32 = _layers(ja.random_model(key, 8, 2, 3, shared=False, weights=weights, biases=True, dtype=jnp.float32))
        m64 = _layers(ja.random_model(key, 8, 2, 3, shared=False, weights=weights, biases=True, dtype=jnp.float64))
        for f in FIELDS:
            assert m32[f].dtype == np.float32 and m64[f].dtype == np.float64, f
            np.testing.assert_array_equal(m64[f], m32[f].astype(np.float64), err_msg=f"{weights} {f}")
    g32 = ja.init_tokens(key, 70, 5, 8, kind="gaussian", dtype=jnp.float32)
    g64 = ja.init_tokens(key, 70, 5, 8, kind="gaussian", dtype=jnp.float64)
    assert g64.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(g64), np.asarray(g32, np.float64))
    s32 = np.asarray(ja.init_tokens(key, 70, 5, 8, dtype=jnp.float32), np.float64)
    s64 = np.asarray(ja.init_tokens(key, 70, 5, 8, dtype=jnp.float64))
    np.testing.assert_allclose(s64, s32, atol=3e-7)  # the same tokens, normalised in each precision
    np.testing.assert_allclose(np.linalg.norm(s64, axis=-1), 1.0, atol=1e-14)
    spec = [2.0, 1.0, 0.5, -1.0]
    F32 = ja.layer_matrices(ja.random_model(key, 4, value="symmetric", spectrum=spec, dtype=jnp.float32))
    F64 = ja.layer_matrices(ja.random_model(key, 4, value="symmetric", spectrum=spec, dtype=jnp.float64))
    np.testing.assert_allclose(F64, F32, atol=2e-6)
    np.testing.assert_allclose(np.linalg.eigvalsh(F64[0]), sorted(spec), atol=1e-13)


_X64_OFF = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import jaxattn as ja
    from jaxattn.errors import ConfigError
    assert not jax.config.read("jax_enable_x64")
    key = jax.random.key(0)
    m = ja.random_model(key, 8, 2, 3, shared=False, biases=True)
    S = ja.model.sampling.symmetric_with_spectrum(key, [3.0, 1.0, 0.5])
    X = ja.init_tokens(key, 70, 5, 8)
    arrays = {f: np.asarray(getattr(m.layers, f)) for f in ("q", "k", "v", "o", "bq", "bo")}
    np.savez(sys.argv[1], X=np.asarray(X), S=np.asarray(S), **arrays)
    errors = []
    for f in (lambda: ja.init_tokens(key, 2, 3, 4, dtype=jnp.float64),
              lambda: ja.random_model(key, 4, dtype=jnp.float64),
              lambda: ja.model.sampling.symmetric_with_spectrum(key, [1.0, 2.0], dtype="float64")):
        try:
            f()
            errors.append("accepted")
        except ConfigError as e:
            errors.append(str(e))
    print(json.dumps(errors))
""")


@pytest.mark.e2e
def test_same_numbers_with_x64_off(tmp_path):
    env = one_device_env(drop=("JAX_ENABLE_X64",))
    out = subprocess.run([sys.executable, "-c", _X64_OFF, str(tmp_path / "a.npz")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    errors = json.loads(out.stdout.strip().splitlines()[-1])
    assert all("float64 needs JAX's x64 mode" in e for e in errors), errors
    got = np.load(tmp_path / "a.npz")
    key = jax.random.key(0)
    # x64 on: the default dtype is float64, the numbers are those drawn with x64 off
    m64 = _layers(ja.random_model(key, 8, 2, 3, shared=False, biases=True))
    m32 = _layers(ja.random_model(key, 8, 2, 3, shared=False, biases=True, dtype=jnp.float32))
    for f in ("q", "k", "v", "o", "bq", "bo"):
        assert got[f].dtype == np.float32 and m32[f].dtype == np.float32, f
        np.testing.assert_array_equal(m32[f], got[f], err_msg=f)
        np.testing.assert_array_equal(m64[f], got[f].astype(np.float64), err_msg=f)
    np.testing.assert_array_equal(np.asarray(ja.init_tokens(key, 70, 5, 8)), got["X"])
    S64 = np.asarray(ja.model.sampling.symmetric_with_spectrum(key, [3.0, 1.0, 0.5]))
    np.testing.assert_allclose(S64, got["S"], atol=2e-6)


def test_init_tokens_bit_identical_however_split():
    key = jax.random.key(5)
    for dtype in (jnp.float32, jnp.float64):
        ref = np.asarray(ja.init_tokens(key, 150, 7, 33, dtype=dtype))
        for sizes in ((1, 63, 64, 22), (100, 50), (3, 147)):
            starts = np.cumsum((0, *sizes[:-1]))
            parts = [np.asarray(ja.init_tokens(key, b, 7, 33, start=int(s), dtype=dtype))
                     for b, s in zip(sizes, starts, strict=True)]
            np.testing.assert_array_equal(np.concatenate(parts), ref, err_msg=f"{sizes} {dtype}")


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
def test_sampling_refuses_what_it_would_silently_change():
    key = jax.random.key(0)
    assert ja.random_model(key, 4, dtype=jnp.float32).layers.q.dtype == jnp.float32
    assert ja.random_model(key, 4, biases=True, dtype=jnp.float32).layers.bq.dtype == jnp.float32
    for call, match in ((lambda: ja.random_model(key, 4, dtype=jnp.int32), "floating dtype"),
                        (lambda: ja.init_tokens(key, 2, 3, 4, dtype=jnp.int32), "floating dtype"),
                        (lambda: ja.init_tokens(key, 2, 3, 4, dtype="fancy"), "floating dtype"),
                        (lambda: ja.init_tokens(key, 2.5, 5, 8), "batch must be a non-negative integer"),
                        (lambda: ja.init_tokens(key, 2, 5.0, 8), "n must be a positive integer"),
                        (lambda: ja.init_tokens(key, 2, 5, 8, start=1.5), "start must be a non-negative integer"),
                        (lambda: ja.random_model(key, 4.0), "d must be a positive integer"),
                        (lambda: ja.random_model(key, 4, depth=2.0), "depth must be a positive integer"),
                        (lambda: ja.init_tokens(jax.random.split(key, 3), 2, 5, 8), "one PRNG key"),
                        (lambda: ja.random_model(jax.random.split(key, 2), 4), "one PRNG key")):
        with pytest.raises(ConfigError, match=match):
            call()


# ---------------------------------------------------------------- spectrum: a NaN α picked another eigenvalue
def test_spectrum_refuses_non_finite_alpha(capsys):
    from jaxattn.cli import main

    F = np.diag([3.0, 1.0, -5.0])
    for kw in ({"alpha": np.nan}, {"alpha": np.inf}, {"gap_tol": np.nan}, {"imag_tol": -np.inf}):
        with pytest.raises(ConfigError, match="must be a finite number"):
            ja.spectrum(F, order="step", **kw)
    with pytest.raises(ConfigError, match="alpha must be a finite number"):
        ja.analysis.spectral.cumulative_products(F[None], order="step", alpha=float("nan"))
    # checked before the model is read, so a missing file does not hide it
    for argv, msg in ((["--order", "step", "--alpha", "nan"], "--alpha must be a finite number, got nan"),
                      (["--order", "step", "--alpha=-inf"], "--alpha must be a finite number"),
                      (["--alpha", "0.5"], "--alpha only applies to --order step")):
        assert main(["spectrum", "no-such-model.safetensors", *argv]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1, err


# ---------------------------------------------------------------- simulate --model FILE: config.json of that model
@pytest.mark.e2e
def test_simulate_converted_model_records_its_own_dims_and_replays(tmp_path, capsys):
    from jaxattn.cli import main
    from jaxattn.io.checkpoints import save_checkpoint

    model = ja.random_model(jax.random.key(1), 6, 3, 2, shared=False, mask="causal", dtype=jnp.float32)
    path = save_checkpoint(model, tmp_path / "m.safetensors")
    common = ["--n", "4", "--num-init", "5", "--no-progress"]
    assert main(["simulate", "--model", str(path), *common, "--out", str(tmp_path / "a")]) == 0
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())["config"]
    assert not {"d", "heads", "depth", "shared", "mask", "weights", "value"} & set(cfg), cfg
    assert cfg["model_dims"] == {"d": 6, "heads": 3, "depth": 2, "shared": False, "masks": ["causal", "causal"],
                                 "family": "synthetic"}
    assert main(["simulate", "--config", str(tmp_path / "a" / "config.json"), "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    from jaxattn.io.results import load_arrays

    a, b = (load_arrays(tmp_path / r / "observables.safetensors") for r in "ab")
    np.testing.assert_array_equal(a["observables.diameter"], b["observables.diameter"])


# ---------------------------------------------------------------- options that change nothing are refused
@pytest.mark.parametrize("raw, msg", [
    ({"dynamics": {"kind": "continuous", "alpha": 2.0}},
     "dynamics.alpha does nothing with dynamics.kind = 'continuous'"),
    ({"dynamics": {"t1": 3.0}}, "dynamics.t1 does nothing with dynamics.kind = 'discrete'"),
    ({"dynamics": {"steps": 4, "kind": "continuous"}}, "dynamics.steps does nothing"),
    ({"kernel": "plain", "dynamics": {"kind": "continuous"}}, "path does nothing"),
    ({"dynamics": {"attention": "uniform", "beta": 5.0}}, "dynamics.beta does nothing with dynamics.attention"),
    ({"model": {"scale": 0.3}, "dynamics": {"attention": "uniform"}}, "model.scale does nothing"),
    ({"dynamics": {"kind": "continuous", "solver": "euler", "dt": 0.1, "rtol": 1e-3}}, "dynamics.rtol does nothing"),
    ({"dynamics": {"biases": True}}, "dynamics.biases does nothing with model.source = 'random'"),
    ({"dynamics": {"kind": ["discrete", "continuous"], "alpha": [1.0, 2.0]}}, "dynamics.alpha is an axis"),
])
def test_sweep_refuses_options_that_do_nothing(raw, msg):
    from jaxattn.sweeps import grid

    with pytest.raises(ConfigError, match=msg.replace(".", r"\.")):
        grid.validate_config(raw)


def test_options_that_matter_or_keep_their_default_are_accepted():
    from jaxattn.sweeps import grid

    cases = [({"dynamics": {"kind": ["discrete", "continuous"], "alpha": 2.0}},  # used by the discrete points
              "dynamics.alpha", [2.0, 2.0]),
             ({"dynamics": {"kind": "continuous", "alpha": 1.0, "biases": False}},  # defaults: nothing recorded
              "dynamics.biases", [False]),
             ({"dynamics": {"attention": "unnormalised", "beta": 5.0}}, "dynamics.beta", [5.0])]
    for raw, key, want in cases:  # accepted, and the value reaches every point of the grid
        points = grid.expand(grid.validate_config(raw))
        assert [p[key] for p in points] == want, (raw, key)


def test_simulate_and_solve_refuse_beta_with_uniform_attention(tmp_path, capsys):
    from jaxattn.cli import main

    for argv in (["simulate", "--attention", "uniform", "--beta", "5"],
                 ["solve", "--attention", "uniform", "--beta", "5"]):
        assert main([*argv, "--num-init", "2", "--n", "3", "--out", str(tmp_path / argv[0])]) == 2
        err = capsys.readouterr().err
        assert "beta does nothing" in err and err.count("\n") == 1, err
        assert not (tmp_path / argv[0]).exists()


# ---------------------------------------------------------------- reading a sweep verifies its chunks
_TINY = {"num_init": 10, "chunk": 4, "model": {"d": 4, "heads": 1, "depth": 2}, "init": {"n": 3}}


def _chunk_file(root: Path, name: str, c: int) -> Path:
    return root / "data.zarr" / "p0000" / "observables" / name / "c" / str(c) / "0"


@pytest.mark.parametrize("damage", ["flip", "empty", "truncate"])
def test_reading_a_sweep_refuses_corrupt_chunks(tmp_path, damage):
    from jaxattn.io.store import open_sweep
    from jaxattn.sweeps import grid

    root = tmp_path / "s"
    grid.sweep_grid(_TINY, root, progress=False)
    good = open_sweep(root).arrays(0)
    f = _chunk_file(root, "diameter", 1)
    data = bytearray(f.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x7F  # the exponent byte of the last float32: a wrong but finite-looking number
    f.write_bytes({"flip": bytes(data), "empty": b"", "truncate": bytes(data[:len(data) // 2])}[damage])
    sw = open_sweep(root)
    for read in (lambda: sw.arrays(0), sw.table, lambda: sw.table(summary=True)):
        with pytest.raises(ConfigError, match=r"chunk 1 of grid point 0 \(conditions 4\.\.7\).*corrupt.*diameter.*"
                                               r"run the same sweep again"):
            read()
    assert sw.finished(0).tolist() == [True] * 4 + [False] * 4 + [True] * 2
    again = grid.sweep_grid(_TINY, root, progress=False)  # resuming recomputes exactly that chunk
    assert again.summary["computed"] == 4 and again.summary["resumed"] == 6
    for k, v in open_sweep(root).arrays(0).items():
        np.testing.assert_array_equal(v, good[k], err_msg=k)


def test_unfinished_chunks_read_as_nan(tmp_path):
    from jaxattn.io.store import open_sweep
    from jaxattn.sweeps import grid

    root = tmp_path / "s"
    grid.sweep_grid(_TINY, root, progress=False)
    (root / "done" / "p0000" / "c000002.json").unlink()  # as if the run stopped before its marker
    _chunk_file(root, "diameter", 2).write_bytes(b"")  # ... half-way through writing its data
    sw = open_sweep(root)
    a = sw.arrays(0)["observables.diameter"]
    assert np.isfinite(a[:8]).all() and np.isnan(a[8:]).all()
    assert sw.table()["finished"].tolist() == [True] * 8 + [False] * 2


# ---------------------------------------------------------------- runs that overflow say so
@pytest.mark.e2e
@pytest.mark.parametrize("lanes", [64, 1024])
def test_a_blown_up_configuration_has_a_nan_diameter_at_every_width(lanes):
    """XLA's vectorised max over the pairs dropped the NaNs of a blown-up configuration at 1024 lanes on a CPU (the
    one-head default): its diameter read 0, exact consensus. It is NaN at every block width."""
    model = ja.random_model(jax.random.key(0), 4, heads=1, depth=2, dtype="float32")
    X0 = ja.init_tokens(jax.random.key(1), 4, 3, 4, dtype="float32")
    with pytest.warns(NonFiniteWarning):
        res = ja.simulate(model, X0, 10, alpha=1e39, batch=ja.Batch(size=lanes), dtype="float32")
    assert np.isnan(np.asarray(res.final)).all()
    assert np.isnan(np.asarray(res.observables["diameter"])[:, -1]).all()
    assert np.isnan(np.asarray(ja.metrics.diameter(jnp.full((3, 2), jnp.nan)))) and \
        np.isnan(np.asarray(ja.metrics.diameter(jnp.asarray([[0.0, 1.0], [jnp.inf, 0.0]]))))


@pytest.mark.e2e
def test_a_token_whose_update_overflowed_is_non_finite_on_every_path(monkeypatch, tmp_path, capsys):
    """α = 1e30 in float32: ``x + α u`` is finite but its squared norm overflows, and ``y / inf`` made every token
    the zero vector: diameter 0, ok True and no warning (perfect consensus) from the API, while the CLI warned. The
    token is non-finite whatever the norm makes of it, in the core and the CLI."""
    from jaxattn.cli import main

    model = ja.random_model(jax.random.key(0), 4, heads=1, depth=1, dtype="float32")
    X0 = ja.init_tokens(jax.random.key(1), 3, 4, 4, dtype="float32")
    with pytest.warns(NonFiniteWarning, match="3 of 3 conditions"):
        res = ja.simulate(model, X0, 1, alpha=1e30)
    assert not np.asarray(res.ok).any()
    assert np.isnan(np.asarray(res.observables["diameter"])[:, -1]).all()
    # the core, on the sphere and under a LayerNorm (whose overflowed variance made every token its bias); flat
    # space has no norm, and its tokens are what the (finite) update made them
    ln = model.replace(layers=model.layers.replace(ln1_w=jnp.ones((1, 4), "float32"),
                                                   ln1_b=jnp.full((1, 4), 0.5, "float32")))
    for m, dyn in ((model, ja.D1), (ln, ja.Dynamics(norm="layernorm"))):
        one = ja.simulate_one(m, X0[0], 1, dynamics=dyn, alpha=1e30)
        assert np.isnan(np.asarray(one.final)).all() and np.isnan(np.asarray(one.observables["diameter"][-1]))
    assert np.isfinite(np.asarray(ja.simulate_one(model, X0[0], 1, dynamics=ja.D4, alpha=1e30).final)).all()
    # one token per condition: its cosine consensus is 0 by definition, so only the state itself can say it
    assert main(["simulate", "--d", "4", "--heads", "1", "--depth", "1", "--n", "1", "--num-init", "2",
                 "--alpha", "1e30", "--no-progress", "--out", str(tmp_path / "r")]) == 0
    assert "2 of 2 initial conditions (100.0%) became non-finite" in capsys.readouterr().err


def test_simulate_says_when_conditions_become_non_finite(tmp_path, capsys):
    from jaxattn.cli import main

    out = tmp_path / "r"
    assert main(["simulate", "--d", "4", "--heads", "1", "--depth", "2", "--n", "3", "--num-init", "6",
                 "--alpha", "1e39", "--no-progress", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "6 of 6 initial conditions (100.0%) became non-finite" in cap.out
    assert cap.err.startswith("jaxattn: warning: 6 of 6 initial conditions")
    assert "diameter < 1e-2" not in cap.out and "no initial condition stayed finite" in cap.out
    assert json.loads((out / "config.json").read_text())["nonfinite_conditions"] == 6
    assert (out / "summary.txt").read_text() == cap.out


def test_summary_statistics_leave_out_non_finite_conditions():
    from jaxattn.cli.simulate import consensus_lines
    from jaxattn.io.store import nonfinite_conditions

    diam = np.array([[2.0, 1e-3], [2.0, np.nan], [2.0, 0.5], [np.inf, 0.0]])
    cosc = np.array([[1.0, 0.1], [1.0, 0.2], [1.0, 0.3], [1.0, 0.0]])
    final = np.zeros((4, 3, 2))
    final[1, 0, 0] = np.nan
    bad = nonfinite_conditions({"observables.diameter": diam, "observables.cos_consensus": cosc, "final": final}, 4)
    assert bad.tolist() == [False, True, False, True]
    text = "\n".join(consensus_lines(diam, cosc, ~bad, 1))
    assert "step 0 mean 2 " in text and "min 0.001" in text and "max 0.5" in text
    assert "diameter < 1e-2 in 50.0%" in text and "of the finite initial conditions" in text and "1-cos 0.2" in text


def test_sweep_counts_non_finite_conditions(tmp_path, capsys):
    from jaxattn.cli import main
    from jaxattn.io.store import open_sweep

    cfg = tmp_path / "g.json"
    cfg.write_text(json.dumps({**_TINY, "dynamics": {"alpha": [1.0, 1e39]}}))
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "s"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "jaxattn: warning: 10 of 20 initial conditions (50.0%) became non-finite" in err
    sw = open_sweep(tmp_path / "s")
    summary = sw.table(summary=True)
    assert summary["conditions"].tolist() == [10, 0] and summary["nonfinite"].tolist() == [0, 10]
    assert np.isfinite(summary["diameter_mean"][0]) and np.isnan(summary["diameter_mean"][1])
    table = sw.table()
    assert table["finite"].tolist() == [True] * 10 + [False] * 10
    # the blown-up conditions' stored diameters are NaN, not 0 (which would read as exact consensus)
    assert np.isnan(sw.arrays(1)["observables.diameter"][:, -1]).all()
    # one column order, every call (the observables in name order)
    cols = list(table.columns)
    assert cols.index("cos_consensus") < cols.index("diameter") and list(sw.table().columns) == cols
    again = ja.sweep_grid(json.loads(cfg.read_text()), tmp_path / "s", progress=False)  # resumed chunks count too
    assert again.summary["resumed"] == 20 and again.summary["nonfinite"] == 10
    assert again.summary["nonfinite_per_point"] == [0, 10]


@pytest.mark.e2e
def test_simulate_float32_and_float64_start_from_the_same_tokens(tmp_path, capsys):
    from jaxattn.cli import main
    from jaxattn.io.results import load_arrays

    runs = {}
    for dtype in ("float32", "float64"):
        out = tmp_path / dtype
        assert main(["simulate", "--d", "8", "--heads", "2", "--depth", "3", "--n", "4", "--num-init", "5",
                     "--dtype", dtype, "--keep-final", "--no-progress", "--out", str(out)]) == 0
        runs[dtype] = load_arrays(out / "observables.safetensors")
    capsys.readouterr()
    a, b = runs["float32"], runs["float64"]
    assert b["observables.diameter"].dtype == np.float64
    np.testing.assert_allclose(b["observables.diameter"], a["observables.diameter"], atol=1e-5)
    np.testing.assert_allclose(b["final"], a["final"], atol=1e-5)


@pytest.mark.e2e
def test_condition_indices_beyond_32_bits_are_refused_not_repeated():
    from jaxattn.sweeps import grid

    key = jax.random.key(0)
    last = ja.init_tokens(key, 1, 2, 3, start=2**32 - 1)  # the last condition a key names
    assert not bool((last == ja.init_tokens(key, 1, 2, 3, start=0)).all())
    with pytest.raises(ConfigError, match="below 2\\^32"):
        ja.init_tokens(key, 1, 2, 3, start=2**32)  # fold_in(key, 2^32) is fold_in(key, 0): condition 0 again
    with pytest.raises(ConfigError, match="beyond the 4,294,967,296"):
        ja.sweep(ja.random_model(key, 4), num_init=2**32 + 1, n=2, steps=1, progress=False)
    with pytest.raises(ConfigError, match="num_init: must be <= 2\\^32"):
        grid.validate_config({"num_init": 2**32 + 1})
