"""Bad input, interruptions and corruptions: one clear error or a correct result, never a silent wrong one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

import jaxattn as ja
import jaxattn.sweeps._point as point_mod  # a sweep's chunks are its point's runs
import jaxattn.sweeps.chunked as sweep_mod
from jaxattn.cli import main
from jaxattn.errors import CheckpointError, ConfigError

from . import hf_models

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--num-init", "12", "--n", "3", "--d", "8", "--heads", "2", "--depth", "2", "--chunk", "4", "--no-progress"]


def _err(capsys):
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error:") and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    hf_models.build("gpt2", folder)
    return ja.convert(str(folder), str(folder / "gpt2.safetensors"))


# ------------------------------------------------------------------ resume never mixes configurations
@pytest.mark.e2e
def test_resume_with_another_mask_is_refused(tmp_path, monkeypatch, capsys):
    calls = []
    real = point_mod.simulate

    def dies(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(point_mod, "simulate", dies)
    assert main(["simulate", *SMALL, "--mask", "full", "--out", str(tmp_path / "r")]) == 130
    monkeypatch.setattr(point_mod, "simulate", real)
    capsys.readouterr()
    assert main(["simulate", *SMALL, "--mask", "causal", "--out", str(tmp_path / "r")]) == 2
    assert "another configuration" in _err(capsys)


@pytest.mark.e2e
def test_same_options_other_weights_are_refused(tmp_path):
    """The fingerprint holds the weights' sha256: two models under one name cannot be mixed (analyze)."""
    a = ja.random_model(jax.random.key(0), 8, 2, 2, mask="full")
    b = ja.random_model(jax.random.key(0), 8, 2, 2, mask="causal")
    kw = dict(num_init=8, n=3, steps=2, chunk=4, progress=False, fingerprint={"model": "random"}, out_dir=tmp_path)
    sweep_mod.sweep(a, **kw)
    with pytest.raises(ConfigError, match="another configuration"):
        sweep_mod.sweep(b, **kw)


def test_corrupt_or_missing_store_files_are_never_trusted(tmp_path):
    model = ja.random_model(jax.random.key(0), 8, 2, 2)
    kw = dict(num_init=12, n=3, steps=2, chunk=4, progress=False)
    good = sweep_mod.sweep(model, **kw)
    sweep_mod.sweep(model, out_dir=tmp_path, **kw)
    store = tmp_path / sweep_mod.STORE
    files = sorted(p for p in (store / "data.zarr" / "p0000" / "observables").rglob("*")
                   if p.is_file() and p.name != "zarr.json")
    files[0].write_bytes(b"\0" * len(files[0].read_bytes()))  # zeroed chunk
    files[1].write_bytes(b"")  # empty chunk
    stats = {}
    again = sweep_mod.sweep(model, out_dir=tmp_path, stats=stats, **kw)
    assert stats["computed"] >= 4 and stats["resumed"] < 12
    for k in good:
        np.testing.assert_array_equal(again[k], good[k])
    (store / "manifest.json").unlink()  # a store whose manifest is gone is not reused with another seed
    with pytest.raises(ConfigError, match="holds no sweep"):
        sweep_mod.sweep(model, out_dir=tmp_path, **{**kw, "seed": 5})


# ------------------------------------------------------------------ user data and finished runs
def test_user_files_are_never_deleted(tmp_path, capsys):
    out = tmp_path / "u"
    (out / "chunks").mkdir(parents=True)
    (out / "chunks" / "keep.txt").write_text("x")
    (out / "sweeps").mkdir()
    (out / "sweeps" / "mine.txt").write_text("y")
    for extra in ([], ["--overwrite"]):  # a directory jaxattn did not write is refused, never mixed or cleared
        assert main(["simulate", *SMALL, "--out", str(out), *extra]) == 2
        assert "'chunks', which jaxattn did not write" in _err(capsys)
    assert (out / "chunks" / "keep.txt").read_text() == "x" and (out / "sweeps" / "mine.txt").read_text() == "y"
    assert sorted(p.name for p in out.iterdir()) == ["chunks", "sweeps"]


