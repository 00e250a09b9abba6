"""Grids into the sweep store: same numbers however the work is split, resumption, integrity, errors."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.errors import ConfigError
from jaxattn.io.store import open_sweep
from jaxattn.sweeps import grid

from .subprocess_env import one_device_env

ROOT = Path(__file__).resolve().parents[1]
BASE = {"num_init": 150, "chunk": 64, "seed": [0, 3],
        "model": {"d": 8, "heads": 2, "depth": 3, "shared": False, "mask": ["full", "causal"]},
        "dynamics": {"beta": 1.5}, "init": {"n": 5}}


def _cfg(**over):
    cfg = json.loads(json.dumps(BASE))
    for k, v in over.items():
        sec, _, key = k.rpartition("__")
        (cfg.setdefault(sec, {}) if sec else cfg)[key] = v
    return cfg


def _arrays(path):
    sw = open_sweep(path)
    return [sw.arrays(p) for p in range(len(sw))]


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert sorted(x) == sorted(y)
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.e2e
def test_grid_values_equal_direct_simulation(tmp_path):
    sw = grid.sweep_grid(_cfg(keep_final=True), tmp_path / "s", progress=False)
    assert len(sw) == 4 and sw.summary["computed"] == 600
    p = grid.expand(grid.validate_config(_cfg()))[3]  # seed 3, causal
    assert p["params"] == {"seed": 3, "model.mask": "causal"}
    model = ja.random_model(jax.random.fold_in(jax.random.key(3), 2**31 - 1), 8, 2, 3, shared=False, mask="causal",
                            dtype=jnp.float32)
    X0 = ja.init_tokens(jax.random.key(3), 150, 5, 8)
    ref = ja.simulate(model, X0, 3, beta=1.5)
    arr = sw.arrays(3)
    np.testing.assert_array_equal(arr["observables.diameter"], np.asarray(ref.observables["diameter"]))
    np.testing.assert_array_equal(arr["final"], np.asarray(ref.final))
    table = sw.table()
    assert len(table) == 600 and table["finished"].all()
    summ = sw.table(summary=True)
    assert list(summ["conditions"]) == [150] * 4
    np.testing.assert_allclose(summ.loc[3, "diameter_mean"], np.asarray(ref.observables["diameter"])[:, -1].mean(),
                               rtol=1e-6)


def test_chunk_size_does_not_change_numbers(tmp_path):
    a = grid.sweep_grid(_cfg(chunk=64), tmp_path / "a", progress=False)
    b = grid.sweep_grid(_cfg(chunk=100), tmp_path / "b", progress=False)
    _assert_same(_arrays(a.store.root), _arrays(b.store.root))


@pytest.mark.e2e
def test_continuous_points_and_result_codes(tmp_path):
    cfg = _cfg(dynamics__kind="continuous", dynamics__t1=[1.0, 2.0], dynamics__saves=3, num_init=40)
    sw = grid.sweep_grid(cfg, tmp_path / "c", progress=False)
    assert len(sw) == 8
    arr = sw.arrays(1)
    assert arr["observables.diameter"].shape == (40, 3) and np.all(arr["result"] == 0)
    p = grid.expand(grid.validate_config(cfg))[1]
    model = ja.random_model(jax.random.fold_in(jax.random.key(p["seed"]), 2**31 - 1), 8, 2, 3, shared=False,
                            mask=p["model.mask"], dtype=jnp.float32)
    X0 = ja.init_tokens(jax.random.key(p["seed"]), 40, 5, 8)
    ref = ja.solve(model, X0, p["dynamics.t1"], beta=1.5, save=ja.Save(ts=np.linspace(0, p["dynamics.t1"], 3)))
    np.testing.assert_array_equal(arr["observables.diameter"], np.asarray(ref.observables["diameter"]))


_SCRIPT = textwrap.dedent("""
    import json, sys
    import jaxattn.sweeps.grid as g
    cfg, out = json.loads(sys.argv[1]), sys.argv[2]
    g.sweep_grid(cfg, out, progress=False)
