"""A full disk, met by every writer: one line (``jaxattn: error: writing PATH failed: the disk is full; ...`` and exit
status 2 on the command line, :class:`jaxattn.errors.DiskFullError` in Python) saying what is kept, nothing
half-written, and the same command run again (with room) finishes with the numbers of an uninterrupted run.

Two full disks: a real one, a tmpfs of a few hundred KB mounted for the test (where mounting is permitted: as root,
with ``mount``; skipped elsewhere), and a simulated one everywhere, whose atomic writes
(:func:`jaxattn.io._atomic._write`) raise ``ENOSPC`` once the room given is used up.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.cli import main
from jaxattn.errors import DiskFullError
from jaxattn.io import _atomic, full_disk
from jaxattn.io.results import load_arrays, save_arrays, write_json
from jaxattn.studies import plots
from jaxattn.studies.skeleton import run_into, write_report


# ---------------------------------------------------------------- the two full disks
@pytest.fixture
def small_disk(tmp_path):
    """``make(size)``: a tmpfs of ``size`` (``"200k"``) mounted under ``tmp_path``, and ``resize(size)`` to give it
    room; the test is skipped where a file system cannot be mounted (not root, no ``mount``, a container that
    refuses it). Unmounted afterwards."""
    mounted: list[Path] = []

    def make(size: str):
        if os.name != "posix" or os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a small file system needs root and mount")
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here: {r.stderr.strip()}")
        mounted.append(where)

        def resize(new: str) -> None:
            subprocess.run(["mount", "-o", f"remount,size={new}", str(where)], check=True)

        return where, resize

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill_disk(monkeypatch, room: int = 0, *, at: str | None = None) -> None:
    """The atomic writes find a disk with ``room`` bytes left (each write uses its size; the one that does not
    fit writes what fits, then raises ``ENOSPC``), or, with ``at``, full only when the file named ``at`` is
    written."""
    left = [room]

    def write(f, data: bytes, path: Path) -> None:
        if at is not None and path.name != at:
            f.write(data)
            return
        if at is None and len(data) <= left[0]:
            left[0] -= len(data)
            f.write(data)
            return
        f.write(data[:left[0]])
        left[0] = 0
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_atomic, "_write", write)


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("jaxattn: error: "), err
    assert "Traceback" not in err and "Errno" not in err
    return lines[0]


def _arrays(path: Path) -> dict[str, np.ndarray]:
    return dict(load_arrays(path))


def _same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes(), k


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith(".tmp"))


# ---------------------------------------------------------------- the Python writers
def _model():
    return ja.random_model(jax.random.key(0), d=8, heads=2, depth=2)


def _figure():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


#: Every kind of file jaxattn writes, each through its own public writer.
WRITERS = {
    "checkpoint": ("m.safetensors", lambda p: ja.save_checkpoint(_model(), p)),
    "arrays": ("a.safetensors", lambda p: save_arrays(p, {"x": np.arange(1000.0)})),
    "json": ("c.json", lambda p: write_json(p, {"x": list(range(300))})),
    "figure": ("f.png", lambda p: plots.save(_figure(), p, 60)),
    "report": ("report.md", lambda p: write_report(p.parent, ["# report", *["a line"] * 200])),
    "movie": ("m.gif", lambda p: ja.plots.movie(np.stack([np.eye(3)[:, :2]] * 3), p, progress=False)),
}


@pytest.mark.fast_cases('arrays', 'figure', 'json', 'movie', 'report')
@pytest.mark.parametrize("kind", WRITERS)
def test_every_writer_says_the_disk_is_full_in_one_line_and_leaves_nothing_half_written(kind, tmp_path, monkeypatch):
    """A full disk was a raw ``OSError: [Errno 28]`` from every writer but the sweeps'; now each raises one
    DiskFullError naming the file, leaves no temporary, and an earlier file of that name as it was."""
    name, write = WRITERS[kind]
    path = tmp_path / name
    path.write_bytes(b"an earlier file")
    fill_disk(monkeypatch, room=10)
    with pytest.raises(DiskFullError, match=rf"^writing {path} failed: the disk is full; nothing is left "
                                            "half-written; free some space and run the same command again$") as e:
        write(path)
    assert e.value.path == path and isinstance(e.value.__cause__, OSError)
    assert path.read_bytes() == b"an earlier file" and _temporaries(tmp_path) == []
    monkeypatch.undo()  # room again: the same call writes the file
    write(path)
    assert path.read_bytes() != b"an earlier file"


def test_the_full_disk_helper_names_what_it_knows_and_passes_other_errors(tmp_path):
    quota = r"^writing s failed: the disk quota is exceeded; finished chunks are kept"
    with pytest.raises(DiskFullError, match=quota), full_disk("s", _atomic.RESUME):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")
    outer = r"^writing s failed: the disk is full; then$"  # the outer level says what it knows
    with pytest.raises(DiskFullError, match=outer), full_disk("s", "then"), full_disk():
        raise OSError(errno.ENOSPC, "No space left on device", "s/inner/file")
    with pytest.raises(PermissionError), full_disk("s"):  # not a full disk: unchanged
        raise PermissionError(errno.EACCES, "Permission denied")
    import pickle

    e = pickle.loads(pickle.dumps(DiskFullError("p", "then", True)))
    assert str(e) == "writing p failed: the disk quota is exceeded; then" and e.quota


def test_a_study_on_a_full_disk_leaves_its_directory_as_it_found_it(tmp_path, monkeypatch):
    """The studies' writer (:func:`run_into`, their report and tables): a full disk raises one DiskFullError and
    the run directory is put back as it was (a study cannot resume); run again with room, it is written."""
    out = tmp_path / "study"
    fill_disk(monkeypatch, at="report.md")

    def body(path: Path) -> str:
        write_json(path / "config.json", {"a": 1})
        write_report(path, ["# a report"])
        return "done"

    with pytest.raises(DiskFullError, match=rf"^writing {out / 'report.md'} failed: the disk is full"):
        run_into(out, body, command="stability")
    assert not out.exists()
    monkeypatch.undo()
    assert run_into(out, body, command="stability") == "done" and (out / "report.md").is_file()


# ---------------------------------------------------------------- the commands
SIM = ["simulate", "--num-init", "1500", "--chunk", "500", "--no-progress"]


def assert_fills_the_disk_then_resumes(out: Path, reference: Path, capsys, make_room) -> None:
    assert main([*SIM, "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line == (f"jaxattn: error: writing {out / 'observables.safetensors'} failed: the disk is full; finished "
                    "chunks are kept, run the same command again to resume")
    assert len(list((out / ".jaxattn-sweep" / "done" / "p0000").glob("*.json"))) == 3  # every chunk kept
    assert _temporaries(out) == []
    make_room()
    assert main([*SIM, "--out", str(out)]) == 0
    capsys.readouterr()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["resumed_conditions"] == 1500 and cfg["computed_conditions"] == 0
    assert main([*SIM, "--out", str(reference)]) == 0  # uninterrupted
    capsys.readouterr()
    _same_bits(_arrays(out / "observables.safetensors"), _arrays(reference / "observables.safetensors"))


@pytest.mark.e2e
def test_simulate_on_a_full_disk_keeps_its_chunks_and_resumes_bit_for_bit(small_disk, tmp_path, capsys):
    """On a 200 KB tmpfs, `simulate` ended its final write in a raw ``OSError: [Errno 28]`` traceback (exit 1);
    now one line and exit 2, its finished chunks kept, and the same command, with room, resumes them into a run
    equal bit for bit to an uninterrupted one."""
    disk, resize = small_disk("200k")
    assert_fills_the_disk_then_resumes(disk / "sim", tmp_path / "ref", capsys, lambda: resize("2m"))


@pytest.mark.e2e
def test_simulate_on_a_simulated_full_disk(tmp_path, capsys, monkeypatch):
    """The same everywhere (no file system to mount): the disk fills at the final write."""
    fill_disk(monkeypatch, at="observables.safetensors")
    assert_fills_the_disk_then_resumes(tmp_path / "sim", tmp_path / "ref", capsys, monkeypatch.undo)


@pytest.mark.e2e
def test_a_command_that_cannot_resume_says_what_it_left(tmp_path, capsys, monkeypatch):
    """`movie` (one file, like `convert`): nothing half-written, run it again."""
    out = tmp_path / "sim"
    assert main(["simulate", "--num-init", "6", "--n", "4", "--d", "3", "--heads", "1", "--depth", "2", "--steps", "3",
                 "--chunk", "4", "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    fill_disk(monkeypatch, room=1000)
    assert main(["movie", str(out), "--no-progress", "--conditions", "1"]) == 2
    assert _one_error_line(capsys.readouterr().err) == (
        f"jaxattn: error: writing {out / 'movie.gif'} failed: the disk is full; nothing is left half-written; free "
        "some space and run the same command again")
    assert not (out / "movie.gif").exists() and _temporaries(out) == []
    monkeypatch.undo()
    assert main(["movie", str(out), "--no-progress", "--conditions", "1"]) == 0
    assert (out / "movie.gif").is_file()


@pytest.mark.e2e
def test_sweep_on_a_full_disk_resumes_into_the_store_of_an_uninterrupted_run(small_disk, tmp_path, capsys):
    """`sweep` on a 600 KB tmpfs: one line, the finished chunks kept; with room, the resumed store equals an
    uninterrupted one bit for bit."""
    disk, resize = small_disk("600k")
    grid = tmp_path / "grid.toml"
    grid.write_text('num_init = 6000\nchunk = 500\n[init]\nn = 6\n[model]\nsource = "random"\nd = 16\nheads = 2\n'
                    "depth = 6\n[dynamics]\nbeta = [1.0, 2.0]\n")
    out = disk / "grid"
    assert main(["sweep", str(grid), "--out", str(out), "--no-progress"]) == 2
    assert _one_error_line(capsys.readouterr().err) == (
        f"jaxattn: error: writing {out} failed: the disk is full; finished chunks are kept, run the same command "
        "again to resume")
    kept = len(list((out / "done").rglob("*.json")))
    assert kept > 0
    resize("4m")
    assert main(["sweep", str(grid), "--out", str(out), "--no-progress"]) == 0
    assert f"{kept * 500:,} resumed" in capsys.readouterr().out
    assert main(["sweep", str(grid), "--out", str(tmp_path / "ref"), "--no-progress"]) == 0
    a, b = ja.open_sweep(out), ja.open_sweep(tmp_path / "ref")
    for p in range(2):
        for name in ("diameter", "cos_consensus"):
            x, y = (np.asarray(s.store.group[f"p{p:04d}/observables/{name}"][:]) for s in (a, b))
            assert x.tobytes() == y.tobytes()


@pytest.mark.e2e
def test_analyze_on_a_full_disk_keeps_its_chunks_and_resumes(small_disk, capsys):
    """`analyze` (figures included) on a 300 KB tmpfs: one line, its chunk stores kept; with room, resumed."""
    disk, resize = small_disk("300k")
    out = disk / "a"
    argv = ["analyze", "random", "--d", "8", "--heads", "2", "--depth", "3", "--num-init", "16", "--n", "3", "--gammas",
            "1", "--no-sensitivity", "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith(f"jaxattn: error: writing {out}/") and line.endswith(
        "failed: the disk is full; finished chunks are kept, run the same command again to resume")
    assert (out / ".jaxattn-analyze").is_dir() and _temporaries(out) == []
    resize("4m")
    assert main(argv) == 0
    assert (out / "report.md").is_file() and (out / "metrics.png").is_file()
    assert not (out / ".jaxattn-analyze").exists()  # the chunk stores, kept only to resume


@pytest.mark.e2e
def test_a_study_command_on_a_full_disk_leaves_its_directory_as_found(tmp_path, capsys, monkeypatch):
    """`metastability` (a study, which cannot resume): one line saying so, and no directory left."""
    out = tmp_path / "m"
    argv = ["metastability", "--dims", "2", "--n", "4", "--betas", "2", "--num", "2", "--t1", "10", "--saves", "10",
            "--boot", "5", "--no-figures", "--no-movie", "--no-progress", "--out", str(out)]
    fill_disk(monkeypatch, at="report.md")
    assert main(argv) == 2
    assert _one_error_line(capsys.readouterr().err) == (
        f"jaxattn: error: writing {out / 'report.md'} failed: the disk is full; the output directory is left as it "
        "was found; free some space and run the same command again")
    assert not out.exists()
    monkeypatch.undo()
    assert main(argv) == 0 and (out / "report.md").is_file()
