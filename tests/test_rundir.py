"""The ``--out`` contract (jaxattn.io.rundir): jaxattn deletes or replaces only what it wrote itself."""

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jaxattn.sweeps._point as point_mod  # a sweep's chunks are its point's runs
import jaxattn.sweeps.chunked as sweep_mod
from jaxattn.cli import main
from jaxattn.errors import ConfigError
from jaxattn.io import rundir

from . import hf_models
from .subprocess_env import one_device_env

SIM = ["simulate", "--d", "8", "--heads", "2", "--depth", "2", "--num-init", "8", "--n", "3", "--chunk", "4",
       "--no-progress"]
ANALYZE = ["analyze", "random", "--d", "8", "--heads", "2", "--depth", "2", "--num-init", "8", "--n", "3",
           "--gammas", "0,1", "--prolong", "1", "--no-ffn-study", "--no-figures", "--no-progress"]
CLUSTERS = ["clusters", "--n", "4", "--n-1d", "3", "--t1", "1", "--num", "2", "--table-n", "3", "--table-d", "2",
            "--table-beta", "1", "--good-d", "2", "--good-samples", "2", "--ensembles", "ginibre", "--no-figures",
            "--no-progress"]
CONSENSUS = ["consensus", "CKPT", "--passes", "1", "--prompts", "2", "--tokens", "3", "--no-synthetic", "--no-figures",
             "--no-progress"]
STABILITY = ["stability", "--tokens", "3", "--models", "1", "--basin-num", "2", "--basin-n", "3", "--perturb-num",
             "1", "--search", "2", "--no-figures", "--no-progress"]
SOLVE = ["solve", "--num-init", "8", "--n", "3", "--d", "4", "--heads", "1", "--depth", "1", "--t1", "0.1",
         "--no-progress"]
USER = {"notes.txt": "my notes", "report.md": "# my report", "config.json": '{"mine": true}'}


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error:") and err.count("\n") == 1, err
    return err


def _user_dir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in USER.items():
        (folder / name).write_text(text)
    return folder


def _with(argv: list[str], checkpoint: Path) -> list[str]:
    return [str(checkpoint) if a == "CKPT" else a for a in argv]


def _intact(folder: Path) -> bool:
    return {p.name: p.read_text() for p in folder.iterdir()} == USER


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    hf_models.build("gpt2", folder)
    return folder


@pytest.fixture(scope="module")
def sweep_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("grid") / "grid.toml"
    path.write_text("num_init = 8\n[model]\nd = 4\nheads = 1\ndepth = 1\n[init]\nn = 3\n")
    return path


# ---------------------------------------------------------------- --out ""
@pytest.mark.parametrize("argv", [
    [*SIM, "--overwrite"], [*SIM], [*ANALYZE, "--overwrite"], CLUSTERS, STABILITY, SOLVE, ["sweep", "GRID"],
    ["convert", "CKPT"]], ids=lambda a: a[0] + ("-overwrite" if "--overwrite" in a else ""))
def test_empty_out_is_refused_and_the_current_directory_kept(argv, tmp_path, monkeypatch, capsys, checkpoint,
                                                             sweep_config):
    """`--out ""` once meant the current directory: `simulate --overwrite` deleted every file in it."""
    argv = _with([str(sweep_config) if a == "GRID" else a for a in argv], checkpoint)
    monkeypatch.chdir(_user_dir(tmp_path / "cwd"))
    assert main([*argv, "--out", ""]) == 2
    assert "--out must name a path" in _err(capsys)
    assert _intact(tmp_path / "cwd")


# ---------------------------------------------------------------- directories jaxattn did not write
@pytest.mark.parametrize("argv", [SIM, ANALYZE, CLUSTERS], ids=lambda a: a[0])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_directory_of_user_files_is_refused_never_deleted(argv, overwrite, tmp_path, capsys):
    out = _user_dir(tmp_path / "mine")
    assert main([*argv, "--out", str(out), *(["--overwrite"] if overwrite else [])]) == 2
    err = _err(capsys)
    assert "'config.json', which jaxattn did not write" in err and "--overwrite" not in err
    assert _intact(out)


def test_a_run_of_an_older_jaxattn_is_never_deleted(tmp_path, capsys):
    out = tmp_path / "old"
    assert main([*SIM, "--out", str(out)]) == 0
    (out / rundir.MARKER).unlink()  # as written before the marker existed
    before = sorted(p.name for p in out.iterdir())
    for extra in ([], ["--overwrite"]):
        assert main([*SIM, "--seed", "3", "--out", str(out), *extra]) == 2
        assert "older jaxattn" in (err := _err(capsys)) and "remove it by hand" in err
    assert sorted(p.name for p in out.iterdir()) == before


