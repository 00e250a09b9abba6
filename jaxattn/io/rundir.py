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
* a finished run, or a run of another command, is refused unless ``overwrite``: then what the
  marker lists is removed and the run starts afresh.

Commands that write one file (``convert``) use :func:`file_out`: an existing file is replaced only
with ``overwrite``. ``sweep`` and ``solve`` write a sweep store, recognised by its own manifest
(:mod:`jaxattn.io.store`), and only check their ``--out`` here (:func:`dir_out`).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jaxattn.errors import ConfigError, JaxattnError
from jaxattn.io._atomic import replace_bytes

MARKER = ".jaxattn-run.json"
FORMAT = "jaxattn-run"
VERSION = 1
_TMP = re.compile(r"^\.(?P<name>.+)\.[^.]+\.tmp$")  # tempfile.mkstemp(prefix=".NAME.", suffix=".tmp")


@dataclass(frozen=True)
class RunDir:
    """A started run directory: ``path``; ``created``: the outermost folder :func:`start` created (or None);
    ``fresh``: a new run (nothing of an earlier one kept to resume)."""

    path: Path
    command: str
    created: Path | None = None
    fresh: bool = True


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
    if not isinstance(m.get("version"), int) or m["version"] > VERSION:
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

    Returns the :class:`RunDir`; the marker is written (unfinished) before this returns.
    """
    out = out_path(raw, option)
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
        elif same or overwrite:
            clear(out, marker)
            marker = None
        else:
            state = "a finished" if marker.get("finished") else "an unfinished"
            raise ConfigError(f"{option} {out} holds {state} run of `jaxattn {marker['command']}`; choose another "
                              "directory or pass --overwrite to replace it")
    marker = new_marker(command, set(own) | set(marker["files"] if marker is not None else ()))
    _write_marker(out, marker)
    clear(out, marker, temporaries_only=True)  # stale temporaries of writes killed before their rename
    return RunDir(out, command, created, fresh)


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
    """Mark the run finished: from now on it is replaced only with ``--overwrite``."""
    marker = read_marker(run.path)
    _write_marker(run.path, {**(marker or new_marker(run.command)), "finished": True})


@contextmanager
def undone_if_refused(run: RunDir) -> Iterator[None]:
    """Around a run's computation: if it refuses its input (:class:`JaxattnError`) and the run is fresh, what it
    wrote is removed (:func:`abandon`), so bad input leaves no output; an interruption keeps it to resume."""
    try:
        yield
    except JaxattnError:
        if run.fresh:
            abandon(run)
        raise


def abandon(run: RunDir) -> None:
    """Put ``run``'s directory back as it was before :func:`start` (a failed or interrupted study): what
    jaxattn wrote is removed, then the marker, then the folders :func:`start` created if they are empty."""
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
           "out_path", "read_marker", "record", "start", "undone_if_refused"]
