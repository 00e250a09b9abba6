"""The lane width (issue 48, item 1): the default follows the batch, never padding it to twice or more; a condition's
numbers are the same bits for a fixed ``Batch(size=...)`` however the batch is split, the same to round-off at other
widths (1e-6 in float32, 1e-13 in float64), and a resumed run or sweep keeps the width it recorded, so that it is
bit-identical to an uninterrupted one."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.dynamics import _runner, default_lanes, lanes_for, working_bytes
from jaxattn.dynamics.discrete import lanes_of
from jaxattn.errors import ConfigError
from jaxattn.io import store
from jaxattn.sweeps import chunked, grid

TOL = {"float32": 1e-6, "float64": 1e-13}


def _one_head(dtype=jnp.float32):
    """The papers' sphere model at d = 3: one head, so the widest default blocks (1024 lanes on a CPU)."""
    return ja.random_model(jax.random.key(0), 3, 1, 2, shared=False, dtype=dtype)


def _two_heads(dtype=jnp.float32):
    return ja.random_model(jax.random.key(1), 8, 2, 3, shared=False, mask="causal", dtype=dtype)


def _padded(B: int, lanes: int, devices: int = 1) -> int:
    """Conditions the runner computes for a batch of ``B``: whole blocks of ``lanes`` on every device."""
    return -(-B // (lanes * devices)) * lanes * devices


@pytest.mark.parametrize("condition_bytes,one_head", [(None, None), (working_bytes(32, 2, 1, jnp.float32),
                                                                     working_bytes(32, 2, 1, jnp.float32)),
                                                      (working_bytes(200, 768, 12, jnp.float32, hidden=3072), None)])
def test_the_default_width_follows_the_batch_with_less_than_twice_its_conditions(condition_bytes, one_head):
    fixed = default_lanes(condition_bytes, one_head)
    for B in [*range(1, 70), 100, 127, 128, 129, 1000, 1023, 1025, 5000, 70_000]:
        lanes = lanes_for(None, condition_bytes, one_head, B)
        assert lanes == min(fixed, 1 << (B - 1).bit_length()), B  # a power of two, never above the backend's
        assert _padded(B, lanes) < 2 * B, (B, lanes)
    for devices in (2, 8):  # each device's share decides, with the same bound per device
        for B in (1, 5, 9, 64, 100, 1000, 70_000):
            share = -(-B // devices)
            lanes = lanes_for(None, condition_bytes, one_head, share)
            assert _padded(share, lanes) < 2 * share and _padded(B, lanes, devices) <= devices * _padded(share, lanes)
    assert lanes_for(16, condition_bytes, one_head, 3) == 16  # a given size is never capped


@pytest.mark.e2e
def test_the_runner_pads_a_small_batch_to_its_own_width(monkeypatch):
    """What the runner compiles: a block of 8 lanes for 5 conditions of the sphere model, not 1024."""
    seen = []
    real = _runner._run

    def spy(program, X0, params, *, lanes, mesh, pad=0):
        seen.append((X0.shape[0] + pad, lanes))  # padded inside the run's program
        return real(program, X0, params, lanes=lanes, mesh=mesh, pad=pad)

    monkeypatch.setattr(_runner, "_run", spy)
    model, X0 = _one_head(), ja.init_tokens(jax.random.key(2), 5, 4, 3)
    ja.simulate(model, X0, 2)
    ja.simulate(model, X0, 2, batch=ja.Batch(size=64))
    assert seen == [(8, 8), (64, 64)]


@pytest.mark.fast_cases('one_head-float64')
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [_one_head, _two_heads], ids=["one_head", "two_heads"])
def test_a_fixed_size_gives_the_same_bits_however_the_batch_is_split(make, dtype):
    with jax.enable_x64(dtype == "float64"):
        model, X0 = make(dtype), ja.init_tokens(jax.random.key(3), 50, 4, make().d_model, dtype=dtype)
        for size in (16, 64):
            batch = ja.Batch(size=size)
            whole = ja.simulate(model, X0, 5, batch=batch)
            parts = [ja.simulate(model, X0[a:b], 5, batch=batch) for a, b in ((0, 7), (7, 37), (37, 50))]
            np.testing.assert_array_equal(np.asarray(whole.final), np.concatenate([np.asarray(p.final) for p in parts]))
            np.testing.assert_array_equal(np.asarray(whole.observables["diameter"]),
                                          np.concatenate([np.asarray(p.observables["diameter"]) for p in parts]))


@pytest.mark.e2e
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [_one_head, _two_heads], ids=["one_head", "two_heads"])
def test_other_splits_agree_to_round_off(make, dtype):
    """The default width follows each part (8, 32 and 16 lanes, against 64 for the whole): within 1e-6 in float32
    and 1e-13 in float64, in every driver."""
    with jax.enable_x64(dtype == "float64"):
        model, X0 = make(dtype), ja.init_tokens(jax.random.key(4), 50, 4, make().d_model, dtype=dtype)
        cuts = ((0, 7), (7, 37), (37, 50))
        runs = {"simulate": lambda X: ja.simulate(model, X, 5).final,
                "repeated_passes": lambda X: ja.repeated_passes(model, X, 2, dynamics=ja.D1).final,
                "solve": lambda X: ja.solve(model, X, 0.5).final}
        for name, run in runs.items():
            whole = np.asarray(run(X0))
            parts = np.concatenate([np.asarray(run(X0[a:b])) for a, b in cuts])
            np.testing.assert_allclose(parts, whole, rtol=0, atol=TOL[dtype], err_msg=name)