def test_overwrite_replaces_only_what_jaxattn_wrote(tmp_path, capsys):
    out = tmp_path / "r"
    assert main([*SIM, "--out", str(out)]) == 0
    marker = json.loads((out / rundir.MARKER).read_text())
    assert marker["format"] == "jaxattn-run" and marker["version"] == 1 and marker["command"] == "simulate"
    assert marker["finished"] and {p.name for p in out.iterdir()} - {rundir.MARKER} <= set(marker["files"])
    assert {"config.json", "observables.safetensors", "summary.txt"} <= set(marker["files"])
    (out / "notes.txt").write_text("mine")  # the user's file, added to a finished run
    capsys.readouterr()
    assert main([*SIM, "--seed", "7", "--out", str(out), "--overwrite"]) == 2
    assert "'notes.txt', which jaxattn did not write" in _err(capsys)
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 0 and (out / "notes.txt").exists()
    (out / "notes.txt").unlink()
    (out / ".summary.txt.k3j4h5g6.tmp").write_text("stale")  # a temporary of a killed write is jaxattn's
    assert main([*SIM, "--seed", "7", "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 7
    assert not (out / ".summary.txt.k3j4h5g6.tmp").exists()


SOLVE = ["solve", "--d", "4", "--heads", "1", "--depth", "2", "--num-init", "4", "--n", "3", "--chunk", "4", "--t1",
         "1", "--saves", "3", "--no-progress"]


@pytest.mark.e2e
def test_overwrite_of_a_solve_removes_its_own_movie(tmp_path, capsys):
    """`solve --movie` (and `jaxattn movie` of a finished solve) wrote movie.gif and trajectory.safetensors beside the
    sweep store, which has no run marker: `--overwrite` then refused the run, calling jaxattn's own files foreign.
    They are recorded in the store's manifest now and replaced with it; a file of the user's still is refused."""
    out = tmp_path / "s"
    assert main([*SOLVE, "--movie", "--out", str(out)]) == 0
    made = {"movie.gif", "trajectory.safetensors"}
    assert made <= {p.name for p in out.iterdir()}
    assert made <= set(json.loads((out / "manifest.json").read_text())["files"])
    capsys.readouterr()
    assert main([*SOLVE, "--beta", "3", "--overwrite", "--out", str(out)]) == 0, _err(capsys)
    assert not made & {p.name for p in out.iterdir()}  # the old run's movie went with it (no --movie this time)
    assert json.loads((out / "config.json").read_text())["config"]["dynamics"]["beta"] == 3.0
    assert main(["movie", str(out)]) == 0  # a movie of the finished run afterwards: recorded too
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main([*SOLVE, "--beta", "2", "--overwrite", "--out", str(out)]) == 2
    assert "'notes.txt'" in _err(capsys) and (out / "notes.txt").exists() and (out / "movie.gif").exists()
    (out / "notes.txt").unlink()
    assert main([*SOLVE, "--beta", "2", "--overwrite", "--out", str(out)]) == 0
    assert not (out / "movie.gif").exists()
    # a movie written into a folder of the user's that has a manifest.json of its own: written, the file untouched
    mine = tmp_path / "site"
    mine.mkdir()
    (mine / "manifest.json").write_text('{"name": "my web app"}')
    assert main(["movie", str(out), "--out", str(mine / "flow.gif")]) == 0
    assert (mine / "flow.gif").exists() and (mine / "manifest.json").read_text() == '{"name": "my web app"}'


@pytest.mark.parametrize("name", [".notes.txt.k3j4h5g6.tmp", ".config.json.d.a1b2c3d4.tmp", "..x.tmp"])
def test_overwrite_keeps_a_foreign_file_named_like_a_temporary(name, tmp_path, capsys):
    """A file of the user's whose name has the shape of jaxattn's temporaries (``.NAME.XXXXXXXX.tmp``) but whose NAME
    is not one jaxattn wrote there: ``--overwrite`` of the finished run is refused naming it, and nothing is deleted."""
    out = tmp_path / "r"
    assert main([*SIM, "--out", str(out)]) == 0
    (out / name).write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main([*SIM, "--seed", "7", "--out", str(out), "--overwrite"]) == 2
    assert f"{name!r}, which jaxattn did not write" in _err(capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.e2e
def test_a_finished_study_is_refused_unless_overwrite(tmp_path, capsys, checkpoint):
    out = tmp_path / "c"
    study = _with(CONSENSUS, checkpoint)
    assert main([*study, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main([*study, "--seed", "1", "--out", str(out)]) == 2
    assert "holds a finished run of `jaxattn consensus`" in _err(capsys)
    assert main([*SIM, "--out", str(out), "--overwrite"]) == 0  # another command replaces it, with --overwrite
    assert json.loads((out / "config.json").read_text())["command"] == "simulate"
    assert not (out / "passes.csv").exists()  # the study's files are gone


# ---------------------------------------------------------------- what a SIGKILL leaves behind
def test_a_killed_study_is_cleared_by_the_rerun(tmp_path, capsys, checkpoint):
    """A study killed during its final writes leaves CSVs, its marker (unfinished) and a temporary."""
    out = tmp_path / "c"
    study = _with(CONSENSUS, checkpoint)
    assert main([*study, "--out", str(out)]) == 0
    marker = json.loads((out / rundir.MARKER).read_text())
    (out / rundir.MARKER).write_text(json.dumps({**marker, "finished": False}))
    (out / "report.md").unlink()
    (out / ".report.md.a1b2c3d4.tmp").write_text("half a report")
    assert main([*study, "--out", str(out)]) == 0
    assert (out / "report.md").is_file() and not (out / ".report.md.a1b2c3d4.tmp").exists()
    (out / rundir.MARKER).write_text(json.dumps({**marker, "finished": False}))
    (out / "mine.txt").write_text("x")  # the user's file in it: refused, kept
    capsys.readouterr()
    assert main([*study, "--out", str(out)]) == 2
    assert "'mine.txt'" in _err(capsys) and (out / "mine.txt").read_text() == "x"


def test_a_killed_simulate_resumes_and_drops_its_stale_temporary(tmp_path, monkeypatch):
    out = tmp_path / "r"
    real, calls = point_mod.simulate, []

    def dies(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(point_mod, "simulate", dies)
    assert main([*SIM, "--out", str(out)]) == 130
    monkeypatch.setattr(point_mod, "simulate", real)
    rundir.claim(out / "observables.safetensors")  # what a SIGKILL during the final write leaves: the name
    stale = out / ".observables.safetensors.q9w8e7r6.tmp"  # recorded, then part of its temporary
    stale.write_bytes(b"\0" * 1000)
    assert main([*SIM, "--out", str(out)]) == 0
    assert not stale.exists()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["resumed_conditions"] == 4 and cfg["computed_conditions"] == 4


def test_an_unfinished_run_of_another_command_needs_overwrite(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r"
    real, calls = point_mod.simulate, []

    def dies(*a, **k):  # after one finished chunk (a run stopped before any result keeps no store)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(point_mod, "simulate", dies)
    assert main([*SIM, "--out", str(out)]) == 130
    capsys.readouterr()
    assert main([*CLUSTERS, "--out", str(out)]) == 2
    assert "holds an unfinished run of `jaxattn simulate`" in _err(capsys)
    assert (out / sweep_mod.STORE).is_dir()


def test_an_interrupted_study_removes_only_its_own_files(tmp_path, monkeypatch):
    import jaxattn.studies.clusters as study
    from jaxattn.io.results import atomic_write_text

    out = tmp_path / "a" / "b" / "c"

    def interrupted(out, cfg, progress=None):
        atomic_write_text(out / "half.csv", "partial")
        (out.parents[1] / "theirs.txt").write_text("written meanwhile by someone else")
        raise KeyboardInterrupt

    monkeypatch.setattr(study, "run", interrupted)
    assert main([*CLUSTERS, "--out", str(out)]) == 130
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["theirs.txt"]  # the folders start created are gone


# ---------------------------------------------------------------- --out under a file, checked before computing
@pytest.mark.parametrize("argv", [SIM, ANALYZE, CLUSTERS, STABILITY, SOLVE, ["convert", "CKPT"]],
                         ids=lambda a: a[0])
def test_out_under_a_file_is_refused_before_any_computation(argv, tmp_path, monkeypatch, capsys, checkpoint):
    import jaxattn.io.checkpoints as ckpt
    import jaxattn.studies.clusters as clusters
    import jaxattn.studies.power_method as power_method
    import jaxattn.studies.stability as stability
    import jaxattn.sweeps.grid as grid

    def computes(*a, **k):
        raise AssertionError("computed before checking --out")

    for mod, name in ((sweep_mod, "sweep"), (power_method, "run"), (clusters, "run"),
                      (stability, "run"), (grid, "sweep_grid"), (ckpt, "convert")):
        monkeypatch.setattr(mod, name, computes)
    monkeypatch.setattr("jaxattn.cli.sweep.execute", computes)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    argv = _with(argv, checkpoint)
    assert main([*argv, "--out", str(afile / "sub")]) == 2
    assert "afile is a file, not a directory" in _err(capsys) and afile.read_text() == "mine"


# ---------------------------------------------------------------- commands that write one file
def test_convert_never_replaces_a_file_silently(checkpoint, tmp_path, capsys):
    out = tmp_path / "model.safetensors"
    out.write_bytes(b"somebody else's file")
    assert main(["convert", str(checkpoint), "--out", str(out)]) == 2
    assert "exists; choose another name or pass --overwrite" in _err(capsys)
    assert out.read_bytes() == b"somebody else's file"
    assert main(["convert", str(checkpoint), "--out", str(tmp_path)]) == 2
    assert "is a directory" in _err(capsys)
    assert main(["convert", str(checkpoint), "--out", str(out), "--overwrite"]) == 0
    assert out.read_bytes()[8:9] == b"{"  # now a safetensors file


# ---------------------------------------------------------------- the marker itself
def test_claim_records_names_before_writing_and_only_in_unfinished_runs(tmp_path):
    from jaxattn.io.results import atomic_write_text

    run = rundir.start(tmp_path / "r", "simulate", resumable=True, own=(".jaxattn-sweep",))
    atomic_write_text(run.path / "a.txt", "a")
    assert rundir.read_marker(run.path)["files"] == [".jaxattn-sweep", "a.txt"]
    rundir.finish(run)
    atomic_write_text(run.path / "b.txt", "b")  # a finished run is no longer extended
    assert rundir.read_marker(run.path)["files"] == [".jaxattn-sweep", "a.txt"]
    assert rundir.is_ours(".a.txt.x1y2z3w4.tmp", ["a.txt"]) and not rundir.is_ours(".b.txt.x1y2z3w4.tmp", ["a.txt"])
    (run.path / rundir.MARKER).write_text("{not json")
    with pytest.raises(ConfigError, match="not a jaxattn run marker"):
        rundir.start(run.path, "simulate", overwrite=True)


def test_a_write_of_the_marker_itself_killed_is_not_foreign(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "..jaxattn-run.json.a1b2c3d4.tmp").write_text("{")  # killed while writing the first marker
    run = rundir.start(out, "consensus")
    assert sorted(p.name for p in run.path.iterdir()) == [rundir.MARKER]


# ---------------------------------------------------------------- a read-only --out
META = ["metastability", "--dims", "2", "--n", "4", "--betas", "2", "--num", "2", "--t1", "10", "--saves", "10",
        "--boot", "5", "--no-figures", "--no-movie", "--no-progress"]


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("mount") is None, reason="needs unshare and mount")
def test_a_read_only_out_is_refused_in_one_line_before_any_work(tmp_path):
    """An --out on a read-only filesystem (a tmpfs mounted read-only in a namespace of the test's own): simulate,
    analyze, metastability and movie each end in one 'jaxattn: error:' line, exit 2, no traceback (they raised
    ``OSError: [Errno 30]`` from the marker's write; movie after rendering for 11 s); solve said it already."""
    ro = tmp_path / "ro"
    ro.mkdir()
    runs = [SIM, ANALYZE, META, SOLVE, ["movie", str(tmp_path / "run"), "--no-progress"]]
    prep = [sys.executable, "-m", "jaxattn.cli", *SIM, "--out", str(tmp_path / "run")]
    r = subprocess.run(prep, env=one_device_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    script = [f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(ro))} || exit 99"]
    for argv in runs:
        out = ro / "movie.gif" if argv[0] == "movie" else ro
        cmd = shlex.join([sys.executable, "-m", "jaxattn.cli", *argv, "--out", str(out)])
        script.append(f"echo '### {argv[0]}'; {cmd} 2>&1; echo \"### rc=$?\"")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", "\n".join(script)], env=one_device_env(), capture_output=True,
                       text=True, timeout=900)
    if r.returncode == 99:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.strip()[:200]}")
    blocks = r.stdout.split("### ")[1:]
    outputs = {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in blocks if not b.startswith("rc=")}
    codes = [b.strip() for b in blocks if b.startswith("rc=")]
    assert list(outputs) == [a[0] for a in runs] and codes == ["rc=2"] * len(runs), r.stdout[-3000:]
    for name, text in outputs.items():
        errors = [line for line in text.splitlines() if line.startswith("jaxattn: error:")]
        assert len(errors) == 1 and "Traceback" not in text, f"{name}: {text[-2000:]}"
        assert "Read-only file system" in errors[0] or "cannot" in errors[0], errors[0]
