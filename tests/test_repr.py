"""Issue 52 §3: the library's objects show a compact summary in a terminal (``__repr__``) and in a notebook
(``_repr_html_``): shapes, dtypes, how many conditions ended non-finite, the configuration's key values; a summary of
traced or abstract values (under ``jit``, ``vmap``, ``eval_shape``) does not fail; progress bars take the notebook's
form there (``tqdm.auto``)."""

from __future__ import annotations

import ast
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxattn as ja


@pytest.fixture(scope="module")
def model():
    return ja.random_model(jax.random.key(0), d=4, heads=1, depth=2)


def _both(obj) -> tuple[str, str]:
    text, page = repr(obj), obj._repr_html_()
    assert page.startswith("<div") and "<table" in page
    return text, page


def assert_shows(obj, title: str, **rows: str) -> None:
    """The title and every row ``label: value`` (``non_finite`` for ``non-finite``) in the terminal's form and in
    the notebook's (a table there, HTML-escaped)."""
    import html

    text, page = _both(obj)
    assert text.startswith(f"<{title}>") and f">{title}</div>" in page, (text, page)
    for label, value in rows.items():
        label = label.replace("non_finite", "non-finite")
        assert f"{label:<12} {value}" in text, (label, value, text)
        assert f">{html.escape(label)}</th>" in page and html.escape(value) in page, (label, value, page)


def test_a_model(model):
    assert_shows(model, "jaxattn.Model", d_model="4   heads 1", depth="2 blocks, 1 weight set(s)  (shared weights)",
           weights="q (1, 1, 4, 4) float64", non_finite="0 of 7 arrays")
    assert len(repr(model).splitlines()) < 15  # compact: no weights printed
    broken = model.replace(layers=model.layers.replace(v=model.layers.v.at[0, 0, 0, 0].set(np.nan)))
    assert_shows(broken, "jaxattn.Model", non_finite="1 of 7 arrays (.layers.v)")


def test_a_simulation():
    final = np.ones((3, 2, 4), np.float32)
    final[1, 0, 0] = np.nan
    res = ja.Simulation({"diameter": np.zeros((3, 5), np.float32)}, final, None)
    assert_shows(res, "jaxattn.Simulation", dimensions="condition: 3, step (saved): 5, token: 2, coord: 4",
           observables="diameter (3, 5) float32", final="(3, 2, 4) float32", trajectory="none",
           non_finite="1 of 3 conditions")


def test_a_solution():
    final = np.zeros((3, 2, 4))
    final[2] = np.inf
    sol = ja.Solution(np.linspace(0.0, 2.0, 5), {"diameter": np.zeros((3, 5))}, final, np.zeros((3, 5, 2, 4)),
                      np.asarray([0, 1, 3], np.int32), np.asarray([4, 100, 7], np.int32))
    assert_shows(sol, "jaxattn.Solution", dimensions="condition: 3, t (saved): 5, token: 2, coord: 4", times="0 to 2",
           trajectory="(3, 5, 2, 4) float64", solves="1 of 3 succeeded (1 max_steps_reached, 1 nonfinite)",
           non_finite="1 of 3 conditions")


def test_a_spectrum(model):
    assert_shows(ja.spectrum(model), "jaxattn.Spectrum", dimensions="weight sets: 1, d: 4", order="real",
           F="(1, 4, 4) float64", non_finite="0 of 1 weight set")


