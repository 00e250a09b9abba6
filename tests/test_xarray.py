"""Issue 52 §2: results and sweep stores as labelled arrays (xarray). Each Dataset holds exactly the arrays it came
from, under the names of :mod:`jaxattn.dynamics.labelled`; a grid point is selected by its axes' values; a store
written before its arrays carried dimension names opens alike."""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import jaxattn as ja
from jaxattn.errors import ConfigError


@pytest.fixture(scope="module")
def model():
    return ja.random_model(jax.random.key(0), d=4, heads=1, depth=2)


@pytest.fixture(scope="module")
def X0():
    return ja.init_tokens(jax.random.key(1), 3, 3, 4)


def test_a_map_as_a_dataset(model, X0):
    save = ja.Save(every=2, trajectory=True)
    res = ja.simulate(model, X0, 5, save=save)
    ds = res.to_xarray(5, save, attrs={"seed": 1, "config": {"beta": 1.0}, "note": None})
    assert dict(ds.sizes) == {"condition": 3, "step": 4, "token": 3, "coord": 4}
    assert ds.step.values.tolist() == [0, 2, 4, 5]  # the saved steps: every second and the last
    for name, a in res.observables.items():
        assert ds[name].dims == ("condition", "step")
        np.testing.assert_array_equal(ds[name].values, np.asarray(a))
    np.testing.assert_array_equal(ds.final.values, np.asarray(res.final))
    assert ds.trajectory.dims == ("condition", "step", "token", "coord")
    np.testing.assert_array_equal(ds.trajectory.values, np.asarray(res.trajectory))
    assert ds.attrs["kind"] == "map" and ds.attrs["seed"] == 1 and ds.attrs["steps"] == 5 and ds.attrs["every"] == 2
    assert json.loads(ds.attrs["config"]) == {"beta": 1.0} and "note" not in ds.attrs  # JSON text, None left out
    assert json.loads(ds.attrs["versions"])["jaxattn"]
    # one line: a step by value, averaged over the conditions
    np.testing.assert_allclose(ds.diameter.sel(step=4).mean("condition"), np.asarray(res.observables["diameter"])[:, 2]
                               .mean(), rtol=1e-6)


def test_a_map_without_its_save_and_of_one_configuration(model, X0):
    res = ja.simulate(model, X0, 2)
    assert "step" not in res.to_xarray().coords  # which steps were saved is not recorded: positions only
    assert res.to_xarray().diameter.sizes["step"] == 3 and res.to_xarray(2).step.values.tolist() == [0, 1, 2]
    thinned = ja.simulate(model, X0, 4, save=ja.Save(every="last"))
    with pytest.raises(ConfigError, match="give the steps"):  # the saved steps do not fit the arrays
        thinned.to_xarray(4)
    assert thinned.to_xarray(4, ja.Save(every="last")).step.values.tolist() == [4]
    one = ja.simulate_one(model, X0[0], 2, save=ja.Save(observe=lambda t, X, ctx: X.sum()))
    ds = one.to_xarray()
    assert ds.observable.dims == ("step",) and ds.final.dims == ("token", "coord")
    np.testing.assert_array_equal(ds.observable.values, np.asarray(one.observables))
    with pytest.raises(ConfigError, match="traced"):  # values, not tracers: outside jit
        jax.jit(lambda X: ja.simulate_one(model, X, 1).to_xarray())(X0[0])


def _flow_equals(sol, ds):
    assert dict(ds.sizes) == {"condition": 3, "t": 3, "token": 3, "coord": 4}
    assert ds.t.values.tolist() == [0.0, 0.5, 1.0] and ds.attrs["kind"] == "flow" and ds.attrs["beta"] == 1.0
    for name, a in sol.observables.items():
        assert ds[name].dims == ("condition", "t")
        np.testing.assert_array_equal(ds[name].values, np.asarray(a))
    np.testing.assert_array_equal(ds.final.values, np.asarray(sol.final))
    assert ds.trajectory.dims == ("condition", "t", "token", "coord")
    np.testing.assert_array_equal(ds.trajectory.values, np.asarray(sol.trajectory))
    np.testing.assert_array_equal(ds.result.values, np.asarray(sol.result))
    np.testing.assert_array_equal(ds.num_steps.values, np.asarray(sol.num_steps))


def test_a_flow_as_a_dataset():
    """The arrays of a Solution (built here: solving costs a compilation, the slower tier solves one below)."""
    rng = np.random.default_rng(0)
    sol = ja.Solution(ts=np.linspace(0.0, 1.0, 3), observables={"diameter": rng.random((3, 3)), "cos_consensus":
                      rng.random((3, 3))}, final=rng.random((3, 3, 4)), trajectory=rng.random((3, 3, 3, 4)),
                      result=np.asarray([0, 1, 0], np.int32), num_steps=np.asarray([5, 9, 4], np.int32))
    ds = sol.to_xarray(attrs={"beta": 1.0})
    _flow_equals(sol, ds)
    assert "max_steps_reached" in ds.result.attrs["result_names"]
    np.testing.assert_allclose(ds.diameter.sel(t=0.5).mean("condition"), sol.observables["diameter"][:, 1].mean())


