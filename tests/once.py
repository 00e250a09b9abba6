"""Work done once per test session however many xdist workers need it (the pattern of pytest-xdist's
documentation): the first worker to ask does it under a file lock in the session's shared temporary folder, the
others wait for that one piece only and read its result. Several pieces, each with its own lock, let the workers
share expensive set-up (documented commands, reduced reproduction runs) instead of one worker doing it all while
the other waits, or every worker doing it again."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock


def shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this test session shared by its xdist workers (``name`` under the parent of the workers' own
    temporary folders; the session's temporary folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder = base / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def once(folder: Path, key: str, work: Callable[[], Any]) -> Any:
    """``work()``'s JSON result, computed by the first caller of this session for ``key`` and read back by the
    others. A ``work`` that raised leaves nothing behind, so the next caller tries again (and fails the same way in
    its own test)."""
    done = folder / f"{key}.json"
    with FileLock(str(folder / f"{key}.lock")):
        if not done.is_file():
            result = work()
            tmp = done.with_suffix(".tmp")
            tmp.write_text(json.dumps(result))
            tmp.replace(done)  # atomic: a reader sees the whole result or none
        return json.loads(done.read_text())
