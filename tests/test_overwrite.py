"""``--overwrite`` replaces a finished run atomically (:func:`jaxattn.io.rundir.swap`): the new run is built beside
``--out`` and swapped in when finished, so a replacement killed at any point (SIGKILL: no clean-up runs) leaves
the old run byte for byte as it was, and the same command run again finishes the replacement."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.numpy import load_file

from jaxattn.cli import main
from jaxattn.errors import ConfigError
from jaxattn.io import rundir
from jaxattn.io.results import atomic_write_text
from jaxattn.io.store import SweepStore, open_sweep, replacing, swap_in
from jaxattn.studies.skeleton import run_into

from .subprocess_env import ROOT

SIM = ["simulate", "--d", "4", "--heads", "1", "--depth", "1", "--num-init", "8", "--n", "3", "--chunk", "4",
       "--no-progress"]
ANALYZE = ["analyze", "random", "--d", "4", "--heads", "1", "--depth", "1", "--num-init", "8", "--n", "3", "--chunk",
           "4", "--gammas", "0", "--steer-target", "0", "--no-sensitivity", "--prolong", "1", "--no-ffn-study",
           "--no-figures", "--no-progress"]
SOLVE = ["solve", "--d", "4", "--heads", "1", "--depth", "1", "--num-init", "8", "--n", "3", "--chunk", "4", "--t1",
         "0.5", "--saves", "2", "--solver", "euler", "--dt", "0.25", "--no-progress"]
GRID = "num_init = 8\nchunk = 4\nseed = {seed}\n[model]\nd = 4\nheads = 1\ndepth = 1\n[init]\nn = 3\n"

# The replacement, SIGKILLed at a named point: `start` once it is set up, before its first chunk (the chunk loop takes
# its lock); `chunk` after its first chunk is written; `swap` once the old run is renamed away, before the new one is
# renamed in (the one moment --out does not exist).
DRIVER = """
import os, signal, sys
from jaxattn.cli import main
from jaxattn.io import rundir
from jaxattn.io.store import SweepStore

at, argv = sys.argv[1], sys.argv[2:]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
write, move = SweepStore.write_chunk, rundir._move
if at == "start":
    SweepStore.lock = lambda self, *a, **k: die()
elif at == "chunk":
    SweepStore.write_chunk = lambda self, *a, **k: (write(self, *a, **k), die())
elif at == "swap":
    rundir._move = lambda src, dst: (move(src, dst), dst.name.endswith(rundir.REPLACED) and die())
sys.exit(main(argv))
"""
KILLS = ["start", "chunk", "swap"]


def _env() -> dict[str, str]:
    """The test process's JAX settings (its devices, float64, the run's compilation cache): the killed process
    compiles what this one did, so it loads the programs instead of compiling them again."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            "JAX_ENABLE_X64": "1", "JAX_NUMPY_RANK_PROMOTION": "raise"}


