"""The sweep store: results of a grid of runs on disk, chunk by chunk, in Zarr v3.

Layout of a store directory::

    manifest.json            configuration, its fingerprint, grid points, chunking, versions, devices
    data.zarr/               one group per grid point: p0000/observables/<name> [N, T, ...],
                             p0000/final [N, n, d] (optional), p0000/result [N] (flows), p0000/times [T]
    done/p0000/c000000.json  one marker per finished chunk: rows, sha256 of every array slice
    locks/                   one lock file per writing process

A chunk counts as finished only when its marker exists and the data read back hashes to the
marker's checksums, so a chunk half-written when a process was killed, truncated or with flipped
bytes is recomputed on the next run. Markers are written atomically after the data. A store written
with another configuration is refused, never mixed; several processes share a store by taking
disjoint chunks, and a second process started with the same process index is refused (file lock).
A store of another configuration is replaced (``overwrite``) atomically by the grid's writer: the new
store is built beside it (:func:`replacing`, in :func:`jaxattn.io.rundir.replacement`) and swapped in
once finished (:func:`swap_in`), so the old one stays whole and readable until then.
Zarr, xarray and pandas read the data directly; :func:`open_sweep` is the reader. Every array carries the names of
its axes (Zarr's ``dimension_names``: ``condition``, ``step`` or ``t``, ``token``, ``coord``, see
:mod:`jaxattn.dynamics.labelled`) and each point's group its axes' values as attributes, so that
``xarray.open_zarr(store / "data.zarr", group="p0000/observables")`` opens a point as a Dataset and
``xarray.open_datatree(store / "data.zarr", engine="zarr", consolidated=False)`` every point (raw: unverified,
unfinished rows unfilled);
:meth:`Sweep.to_xarray` gives the whole grid, its axes as coordinates, also from a store written before the names
were (they are metadata only: no checksum covers them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxattn.dynamics import labelled
from jaxattn.errors import ConfigError, path_arg
from jaxattn.io._atomic import RESUME, full_disk, replace_bytes
from jaxattn.io.results import config_hash, device_info, versions, write_json
from jaxattn.io.rundir import is_ours, recover, replacement, swap
from jaxattn.model import display

if TYPE_CHECKING:
    import xarray

FORMAT = "jaxattn-sweep-1"


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha256()
    h.update(str((a.dtype.str, a.shape)).encode())
    h.update(a.tobytes())
    return h.hexdigest()


class CorruptChunk(ConfigError):
    """A finished chunk whose data no longer verify: reading refuses it, a resumed sweep recomputes it."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where} is corrupt ({why}): run the same sweep again into this store to recompute it "
                         "(chunks that do not verify are computed again)")