def test_finished_run_is_refused_or_replaced(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["simulate", *SMALL, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["simulate", *SMALL, "--seed", "7", "--out", str(out)]) == 2
    assert "holds a finished run" in _err(capsys)
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 0  # untouched
    (out / "old-figure.png").write_bytes(b"mine")  # not jaxattn's: --overwrite refuses rather than delete it
    assert main(["simulate", *SMALL, "--seed", "7", "--out", str(out), "--overwrite"]) == 2
    assert "'old-figure.png', which jaxattn did not write" in _err(capsys)
    (out / "old-figure.png").unlink()
    assert main(["simulate", *SMALL, "--seed", "7", "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 7


# ------------------------------------------------------------------ options recorded but not applied
@pytest.mark.parametrize("extra,match", [
    (["--biases"], "no biases"),
    (["--pre-ln"], "pre-norm models"),
    (["--ffn"], "no FFN"),
    (["--norm", "layernorm"], "no LayerNorm"),
])
def test_options_that_would_change_nothing_are_refused(extra, match, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["simulate", *SMALL, *extra, "--out", str(out)]) == 2
    assert match in _err(capsys)
    assert not out.exists()  # a refused run leaves nothing behind


def test_random_model_options_with_a_converted_model(gpt2_file, tmp_path, capsys):
    for opt in (["--mask", "causal"], ["--d", "7"], ["--heads", "5"], ["--no-shared"]):
        assert main(["simulate", "--model", str(gpt2_file), *opt, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
        assert "only applies to --model random" in _err(capsys)


@pytest.mark.parametrize("cfg,match", [
    ({"shared": "false"}, "config value shared: expected bool, got 'false'"),
    ({"num_init": True}, "config value num_init: expected int, got True"),
    ({"alpha": "fast"}, "config value alpha: expected float, got 'fast'"),
    ({"mask": 5}, "config value mask: expected str, got 5"),
    ({"beta": float("nan")}, "config value beta: must be finite, got nan"),
])
def test_config_values_are_type_checked(cfg, match, tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    assert main(["simulate", "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    assert match in _err(capsys)
    assert not (tmp_path / "r").exists()


def test_a_finished_runs_config_json_replays_it(tmp_path):
    assert main(["simulate", *SMALL, "--seed", "4", "--out", str(tmp_path / "a")]) == 0
    assert main(["simulate", "--config", str(tmp_path / "a" / "config.json"), "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "config.json").read_text())["config"]
    b = json.loads((tmp_path / "b" / "config.json").read_text())["config"]
    assert a["weights_sha256"] == b["weights_sha256"] and a["seed"] == b["seed"] == 4
    from jaxattn.io.results import load_arrays

    np.testing.assert_array_equal(load_arrays(tmp_path / "a" / "observables.safetensors")["observables.diameter"],
                                  load_arrays(tmp_path / "b" / "observables.safetensors")["observables.diameter"])


@pytest.mark.e2e
def test_a_replay_neither_goes_to_the_recorded_out_nor_replaces_it(tmp_path, monkeypatch, capsys):
    """A run made with --overwrite recorded out and overwrite; replaying its config.json used both and silently
    replaced that finished run. The replay goes to its own --out (here the default) and replaces nothing."""
    monkeypatch.chdir(tmp_path)
    ow = tmp_path / "ow"
    assert main(["simulate", *SMALL, "--out", str(ow)]) == 0
    assert main(["simulate", *SMALL, "--alpha", "0.5", "--overwrite", "--out", str(ow)]) == 0
    before = (ow / "config.json").read_bytes()
    assert main(["simulate", "--config", str(ow / "config.json")]) == 0
    assert (ow / "config.json").read_bytes() == before
    assert json.loads((tmp_path / "runs" / "simulate" / "config.json").read_text())["config"]["alpha"] == 0.5
    capsys.readouterr()
    assert main(["simulate", "--config", str(ow / "config.json"), "--out", str(ow)]) == 2
    assert "--overwrite" in _err(capsys) and (ow / "config.json").read_bytes() == before


@pytest.mark.parametrize("argv,match", [
    (["--alpha", "nan"], "--alpha: must be finite, got nan"),
    (["--beta", "inf"], "--beta: must be finite, got inf"),
    (["--seed", str(2**70)], "--seed: must be in [0, 2^63)"),
    (["--num-init", str(10**12)], "--num-init: must be <= 2^32"),
])
def test_cli_values_refused_with_one_line(argv, match, tmp_path, capsys):
    assert main(["simulate", *SMALL, *argv, "--out", str(tmp_path / "r")]) == 2
    assert match in _err(capsys)
    assert not (tmp_path / "r").exists()


def test_out_naming_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("mine")
    assert main(["simulate", *SMALL, "--out", str(f)]) == 2
    assert "is not a directory" in _err(capsys) and f.read_text() == "mine"


# ------------------------------------------------------------------ converted files keep their integrity
def test_modified_converted_file_is_refused(gpt2_file, tmp_path):
    data = bytearray(Path(gpt2_file).read_bytes())
    header = int.from_bytes(data[:8], "little")
    start = 8 + header
    data[start + 100:start + 400] = b"\0" * 300  # zero part of the tensor data, header intact
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="do not match the checksum"):
        ja.load(bad)
    ja.load(gpt2_file)  # the original still loads


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
# ------------------------------------------------------------------ the API
@pytest.mark.parametrize("X0,match", [
    (np.full((1, 3, 4), np.nan), "non-finite"),
    (np.full((1, 3, 4), np.inf), "non-finite"),
    (np.zeros((1, 3, 4)), "exactly zero"),
    (np.ones((1, 3, 4)) * (1 + 1j), "complex"),
    (None, "None"),
    (np.zeros((1, 0, 4)), "no token"),
])
def test_bad_initial_states(X0, match):
    model = ja.random_model(jax.random.key(0), 4, 2, 1)
    with pytest.raises(ConfigError, match=match):
        ja.simulate(model, X0, 2)
    with pytest.raises(ConfigError, match=match):
        ja.solve(model, X0, 1.0)


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
@pytest.mark.parametrize("kw,match", [
    (dict(steps=True), "steps must be"),
    (dict(batch=ja.Batch(size=3), save="last"), r"save must be a jaxattn.Save, got 'last' \(steps to save are"),
    (dict(alpha=np.ones(3)), "alpha must be a finite number"),
    (dict(beta=float("nan")), "beta must be a finite number"),
])
def test_bad_arguments(kw, match):
    model = ja.random_model(jax.random.key(0), 4, 2, 1)
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4)
    args = {"steps": 2, **kw}
    with pytest.raises(ConfigError, match=match):
        ja.simulate(model, X0, args.pop("steps"), **args)


def test_nan_weights_edited_in_are_refused():
    model = ja.random_model(jax.random.key(0), 4, 2, 1)
    bad = model.replace(layers=model.layers.replace(v=model.layers.v.at[0, 0, 0, 0].set(jnp.nan)))
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4)
    for call in (lambda: ja.simulate(bad, X0, 2), lambda: ja.solve(bad, X0, 1.0)):
        with pytest.raises(ConfigError, match="non-finite"):
            call()


@pytest.mark.e2e
def test_float64_without_x64_is_refused():
    code = ("import jax, jax.numpy as jnp, jaxattn as ja\n"
            "m = ja.random_model(jax.random.key(0), 4, 2, 1)\n"
            "try:\n    ja.simulate(m, ja.init_tokens(jax.random.key(1), 2, 3, 4), 2, dtype=jnp.float64)\n"
            "except ja.ConfigError as e:\n    print('refused:', e)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "refused: float64 needs JAX's x64 mode" in out


@pytest.mark.unchecked_types("a float id on purpose: the user's one-line error")
def test_token_ids_are_checked(gpt2_file):
    model = ja.load(gpt2_file)
    vocab = model.embeddings.word.shape[0]
    for ids, match in (([vocab], "must be in"), ([-1, 3], "must be in"), ([], "non-empty"), ([1.5], "integers")):
        with pytest.raises(ConfigError, match=match):
            ja.hidden_states(model, ids)


def test_single_token_is_at_consensus():
    assert float(ja.metrics.cos_consensus(jnp.ones((1, 4)))) == 0.0


def test_files_follow_the_umask(tmp_path):
    from jaxattn.io.results import write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    with pytest.raises(ValueError):
        write_json(tmp_path / "b.json", {"x": float("nan")})  # strict JSON: NaN is refused, not written


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
def test_wrong_kinds_of_arguments_get_one_clear_error():
    model = ja.random_model(jax.random.key(0), 4, 2, 1)
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4)
    with pytest.raises(ConfigError, match=r"dynamics must be a jaxattn\.Dynamics"):
        ja.simulate(model, X0, 2, dynamics="D1")
    for call in (lambda: ja.random_model(0, 4, 2, 1), lambda: ja.init_tokens(7, 2, 3, 4),
                 lambda: ja.model.sampling.symmetric_with_spectrum(1, [1.0, 2.0])):
        with pytest.raises(ConfigError, match="key must be a JAX PRNG key"):
            call()
    # both key styles are accepted and give the same tokens
    np.testing.assert_array_equal(ja.init_tokens(jax.random.PRNGKey(3), 2, 3, 4),
                                  ja.init_tokens(jax.random.wrap_key_data(jax.random.PRNGKey(3)), 2, 3, 4))


def test_the_suite_checks_annotations_at_run_time(request):
    """The suite runs with jaxtyping's runtime checker on the package (pyproject.toml's addopts): a wrong kind of
    value meets it before the package's own check, and an array of the wrong shape for its annotation too; the tests
    marked ``unchecked_types`` see the package's one-line error instead (the test above)."""
    assert request.config.getoption("--jaxtyping-packages"), "the suite runs with --jaxtyping-packages (pyproject.toml)"
    model = ja.random_model(jax.random.key(0), 4, 2, 1)
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4)
    with pytest.raises(jaxtyping.TypeCheckError, match="dynamics"):
        ja.simulate(model, X0, 2, dynamics="D1")
    # velocity's X is Float[Array, "n d"]: one configuration, not a batch
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'X'"):
        ja.velocity(model, X0)


@pytest.mark.e2e
@pytest.mark.requires_cpu("pieces of whole blocks of the CPU's 64 conditions")
def test_a_big_chunk_moves_the_progress_bar_and_auto_chunk_fits_the_budget(monkeypatch):
    model = ja.random_model(jax.random.key(0), 8, 2, 3, shared=False)
    kw = dict(num_init=700, n=4, steps=3, progress=False, keep_final=True)
    calls = []
    real = point_mod.simulate
    monkeypatch.setattr(point_mod, "simulate", lambda m, X0, *a, **k: calls.append(X0.shape[0]) or real(m, X0, *a, **k))
    one = sweep_mod.sweep(model, chunk=700, **kw)
    assert len(calls) > 1  # the chunk ran in pieces, each one a progress-bar update
    assert sum(calls) >= 700 and all(c == calls[0] for c in calls)  # one piece shape: one compiled program
    small = sweep_mod.sweep(model, chunk=64, **kw)
    stats = {}
    auto = sweep_mod.sweep(model, stats=stats, **kw)
    for k in one:
        np.testing.assert_array_equal(one[k], small[k])
        np.testing.assert_array_equal(one[k], auto[k])
    # the automatic chunk holds its arrays within the budget, in whole lane blocks
    c = sweep_mod.auto_chunk(32, 1024, 24, keep_final=True, dtype=jnp.float32, lanes=64)
    assert c % 64 == 0 and c * 4 * (2 * 32 * 1024 + 8 * 25) <= sweep_mod.CHUNK_BUDGET
    assert (c + 64) * 4 * (2 * 32 * 1024 + 8 * 25) > sweep_mod.CHUNK_BUDGET
    assert stats["chunk"] == sweep_mod.auto_chunk(4, 8, 3, keep_final=True, dtype=jnp.float32)


@pytest.mark.parametrize("name,text,match", [
    ("c.toml", "alpha = [", "is not valid TOML"),
    ("c.json", "{\"alpha\": ", "is not valid JSON"),
    ("c.json", "[1, 2]", "must hold a table of option = value"),
])
def test_unreadable_config_files_are_one_error_line(name, text, match, tmp_path, capsys):
    path = tmp_path / name
    path.write_text(text)
    for argv in (["simulate", *SMALL, "--config", str(path), "--out", str(tmp_path / "r")],
                 ["sweep", str(path), "--out", str(tmp_path / "s")]):
        assert main(argv) == 2
        assert match in _err(capsys)
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_an_interrupted_study_leaves_its_directory_as_it_found_it(tmp_path, monkeypatch, capsys):
    import jaxattn.studies.stability as study

    def interrupted(out, cfg, progress=None):  # writes part of its directory (as studies write), then Ctrl-C
        from jaxattn.io.results import atomic_write_text

        atomic_write_text(out / "half.csv", "partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(study, "run", interrupted)
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        assert main(["stability", "--out", str(out), "--no-progress", "--no-figures"]) == 130
        assert f"{out} is left as it was found (nothing of this run was kept)" in capsys.readouterr().err
        assert (not out.exists()) if out.name == "new" else (out.is_dir() and not any(out.iterdir()))


def test_an_interrupted_overwrite_of_a_study_says_the_earlier_run_is_whole(tmp_path, monkeypatch, capsys):
    """Ctrl-C during ``--overwrite`` of a finished study: the line says the earlier run is whole (it is: the
    replacement was built beside it and removed), not that nothing was kept."""
    import collections

    import jaxattn.studies.stability as study
    from jaxattn.io.results import atomic_write_text

    def finished(out, cfg, progress=None):
        atomic_write_text(out / "report.md", "the earlier run")
        return collections.defaultdict(list)  # no rows in the tables the command prints

    def interrupted(out, cfg, progress=None):
        atomic_write_text(out / "half.csv", "partial")
        raise KeyboardInterrupt

    out = tmp_path / "run"
    monkeypatch.setattr(study, "run", finished)
    assert main(["stability", "--out", str(out), "--no-progress", "--no-figures"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(study, "run", interrupted)
    assert main(["stability", "--out", str(out), "--no-progress", "--no-figures", "--overwrite"]) == 130
    err = capsys.readouterr().err
    assert f"{out} is left as it was found (the earlier run in it is whole)" in err and "nothing" not in err
    assert (out / "report.md").read_text() == "the earlier run" and not (out / "half.csv").exists()