def _interrupt_after(monkeypatch, chunks: int):
    """Make the store's writes fail after ``chunks`` chunks, as a run killed there."""
    real, calls = store.SweepStore.write_chunk, []

    def failing(self, *a, **k):
        calls.append(1)
        if len(calls) > chunks:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(store.SweepStore, "write_chunk", failing)
    return lambda: monkeypatch.setattr(store.SweepStore, "write_chunk", real)


def _recorded(path) -> list:
    return [p.get("lanes", "absent") for p in json.loads((path / "manifest.json").read_text())["points"]]


@pytest.mark.fast_cases('float32')
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_chunked_run_has_one_width_and_resumes_at_the_width_it_recorded(tmp_path, monkeypatch, dtype):
    """100 conditions in chunks of 48: every chunk (the remainder of 4 too) runs at the chunk's width, 64 lanes of
    the sphere model, recorded in the store. Resumed where the backend's width would now be 16 (a smaller
    DEFAULT_LANES and WIDE_LANES: a newer version), it keeps 64: the same bits as the uninterrupted run."""
    with jax.enable_x64(dtype == "float64"):
        model = _one_head(dtype)
        kw = dict(num_init=100, n=4, steps=5, chunk=48, dtype=dtype, progress=False)
        ref = ja.simulate(model, ja.init_tokens(jax.random.key(0), 100, 4, 3, dtype=dtype), 5,
                          batch=ja.Batch(size=64))
        whole = ja.sweep(model, **kw)
        np.testing.assert_array_equal(whole["final"], np.asarray(ref.final))  # one width, the remainder chunk's too
        restore = _interrupt_after(monkeypatch, 1)
        with pytest.raises(KeyboardInterrupt):
            ja.sweep(model, out_dir=tmp_path, **kw)
        restore()
        assert _recorded(tmp_path / chunked.STORE) == [64]
        backend = jax.default_backend()
        monkeypatch.setitem(_runner.DEFAULT_LANES, backend, 16)
        monkeypatch.setitem(_runner.WIDE_LANES, backend, 16)
        assert lanes_of(model, 4, conditions=48, dtype=dtype) == 16  # what a fresh run would take now
        stats: dict = {}
        resumed = ja.sweep(model, out_dir=tmp_path, stats=stats, **kw)
        assert stats["resumed"] == 48 and stats["computed"] == 52
        for k in whole:
            np.testing.assert_array_equal(resumed[k], whole[k], err_msg=k)
        fresh = ja.sweep(model, **kw)  # a fresh run at 16 lanes: round-off from the recorded width
        np.testing.assert_allclose(fresh["final"], whole["final"], rtol=0, atol=TOL[dtype])


@pytest.mark.e2e
def test_a_store_written_before_the_width_was_recorded_resumes_at_the_uncapped_default(tmp_path, monkeypatch):
    """A store without a recorded width ran at the backend's width, whatever the batch (1024 lanes for the sphere
    model on a CPU): its remaining chunks are computed at that width, as the code that wrote it would have."""
    with jax.enable_x64(True):
        model = _one_head(jnp.float64)
        kw = dict(num_init=100, n=4, steps=5, chunk=48, dtype="float64", progress=False)
        restore = _interrupt_after(monkeypatch, 1)
        with pytest.raises(KeyboardInterrupt):
            ja.sweep(model, out_dir=tmp_path, **kw)
        restore()
        path = tmp_path / chunked.STORE / "manifest.json"
        m = json.loads(path.read_text())
        del m["points"][0]["lanes"]  # as written before the width was recorded
        path.write_text(json.dumps(m))
        old = lanes_of(model, 4, dtype="float64")
        assert old == default_lanes(None, working_bytes(4, 3, 1, jnp.float64)) and old > 64
        got = ja.sweep(model, out_dir=tmp_path, **kw)
        X0 = ja.init_tokens(jax.random.key(0), 100, 4, 3, dtype=jnp.float64)
        first = ja.simulate(model, X0[:48], 5, batch=ja.Batch(size=64)).final
        rest = ja.simulate(model, X0[48:], 5, batch=ja.Batch(size=old)).final
        np.testing.assert_array_equal(got["final"][:48], np.asarray(first))
        np.testing.assert_array_equal(got["final"][48:], np.asarray(rest))


