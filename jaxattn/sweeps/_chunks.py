"""The chunk loop of both sweep engines: :func:`jaxattn.sweep` (one configuration, a one-point grid) and
:func:`jaxattn.sweep_grid` (grid points split over processes) run their chunks through :func:`run_chunks`.

A work item is ``(point, chunk index, start, size)``. A chunk finished in the store is read back and verified
(one that does not verify is computed again); any other is computed by the caller's callback and written with
its marker. The callers keep what is theirs: what a chunk computes, how the work is split, the store's manifest.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from jaxattn.io import RESUME, full_disk
from jaxattn.io.store import CorruptChunk, SweepStore, chunk_ranges, nonfinite_conditions

Work = tuple[int, int, int, int]  # (point, chunk index, start, size)
#: ``compute(point, start, size, advance)``: the chunk's arrays by store name (``observables/<name>``,
#: ``final``, ...), ``size`` rows each; ``advance(k)`` may move the progress bar within the chunk, ``advance(0, note)``
#: shows ``note`` beside it (a flow's time reached; ``''`` clears it)
Compute = Callable[[int, int, int, Callable[..., None]], dict[str, np.ndarray]]


@dataclasses.dataclass
class Ran:
    """What :func:`run_chunks` did: conditions computed and resumed, the non-finite ones per point (NaN or
    inf anywhere in their arrays), the seconds the loop took and each point's arrays (empty unless kept)."""

    computed: int
    resumed: int
    nonfinite: list[int]
    seconds: float
    arrays: list[dict[str, np.ndarray]]


def work_items(num_inits: Iterable[int], chunk: int) -> list[Work]:
    """Every chunk of every point, point by point."""
    return [(i, c, start, size) for i, num in enumerate(num_inits) for c, start, size in chunk_ranges(num, chunk)]


def _finished(store: SweepStore | None, point: int, c: int, start: int, size: int) -> dict | None:
    """The verified arrays of a finished chunk, or ``None`` when it is to be computed (not finished, corrupt)."""
    if store is None:
        return None
    try:
        return store.read_chunk(point, c, start, size)
    except CorruptChunk:  # recomputed
        return None


def run_chunks(store: SweepStore | None, work: Sequence[Work], compute: Compute, *, rows: Sequence[int],
               chunk: int, desc: str, progress: bool, keep: bool = False, process: int = 0,
               info: dict | None = None, discard_if_empty: bool = False) -> Ran:
    """Run the chunks ``work`` into ``store`` (``None``: in memory only) under this process's lock.

    ``rows[point]``: the point's number of conditions (the length of its stored arrays); ``info``: extra keys
    of every chunk marker. ``keep`` returns each point's arrays (the points' chunks in order, concatenated).
    ``discard_if_empty``: the store was created by this call, so a run stopped before any result (refused,
    interrupted) removes it rather than leave an empty store behind.
    """
    from tqdm.auto import tqdm

    if store is not None:
        store.lock(process)
    computed = resumed = 0
    nonfinite = [0] * len(rows)
    parts: list[list[dict]] = [[] for _ in rows]
    bar = tqdm(total=sum(w[3] for w in work), unit="cond", desc=desc, file=sys.stderr, disable=not progress,
               smoothing=0.1)
    moved = 0  # conditions of the chunk being computed that the callback reported
    noted = 0.0  # when a note was last drawn: at most five a second (a solver reports every 20 steps)

    def advance(k: int, note: str | None = None) -> None:
        nonlocal moved, noted
        moved += k
        bar.update(k)
        if note is not None and (not note or time.perf_counter() - noted >= 0.2):
            noted = time.perf_counter()
            bar.set_postfix_str(note)

    t0 = time.perf_counter()
    try:
        for point, c, start, size in work:
            got = _finished(store, point, c, start, size)
            if got is not None:
                resumed += size
                bar.update(size)
            else:
                moved = 0
                got = compute(point, start, size, advance)
                if store is not None:
                    with full_disk(store.root, RESUME):  # one line, whatever the store's writer raised
                        store.write_chunk(point, c, start, got, rows[point], chunk, info)
                computed += size
                bar.update(size - moved)  # what the callback did not report itself
            nonfinite[point] += int(nonfinite_conditions(got, size).sum())
            if keep:
                parts[point].append(got)
        seconds = time.perf_counter() - t0
    except BaseException:
        if store is not None:
            store.release()
            if discard_if_empty and computed == 0 and not any((store.root / "done").rglob("*.json")):
                shutil.rmtree(store.root, ignore_errors=True)  # a run refused before any result: leave nothing
        raise
    finally:
        bar.close()
        if store is not None:
            store.release()
    arrays = [{k: np.concatenate([q[k] for q in p]) for k in p[0]} if p else {} for p in parts]
    return Ran(computed, resumed, nonfinite, seconds, arrays)