class SweepStore:
    """Chunked, verified storage of a sweep (see the module docstring)."""

    def __init__(self, root, manifest: dict):
        self.root = Path(root)
        self.manifest = manifest
        self._group: Any = None  # the zarr group, opened on first use
        self._locks: list = []

    # ------------------------------------------------------------------ creation
    @classmethod
    def open(cls, root, manifest: dict | None = None, *, overwrite: bool = False) -> SweepStore:
        """Open the store at ``root``; with ``manifest``, create it or check that it matches.

        ``manifest`` must hold ``fingerprint`` (what decides the numbers) and may hold ``decides`` (the
        configuration that was fingerprinted, to name what differs). A store whose fingerprint differs is
        refused with the differing keys and left untouched, or with ``overwrite`` removed in place (only the
        entries a store holds, see :func:`clear_store`; anything else in ``root`` is refused, never deleted) and
        created anew: for a store that is itself a replacement, or a run's chunk cache; a store a user keeps is
        replaced beside it instead (:func:`replacing`).
        """
        root = Path(root)
        path = root / "manifest.json"
        try:
            recover(root)  # a replacement killed while being swapped in: the old store put back
        except OSError:
            if manifest is not None:  # a reader without write access reads what is there
                raise
        if root.exists() and not root.is_dir():
            raise ConfigError(f"{root} exists and is not a directory")
        if manifest is None:
            if not root.exists():  # "not a jaxattn sweep store" would hide a mistyped path
                raise ConfigError(f"{root} does not exist")
            if not path.is_file():
                command = _run_of(root) if root.is_dir() else None
                raise ConfigError(f"{root} is not a jaxattn sweep store (no manifest.json)" + (
                    f": it is a run directory of `jaxattn {command}`, whose results are its own files (config.json, "
                    "*.safetensors, *.csv)" if command else ""))
            return cls(root, _read_manifest(path))
        if path.is_file():
            old = _read_manifest(path)
            if _matches(old, manifest):
                return cls(root, old)
            if not overwrite:
                waits = " (its replacement waits beside it: --overwrite resumes it)" if replacement(root).exists() \
                    else ""
                raise ConfigError(f"{root} holds a sweep with another configuration ({_differences(old, manifest)}); "
                                  "choose another output directory, or replace it (--overwrite; overwrite=True "
                                  f"in Python){waits}")
            clear_store(root)
        other = sorted(p.name for p in root.iterdir() if p.name != "locks") if root.exists() else []
        command = _run_of(root) if other else None
        if command:
            raise ConfigError(f"{root} holds a run of `jaxattn {command}`, not a sweep store (nothing is deleted); "
                              "choose a new or empty directory")
        if other:
            raise ConfigError(f"{root} is not empty and holds no sweep: it holds {other[0]!r}, which is no part of a "
                              "sweep store (nothing is deleted); choose a new or empty directory")
        try:
            with full_disk(root):
                root.mkdir(parents=True, exist_ok=True)
                probe = root / ".jaxattn-write-test"
                probe.write_bytes(b"")
                probe.unlink()
        except OSError as e:
            raise ConfigError(f"cannot write to {root}: {e.strerror or e}") from None
        manifest = {"format": FORMAT, **manifest}
        tmp = root / f".manifest.{os.getpid()}.tmp"
        try:
            with full_disk(root):
                tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:
            os.link(tmp, path)  # atomic create: exactly one process wins
        except FileExistsError:
            tmp.unlink(missing_ok=True)
            return cls.open(root, manifest)
        tmp.unlink(missing_ok=True)
        return cls(root, manifest)

    def lock(self, process_id: int = 0) -> None:
        """Take this process's writer lock; refuse if another live process holds it."""
        from filelock import FileLock, Timeout

        (self.root / "locks").mkdir(exist_ok=True)
        lk = FileLock(str(self.root / "locks" / f"process-{process_id}.lock"))
        try:
            lk.acquire(timeout=0)
        except Timeout:
            raise ConfigError(f"another process is already writing {self.root} as process {process_id}; "
                              "wait for it to finish") from None
        self._locks.append(lk)

    def release(self) -> None:
        for lk in self._locks:
            lk.release()
        self._locks.clear()

    # ------------------------------------------------------------------ data
    @property
    def group(self):
        if self._group is None:
            import zarr

            self._group = zarr.open_group(str(self.root / "data.zarr"), mode="a")
        return self._group

    def _array(self, point: int, name: str, like: np.ndarray, rows: int, chunk: int, names: Collection[str] = ()):
        """The array ``p<point>/<name>`` of ``rows`` rows shaped like ``like[0]``, created on first use (``names``:
        every array of the chunk being written, which tell a flow's from a map's where the manifest does not)."""
        from filelock import FileLock

        key = f"p{point:04d}/{name}"
        try:
            return self.group[key]
        except KeyError:
            pass
        with FileLock(str(self.root / "locks" / "create.lock")):
            self._group = None  # another process may have created it meanwhile
            try:
                return self.group[key]
            except KeyError:
                fill = np.nan if np.issubdtype(like.dtype, np.floating) else 0
                dims = labelled.stored_dims(name, like.ndim, _time_dim(self.manifest["points"][point], names))
                arr = self.group.create_array(key, shape=(rows, *like.shape[1:]), chunks=(chunk, *like.shape[1:]),
                                              dtype=like.dtype, fill_value=fill, dimension_names=dims)
                parent = self.group[key.rsplit("/", 1)[0]]
                if "jaxattn_point" not in parent.attrs:  # what xarray shows of the group a point's arrays are in
                    parent.attrs.update(_point_attrs(self.manifest["points"][point], point))
                return arr

    def _marker(self, point: int, chunk_index: int) -> Path:
        return self.root / "done" / f"p{point:04d}" / f"c{chunk_index:06d}.json"

    def write_chunk(self, point: int, chunk_index: int, start: int, arrays: Mapping[str, np.ndarray],
                    rows: int, chunk: int, info: dict | None = None) -> None:
        """Write rows ``start : start + len`` of every array, then the chunk's marker (atomically). A full disk
        raises :class:`jaxattn.errors.DiskFullError` naming the store (a chunk written in part has no marker: it is
        recomputed when the run resumes)."""
        sums = {}
        with full_disk(self.root, RESUME):
            for name, a in arrays.items():
                a = np.asarray(a)
                arr = self._array(point, name, a, rows, chunk, arrays.keys())
                arr[start:start + a.shape[0]] = a
                sums[name] = _digest(a)
            size = int(next(iter(arrays.values())).shape[0])
            write_json(self._marker(point, chunk_index), {"start": start, "rows": size, "sha256": sums,
                                                          **(info or {})})

    def read_chunk(self, point: int, chunk_index: int, start: int, size: int) -> dict[str, np.ndarray] | None:
        """The verified arrays of a finished chunk (``{name: rows}``); ``None`` if it is not finished (no
        marker). A chunk whose marker is unreadable or whose data do not hash to the marker's checksums
        (flipped bytes, truncated or zeroed files) raises :class:`CorruptChunk`."""
        m = self._marker(point, chunk_index)
        if not m.is_file():
            return None
        where = f"chunk {chunk_index} of grid point {point} (conditions {start}..{start + size - 1}) in {self.root}"
        try:
            marker = json.loads(m.read_text())
            sums = dict(marker["sha256"])
        except Exception:
            raise CorruptChunk(where, f"its marker {m.relative_to(self.root)} is unreadable") from None
        if marker.get("start") != start or marker.get("rows") != size:
            raise CorruptChunk(where, "its marker describes other rows")
        out = {}
        for name, want in sums.items():
            try:
                a = np.asarray(self.group[f"p{point:04d}/{name}"][start:start + size])
            except Exception as e:  # a zero-byte or truncated chunk file fails in the codec
                raise CorruptChunk(where, f"{name} cannot be read ({type(e).__name__})") from None
            if _digest(a) != want:
                raise CorruptChunk(where, f"{name} does not match its checksum")
            out[name] = a
        return out

    def chunk_done(self, point: int, chunk_index: int, start: int, size: int) -> bool:
        """True if the chunk's marker exists and its data read back matches the marker's checksums."""
        try:
            return self.read_chunk(point, chunk_index, start, size) is not None
        except CorruptChunk:  # recompute it
            return False

    def mark_finished(self, summary: dict, process_id: int = 0) -> None:
        """Record a process's summary of its part (``summary-<process>.json``)."""
        write_json(self.root / f"summary-{process_id}.json", summary)


