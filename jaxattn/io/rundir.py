"""The ``--out`` contract of every command: what jaxattn may write, resume, clear or replace.

A run directory is recognised by a marker that only jaxattn writes, ``.jaxattn-run.json``::

    {"format": "jaxattn-run", "version": 1, "command": "simulate", "finished": false,
     "files": [".jaxattn-sweep", "observables.safetensors", "config.json", "summary.txt"]}

It is written before anything else, and every name is added to ``files`` *before* its file is
written (:func:`claim`, called by :func:`jaxattn.io.results.atomic_write_bytes`), so even a run
killed mid-write leaves a directory whose every entry is accounted for. jaxattn's own entries are
the names in ``files`` and their temporaries ``.NAME.XXXXXXXX.tmp``; anything else is the user's and
is never deleted. :func:`start` decides, before any computation:

* ``--out ""`` is refused; so is a file, or a path under a file; a missing directory is created;
* a new or empty directory starts a run;
* an entry that is not jaxattn's (with a marker: not in ``files``; without one: anything) is
  refused, naming it; a directory of an older jaxattn (no marker) is never replaced: remove it by hand;
* an unfinished run of the same command resumes (resumable commands; stale temporaries are removed)
  or is cleared and started again (studies, which cannot resume);
* a finished run, or a run of another command, is refused unless ``overwrite``: then it is replaced
  atomically. The new run is built beside it, in the hidden sibling ``.NAME.jaxattn-replace``
  (:func:`replacement`), under these same rules (an unfinished replacement of the same command resumes
  there, whatever else is cleared), and :func:`finish` swaps it in (:func:`swap`): ``--out`` is renamed
  to ``.NAME.jaxattn-replaced``, the replacement to ``--out``, and the old run is removed. Until then the
  old run stays whole and readable; a replacement killed at any point leaves the old run as it was (a
  swap killed between its renames is put back by :func:`recover`, which :func:`start` runs first), and
  the same command run again resumes the replacement and swaps it in.

Commands that write one file (``convert``) use :func:`file_out`: an existing file is replaced only
with ``overwrite``. ``sweep`` and ``solve`` write a sweep store, recognised by its own manifest
(:mod:`jaxattn.io.store`), and only check their ``--out`` here (:func:`dir_out`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jaxattn.errors import ConfigError, DiskFullError, JaxattnError, is_integer
from jaxattn.io._atomic import full_disk, replace_bytes

MARKER = ".jaxattn-run.json"
FORMAT = "jaxattn-run"
VERSION = 1
_TMP = re.compile(r"^\.(?P<name>.+)\.[^.]+\.tmp$")  # tempfile.mkstemp(prefix=".NAME.", suffix=".tmp")
REPLACE = ".jaxattn-replace"  # .NAME.jaxattn-replace: the run that replaces NAME, built beside it
REPLACED = ".jaxattn-replaced"  # .NAME.jaxattn-replaced: the old run NAME while the replacement is swapped in


@dataclass(frozen=True)
class RunDir:
    """A started run directory: ``path``, where the run is written; ``created``: the outermost folder :func:`start`
    created (or None; a replacement's own folder always); ``fresh``: a new run (nothing of an earlier one kept to
    resume); ``replaces``: the ``--out`` whose run this one replaces, swapped in by :func:`finish` (``path`` is
    then its :func:`replacement`), or None."""

    path: Path
    command: str
    created: Path | None = None
    fresh: bool = True
    replaces: Path | None = None


# ---------------------------------------------------------------- paths
def out_path(raw, option: str = "--out") -> Path:
    """``raw`` as a path; an empty one is refused (``Path("")`` would silently mean the current directory)."""
    if raw is None or not str(raw).strip():
        raise ConfigError(f"{option} must name a path, got an empty string")
    return Path(raw)


def _check_parents(path: Path, option: str) -> None:
    """Refuse a path under an existing file (``afile/sub``), before anything is computed."""
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise ConfigError(f"{option} {path}: {parent} is a file, not a directory")
            return


def check_writable(folder: Path, option: str, path: Path | None = None) -> None:
    """Refuse, before any work, a ``folder`` that cannot be written in (a read-only filesystem, no permission): a file
    made and removed there says so where asking the permissions would not (root, network mounts). ``path``: what the
    option named, if not the folder itself (a file's parent)."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".jaxattn-write-check-")
    except OSError as e:
        raise ConfigError(f"{option} {path or folder}: cannot write in {folder} ({e.strerror or e}); choose a "
                          "writable directory") from None
    os.close(fd)
    os.unlink(probe)


def dir_out(raw, option: str = "--out") -> Path:
    """A directory that a command creates or resumes on its own terms (the sweep store of ``sweep`` and
    ``solve``, with its own manifest): refused if empty, a file, or under a file. Nothing is created."""
    path = out_path(raw, option)
    if (path.exists() or path.is_symlink()) and not path.is_dir():
        raise ConfigError(f"{option} {path} exists and is not a directory")
    _check_parents(path, option)
    return path


def file_out(raw, overwrite: bool, option: str = "--out") -> Path:
    """The one file a command writes: refused if it exists (unless ``overwrite``), is a directory, or lies
    under a file. Nothing is created."""
    path = out_path(raw, option)
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory, not a file")
    _check_parents(path, option)
    if path.exists() and not overwrite:
        raise ConfigError(f"{option} {path} exists; choose another name or pass --overwrite to replace it")
    parent = next((p for p in path.parents if p.is_dir()), None)
    if parent is not None:
        check_writable(parent, option, path)
    return path


# ---------------------------------------------------------------- the marker
def read_marker(out: Path) -> dict | None:
    """The marker of ``out``, or None if there is none. An unreadable or foreign one is refused."""
    path = Path(out) / MARKER
    if not path.is_file():
        return None
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        m = None
    if not (isinstance(m, dict) and m.get("format") == FORMAT and isinstance(m.get("files"), list)
            and isinstance(m.get("command"), str)):
        raise ConfigError(f"{path} is unreadable or not a jaxattn run marker; remove {out} by hand or choose "
                          "another directory")
    if not is_integer(m.get("version")) or m["version"] > VERSION:
        raise ConfigError(f"{out} was written by a newer jaxattn (run format version {m.get('version')!r}); "
                          "choose another directory")
    return m


def _write_marker(out: Path, marker: dict) -> None:
    replace_bytes(Path(out) / MARKER, (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode())


def new_marker(command: str, files: Iterable[str] = ()) -> dict:
    return {"format": FORMAT, "version": VERSION, "command": command, "finished": False, "files": sorted(set(files))}


def is_ours(name: str, files: Iterable[str]) -> bool:
    """Whether an entry ``name`` of a run directory is jaxattn's: the marker, a listed name, or a temporary of
    either (a write killed before its rename)."""
    files = {*files, MARKER}
    m = _TMP.match(name)
    return name in files or (m is not None and m["name"] in files)


def foreign(out: Path, marker: dict | None) -> list[str]:
    """Entries of ``out`` that jaxattn did not write (sorted); without a marker, all but a temporary of one."""
    files = marker["files"] if marker is not None else ()
    return sorted(p.name for p in Path(out).iterdir() if not is_ours(p.name, files))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def clear(out: Path, marker: dict, *, temporaries_only: bool = False) -> None:
    """Remove what ``marker`` lists in ``out`` and its temporaries (only those with ``temporaries_only``);
    nothing else, and not the marker."""
    for p in Path(out).iterdir():
        if p.name == MARKER or not is_ours(p.name, marker["files"]):
            continue
        if not temporaries_only or (_TMP.match(p.name) and p.name not in marker["files"]):
            _remove(p)


# ---------------------------------------------------------------- replacing a run (or a sweep store) atomically
def _base(out) -> Path:
    """The folder a swap renames: ``out`` itself, resolved (``--out .``, a symbolic link: its target)."""
    return Path(os.path.realpath(out))


def replacement(out) -> Path:
    """Where the run (or store) that replaces ``out`` is built: the hidden sibling ``.NAME.jaxattn-replace``."""
    base = _base(out)
    return base.parent / f".{base.name}{REPLACE}"


def _replaced(out) -> Path:
    base = _base(out)
    return base.parent / f".{base.name}{REPLACED}"


def _move(src: Path, dst: Path) -> None:
    """One step of a swap: a rename, atomic on one file system (``dst`` must not exist)."""
    os.rename(src, dst)


def _sync_dir(folder: Path) -> None:
    """Make the renames in ``folder`` durable (where directories can be synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def recover(out) -> None:
    """Settle a swap into ``out`` that was killed half-way (:func:`swap`): the old run, moved away before the
    replacement was moved in, is put back (the replacement waits, finished, for the same command to swap it in
    again); once the replacement is in, what is left of the old run is removed. A no-op otherwise."""
    old, base = _replaced(out), _base(out)
    if not old.is_dir() or old.is_symlink():
        return
    if base.exists() or base.is_symlink():
        shutil.rmtree(old)  # checked to be only jaxattn's before the swap moved it there
    else:
        _move(old, base)
    _sync_dir(base.parent)


def swap(out, staging, foreign_of: Callable[[Path], list[str]], option: str = "--out") -> None:
    """Put the finished run (or store) ``staging`` in the place of ``out``: ``out`` renamed to
    ``.NAME.jaxattn-replaced``, ``staging`` to ``out``, then the old run removed. Every step leaves a whole
    run at ``out`` or under the hidden name, which :func:`recover` settles. If the old run gained entries
    jaxattn did not write (``foreign_of``, checked once it is out of the way), it is put back and the swap
    refused: nothing is deleted, and the replacement waits."""
    base, old = _base(out), _replaced(out)
    _move(base, old)  # the old run, whole, under a hidden name: nothing is deleted before the new one is in
    try:
        names = foreign_of(old)
    except BaseException:
        _move(old, base)
        raise
    if names:
        _move(old, base)
        raise ConfigError(f"{option} {out} now holds {names[0]!r}, which jaxattn did not write: nothing is deleted and "
                          f"its finished replacement waits in {staging}; move the file away and run the same command "
                          "again to swap it in")
    try:
        _move(Path(staging), base)
    except BaseException:
        if not (base.exists() or base.is_symlink()):
            _move(old, base)
        raise
    _sync_dir(base.parent)
    shutil.rmtree(old, ignore_errors=True)  # what is left is removed by the next recover()


def _pending(out: Path) -> str:
    """A note for a refusal: a replacement of ``out`` that waits, unfinished or not swapped in, if there is one."""
    return f" (its replacement waits in {replacement(out)}: --overwrite resumes it)" if replacement(out).exists() \
        else ""


# ---------------------------------------------------------------- the run
def _create(out: Path, option: str) -> Path | None:
    """Create ``out`` (and missing parents); return the outermost folder created, or None if it existed."""
    if out.is_dir():
        return None
    if out.exists() or out.is_symlink():
        raise ConfigError(f"{option} {out} exists and is not a directory")
    _check_parents(out, option)
    top = out
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    try:
        with full_disk(out):
            out.mkdir(parents=True)
    except OSError as e:
        raise ConfigError(f"cannot create {option} {out}: {e.strerror or e}") from None
    return top


def _older_run(out: Path) -> bool:
    """Whether ``out`` looks like the directory of a jaxattn run from before the marker."""
    try:
        cfg = json.loads((out / "config.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(cfg, dict) and "command" in cfg and "versions" in cfg


def _refuse_foreign(out: Path, marker: dict | None, names: list[str], option: str) -> None:
    if marker is None and _older_run(out):
        raise ConfigError(f"{option} {out} holds a run written by an older jaxattn (no {MARKER}); jaxattn "
                          "does not delete it: remove it by hand or choose another directory")
    raise ConfigError(f"{option} {out} is not an empty directory and holds {names[0]!r}, which jaxattn did not "
                      "write (nothing is deleted); choose another directory")


def start(raw, command: str, *, overwrite: bool = False, resumable: bool = False, own: Iterable[str] = (),
          option: str = "--out") -> RunDir:
    """Check and prepare the run directory ``raw`` for ``command`` before any computation (see the module
    docstring); ``own``: the folders the command keeps there to resume (listed in the marker at once).

    Returns the :class:`RunDir`; the marker is written (unfinished) before this returns. A run that replaces
    another is written into its :func:`replacement` (``RunDir.path``) and swapped in by :func:`finish`.
    """
    out = out_path(raw, option)
    if out.is_dir():  # a read-only one fails here in one line, not at the marker's write with a traceback
        check_writable(out, option)
    recover(out)
    created = _create(out, option)
    marker = None if created else read_marker(out)
    own, fresh = tuple(own), True
    if created is None:
        names = foreign(out, marker)
        if marker is None and names and resumable and set(names) <= set(own):
            names, fresh = [], False  # an unfinished run of an older jaxattn (its chunk folder only): resumed
        if names:
            _refuse_foreign(out, marker, names, option)
    if marker is not None:
        same = marker["command"] == command and not marker.get("finished")
        if same and resumable:
            fresh = False
        elif same:
            clear(out, marker)  # an unfinished study, which cannot resume: started again
            marker = None
        elif overwrite:
            return _beside(out, command, resumable, own, option)
        else:
            state = "a finished" if marker.get("finished") else "an unfinished"
            raise ConfigError(f"{option} {out} holds {state} run of `jaxattn {marker['command']}`; choose another "
                              f"directory or pass --overwrite to replace it{_pending(out)}")
    return _begin(out, command, marker, own, created, fresh)


def _begin(out: Path, command: str, marker: dict | None, own: tuple[str, ...], created: Path | None,
           fresh: bool) -> RunDir:
    """Write the unfinished marker of the run (keeping what ``marker`` lists, resumed) and drop stale temporaries."""
    marker = new_marker(command, set(own) | set(marker["files"] if marker is not None else ()))
    _write_marker(out, marker)
    clear(out, marker, temporaries_only=True)  # stale temporaries of writes killed before their rename
    return RunDir(out, command, created, fresh)


def _beside(out: Path, command: str, resumable: bool, own: tuple[str, ...], option: str) -> RunDir:
    """The run that replaces the run in ``out``, started in :func:`replacement`: a replacement of the same
    command found there resumes (finished too: killed before its swap) if the command can; anything else of
    jaxattn's there is cleared; an entry that is not jaxattn's is refused."""
    path = replacement(out)
    created = _create(path, option)
    marker = None if created else read_marker(path)
    names = [] if created else foreign(path, marker)
    if names:
        raise ConfigError(f"{path}, where jaxattn builds the replacement of {option} {out}, holds {names[0]!r}, which "
                          "jaxattn did not write (nothing is deleted); remove it or choose another directory")
    fresh = True
    if marker is not None and marker["command"] == command and resumable:
        fresh = False
    elif marker is not None:
        clear(path, marker)
        marker = None
    run = _begin(path, command, marker, own, path, fresh)
    return dataclasses.replace(run, replaces=out)


def claim(path) -> None:
    """Record ``path``'s name in its directory's marker before jaxattn writes it, if that directory is an
    unfinished run (a no-op anywhere else)."""
    path = Path(path)
    if path.name == MARKER:
        return
    try:
        marker = read_marker(path.parent)
    except ConfigError:
        return
    if marker is None or marker.get("finished") or path.name in marker["files"]:
        return
    _write_marker(path.parent, {**marker, "files": sorted({*marker["files"], path.name})})


def record(path) -> None:
    """Record ``path``'s name in its directory's marker before jaxattn writes it there, finished run or not (a
    movie rendered from a finished run afterwards: an ``--overwrite`` of the run then removes it too). A no-op
    in a directory without a marker."""
    path = Path(path)
    marker = read_marker(path.parent)
    if marker is None or path.name == MARKER or path.name in marker["files"]:
        return
    _write_marker(path.parent, {**marker, "files": sorted({*marker["files"], path.name})})


def finish(run: RunDir) -> None:
    """Mark the run finished: from now on it is replaced only with ``--overwrite``. A replacement is then swapped
    in (:func:`swap`)."""
    marker = read_marker(run.path)
    _write_marker(run.path, {**(marker or new_marker(run.command)), "finished": True})
    if run.replaces is not None:
        swap(run.replaces, run.path, lambda old: foreign(old, read_marker(old)))


@contextmanager
def undone_if_refused(run: RunDir) -> Iterator[None]:
    """Around a run's computation: if it refuses its input (:class:`JaxattnError`) and the run is fresh, what it
    wrote is removed (:func:`abandon`), so bad input leaves no output; an interruption, or a full disk
    (:class:`DiskFullError`, no bad input), keeps it to resume."""
    try:
        yield
    except DiskFullError:
        raise
    except JaxattnError:
        if run.fresh:
            abandon(run)
        raise


def abandon(run: RunDir) -> None:
    """Put ``run``'s directory back as it was before :func:`start` (a failed or interrupted study): what
    jaxattn wrote is removed, then the marker, then the folders :func:`start` created if they are empty (a
    replacement's own folder: the run it was to replace is left as it was)."""
    marker = read_marker(run.path)
    if marker is not None:
        clear(run.path, marker)
        (run.path / MARKER).unlink(missing_ok=True)
    if run.created is not None:
        p = run.path
        while True:
            try:
                p.rmdir()  # only if empty: whatever someone else put there stays
            except OSError:
                break
            if p == run.created:
                break
            p = p.parent


__all__ = ["MARKER", "RunDir", "abandon", "claim", "clear", "dir_out", "file_out", "finish", "foreign", "is_ours",
           "out_path", "read_marker", "record", "recover", "replacement", "start", "swap", "undone_if_refused"]
