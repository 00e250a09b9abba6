"""One atomic file write, below both the run-directory contract (:mod:`jaxattn.io.rundir`, whose marker
it writes) and the result files (:mod:`jaxattn.io.results`, which first claim the name in the marker); and the one
handling of a full disk that every writer of jaxattn shares (:func:`full_disk`)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jaxattn.errors import DiskFullError

#: The errors of a write that found no room: the disk (or file system: its blocks or inodes) full, a quota exceeded.
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})

#: What a full disk leaves, said after "the disk is full; ": by a write of one file (nothing half-written: the
#: default), by a resumable run (its finished chunks), by a study, which cannot resume (its directory as found).
AGAIN = "nothing is left half-written; free some space and run the same command again"
RESUME = "finished chunks are kept, run the same command again to resume"
STUDY = "the output directory is left as it was found; free some space and run the same command again"


def no_room(e: BaseException) -> bool:
    """Whether ``e`` says that the disk (or the quota) is full."""
    return isinstance(e, DiskFullError) or (isinstance(e, OSError) and e.errno in NO_ROOM)


@contextmanager
def full_disk(target=None, then: str | None = None) -> Iterator[None]:
    """Around writes: a full disk (``OSError`` ENOSPC or EDQUOT, or a :class:`DiskFullError` from a write inside)
    becomes one :class:`DiskFullError`, ``writing TARGET failed: the disk is full; THEN``. ``target`` (default: the
    file the error names) and ``then`` (default: the inner error's, else :data:`AGAIN`) say it at the level that
    knows: a run directory names its store and that its finished chunks are kept (:data:`RESUME`). Any other
    error passes unchanged."""
    try:
        yield
    except DiskFullError as e:
        if (target is None or target == e.path) and (then is None or then == e.then):
            raise
        raise DiskFullError(e.path if target is None else target, e.then if then is None else then,
                            e.quota) from e.__cause__
    except OSError as e:
        if e.errno not in NO_ROOM:
            raise
        where = target if target is not None else (e.filename if e.filename is not None else "a file")
        raise DiskFullError(where, AGAIN if then is None else then, e.errno == errno.EDQUOT) from e


def replace_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file ``.NAME.XXXXXXXX.tmp`` and ``os.replace``, so an
    interrupted write never leaves a half-written file behind; a full disk raises :class:`DiskFullError` naming
    ``path`` (the temporary removed, an earlier file at ``path`` left as it was)."""
    path = Path(path)
    with full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                _write(f, data, path)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600: follow the umask like open() does
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def _write(f, data: bytes, path: Path) -> None:
    """The bytes of one atomic write of ``path`` into its open temporary ``f`` (the one place where the tests fill
    the disk)."""
    f.write(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