#: The entries of a store directory (``solve`` writes its ``config.json`` and ``summary.txt`` there too), and the
#: temporaries of their atomic writes: what replacing a store may remove.
_ENTRY = re.compile(r"^(manifest\.json|data\.zarr|done|locks|summary-\d+\.json|config\.json|summary\.txt"
                    r"|\.jaxattn-write-test|\.manifest\.\d+\.tmp|\.(config\.json|summary\.txt|summary-\d+\.json)\..+\.tmp)$")


def record_file(root, name: str) -> None:
    """Record ``name`` in the manifest of the store ``root`` before jaxattn writes that file beside the store (a
    movie of a finished ``solve``, its trajectory), so that replacing the store removes it too (:func:`clear_store`),
    as a run directory's marker lists its files (:func:`jaxattn.io.rundir.record`; ``jaxattn movie`` picks
    the one that applies). A ``manifest.json`` that is not
    a store's is left untouched."""
    path = Path(root) / "manifest.json"
    try:
        m = _read_manifest(path)
    except ConfigError:  # a folder of the user's with a manifest.json of its own is no store: nothing to record
        return
    files = sorted({*m.get("files", []), name})
    if files != m.get("files"):
        replace_bytes(path, (json.dumps({**m, "files": files}, indent=2, sort_keys=True) + "\n").encode())


def _listed(root: Path) -> list[str]:
    """The files jaxattn recorded beside the store ``root`` (:func:`record_file`); none if its manifest is
    unreadable."""
    try:
        m = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError):
        return []
    files = m.get("files") if isinstance(m, dict) else None
    return [f for f in files if isinstance(f, str)] if isinstance(files, list) else []


def _foreign(root: Path) -> list[str]:
    """The entries of the store ``root`` that are neither its own nor recorded beside it (:func:`record_file`)."""
    listed = _listed(root)
    return sorted(p.name for p in root.iterdir() if not _ENTRY.match(p.name)
                  and not (listed and p.name != ".jaxattn-run.json" and is_ours(p.name, listed)))


def _replaceable(root: Path) -> None:
    """Refuse to replace or clear the store ``root`` if it holds anything else, or a process is writing it."""
    other = _foreign(root)
    if other:
        raise ConfigError(f"{root} holds {other[0]!r}, which is not part of a jaxattn sweep store: nothing is "
                          "deleted; choose another directory")
    _not_in_use(root)


def clear_store(root) -> None:
    """Remove the sweep store ``root``'s own entries (its manifest first, so that an interrupted removal leaves no
    store half-trusted) and the files jaxattn recorded beside it (:func:`record_file`); refused, with nothing
    removed, if ``root`` holds anything else."""
    _replaceable(Path(root))
    entries = sorted(Path(root).iterdir(), key=lambda q: (q.name != "manifest.json", q.name))
    for p in entries:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def _matches(old: dict, new: dict) -> bool:
    """Whether a store's manifest ``old`` was written with the configuration of ``new`` (then it is resumed)."""
    return old.get("fingerprint") == new["fingerprint"] or _same_values(old, new)


def replacing(root, manifest: dict) -> Path:
    """Where a sweep with ``manifest`` that may replace the store ``root`` (``overwrite``) writes: ``root``, unless
    it holds a store of another configuration; then the replacement beside it
    (:func:`jaxattn.io.rundir.replacement`; one left there by a killed run resumes), swapped in by :func:`swap_in`
    when finished. The old store is checked first (:func:`clear_store`'s rules), and left whole and readable."""
    root = Path(root)
    recover(root)
    try:
        old = _read_manifest(root / "manifest.json") if (root / "manifest.json").is_file() else None
    except ConfigError:
        return root  # not a store: SweepStore.open says why
    if old is None or _matches(old, manifest):
        return root
    _replaceable(root)
    return replacement(root)