@pytest.mark.e2e
def test_a_solved_flow_as_a_dataset(model, X0):
    sol = ja.solve(model, X0, 1.0, save=ja.Save(ts=jnp.linspace(0.0, 1.0, 3), trajectory=True), max_steps=3,
                   dt=0.1, solver="euler")
    ds = sol.to_xarray(attrs={"beta": 1.0})
    _flow_equals(sol, ds)
    assert (ds.result.values == 1).all()  # max_steps = 3 < 10 Euler steps: diffrax's code 1


GRID = {"num_init": 5, "chunk": 4, "seed": [0, 1], "keep_final": True, "init": {"n": 3},
        "model": {"source": "random", "d": 4, "heads": 1, "depth": 2}, "dynamics": {"beta": [1.0, 4.0]}}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid") / "g"
    return root, ja.sweep_grid(GRID, root, progress=False)


def test_a_grid_of_two_axes_as_a_dataset(grid):
    _, sw = grid
    ds = sw.to_xarray()
    assert ds.diameter.dims == ("seed", "beta", "condition", "step")  # the grid's axes first, in its order
    assert ds.final.dims == ("seed", "beta", "condition", "token", "coord")
    assert ds.seed.values.tolist() == [0, 1] and ds.beta.values.tolist() == [1.0, 4.0]
    assert ds.beta.attrs["key"] == "dynamics.beta" and ds.step.values.tolist() == [0, 1, 2]
    for i, p in enumerate(sw.points):
        at = ds.sel(seed=p["params"]["seed"], beta=p["params"]["dynamics.beta"])
        assert int(at.point) == i
        arrays = sw.arrays(i)
        for name in ("diameter", "cos_consensus"):
            np.testing.assert_array_equal(at[name].values, arrays[f"observables.{name}"])
        np.testing.assert_array_equal(at.final.values, arrays["final"])
        assert at.finished.values.all() and at.finite.values.all()
        xr.testing.assert_identical(sw.to_xarray(point=i).drop_attrs(), at.drop_attrs())
    # a grid point by value, averaged over its conditions: one line
    mean = ds.sel(beta=4.0).mean("condition")
    np.testing.assert_allclose(mean.diameter.sel(seed=1), sw.arrays(3)["observables.diameter"].mean(0), rtol=1e-6)
    assert ds.attrs["num_init"] == 5 and ds.attrs["kind"] == "map" and "seed" not in ds.attrs  # seed is an axis
    assert json.loads(ds.attrs["config"])["dynamics"]["beta"] == [1.0, 4.0]
    assert json.loads(ds.attrs["versions"])["jax"] == jax.__version__
    summary = repr(sw)  # and its summary (tests/test_repr.py)
    assert "4 points: seed [0, 1] × beta [1, 4]" in summary and "non-finite   0 of 20 conditions" in summary


def test_zarr_opens_a_point_of_the_store_directly(grid):
    root, sw = grid
    obs = xr.open_zarr(root / "data.zarr", group="p0003/observables", consolidated=False)
    assert obs.diameter.dims == ("condition", "step")
    assert obs.attrs["dynamics.beta"] == 4.0 and obs.attrs["seed"] == 1 and obs.attrs["jaxattn_point"] == 3
    np.testing.assert_array_equal(obs.diameter.values, sw.arrays(3)["observables.diameter"])
    point = xr.open_zarr(root / "data.zarr", group="p0003", consolidated=False)
    assert point.final.dims == ("condition", "token", "coord")
    np.testing.assert_array_equal(point.final.values, sw.arrays(3)["final"])


def test_xarray_opens_the_whole_store_as_a_tree(grid):
    """Every point's groups at once (xarray's DataTree): each group equals the arrays of its point, and says
    which point of the grid it is."""
    root, sw = grid
    tree = xr.open_datatree(root / "data.zarr", engine="zarr", consolidated=False)
    assert sorted(tree.children) == [f"p{i:04d}" for i in range(len(sw.points))]
    for i, p in enumerate(sw.points):
        group, arrays = tree[f"p{i:04d}"], sw.arrays(i)
        obs = group["observables"].to_dataset()
        assert obs.attrs["jaxattn_point"] == i and obs.attrs["seed"] == p["params"]["seed"]
        assert obs.attrs["dynamics.beta"] == p["params"]["dynamics.beta"]
        for name in ("diameter", "cos_consensus"):
            assert obs[name].dims == ("condition", "step")
            np.testing.assert_array_equal(obs[name].values, arrays[f"observables.{name}"])
        np.testing.assert_array_equal(group.to_dataset().final.values, arrays["final"])