def test_a_sweep(tmp_path):
    """A store written by hand (no run: its summary is what is checked; tests/test_xarray.py shows a real one)."""
    from jaxattn.io.store import SweepStore, manifest
    from jaxattn.sweeps.grid import validate_config

    cfg = validate_config({"num_init": 3, "chunk": 2, "init": {"n": 2}, "dynamics": {"beta": [1.0, 2.0]},
                           "model": {"source": "random", "d": 4, "heads": 1, "depth": 2}})
    points = [{"params": {"dynamics.beta": b}, "num_init": 3, "n": 2, "d": 4, "times": [0.0, 1.0, 2.0],
               "kernel": "plain", "lanes": 4} for b in (1.0, 2.0)]
    store = SweepStore.open(tmp_path / "g", manifest({"config": cfg}, chunk=2, points=points, config=cfg))
    for i in range(2):
        for c, start in ((0, 0), (1, 2)):
            if (i, c) != (1, 1):  # the last chunk of the second point is not finished
                rows = np.zeros((min(2, 3 - start), 3), np.float32)
                store.write_chunk(i, c, start, {"observables/diameter": rows}, rows=3, chunk=2)
    sw = ja.open_sweep(tmp_path / "g")
    rows = dict(grid="2 points: beta [1, 2]", dimensions="condition: 3, step: 3, token: 2, coord: 4",
                finished="5 of 6 conditions (chunks of 2)", model="random: d 4, heads 1, depth 2, full",
                observables="diameter, cos_consensus")
    assert_shows(sw, "jaxattn.Sweep", **rows, non_finite="not recorded (table() counts them)")
    store.mark_finished({"nonfinite": 1, "processes": 1}, 0)
    assert_shows(ja.open_sweep(tmp_path / "g"), "jaxattn.Sweep", **rows, non_finite="1 of 6 conditions")


def test_a_summary_of_traced_values_does_not_fail(model):
    """Under ``jit`` and ``vmap`` the shapes and dtypes are shown and the values said to be unknown; a result of
    ``eval_shape`` or one whose leaves a transformation replaced falls back to its plain form."""
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4)
    seen: list[str] = []

    def show(x):
        seen.append(repr(x))
        seen.append(x._repr_html_())

    # traced as jit traces (eval_shape: nothing compiled or run)
    jax.eval_shape(jax.jit(lambda X: (show(ja.simulate_one(model, X, 1)), X)[1]), X0[0])
    assert "final        (3, 4) float64 (traced)" in seen[0] and "non-finite   unknown (traced" in seen[0]
    jax.eval_shape(jax.vmap(lambda X: (show(ja.simulate_one(model, X, 1)), X)[1]), X0)
    assert "final        (3, 4) float64 (traced)" in seen[2]
    jax.eval_shape(jax.jit(lambda m: (show(m), m.layers.q.sum())[1]), model)
    assert "masks and scale traced" in seen[4] and "non-finite   unknown" in seen[4]
    sol = ja.Solution(np.linspace(0.0, 1.0, 2), {"diameter": np.zeros((2, 2))}, np.zeros((2, 3, 4)), None,
                      np.zeros(2, np.int32), np.ones(2, np.int32))
    jax.eval_shape(jax.jit(lambda s: (show(s), s.final.sum())[1]), sol)
    assert "solves       unknown" in seen[6] and "times" not in seen[6]
    assert "(abstract)" in repr(jax.eval_shape(lambda: ja.simulate(model, X0, 1)))
    plain = jax.tree_util.tree_map(lambda a: 0, ja.Simulation({"d": np.zeros((2, 2))}, np.zeros((2, 3, 4)), None))
    assert repr(plain) == "Simulation(observables={'d': 0}, final=0, trajectory=None)"
    assert plain._repr_html_().startswith("<pre>")
    again = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(sol), jax.tree_util.tree_leaves(sol))
    assert isinstance(again, ja.Solution) and repr(again) == repr(sol)  # still a NamedTuple pytree


def test_progress_bars_take_the_notebooks_form():
    """Every progress bar of the package comes from ``tqdm.auto``: a bar of widgets in a notebook, text in a
    terminal."""
    root = Path(ja.__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "jaxattn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tqdm":
                names = [node.module or ""]
            if any(n.split(".")[0] == "tqdm" and n not in ("tqdm.auto", "tqdm.autonotebook") for n in names):
                found.append(path.relative_to(root).as_posix())
    assert not found, f"progress bars not from tqdm.auto: {sorted(set(found))}"