def swap_in(root, work) -> None:
    """Swap the finished store ``work`` (:func:`replacing`) in for ``root``: a no-op when they are one folder."""
    if Path(work) != Path(root):
        _not_in_use(Path(root))
        swap(root, work, _foreign)


def _run_of(root: Path) -> str | None:
    """The command whose run directory ``root`` is (its marker, ``.jaxattn-run.json``), if it is one."""
    try:
        marker = json.loads((root / ".jaxattn-run.json").read_text())
    except (OSError, ValueError):
        return None
    return marker.get("command") if isinstance(marker, dict) and isinstance(marker.get("command"), str) else None


def _not_in_use(root: Path) -> None:
    """Refuse while a process holds one of the store's writer locks (it is writing chunks there)."""
    from filelock import FileLock, Timeout

    for f in sorted((root / "locks").glob("process-*.lock")):
        lk = FileLock(str(f))
        try:
            lk.acquire(timeout=0)
        except Timeout:
            raise ConfigError(f"another process is writing {root} ({f.name}); wait for it to finish") from None
        lk.release()


def _flat(d, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out |= _flat(v, f"{prefix}{k}." if k else prefix)  # the top-level section "" adds no name
        else:
            out[f"{prefix}{k}"] = v
    return out


def _decided(manifest: dict) -> dict | None:
    """The configuration a store's fingerprint was computed from, flat (``section.key``), if the manifest holds it."""
    d = manifest.get("decides", manifest.get("stamp", manifest.get("config")))
    return _flat(d) if isinstance(d, dict) else None


def _same_values(old: dict, new: dict) -> bool:
    """Whether two configurations whose fingerprints differ hold the same values, ``beta = 2`` against
    ``beta = 2.0`` (a fingerprint hashes the JSON text, where they differ; the run computes the same numbers)."""
    a, b = _decided(old), _decided(new)
    return a is not None and a == b


def _differences(old: dict, new: dict, most: int = 4) -> str:
    """What differs between the configuration a store was written with and the one asked now, as
    ``key: stored value there, value now``; the fingerprints when the store does not say what it was made from."""
    a, b = _decided(old), _decided(new)
    if a is None or b is None:
        return f"fingerprint {old.get('fingerprint')} != {new['fingerprint']}"
    missing = object()
    keys = [k for k in sorted(a.keys() | b.keys()) if a.get(k, missing) != b.get(k, missing)]
    if not keys:
        return f"fingerprint {old.get('fingerprint')} != {new['fingerprint']}"
    # the caller's own options (a command's) read better than the machinery's copies of them
    show = lambda v: "(not set)" if v is missing else repr(v)
    pair = lambda k: (show(a.get(k, missing)), show(b.get(k, missing)))
    name = lambda k: k.removeprefix("config.").removeprefix("fingerprint.")  # the keys as the user wrote them
    # a copy (the seed, the weights' hash, the same option as given and as stored, beta 3 and 3.0): said once
    own = {pair(k) for k in keys if k.startswith("fingerprint.")}
    named = {name(k) for k in keys if k.startswith("fingerprint.")}
    keys = [k for k in keys if k.startswith("fingerprint.") or (pair(k) not in own and name(k) not in named)]
    shown = [f"{name(k)}: {show(a.get(k, missing))} there, {show(b.get(k, missing))} now"
             for k in keys[:most]]
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return "; ".join(shown) + more


def _read_manifest(path: Path) -> dict:
    try:
        m = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path} is unreadable or not valid JSON ({e}); the store cannot be resumed") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or "fingerprint" not in m:
        raise ConfigError(f"{path} is not a jaxattn sweep manifest")
    return m


def nonfinite_conditions(arrays: Mapping[str, np.ndarray], num: int) -> np.ndarray:
    """``[num]`` bool: the conditions with a NaN or inf anywhere in their floating arrays (the arrays
    whose leading axis has ``num`` rows): runs whose states overflowed, e.g. a step size or β too
    large for the precision. Their observables mean nothing and are left out of summaries."""
    bad = np.zeros(num, bool)
    for a in arrays.values():
        a = np.asarray(a)
        if a.shape[:1] == (num,) and np.issubdtype(a.dtype, np.floating):
            bad |= ~np.isfinite(a.reshape(num, -1)).all(axis=1)
    return bad


def nonfinite_warning(bad: int, total: int) -> str:
    """The line that says how many conditions became non-finite."""
    return (f"{bad:,} of {total:,} initial conditions ({100 * bad / max(total, 1):.1f}%) became non-finite (NaN or "
            "inf): left out of the statistics; a smaller step size or β, or float64, may keep them finite")