def test_an_old_store_still_opens(grid, tmp_path):
    """A store written before the arrays carried ``dimension_names`` (and the point groups their attributes):
    the reader and to_xarray read it as they read a new one (the names are metadata; no checksum covers them)."""
    import shutil

    root, sw = grid
    old = tmp_path / "old"
    shutil.copytree(root, old)
    for f in (old / "data.zarr").rglob("zarr.json"):
        meta = json.loads(f.read_text())
        meta.pop("dimension_names", None)
        meta.pop("attributes", None)
        f.write_text(json.dumps(meta))
    with pytest.raises(KeyError, match="dimension_names"):  # what xarray says of such a store: use to_xarray
        xr.open_zarr(old / "data.zarr", group="p0000/observables", consolidated=False)
    opened = ja.open_sweep(old)
    for i in range(len(sw.points)):
        for k, a in sw.arrays(i).items():
            np.testing.assert_array_equal(opened.arrays(i)[k], a)
    new, was = sw.to_xarray(), opened.to_xarray()
    xr.testing.assert_identical(was.drop_attrs(), new.drop_attrs())
    assert was.attrs["store"] == str(old)
    assert opened.table(summary=True)["conditions"].tolist() == [5, 5, 5, 5]


def test_an_unfinished_point_reads_as_nan(grid, tmp_path):
    """Rows of unfinished chunks are NaN and ``finished`` false, as the table has them."""
    import shutil

    root, _ = grid
    part = tmp_path / "part"
    shutil.copytree(root, part)
    (part / "done" / "p0001" / "c000001.json").unlink()  # conditions 4.. of point 1 not finished
    ds = ja.open_sweep(part).to_xarray()
    at = ds.sel(seed=0, beta=4.0)
    assert at.finished.values.tolist() == [True] * 4 + [False]
    assert np.isnan(at.diameter.values[4]).all() and not np.isnan(at.diameter.values[:4]).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN rows are skipped by the mean, not warned about
        assert np.isfinite(at.mean("condition").diameter.values).all()


@pytest.mark.e2e
def test_a_grid_of_unequal_points_and_flows(tmp_path):
    """Points of different shapes (an axis over the tokens) are aligned on the union of their coordinates, NaN
    where a point has none; a flow's grid has its times."""
    cfg = {"num_init": 2, "chunk": 4, "keep_final": True, "init": {"n": [2, 3]},
           "model": {"source": "random", "d": 4, "heads": 1, "depth": 2}}
    sw = ja.sweep_grid(cfg, tmp_path / "n", progress=False)
    ds = sw.to_xarray()
    assert ds.final.dims == ("n", "condition", "token", "coord") and ds.token.values.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(ds.final.sel(n=2).values[:, :2], sw.arrays(0)["final"])
    assert np.isnan(ds.final.sel(n=2).values[:, 2]).all()
    np.testing.assert_array_equal(ds.final.sel(n=3).values, sw.arrays(1)["final"])
    flows = {"num_init": 2, "chunk": 4, "init": {"n": 3}, "model": {"source": "random", "d": 4, "heads": 1},
             "dynamics": {"kind": "continuous", "t1": [1.0, 2.0], "saves": 3}}
    fl = ja.sweep_grid(flows, tmp_path / "f", progress=False).to_xarray()
    assert fl.diameter.dims == ("t1", "condition", "t") and fl.t.values.tolist() == [0.0, 0.5, 1.0, 2.0]
    assert np.isnan(fl.diameter.sel(t1=1.0, t=2.0)).all() and fl.result.dims == ("t1", "condition")


@pytest.mark.e2e
def test_an_array_added_to_a_flow_store_of_the_earlier_layout_is_in_time(tmp_path):
    """A store whose manifest records no path (the earlier layout) labels a flow's array it creates on resuming by
    the chunk's arrays (a flow's has the solver's ``result``): in ``t``, not in steps."""
    import zarr

    from jaxattn.io.store import SweepStore

    cfg = {"num_init": 2, "chunk": 4, "init": {"n": 3}, "model": {"source": "random", "d": 4, "heads": 1},
           "dynamics": {"kind": "continuous", "t1": 1.0, "saves": 3}}
    root = tmp_path / "f"
    ja.sweep_grid(cfg, root, progress=False)
    manifest = json.loads((root / "manifest.json").read_text())
    for p in manifest["points"]:
        del p["kernel"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    del zarr.open_group(str(root / "data.zarr"), mode="a")["p0000/observables/diameter"]
    store = SweepStore.open(root)
    chunk = {"observables/diameter": np.zeros((2, 3), np.float32), "result": np.zeros(2, np.int32)}
    store.write_chunk(0, 0, 0, chunk, rows=2, chunk=4)  # the diameter first: the chunk's result tells
    dims = lambda: zarr.open_group(str(root / "data.zarr"))["p0000/observables/diameter"].metadata.dimension_names
    assert dims() == ("condition", "t")
    del zarr.open_group(str(root / "data.zarr"), mode="a")["p0000/observables/diameter"]
    SweepStore.open(root).write_chunk(0, 0, 0, {"observables/diameter": chunk["observables/diameter"]}, rows=2,
                                      chunk=4)  # a map's chunk: no result
    assert dims() == ("condition", "step")