GRID = {"num_init": 40, "chunk": 16, "seed": 0, "init": {"n": 4},
        "model": {"d": 4, "heads": [1, 2], "depth": 2, "shared": False}, "dynamics": {"beta": 2.0}}


@pytest.mark.e2e
def test_a_grid_records_each_points_width_and_resumes_at_it(tmp_path, monkeypatch):
    """sweep_grid: every point's chunks run at the width its chunk decides on the devices given (16 conditions on
    one device: 16 lanes), recorded per point; a sweep resumed where the width would now differ keeps it, the
    same bits as the uninterrupted sweep; a store without recorded widths resumes at the uncapped default."""
    one = ja.Batch(devices=jax.local_devices()[:1])
    ref = grid.sweep_grid(GRID, tmp_path / "ref", batch=one, progress=False)
    assert _recorded(tmp_path / "ref") == [16, 16]
    restore = _interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        grid.sweep_grid(GRID, tmp_path / "s", batch=one, progress=False)
    restore()
    monkeypatch.setitem(_runner.DEFAULT_LANES, jax.default_backend(), 4)
    monkeypatch.setitem(_runner.WIDE_LANES, jax.default_backend(), 4)
    sw = grid.sweep_grid(GRID, tmp_path / "s", batch=one, progress=False)
    assert sw.summary["resumed"] == 16 and sw.summary["computed"] == 80 - 16
    for p in range(2):
        a, b = ref.arrays(p), sw.arrays(p)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    monkeypatch.undo()
    # a store from before: no widths recorded; its chunks still to compute run at the uncapped width of then
    restore = _interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        grid.sweep_grid(GRID, tmp_path / "old", batch=one, progress=False)
    restore()
    path = tmp_path / "old" / "manifest.json"
    m = json.loads(path.read_text())
    for e in m["points"]:
        del e["lanes"]
    path.write_text(json.dumps(m))
    old = grid.sweep_grid(GRID, tmp_path / "old", batch=one, progress=False)
    points = [grid.point_of(p) for p in grid.expand(grid.validate_config(GRID))]
    model = points[0].build_model({})
    uncapped = points[0].lanes(model, None, one)
    assert uncapped == default_lanes(None, working_bytes(4, 4, 1, jnp.float32)) > 16
    X0 = ja.init_tokens(jax.random.key(0), 40, 4, 4)
    for a, b, lanes in ((0, 16, 16), (16, 40, uncapped)):  # the chunk finished before, the chunks resumed
        want = ja.simulate(model, X0[a:b], 2, beta=2.0, batch=ja.Batch(size=lanes)).observables["diameter"]
        np.testing.assert_array_equal(old.arrays(0)["observables.diameter"][a:b], np.asarray(want))


@pytest.mark.e2e
def test_a_grid_on_several_devices_takes_each_devices_share():
    """Eight devices and chunks of 16: two conditions per device, so blocks of 2 lanes, not 64."""
    if len(jax.local_devices()) < 8:
        pytest.skip("needs the eight CPU devices of the test configuration")
    points = [grid.point_of(p) for p in grid.expand(grid.validate_config(GRID))]
    model = points[1].build_model({})
    assert points[1].lanes(model, -(-16 // 8)) == 2


def test_the_removed_fused_path_is_refused_with_its_reason(tmp_path):
    """Batch(path='fused') named a Pallas kernel, removed after an H200 measured it slower than the plain path at
    every shape: refused in one line that says so (no driver can be given such a Batch), and a sweep configuration
    naming it is refused before a store is written; 'auto' and 'plain' are the same path."""
    with pytest.raises(ConfigError, match=r"^Batch\(path='fused'\): the fused Pallas kernel was removed .*'plain'"):
        ja.Batch(path="fused")
    with pytest.raises(ConfigError, match=r"^path: got 'fused': the fused Pallas kernel was removed"):
        ja.sweep_grid({"num_init": 4, "path": "fused", "init": {"n": 3}, "model": {"d": 4, "heads": 1, "depth": 1}},
                      tmp_path / "g", progress=False)
    assert not (tmp_path / "g").exists()
    model = _two_heads()
    assert lanes_of(model, 4, batch=ja.Batch(path="plain"), conditions=8) == lanes_of(model, 4, conditions=8) == 8
