"""One atomic file write, below both the run-directory contract (:mod:`jaxattn.io.rundir`, whose marker
it writes) and the result files (:mod:`jaxattn.io.results`, which first claim the name in the marker)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file ``.NAME.XXXXXXXX.tmp`` and ``os.replace``, so an
    interrupted write never leaves a half-written file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600: follow the umask like open() does
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