""")


def _env(devices: int = 1, **extra):
    env = one_device_env(xla_flags=f"--xla_force_host_platform_device_count={devices}" if devices > 1 else "")
    env.update(extra)
    return env


@pytest.mark.e2e  # two processes with a coordinator: the slower tier
@pytest.mark.requires_cpu("eight forced CPU devices and two processes on one machine")
def test_eight_devices_and_two_processes_give_the_same_numbers(tmp_path):
    cfg = _cfg()  # every run in a fresh process with the same settings (this one has x64 on)
    subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(cfg), str(tmp_path / "one")], env=_env(), check=True)
    env8 = _env(devices=8)
    subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(cfg), str(tmp_path / "eight")], env=env8, check=True)
    _assert_same(_arrays(tmp_path / "one"), _arrays(tmp_path / "eight"))
    assert "cpu" in json.loads((tmp_path / "eight" / "summary-0.json").read_text())["devices"][7]
    port = str(20000 + os.getpid() % 20000)
    procs = [subprocess.Popen([sys.executable, "-m", "jaxattn.cli", "sweep", str(tmp_path / "cfg.json"), "--out",
                               str(tmp_path / "two"), "--quiet", "--num-processes", "2", "--process-id", str(i),
                               "--coordinator", f"localhost:{port}"], env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for i in range(2) if (tmp_path / "cfg.json").write_text(json.dumps(cfg)) or True]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    parts = [json.loads((tmp_path / "two" / f"summary-{i}.json").read_text())["computed"] for i in range(2)]
    assert sum(parts) == 600 and min(parts) > 0  # both processes worked
    _assert_same(_arrays(tmp_path / "one"), _arrays(tmp_path / "two"))


@pytest.mark.e2e
def test_sigkill_then_resume_computes_only_the_missing_chunks(tmp_path):
    cfg = _cfg(num_init=3000, chunk=100, seed=0, model__mask="full", model__depth=40, dynamics__steps=400)
    out = tmp_path / "k"
    p = subprocess.Popen([sys.executable, "-c", _SCRIPT, json.dumps(cfg), str(out)], env=_env())
    deadline = time.time() + 240
    while time.time() < deadline and len(list((out / "done").rglob("*.json"))) < 3:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    done = len(list((out / "done").rglob("*.json")))
    assert 3 <= done < 30, done
    for path in (out, tmp_path / "ref"):  # resume, and an uninterrupted run, in the same kind of process
        subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(cfg), str(path)], env=_env(), check=True)
    summary = json.loads((out / "summary-0.json").read_text())
    assert summary["resumed"] == done * 100 and summary["computed"] == 3000 - done * 100
    _assert_same(_arrays(out), _arrays(tmp_path / "ref"))


def test_corrupt_chunks_are_detected_and_recomputed(tmp_path):
    cfg = _cfg(seed=0, model__mask="full")
    sw = grid.sweep_grid(cfg, tmp_path / "s", progress=False)
    good = _arrays(tmp_path / "s")
    chunk_dir = tmp_path / "s" / "data.zarr" / "p0000" / "observables" / "diameter" / "c"
    files = sorted(chunk_dir.rglob("*"))
    files = [f for f in files if f.is_file()]
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF  # flipped bytes
    files[0].write_bytes(bytes(data))
    files[1].write_bytes(files[1].read_bytes()[:5])  # truncated
    assert not sw.finished(0).all()
    again = grid.sweep_grid(cfg, tmp_path / "s", progress=False)
    assert again.summary["computed"] == 128 and again.summary["resumed"] == 150 - 128
    _assert_same(good, _arrays(tmp_path / "s"))


def test_another_configuration_is_refused_and_nothing_touched(tmp_path):
    out = tmp_path / "s"
    grid.sweep_grid(_cfg(), out, progress=False)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="another configuration"):
        grid.sweep_grid(_cfg(dynamics__beta=2.0), out, progress=False)
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert before == after


@pytest.mark.e2e
def test_second_writer_with_the_same_process_id_is_refused(tmp_path):
    from filelock import FileLock

    out = tmp_path / "s"
    grid.sweep_grid(_cfg(num_init=10), out, progress=False)
    with FileLock(str(out / "locks" / "process-0.lock")):
        code = ("import jaxattn.sweeps.grid as g, json; "
                f"g.sweep_grid(json.loads({json.dumps(json.dumps(_cfg(num_init=10)))}), {str(out)!r}, progress=False)")
        r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True)
    assert r.returncode != 0 and "already writing" in r.stderr


_TRACES = []


def _counting(X, ctx):
    _TRACES.append(1)
    return ja.metrics.diameter(X)


@pytest.mark.e2e
def test_points_differing_in_alpha_and_beta_compile_once(tmp_path, monkeypatch):
    monkeypatch.setitem(grid.OBSERVABLES, "diameter", _counting)
    cfg = _cfg(seed=0, model__mask="full", num_init=20, chunk=32, dynamics__alpha=[0.25, 0.5, 1.0, 2.0],
               dynamics__beta=[0.5, 1.0, 1.5, 2.0, 3.0, 4.0], observables=["diameter"])
    _TRACES.clear()
    sw = grid.sweep_grid(cfg, tmp_path / "s", progress=False)
    assert len(sw) == 24
    grid_traces = len(_TRACES)
    _TRACES.clear()  # one new program (another number of steps): the traces of exactly one compilation
    grid.sweep_grid({**cfg, "dynamics": {"steps": 5}}, tmp_path / "one", progress=False)
    assert len(_TRACES) > 0 and grid_traces == len(_TRACES)


@pytest.mark.parametrize("cfg,match", [
    ({"num_iit": 3}, "unknown key 'num_iit'"),
    ({"dynamic": {"beta": 2.0}}, r"unknown key 'dynamic' \(known: .*\[dynamics\], \[init\]\)"),  # a table misspelt
    ({"model": {"dd": 3}}, r"unknown key 'model.dd'"),
    ({"dynamics": {"alpha": "fast"}}, r"dynamics.alpha: expected"),
    ({"dynamics": {"beta": [1.0, float("nan")]}}, r"dynamics.beta\[1\]: must be finite"),
    ({"model": {"mask": 5}}, "model.mask: expected str"),
    ({"model": {"shared": "false"}}, "model.shared: expected bool"),
    ({"num_init": True}, "num_init: expected int"),
    ({"num_init": 0}, "num_init: must be > 0"),
    ({"seed": 2**70}, "seed: must be in"),
    ({"model": {"d": 10, "heads": 3}}, "not divisible"),
    ({"model": {"source": "minilm", "d": 7}}, "model.d only applies"),
    ({"chunk": [1, 2]}, "chunk: takes a single value"),
    ({"dynamics": {"kind": "continuous", "solver": "rk99"}}, "dynamics.solver"),
    ({"observables": ["energy"]}, r"observables\[0\]: must be one of diameter"),
    ({"init": {"kind": "cube"}}, "init.kind: must be one of"),
])
def test_bad_configurations_name_the_key(cfg, match, tmp_path):
    with pytest.raises(ConfigError, match=match):
        grid.sweep_grid(cfg, tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "jaxattn.cli", *args], env=_env(), capture_output=True, text=True,
                          cwd=cwd)


@pytest.mark.e2e
def test_cli_sweep_and_solve(tmp_path):
    (tmp_path / "g.toml").write_text('num_init = 20\n[model]\nd = 4\nheads = 1\ndepth = 2\n'
                                     '[dynamics]\nbeta = [1.0, 2.0]\n')
    r = _cli("sweep", str(tmp_path / "g.toml"), "--out", str(tmp_path / "g"), "--quiet")
    assert r.returncode == 0, r.stderr
    assert "2 grid point(s)" in r.stdout
    r = _cli("solve", "--num-init", "30", "--n", "4", "--d", "6", "--heads", "2", "--depth", "2", "--no-shared",
             "--t1", "3", "--saves", "4", "--out", str(tmp_path / "s"), "--quiet")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "s" / "config.json").read_text())
    assert cfg["command"] == "solve" and cfg["config"]["dynamics"]["t1"] == 3 and "versions" in cfg
    assert "30 of 30 solves succeeded" in (tmp_path / "s" / "summary.txt").read_text()
    sw = open_sweep(tmp_path / "s")
    assert sw.arrays(0)["observables.diameter"].shape == (30, 4)
    # the same command resumes (nothing recomputed) and a changed one is refused
    r = _cli("solve", "--num-init", "30", "--n", "4", "--d", "6", "--heads", "2", "--depth", "2", "--no-shared",
             "--t1", "3", "--saves", "4", "--out", str(tmp_path / "s"), "--quiet")
    assert r.returncode == 0 and "30 resumed" in r.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("args,match", [
    (["solve", "--t1", "-1"], "--t1: must be > 0"),
    (["solve", "--rtol", "0"], "--rtol: must be > 0"),
    (["solve", "--solver", "euler", "--t1", "1"], "fixed step size"),
    (["solve", "--heads", "3"], "not divisible"),
    (["solve", "--model", "minilm", "--d", "7"], "--d only applies"),
    (["solve", "--space", "ellipse"], "argument --space: invalid choice"),
    (["sweep", "missing.toml"], "does not exist"),
])
def test_cli_bad_input_one_line_exit_2_nothing_left(args, match, tmp_path):
    out = tmp_path / "o"
    r = _cli(*args, "--out", str(out), "--quiet", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("jaxattn: error:") and match in r.stderr
    assert not out.exists()


@pytest.mark.e2e
def test_full_disk_is_one_clear_error_and_keeps_finished_chunks(tmp_path, monkeypatch):
    import errno

    from jaxattn.errors import DiskFullError
    from jaxattn.io import store

    out = tmp_path / "s"
    cfg = _cfg(seed=0, model__mask="full")
    calls = []
    real = store.SweepStore.write_chunk

    def failing(self, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(store.SweepStore, "write_chunk", failing)
    from jaxattn.cli.sweep import execute

    class Args:
        process_id = num_processes = coordinator = None
        progress, overwrite, command = False, False, "sweep"

    with pytest.raises(DiskFullError, match=f"^writing {out} failed: the disk is full; finished chunks are kept, "
                                            "run the same command again to resume$"):
        execute(cfg, out, Args)
    monkeypatch.setattr(store.SweepStore, "write_chunk", real)
    sw = grid.sweep_grid(cfg, out, progress=False)
    assert sw.summary["resumed"] == 64 and sw.summary["computed"] == 150 - 64


@pytest.mark.e2e
def test_a_point_smaller_than_a_chunk_is_padded_to_the_block_width_only(tmp_path, monkeypatch):
    """`solve --num-init 8` integrated the whole default chunk (4096 conditions): a point smaller than a chunk
    computes its own conditions only (the runner pads them to one block of 8 lanes, not to the chunk, nor to the
    backend's 64), and gives the numbers of a chunk its own size."""
    drawn = []
    import jaxattn.sweeps._point as point_mod

    real = point_mod.init_tokens  # the name a point's chunk calls (imported into the module)
    monkeypatch.setattr(point_mod, "init_tokens", lambda key, batch, *a, **k: drawn.append(batch) or real(key, batch,
                                                                                                   *a, **k))
    big = grid.sweep_grid(_cfg(num_init=6, chunk=4096, seed=0, model__mask="full"), tmp_path / "a", progress=False,
                          batch=ja.Batch(devices=jax.local_devices()[:1]))
    assert drawn == [6]  # the point's conditions, not 4096
    assert [e["lanes"] for e in big.manifest["points"]] == [8]  # one block of 8 lanes
    small = grid.sweep_grid(_cfg(num_init=6, chunk=6, seed=0, model__mask="full"), tmp_path / "b", progress=False,
                            batch=ja.Batch(devices=jax.local_devices()[:1]))
    _assert_same(_arrays(big.store.root), _arrays(small.store.root))


# ---------------------------------------------------------------- one engine: sweep is a one-point grid
def test_a_sweep_refused_before_any_result_leaves_no_store_in_the_way(tmp_path):
    """An option only the first chunk refuses (an unknown init kind) left a store with its fingerprint behind,
    which then refused the corrected run as 'another configuration'; sweep removes the store it created, as
    sweep_grid does."""
    import jaxattn.sweeps.chunked as chunked

    model = ja.random_model(jax.random.key(0), 8, 2, 2)
    kw = dict(num_init=8, n=3, steps=2, chunk=4, progress=False, out_dir=tmp_path)
    with pytest.raises(ConfigError, match="init kind"):
        ja.sweep(model, init="cube", **kw)
    assert not (tmp_path / chunked.STORE).exists()
    stats: dict = {}
    ja.sweep(model, stats=stats, **kw)
    assert stats["computed"] == 8


@pytest.mark.fast_cases('64-8-2')
@pytest.mark.parametrize("chunk,size,heads", [(1024, None, 2), (64, 8, 2), (64, None, 1)])
def test_a_sweep_in_chunks_and_pieces_equals_one_simulate_call(chunk, size, heads, tmp_path, monkeypatch):
    """Issue 32: 200 conditions computed in progress pieces (of 128 conditions in one chunk of the default lane width;
    of 8 in four chunks of lanes of 8; a one-head model's chunks of 64 in blocks of 64, the width the chunk decides),
    stored or not, equal condition by condition one ``ja.simulate`` call at the sweep's width on the seed's first 200
    initial conditions: a piece that redrew an earlier piece's conditions would repeat its rows."""
    import jaxattn.sweeps._point as point_mod  # a sweep's chunks are its point's runs
    from jaxattn.dynamics.discrete import lanes_of

    drawn = []
    real = point_mod.init_tokens
    monkeypatch.setattr(point_mod, "init_tokens", lambda key, batch, *a, **k: drawn.append(batch) or real(key, batch,
                                                                                                     *a, **k))
    model = ja.random_model(jax.random.key(7), 8, heads, 3, shared=False)
    batch = ja.Batch(size=size)
    kw = dict(num_init=200, n=5, steps=3, seed=4, chunk=chunk, beta=1.5, batch=batch, progress=False)
    got = ja.sweep(model, **kw)
    assert len(drawn) >= 2 and sum(drawn) >= 200 and max(drawn) < 200, drawn  # several pieces
    stored = ja.sweep(model, out_dir=tmp_path, **kw)
    width = lanes_of(model, 5, batch=batch, conditions=min(chunk, 200))  # what the chunk decides: 64 lanes each
    assert width == (size or 64)
    ref = ja.simulate(model, ja.init_tokens(jax.random.key(4), 200, 5, 8), 3, beta=1.5, batch=ja.Batch(size=width))
    assert len(np.unique(np.asarray(ref.final).reshape(200, -1), axis=0)) == 200
    for out in (got, stored):
        assert sorted(out) == ["final", "observables.cos_consensus", "observables.diameter"]
        np.testing.assert_array_equal(out["final"], np.asarray(ref.final))
        for name in ("cos_consensus", "diameter"):
            np.testing.assert_array_equal(out[f"observables.{name}"], np.asarray(ref.observables[name]), err_msg=name)


@pytest.mark.e2e
def test_a_sweep_store_has_the_grid_layout(tmp_path):
    """`sweep` and `sweep_grid` write one manifest layout (one fingerprint recipe, the same keys, the same entry
    per point): a `sweep` store reads with `open_sweep` as a one-point grid, with the numbers `sweep` returned."""
    import jaxattn.sweeps.chunked as chunked
    from jaxattn.io.results import config_hash
    from jaxattn.io.store import fingerprint

    model = ja.random_model(jax.random.key(0), 8, 2, 3)
    got = ja.sweep(model, num_init=10, n=5, steps=3, chunk=4, out_dir=tmp_path / "s", progress=False,
                   save=ja.Save(every=2))
    grid.sweep_grid(_cfg(num_init=10, chunk=4, seed=0, model__mask="full"), tmp_path / "g", progress=False)
    s = json.loads((tmp_path / "s" / chunked.STORE / "manifest.json").read_text())
    g = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert sorted(s) == sorted(k for k in g if k != "config")  # the grid also keeps its validated configuration
    assert sorted(s["points"][0]) == sorted(g["points"][0])
    assert sorted(s["created_by"]) == sorted(g["created_by"])
    for m in (s, g):
        assert m["fingerprint"] == fingerprint(m["decides"])
    # the recipe of the stores written before the layouts were one (the hash of the stamp), pinned: a store of
    # that code resumes by its fingerprint, not by the fallback that compares the values
    assert s["fingerprint"] == config_hash(s["decides"])
    assert s["points"][0]["times"] == [0.0, 2.0, 3.0] and (s["points"][0]["n"], s["points"][0]["d"]) == (5, 8)
    sw = ja.open_sweep(tmp_path / "s" / chunked.STORE)
    assert len(sw) == 1
    for k, v in got.items():
        np.testing.assert_array_equal(sw.arrays(0)[k], v, err_msg=k)
    assert len(sw.table()) == 10 and sw.table()["finished"].all()


def test_open_sweep_of_a_finished_simulate_run_says_what_it_is(tmp_path):
    """A finished `simulate` run keeps its results in its own files (its chunk store is removed at the end):
    open_sweep of it said only 'no manifest.json'."""
    from jaxattn.cli import main

    out = tmp_path / "m"
    assert main(["simulate", "--num-init", "4", "--n", "3", "--d", "4", "--heads", "1", "--depth", "2",
                 "--no-progress", "--out", str(out)]) == 0
    with pytest.raises(ConfigError, match=r"no manifest.json\): it is a run directory of `jaxattn simulate`"):
        ja.open_sweep(out)
    with pytest.raises(ConfigError, match=r"no manifest.json\)$"):  # any other folder: as before
        ja.open_sweep(tmp_path)


def test_a_store_path_that_is_not_a_path_is_named(tmp_path):
    """``sweep_grid(cfg, None)`` and ``open_sweep(None)`` raised pathlib's TypeError ("expected str, bytes or
    os.PathLike object"): the argument is named, and nothing is computed or written."""
    cfg = {"num_init": 2, "init": {"n": 3}, "model": {"d": 4, "heads": 1, "depth": 1}}
    with pytest.raises(ConfigError, match=r"^sweep_grid: out must name a path \(a str or pathlib.Path\), got None$"):
        ja.sweep_grid(cfg, None, progress=False)
    with pytest.raises(ConfigError, match=r"^open_sweep: path must name a path .*, got None$"):
        ja.open_sweep(None)
    with pytest.raises(ConfigError, match=r"^open_sweep: path must name a path .*, got an empty string$"):
        ja.open_sweep("")
    with pytest.raises(ConfigError, match=r"^a configuration is a table \(dict\) or a path .*, got None$"):
        ja.sweep_grid(None, tmp_path / "s", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_sweep_grid_takes_the_drivers_save_and_batch_as_its_keys(tmp_path):
    """``sweep_grid(config, out, save=Save(...), batch=Batch(...))`` is the configuration with the keys the objects
    stand for: the same store (the configuration given those keys resumes it, nothing recomputed), the listed steps
    saved (``Save(steps=...)``, ``dynamics.save_steps``)."""
    cfg = {"num_init": 6, "chunk": 4, "init": {"n": 5}, "model": {"source": "random", "d": 8, "heads": 2, "depth": 3},
           "dynamics": {"beta": [1.0, 2.0], "steps": 20}}
    a = ja.sweep_grid(cfg, tmp_path / "a", save=ja.Save(steps=[20, 0, 5]), batch=ja.Batch(size=4, precision="bf16"),
                      progress=False)
    keyed = {**cfg, "matmul_precision": "bf16", "dynamics": {**cfg["dynamics"], "save_steps": [0, 5, 20]}}
    done = sorted((tmp_path / "a" / "done").iterdir())
    again = ja.sweep_grid(keyed, tmp_path / "a", batch=ja.Batch(size=4), progress=False)  # resumes: one store
    assert sorted((tmp_path / "a" / "done").iterdir()) == done and again.table().equals(a.table())
    assert [p["times"] for p in again.manifest["points"]] == [[0.0, 5.0, 20.0]] * 2
    with pytest.raises(ConfigError, match=r"Save\(steps=...\) lists step 30, beyond the run's 20 steps"):
        ja.sweep_grid(cfg, tmp_path / "b", save=ja.Save(steps=[0, 30]), progress=False)
    assert not (tmp_path / "b").exists()


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
def test_a_sweep_refuses_fractional_steps_before_writing_a_store(tmp_path):
    """steps = 2.5 with a store: the store's manifest names the saved steps, which raised a TypeError."""
    model = ja.random_model(jax.random.key(0), 4, 1, 1)
    with pytest.raises(ja.ConfigError, match="steps must be a non-negative integer"):
        ja.sweep(model, num_init=4, n=3, steps=2.5, chunk=4, out_dir=tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


#: D1 as a sweep's stamp named it then (the dataclass repr, every field): the text stores hold
D1_AS_STAMPED = ("Dynamics(norm='l2', ffn=False, pre_ln=False, biases=False, attention='softmax', drop_ln2=False, "
                 "rope='none', unit_output=False)")


@pytest.mark.e2e
def test_a_sweep_store_of_the_earlier_layout_resumes(tmp_path, monkeypatch):
    """A store as `sweep` wrote it before it ran on the chunk loop it shares with sweep_grid (written here with
    that code's calls of the store: its stamp, p0000/observables/<name> and p0000/final, markers without a
    process) resumes with nothing computed, and holds the numbers of a direct `simulate`."""
    import jaxattn.sweeps.chunked as chunked
    from jaxattn.io.results import config_hash, weights_sha256
    from jaxattn.io.store import SweepStore

    model = ja.random_model(jax.random.key(0), 8, 2, 2)
    num_init, n, steps, chunk, seed = 10, 3, 2, 4, 5
    ref = ja.simulate(model, ja.init_tokens(jax.random.key(seed), num_init, n, 8, dtype=jnp.float64), steps,
                      dtype=jnp.float64)
    want = {"observables.diameter": np.asarray(ref.observables["diameter"]),
            "observables.cos_consensus": np.asarray(ref.observables["cos_consensus"]), "final": np.asarray(ref.final)}
    stamp = {"fingerprint": {}, "weights": weights_sha256(model), "num_init": num_init, "chunk": chunk, "n": n,
             "steps": steps, "seed": seed, "init": "sphere", "dynamics": D1_AS_STAMPED, "alpha": 1.0, "beta": 1.0,
             "dtype": "float64", "keep_final": True, "observe": "None", "S": None}
    store = SweepStore.open(tmp_path / chunked.STORE, {"fingerprint": config_hash(stamp), "chunk": chunk,
                                                       "points": [{"num_init": num_init, "params": {}}],
                                                       "stamp": stamp})
    for c, start in enumerate(range(0, num_init, chunk)):
        store.write_chunk(0, c, start, {k.replace(".", "/", 1): v[start:start + chunk] for k, v in want.items()},
                          num_init, chunk)
    kw = dict(num_init=num_init, n=n, steps=steps, seed=seed, chunk=chunk, dtype="float64", progress=False)
    fresh = ja.sweep(model, **kw)  # what this code computes: the same numbers
    import jaxattn.sweeps._point as point_mod  # a sweep's chunks are its point's runs

    real = point_mod.simulate
    monkeypatch.setattr(point_mod, "simulate", lambda *a, **k: pytest.fail("a finished chunk was computed again"))
    stats: dict = {}
    got = ja.sweep(model, out_dir=tmp_path, stats=stats, **kw)
    assert stats == {"computed": 0, "resumed": num_init, "chunk": chunk}
    assert sorted(got) == sorted(want) == sorted(fresh)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
        np.testing.assert_array_equal(fresh[k], v, err_msg=k)
    monkeypatch.setattr(point_mod, "simulate", real)
    (tmp_path / chunked.STORE / "done" / "p0000" / "c000001.json").unlink()  # a lost marker: that chunk only
    again = ja.sweep(model, out_dir=tmp_path, stats=stats, **kw)
    assert stats == {"computed": 4, "resumed": num_init - 4, "chunk": chunk}
    for k, v in want.items():
        np.testing.assert_array_equal(again[k], v, err_msg=k)


@pytest.mark.e2e
def test_a_grid_store_of_the_earlier_layout_resumes(tmp_path, monkeypatch):
    """A grid store whose chunks were written as sweep_grid wrote them before the shared chunk loop (markers with
    the process) resumes with nothing computed, and holds the numbers of a direct `simulate`."""
    import shutil

    from jaxattn.io.store import SweepStore

    cfg = _cfg(num_init=10, chunk=4, seed=0, model__mask="full", dynamics__beta=[1.0, 2.0])
    out = tmp_path / "s"
    grid.sweep_grid(cfg, out, progress=False)  # for its manifest; the chunks are written again below
    shutil.rmtree(out / "data.zarr")
    shutil.rmtree(out / "done")
    model = ja.random_model(jax.random.fold_in(jax.random.key(0), 2**31 - 1), 8, 2, 3, shared=False, mask="full",
                            dtype=jnp.float32)
    X0 = ja.init_tokens(jax.random.key(0), 10, 5, 8)
    store = SweepStore.open(out)
    want = []
    for i, beta in enumerate((1.0, 2.0)):
        ref = ja.simulate(model, X0, 3, beta=beta)
        want.append({f"observables/{k}": np.asarray(ref.observables[k]) for k in ("diameter", "cos_consensus")})
        for c, start in enumerate(range(0, 10, 4)):
            store.write_chunk(i, c, start, {k: v[start:start + 4] for k, v in want[i].items()}, 10, 4, {"process": 0})
    monkeypatch.setattr(grid.Point, "evolve", lambda *a, **k: pytest.fail("a finished chunk was computed again"))
    sw = grid.sweep_grid(cfg, out, progress=False)
    assert (sw.summary["computed"], sw.summary["resumed"], sw.summary["nonfinite_per_point"]) == (0, 20, [0, 0])
    _assert_same(_arrays(out), [{k.replace("/", "."): v for k, v in w.items()} for w in want])


def test_solve_replays_its_own_config_json(tmp_path, capsys):
    """docs/cli.md: a finished run's config.json replays it. solve refused its own ("unknown option in config
    file: command")."""
    from jaxattn.cli import main

    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["solve", "--num-init", "4", "--n", "3", "--d", "8", "--heads", "2", "--depth", "1", "--chunk", "4",
                 "--t1", "1", "--saves", "3", "--beta", "2", "--quiet", "--out", str(a)]) == 0
    assert main(["solve", "--config", str(a / "config.json"), "--quiet", "--out", str(b)]) == 0
    recorded = [json.loads((r / "config.json").read_text())["config"] for r in (a, b)]
    assert recorded[0] == recorded[1]
    np.testing.assert_array_equal(ja.open_sweep(a).arrays(0)["observables.diameter"],
                                  ja.open_sweep(b).arrays(0)["observables.diameter"])
    assert main(["simulate", "--num-init", "2", "--n", "3", "--d", "8", "--heads", "2", "--depth", "1",
                 "--no-progress", "--out", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    assert main(["solve", "--config", str(tmp_path / "s" / "config.json"), "--out", str(tmp_path / "c")]) == 2
    assert "is the config of a `simulate` run, not `solve`" in capsys.readouterr().err


def test_a_sweep_on_the_ellipsoid_equals_one_simulate_call(tmp_path):
    """The ellipsoid's matrix S reaches both the draw and the map of every chunk of a sweep (its point's run holds
    it): stored in chunks of 8 at lanes of 8, the same bits as one simulate call at that width."""
    model = ja.random_model(jax.random.key(3), 3, 1, 2)
    S = np.diag([1.0, 2.0, 0.5]).astype(np.float32)
    kw = dict(num_init=12, n=4, steps=3, seed=2, chunk=8, init="ellipsoid", S=S, dynamics=ja.D5,
              batch=ja.Batch(size=8), progress=False)
    X0 = ja.init_tokens(jax.random.key(2), 12, 4, 3, kind="ellipsoid", S=S)
    ref = ja.simulate(model, X0, 3, dynamics=ja.D5, S=S, batch=ja.Batch(size=8))
    assert np.allclose(np.einsum("bni,ij,bnj->bn", np.asarray(ref.final), S, np.asarray(ref.final)), 1.0, atol=1e-5)
    for out in (ja.sweep(model, **kw), ja.sweep(model, out_dir=tmp_path, **kw)):
        np.testing.assert_array_equal(out["final"], np.asarray(ref.final))
        np.testing.assert_array_equal(out["observables.diameter"], np.asarray(ref.observables["diameter"]))