def chunk_ranges(num_init: int, chunk: int) -> Iterator[tuple[int, int, int]]:
    """``(chunk index, start, size)`` of every chunk of ``num_init`` conditions."""
    for i, start in enumerate(range(0, num_init, chunk)):
        yield i, start, min(chunk, num_init - start)


def _time_dim(entry: dict, arrays: Collection[str] | None = None) -> str:
    """``'t'`` for a flow's point (solved by diffrax), ``'step'`` for a map's: by the path its manifest entry records
    or, in a store whose entries do not, by the solver's ``result`` among its ``arrays`` (their names)."""
    kernel = entry.get("kernel")
    flow = kernel == "diffrax" if kernel is not None else arrays is not None and "result" in arrays
    return labelled.TIME if flow else labelled.STEP


def _point_attrs(entry: dict, point: int) -> dict:
    """A point's group attributes: its index, its axes' values (by configuration key), its saved times."""
    return {"jaxattn_point": point, **entry.get("params", {}), "times": entry.get("times", [])}


def _short_axes(keys: list[str]) -> dict[str, str]:
    """The dimension each grid axis is in a Dataset: its key's last part (``dynamics.beta`` is ``beta``) unless two
    axes share it or it names a dimension or a variable of a result; then the whole key."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    taken = {*labelled.DIMENSIONS, *labelled.RESERVED, "point"}
    return {k: s if last.count(s) == 1 and s not in taken else k for k, s in zip(keys, last, strict=True)}


def _grid_axes(points: list[dict]) -> list[tuple[str, list]] | None:
    """The grid's axes, outermost first, with their values in order, if ``points`` are their product in
    :func:`itertools.product`'s order (as a grid expands: the last axis varies fastest), else ``None``. A manifest
    lists a point's axes by name, not in the grid's order, so the order is read from where each axis first
    changes."""
    axes = list(points[0]["params"]) if points else []
    first_change = {a: next((i for i, p in enumerate(points) if p["params"].get(a) != points[0]["params"].get(a)),
                            len(points)) for a in axes}
    axes.sort(key=lambda a: -first_change[a])
    values: list[list] = [[] for _ in axes]
    for p in points:
        for vals, a in zip(values, axes, strict=True):
            if p["params"].get(a) not in vals:
                vals.append(p["params"].get(a))
    expected = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*values)]
    got = [{a: p["params"].get(a) for a in axes} for p in points]
    return list(zip(axes, values, strict=True)) if got == expected else None


class Sweep:
    """A finished or unfinished sweep opened for reading (:func:`open_sweep`): ``.arrays(point)``, ``.table()``,
    ``.to_xarray()``; a terminal or a notebook shows a summary of it (the grid, the conditions finished and
    non-finite, the configuration's key values)."""

    summary: dict  # set on the sweep that sweep_grid returns: this process's run summary

    def __init__(self, root):
        self.store = SweepStore.open(root)
        self.manifest = self.store.manifest
        self.points = self.manifest["points"]

    def __len__(self) -> int:
        return len(self.points)

    def arrays(self, point: int = 0) -> dict[str, np.ndarray]:
        """Every array of a grid point, each finished chunk verified against its checksums (a corrupt
        one raises :class:`CorruptChunk`); NaN rows (0 for integers) where chunks are not finished."""
        return self._read(point)[0]

    def _read(self, point: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The arrays of a point, read chunk by chunk and verified, and the ``[N]`` finished rows."""
        n = self.points[point]["num_init"]
        done = np.zeros(n, bool)
        g = self.store.group
        key = f"p{point:04d}"
        if key not in g:
            return {}, done
        found: dict = {}

        def walk(grp, prefix):
            for name, arr in grp.arrays():
                found[prefix + name] = arr
            for name, sub in grp.groups():
                walk(sub, prefix + name + "/")

        walk(g[key], "")
        rows = {k: a for k, a in found.items() if a.shape[:1] == (n,)}
        out = {k: np.asarray(a[...]) for k, a in found.items() if k not in rows}  # not per condition
        for k, a in rows.items():
            out[k] = np.full(a.shape, np.nan if np.issubdtype(a.dtype, np.floating) else 0, a.dtype)
        for c, start, size in chunk_ranges(n, self.manifest["chunk"]):
            got = self.store.read_chunk(point, c, start, size)
            if got is None:
                continue
            missing = sorted(set(rows) - set(got))
            if missing:
                raise CorruptChunk(f"chunk {c} of grid point {point} in {self.store.root}",
                                   f"its marker has no checksum for {missing[0]}")
            for k, a in got.items():
                out[k][start:start + size] = a
            done[start:start + size] = True
        return {k.replace("/", "."): v for k, v in out.items()}, done

    def finished(self, point: int = 0) -> np.ndarray:
        """``[N]`` bool: rows whose chunk is finished and verified."""
        p = self.points[point]
        ok = np.zeros(p["num_init"], bool)
        for i, start, size in chunk_ranges(p["num_init"], self.manifest["chunk"]):
            ok[start:start + size] = self.store.chunk_done(point, i, start, size)
        return ok

    def table(self, summary: bool = False):
        """A tidy pandas table: one row per grid point and initial condition with the last saved value
        of every scalar observable, the point's parameters, ``finished`` and ``finite`` (no NaN or inf
        in the condition's arrays); ``summary=True``: one row per point with mean, std and quantiles
        over its finished, finite conditions (``conditions``), and ``nonfinite``, the number of
        finished conditions left out because they became non-finite."""
        import pandas as pd

        frames = []
        for i, p in enumerate(self.points):
            arrs, done = self._read(i)
            cols = {"point": i, "condition": np.arange(p["num_init"])}
            cols["finished"] = done
            cols["finite"] = ~nonfinite_conditions(arrs, p["num_init"])  # unfinished rows are NaN: not finite
            for name, a in sorted(arrs.items()):  # one column order whatever order the store lists its arrays in
                if name.startswith("observables.") and a.ndim == 2:  # [N, T] scalar observable
                    cols[name.split(".", 1)[1]] = a[:, -1]
                elif name == "result":
                    cols["result"] = a
            df = pd.DataFrame(cols)
            for k, v in p["params"].items():
                df[k] = v if not isinstance(v, (list, dict)) else json.dumps(v)
            frames.append(df)
        df = pd.concat(frames, ignore_index=True)
        if not summary:
            return df
        keys = ["point", *self.points[0]["params"]]
        num = [c for c in df.columns if c not in [*keys, "condition", "finished", "finite", "result"]
               and pd.api.types.is_numeric_dtype(df[c])]
        g = df[df["finished"] & df["finite"]].groupby(keys, dropna=False)[num]
        out = g.agg(["mean", "std", "min", "median", "max"])
        out.columns = [f"{a}_{b}" for a, b in out.columns]
        out["conditions"] = g.size()
        every = df.groupby(keys, dropna=False).size().index  # points with no finite condition keep their row
        out = out.reindex(every)
        out["conditions"] = out["conditions"].fillna(0).astype(int)
        out["nonfinite"] = (df[df["finished"] & ~df["finite"]].groupby(keys, dropna=False).size()
                            .reindex(every, fill_value=0).astype(int))
        return out.reset_index()


    def to_xarray(self, point: int | None = None) -> xarray.Dataset:
        """The store as an ``xarray.Dataset``: every observable ``(<axes>, condition, step | t, ...)``, ``final``
        ``(<axes>, condition, token, coord)`` when kept, a flow's ``result`` and ``num_steps``, ``finished`` and
        ``finite`` ``(<axes>, condition)`` as :meth:`table` has them, the grid's axes as dimensions with their values
        (``beta`` for ``dynamics.beta``; the whole key where two axes would share a name), ``point`` the index of
        each point in the store. Attributes: the configuration and the versions that made the store (JSON text), its
        fingerprint, and the seed, dtype and conditions where they are not axes. ``point``: that point only, its
        axes as scalar coordinates.

        Read through :meth:`arrays`: every finished chunk verified, unfinished rows NaN. Points of different shapes
        (an axis over ``num_init``, ``init.n``, ``model.d``, ``steps``, ``t1``) are aligned on the union of their
        coordinates, NaN where a point has none (integers become floats there). Stores written before the arrays
        carried their dimension names open alike.

        Examples:
            >>> import os, shutil, tempfile, jaxattn as ja
            >>> tmp = tempfile.mkdtemp()
            >>> config = {"num_init": 4, "chunk": 4, "init": {"n": 3}, "dynamics": {"beta": [1.0, 4.0]},
            ...           "model": {"source": "random", "d": 4, "heads": 1, "depth": 2}}
            >>> ds = ja.sweep_grid(config, os.path.join(tmp, "g"), progress=False).to_xarray()
            >>> ds.diameter.dims, ds.beta.values.tolist()
            (('beta', 'condition', 'step'), [1.0, 4.0])
            >>> ds.sel(beta=4.0).mean("condition").diameter.dims      # a grid point by value, over its conditions
            ('step',)
            >>> shutil.rmtree(tmp)
        """
        import xarray as xr

        if point is not None:
            if not 0 <= point < len(self.points):
                raise ConfigError(f"point must be in 0..{len(self.points) - 1}, got {point}")
            return self._dataset(point, self._reads(point)[point], scalar_axes=True)
        reads = self._reads()
        sets = [self._dataset(i, reads[i], scalar_axes=True) for i in range(len(self.points))]
        kinds = {next((d for d in (labelled.STEP, labelled.TIME) if d in ds.dims), None) for ds in sets} - {None}
        if len(kinds) > 1:
            raise ConfigError("the store holds maps and flows (dynamics.kind is an axis): their steps and times are "
                              "not one axis; open a point at a time (to_xarray(point=i))")
        names = _short_axes(list(self.points[0]["params"]))
        if not names:
            return sets[0]
        grid = _grid_axes(self.points)
        opts: dict[str, Any] = dict(join="outer", data_vars="all", coords="different", compat="equals",
                                    combine_attrs="override")
        if grid is None:  # not a product grid (a store edited by hand): the points along one axis
            ds = xr.concat(sets, dim="point", **opts)
        else:
            nested: Any = sets
            for _, vals in reversed(grid[1:]):
                nested = [nested[i:i + len(vals)] for i in range(0, len(nested), len(vals))]
            ds = xr.combine_nested(nested, concat_dim=[names[a] for a, _ in grid], **opts)
            ds = ds.transpose(*[names[a] for a, _ in grid], ...)  # the grid's axes first, in its order
        ds.attrs = self._attrs(None)
        return ds

    def _reads(self, only: int | None = None) -> dict[int, tuple[dict[str, np.ndarray], np.ndarray]]:
        """The verified arrays and finished rows of every point (or of ``only``), with a NaN placeholder for an
        array that a point lacks (none of its chunks finished yet) but another has."""
        idx = range(len(self.points)) if only is None else [only]
        reads = {i: self._read(i) for i in idx}
        like: dict[str, np.ndarray] = {}  # one row per condition
        for i, (arrs, _) in reads.items():
            for k, a in arrs.items():
                if a.shape[:1] == (self.points[i]["num_init"],):
                    like.setdefault(k, a)
        for i, (arrs, _) in reads.items():
            p = self.points[i]
            for k, a in like.items():
                if k in arrs:
                    continue
                rest: tuple = a.shape[1:]
                if k == "final":
                    rest = (p.get("n", rest[0]), p.get("d", rest[1]))
                elif (k == "observables" or k.startswith("observables.")) and a.ndim >= 2:
                    rest = (len(p.get("times", [])), *a.shape[2:])
                arrs[k] = np.full((p["num_init"], *rest), np.nan)
        return reads

    def _dataset(self, i: int, read: tuple[dict[str, np.ndarray], np.ndarray], scalar_axes: bool):
        import xarray as xr

        arrs, done = read
        p = self.points[i]
        n = p["num_init"]
        time_dim = _time_dim(p, arrs)
        times = np.asarray(p.get("times", []), np.float64)
        data: dict[str, Any] = {}
        for k, a in sorted(arrs.items()):
            if a.shape[:1] != (n,):
                continue  # not one row per condition
            data[labelled.variable_name(k)] = (labelled.stored_dims(k, a.ndim, time_dim), a)
        data["finished"] = ((labelled.CONDITION,), done)
        data["finite"] = ((labelled.CONDITION,), ~nonfinite_conditions(arrs, n))
        coords: dict[str, Any] = {labelled.CONDITION: np.arange(n), "point": i}
        if any(time_dim in dims for dims, _ in data.values()):
            coords[time_dim] = times.astype(np.int64) if time_dim == labelled.STEP else times
        if "final" in data:
            coords[labelled.TOKEN] = np.arange(data["final"][1].shape[1])
            coords[labelled.COORD] = np.arange(data["final"][1].shape[2])
        axes = list(p["params"])
        names = _short_axes(axes)
        if scalar_axes:
            for a in axes:
                coords[names[a]] = xr.Variable((), p["params"][a], attrs={"key": a})
        ds = xr.Dataset(data, coords=coords)
        return ds.assign_attrs(self._attrs(i))

    def _attrs(self, point: int | None) -> dict:
        """The Dataset's attributes: the store, its fingerprint, configuration and versions (JSON text), the kind of
        dynamics, and the top-level run keys that are not axes."""
        m = self.manifest
        config = m.get("config", m.get("decides"))
        run = config.get("", config) if isinstance(config, dict) else {}
        axes = set(self.points[0]["params"]) if self.points else set()
        keys = {k: run.get(k) for k in ("seed", "dtype", "num_init", "n", "steps", "alpha", "beta")
                if k in run and k not in axes and not isinstance(run.get(k), (list, dict))}
        kinds = {_time_dim(p) for p in self.points}
        out = {"store": str(self.store.root), "fingerprint": m.get("fingerprint"),
               "kind": ("flow" if kinds == {labelled.TIME} else "map") if len(kinds) == 1 else None,
               **keys, "config": config, "versions": m.get("created_by", {}).get("versions")}
        if point is not None and len(self.points) > 1:
            out["point"] = point
        return labelled.clean_attrs(out)

    # ------------------------------------------------------------------ display
    def _finished_rows(self) -> int:
        """Conditions whose chunk has a marker (not verified: reading verifies)."""
        total = 0
        for i, p in enumerate(self.points):
            total += sum(size for c, _, size in chunk_ranges(p["num_init"], self.manifest["chunk"])
                         if self.store._marker(i, c).is_file())
        return total

    def _nonfinite_recorded(self) -> int | None:
        """The non-finite conditions the processes' summaries record (``None`` where none was written)."""
        own = getattr(self, "summary", None)
        if isinstance(own, dict) and own.get("processes", 1) == 1 and "nonfinite" in own:
            return int(own["nonfinite"])
        found = []
        for f in sorted(self.store.root.glob("summary-*.json")):
            try:
                found.append(int(json.loads(f.read_text())["nonfinite"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return sum(found) if found else None

    def _summary(self) -> display.Summary:
        m = self.manifest
        config = m.get("config")
        axes = list(self.points[0]["params"]) if self.points else []
        total = sum(p["num_init"] for p in self.points)
        names = _short_axes(axes)
        order = _grid_axes(self.points)
        grid = (" × ".join(f"{names[a]} {display.short(v)}" for a, v in order) if order is not None
                else ", ".join(names.values())) or "one point"
        time = "/".join(sorted({_time_dim(p) for p in self.points}))
        span = lambda vals: (f"{min(vals)}" if len(set(vals)) == 1 else f"{min(vals)} to {max(vals)}") if vals else "?"
        shape = labelled.dims_line([
            (labelled.CONDITION, span([p["num_init"] for p in self.points])),
            (time, span([len(p.get("times", [])) for p in self.points])),
            (labelled.TOKEN, span([p["n"] for p in self.points if "n" in p])),
            (labelled.COORD, span([p["d"] for p in self.points if "d" in p]))])
        rows = [("store", str(self.store.root)),
                ("grid", f"{len(self.points)} points: {grid}" if axes else "one point"),
                ("dimensions", shape),
                ("finished", f"{self._finished_rows():,} of {total:,} conditions (chunks of {m['chunk']:,})")]
        bad = self._nonfinite_recorded()
        rows.append(("non-finite", "not recorded (table() counts them)" if bad is None
                     else display.count_line(bad, total)))
        if isinstance(config, dict):
            sec = lambda name: {k: v for k, v in config.get(name, {}).items() if f"{name}.{k}" not in axes}
            model, dyn, init, top = sec("model"), sec("dynamics"), sec("init"), config.get("", {})
            src = model.get("source", "random")
            rows.append(("model", f"{src}" + (f": d {model.get('d')}, heads {model.get('heads')}, depth "
                                             f"{model.get('depth')}, {model.get('mask')}" if src == "random" else "")))
            kind = dyn.get("kind", "discrete")
            keys = ("alpha", "beta", "steps", "norm") if kind == "discrete" else ("beta", "t1", "space", "solver")
            rows.append(("dynamics", f"{kind}: " + ", ".join(f"{k} {display.short(dyn[k])}" for k in keys
                                                             if dyn.get(k) is not None)))
            rows.append(("run", ", ".join(f"{k} {display.short(v)}" for k, v in (
                ("seed", top.get("seed")), ("dtype", top.get("dtype")), ("n", init.get("n")),
                ("init", init.get("kind"))) if v is not None and k not in axes)))
            rows.append(("observables", ", ".join(top.get("observables", []))))
        else:
            stamp = m.get("decides", {})
            rows.append(("run", ", ".join(f"{k} {display.short(stamp[k])}" for k in (
                "n", "steps", "seed", "alpha", "beta", "dtype") if k in stamp)))
        return display.Summary("jaxattn.Sweep", rows)

    def __repr__(self) -> str:
        return display.text(display.safe(self._summary, lambda: f"Sweep({str(self.store.root)!r})"))

    def _repr_html_(self) -> str:
        return display.as_html(display.safe(self._summary, lambda: f"Sweep({str(self.store.root)!r})"))


def open_sweep(path) -> Sweep:
    """Open a sweep store (finished or not) for reading: ``.arrays(point)``, ``.table()``."""
    return Sweep(path_arg("open_sweep: path", path))


def fingerprint(config: Mapping) -> str:
    return config_hash(config)


def manifest(decides: Mapping, *, chunk: int, points: list[dict], processes: int = 1, **extra) -> dict:
    """The manifest of a store, one layout for both engines (:func:`jaxattn.sweep`, :func:`jaxattn.sweep_grid`):
    ``decides`` what decides the numbers and its :func:`fingerprint`, the ``chunk`` size, one entry per grid point
    (``params`` its axes' values, ``num_init``, ``n``, ``d``, the saved ``times``, the ``kernel`` path) and what
    made the store (versions, device, processes); ``extra``: more keys (the grid's validated ``config``)."""
    taken = sorted(set(extra) & {"fingerprint", "decides", "chunk", "points", "created_by"})
    if taken:
        raise ValueError(f"manifest: {taken[0]} is the layout's own key, not an extra one")
    return {"fingerprint": fingerprint(decides), "decides": dict(decides), **extra, "chunk": chunk, "points": points,
            "created_by": {"versions": versions(), "device": device_info(), "processes": processes}}


__all__ = ["CorruptChunk", "Sweep", "SweepStore", "chunk_ranges", "clear_store", "fingerprint", "manifest",
           "nonfinite_conditions", "open_sweep", "replacing", "swap_in"]