def _killed(at: str, argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", DRIVER, at, *argv], env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _siblings(out: Path) -> list[str]:
    """What a replacement leaves beside ``out``: nothing once it is swapped in."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.jaxattn-"))


def _seed_of_run(out: Path) -> int:
    return json.loads((out / "config.json").read_text())["config"]["seed"]


def _read_simulate(out: Path):
    return _seed_of_run(out), load_file(str(out / "observables.safetensors"))["observables.diameter"].tobytes()


def _read_analyze(out: Path):
    return _seed_of_run(out), (out / "layers.csv").read_text()


def _read_store(out: Path):
    arrays = open_sweep(out).arrays(0)  # reading puts back an old store a killed swap moved away
    return json.loads((out / "manifest.json").read_text())["fingerprint"], arrays["observables.diameter"].tobytes()


def _read_solve(out: Path):
    stored = _read_store(out)  # first: it puts back a store a killed swap moved away
    return json.loads((out / "config.json").read_text())["config"][""]["seed"], stored[1]


# command: (the old run's argv, the replacement's argv without --out, how to read a run: what it holds)
CASES = {
    "simulate": (SIM, [*SIM, "--seed", "1", "--overwrite"], _read_simulate),
    "analyze": (ANALYZE, [*ANALYZE, "--seed", "1", "--overwrite"], _read_analyze),
    "solve": (SOLVE, [*SOLVE, "--seed", "1", "--overwrite"], _read_solve),
    "sweep": (["sweep", "OLD", "--no-progress"], ["sweep", "NEW", "--overwrite", "--no-progress"], _read_store),
}


@pytest.mark.e2e  # the SIGKILL matrix (processes killed and rerun): the slower tier; the swap's logic is tested below
@pytest.mark.parametrize("command", list(CASES))
def test_a_replacement_killed_at_any_point_leaves_the_old_run_and_the_same_command_finishes_it(command, tmp_path,
                                                                                              capsys):
    """One replacement SIGKILLed three times, each run resuming what the one before left: before its first chunk,
    after one chunk, and in the middle of the swap. Each time the old run is byte for byte as it was and readable;
    the same command run once more swaps the finished replacement in, computing nothing again."""
    for seed, name in ((0, "OLD"), (1, "NEW")):
        (tmp_path / f"{name}.toml").write_text(GRID.format(seed=seed))
    old, new, read = (CASES[command][0], CASES[command][1], CASES[command][2])
    out = tmp_path / "out"
    assert main([*[str(tmp_path / f"{a}.toml") if a in ("OLD", "NEW") else a for a in old], "--out", str(out)]) == 0
    before, held = _snapshot(out), read(out)
    argv = [*[str(tmp_path / f"{a}.toml") if a in ("OLD", "NEW") else a for a in new], "--out", str(out)]
    replacement = rundir.replacement(out)
    for at in KILLS:
        _killed(at, argv)
        assert replacement.is_dir(), at  # the replacement, kept to resume
        if at == "chunk":
            assert list(replacement.rglob("done/p0000/c*.json")), "the chunk written before the kill is kept"
        if at == "swap":  # --out renamed away, whole, under its hidden name
            assert not out.exists() and _snapshot(out.parent / f".out{rundir.REPLACED}") == before
            if command in ("simulate", "analyze"):  # a run directory: put back by the next command into it
                rundir.recover(out)
        assert read(out) == held, at  # readable, as it was (a store's reader puts it back itself)
        assert _snapshot(out) == before, at  # byte for byte
    capsys.readouterr()
    assert main(argv) == 0
    assert read(out) != held and _siblings(out) == []
    said = capsys.readouterr().out
    if command == "simulate":  # the finished replacement's chunks were kept to swap it in: nothing computed again
        assert json.loads((out / "config.json").read_text())["computed_conditions"] == 0
    elif command in ("solve", "sweep"):
        assert "0 computed, 8 resumed" in said.replace("(", ""), said


# ---------------------------------------------------------------- the swap, in-process
def _marker(out: Path) -> dict:
    return json.loads((out / rundir.MARKER).read_text())


def _finished_run(out: Path, command: str = "consensus", text: str = "old") -> None:
    run = rundir.start(out, command)
    atomic_write_text(run.path / "report.md", text)
    rundir.finish(run)


def _replacement(out: Path, text: str = "new") -> rundir.RunDir:
    run = rundir.start(out, "simulate", overwrite=True, resumable=True)
    assert run.path == rundir.replacement(out) and run.replaces == out
    atomic_write_text(run.path / "report.md", text)
    return run


def test_the_old_run_stays_until_the_replacement_finishes(tmp_path):
    out = tmp_path / "r"
    _finished_run(out)
    run = _replacement(out)
    assert (out / "report.md").read_text() == "old"  # readable while the replacement runs
    with pytest.raises(ConfigError, match="--overwrite resumes it"):
        rundir.start(out, "simulate", resumable=True)  # without --overwrite: refused, saying the replacement waits
    rundir.finish(run)
    assert (out / "report.md").read_text() == "new" and _marker(out)["command"] == "simulate"
    assert _siblings(out) == []


def test_a_swap_killed_between_its_renames_is_put_back_and_finished_by_the_rerun(tmp_path):
    out = tmp_path / "r"
    _finished_run(out)
    run = _replacement(out)
    rundir._write_marker(run.path, {**_marker(run.path), "finished": True})  # finished, then killed in its swap
    os.rename(out, tmp_path / f".r{rundir.REPLACED}")  # what a SIGKILL after the swap's first rename leaves
    rundir.recover(out)
    assert (out / "report.md").read_text() == "old" and _siblings(out) == [f".r{rundir.REPLACE}"]
    again = rundir.start(out, "simulate", overwrite=True, resumable=True)
    assert not again.fresh and (again.path / "report.md").read_text() == "new"  # the finished replacement, resumed
    rundir.finish(again)
    assert (out / "report.md").read_text() == "new" and _siblings(out) == []


def test_a_swap_killed_after_the_replacement_went_in_removes_the_old_run(tmp_path):
    out = tmp_path / "r"
    _finished_run(out)
    run = _replacement(out)
    os.rename(out, tmp_path / f".r{rundir.REPLACED}")
    os.rename(run.path, out)  # killed before the old run was removed
    rundir.start(tmp_path / "r", "simulate", resumable=True)  # any command into --out settles it first
    assert (out / "report.md").read_text() == "new" and _siblings(out) == []


def test_a_file_of_the_users_added_meanwhile_stops_the_swap_and_is_kept(tmp_path):
    out = tmp_path / "r"
    _finished_run(out)
    run = _replacement(out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"'notes\.txt', which jaxattn did not write: nothing is deleted"):
        rundir.finish(run)
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.md").read_text() == "old"
    (out / "notes.txt").unlink()
    rundir.finish(rundir.start(out, "simulate", overwrite=True, resumable=True))
    assert (out / "report.md").read_text() == "new"


def test_a_failed_replacement_study_leaves_the_old_run_and_nothing_beside_it(tmp_path):
    out = tmp_path / "r"
    _finished_run(out)
    before = _snapshot(out)

    def fails(path: Path):
        atomic_write_text(path / "half.csv", "partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_into(out, fails, command="clusters", overwrite=True)
    assert _snapshot(out) == before and _siblings(out) == []
    assert run_into(out, lambda path: atomic_write_text(path / "report.md", "study"), command="clusters",
                    overwrite=True)
    assert (out / "report.md").read_text() == "study" and _siblings(out) == []


def test_a_replacement_of_another_command_left_beside_is_cleared(tmp_path):
    out = tmp_path / "r"
    _finished_run(out)
    _replacement(out, "simulate's")  # killed: an unfinished simulate beside the run
    run = rundir.start(out, "clusters", overwrite=True)
    assert run.fresh and sorted(p.name for p in run.path.iterdir()) == [rundir.MARKER]
    (run.path / "mine.txt").write_text("x")  # the replacement's folder is jaxattn's: anything else there is refused
    with pytest.raises(ConfigError, match=r"'mine\.txt', which jaxattn did not write"):
        rundir.start(out, "clusters", overwrite=True)


def test_a_store_of_another_configuration_is_replaced_beside_it(tmp_path):
    root = tmp_path / "s"
    SweepStore.open(root, {"fingerprint": "a"})
    assert replacing(root, {"fingerprint": "a"}) == root  # the same configuration: resumed in place
    work = replacing(root, {"fingerprint": "b"})
    assert work == rundir.replacement(root)
    SweepStore.open(work, {"fingerprint": "b"})
    assert json.loads((root / "manifest.json").read_text())["fingerprint"] == "a"  # the old store, whole
    swap_in(root, work)
    assert json.loads((root / "manifest.json").read_text())["fingerprint"] == "b" and _siblings(root) == []
    (root / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"'notes\.txt', which is not part of a jaxattn sweep store"):
        replacing(root, {"fingerprint": "c"})


@pytest.mark.parametrize("argv", [["simulate"], ["analyze"], ["clusters"], ["solve"], ["sweep", "grid.toml"]],
                         ids=lambda a: a[0])
def test_help_says_what_overwrite_does(argv, capsys):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    text = "".join(capsys.readouterr().out.split())  # as wrapped: argparse breaks lines after a hyphen too
    for said in ("built beside it, in .NAME.jaxattn-replace, and swapped in when it finishes",
                 "a folder holding files jaxattn did not write is refused"):
        assert "".join(said.split()) in text
