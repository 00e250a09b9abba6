"""Grids of runs from one configuration, executed chunk by chunk into a :mod:`jaxattn.io.store`.

A configuration (TOML or JSON, or a dict) names the model, the dynamics, the initial conditions
and the run; any value given as a list becomes an axis of the grid, and the grid is the product of
its axes. Every key is checked against :data:`SCHEMA` before any work: an unknown key, a wrong type
or an impossible value is an error that names the key. Example::

    num_init = 100000          # initial conditions per grid point
    seed = [0, 1]              # an axis: two points
    [model]
    source = "random"          # 'random', 'minilm' or a converted .safetensors file
    d = 64
    heads = 4
    depth = 24
    mask = ["full", "causal"]  # another axis: 2 x 2 = 4 points
    [dynamics]
    kind = "discrete"          # or "continuous" (then t1, solver, rtol, ...)
    alpha = 1.0
    beta = [0.5, 1.0, 2.0]     # 12 points; points that differ only in alpha, beta, t1 or the
    [init]                     # tolerances share one compiled program
    n = 32

Execution (:func:`sweep_grid`, on the chunk loop it shares with :func:`jaxattn.sweep`,
:mod:`jaxattn.sweeps._chunks`): the conditions of every point are cut into chunks; each chunk is
split over the local devices (``shard_map``), its observables (and optionally final states) written
to the store with a checksum, and an interrupted sweep resumes where it stopped. With several
processes (``jax.distributed``; one per host, e.g. under Slurm) process ``p`` of ``P`` takes the
chunks ``p, p + P, ...``. Condition ``i`` of a point always starts from ``fold_in(key(seed), i)``, and all
the chunks of a point run at one lane width (``Batch(size=...)``, else the default for the chunk's conditions per
device), recorded in the store: at a given width every number is the same whatever the chunk size, device count or
process count, a resumed sweep keeps the width it recorded, and sweeps at other widths agree to round-off.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from jaxattn.dynamics import mesh_of, named_dtype, replicate
from jaxattn.dynamics.options import Batch, Save, check_batch, moved
from jaxattn.errors import ConfigError, path_arg
from jaxattn.io import load_config
from jaxattn.io.store import SweepStore, manifest, open_sweep, replacing, swap_in
from jaxattn.sweeps._chunks import run_chunks, work_items
from jaxattn.sweeps._distributed import distributed_from_env
from jaxattn.sweeps._observables import OBSERVABLES, Observables
from jaxattn.sweeps._point import FlowRun, MapRun, Point, RandomModel, dynamics_of, fields_of, point_of
from jaxattn.sweeps._schema import (
    CONTINUOUS_ONLY,
    DISCRETE_ONLY,
    RENAMED,
    SCHEMA,
    SECTIONS,
    Key,
    decisive,
    expand,
    inert_keys,
    keys_of,
    validate_config,
)
from jaxattn.sweeps.chunked import check_fits

#: the grid's face: :func:`sweep_grid`, and what the layers above (the command line, the scripts) take of the private
#: schema, point, observables and process start-up modules (renamed keys, a point as the drivers' objects)
__all__ = ["CONTINUOUS_ONLY", "DISCRETE_ONLY", "OBSERVABLES", "RENAMED", "SCHEMA", "SECTIONS", "FlowRun", "Key",
           "MapRun", "Observables", "Point", "RandomModel", "distributed_from_env", "dynamics_of", "expand",
           "fields_of", "inert_keys", "point_of", "sweep_grid", "validate_config"]


def _rows(chunk: int, num_init: int) -> int:
    """Conditions computed per chunk of a point: the chunk, or the whole point when it is smaller (the runner pads
    them to whole blocks of the point's lane width, :func:`_widths`)."""
    return min(chunk, num_init)


def _widths(points: list[Point], models: dict, entries: list[dict], chunk: int, batch: Batch, devices: int,
            *, recorded: bool) -> list[int | None]:
    """Each point's lane width, one for all its chunks: the one its store entry records (``recorded``: a resumed
    store, so that its chunks are computed as before), else the width the chunk decides (its conditions per device,
    :meth:`Point.lanes`). A store written before the width was recorded resumes at the uncapped default of then."""
    out = []
    for p, e in zip(points, entries, strict=True):
        if recorded and "lanes" in e:
            out.append(e["lanes"])
        else:
            share = None if recorded else -(-_rows(chunk, p.num_init) // devices)
            out.append(p.lanes(p.build_model(models), share, batch))
    return out


def _refuse_same_path(points: list[Point], info: list[dict]) -> None:
    """A ``path`` axis whose values take the same path at a point (``['plain', 'auto']``: both the plain path) would
    compute that point twice: refused."""
    seen: dict = {}
    for p, i in zip(points, info, strict=True):
        if "path" not in p.params:
            return
        rest = json.dumps({k: v for k, v in p.params.items() if k != "path"}, sort_keys=True, default=str)
        path = p.batch.path
        other = seen.setdefault((rest, i["kernel"]), path)
        if other != path:
            raise ConfigError(f"path is an axis but '{other}' and '{path}' both take the {i['kernel']} path here "
                              f"(on {jax.default_backend()}), which would run one point twice: give one of them")


def _merged(config, save: Save | None, batch: Batch | None) -> dict:
    """The configuration with the keys that ``save`` and ``batch`` stand for (:func:`keys_of`) written in: a key the
    configuration sets to another value is refused (given twice), so a store records one value, and its fingerprint
    is the same whether a value came from the configuration or from an object."""
    raw = load_config(config)
    if "command" in raw and isinstance(raw.get("config"), dict):  # what a run's --out records: `unknown key 'command'`
        cmd = raw["command"]
        named = isinstance(config, (str, os.PathLike))
        raise ConfigError(f"{config if named else 'the configuration'} is the config.json of a `jaxattn {cmd}` run, "
                          f"not a grid: replay that run with `jaxattn {cmd} --config {config if named else 'FILE'}`, "
                          "or give a grid of the keys `jaxattn sweep --help` lists")
    keys = keys_of(save, batch)
    if not keys:
        return raw
    own = _validated(raw, config)
    by_save = keys_of(save, None)
    for dotted, value in keys.items():
        sec, _, key = dotted.rpartition(".")
        have, default = own[sec][key], SCHEMA[sec][key].default
        if have != default and have != value:
            by = "save" if dotted in by_save else "batch"
            raise ConfigError(f"{dotted} is given twice: {have!r} by the configuration and {value!r} by {by}=: give "
                              "it once")
        table = raw if not sec else raw.setdefault(sec, {})
        old = [k for k, new in RENAMED.items() if new == key]
        for spelling in {key.replace("_", "-"), *old, *(o.replace("_", "-") for o in old)} - {key}:
            table.pop(spelling, None)
        table[key] = value
    return raw


def _validated(raw: dict, source) -> dict:
    """:func:`validate_config` of ``raw``, read from ``source``: an error in a file's grid names the file."""
    try:
        return validate_config(raw)
    except ConfigError as e:
        if not isinstance(source, (str, os.PathLike)):
            raise
        raise ConfigError(f"config file {source}: {e}") from None


@moved
def sweep_grid(config, out, *, save: Save | None = None, batch: Batch | None = None, process_id: int | None = None,
               num_processes: int | None = None, coordinator: str | None = None, progress: bool = True, log=None,
               overwrite: bool = False, label: str = "sweep"):
    """Run every grid point of ``config`` into the store ``out`` (created, or resumed if it holds this
    configuration; a store of another configuration is refused, or with ``overwrite`` replaced: the new store is
    built beside it, in the hidden ``.NAME.jaxattn-replace``, and swapped in when finished, so the old one stays
    whole until then and a killed replacement resumes; only the old store's own entries are removed, and a folder
    holding anything else is refused). Returns the opened :class:`jaxattn.io.store.Sweep`.

    ``save`` (:class:`jaxattn.Save`) and ``batch`` (:class:`jaxattn.Batch`): the drivers' objects, beside the
    configuration: what they set is written into it as its keys (``Save(every=m)`` is ``dynamics.save``,
    ``Save(steps=[...])`` ``dynamics.save_steps``, ``Batch(precision=...)`` ``matmul_precision``,
    ``Batch(path=...)`` ``path``), so the store records it as though configured, and a key the configuration sets
    to another value is refused. What a store cannot hold (a function as the observable, a flow's own times, a
    trajectory) is refused. ``batch.size`` and ``batch.devices`` say how the grid runs: the lane width and the
    devices each chunk is split over; default ``Batch(devices=jax.local_devices())``, every local device.
    ``process_id``/``num_processes``/``coordinator``: several cooperating processes (one per host)
    under ``jax.distributed``; see :func:`distributed_from_env`. ``progress``: a bar of the conditions done (on
    stderr); a flow's shows beside it the time its solver has reached (:func:`jaxattn.solve`'s ``progress``), the
    numbers being the same bits without it. ``label``: the bar's word (a command's own: ``solve`` for
    a solve); only shown, never recorded in the store.

    Examples:
        >>> import os, shutil, tempfile, jaxattn as ja
        >>> tmp = tempfile.mkdtemp()
        >>> config = {"num_init": 6, "chunk": 4, "init": {"n": 5},
        ...           "model": {"source": "random", "d": 8, "heads": 2, "depth": 3},
        ...           "dynamics": {"beta": [1.0, 2.0]}}            # a list is an axis: two grid points
        >>> sw = ja.sweep_grid(config, os.path.join(tmp, "grid"), progress=False)
        >>> sw.table(summary=True)["dynamics.beta"].tolist()
        [1.0, 2.0]
        >>> ja.open_sweep(os.path.join(tmp, "grid")).table().shape  # one row per point and condition
        (12, 7)
        >>> shutil.rmtree(tmp)
    """
    if batch is not None:
        check_batch(batch, "sweep_grid")
    out = path_arg("sweep_grid: out", out)
    source = config
    config = _merged(config, save, batch)  # what the objects say, as the configuration's keys
    batch = None if batch is None else Batch(size=batch.size, devices=batch.devices)
    cfg = _validated(config, source)
    points = [point_of(p) for p in expand(cfg)]
    if any(p.dtype == "float64" for p in points) and not jax.config.read("jax_enable_x64"):
        with jax.enable_x64(True):  # asked for in the configuration, for this call only: the caller's setting stays
            return sweep_grid(config, out, process_id=process_id, num_processes=num_processes,
                              coordinator=coordinator, progress=progress, batch=batch, log=log, overwrite=overwrite,
                              label=label)
    pid, nproc, coord = distributed_from_env(process_id, num_processes, coordinator)
    if overwrite and nproc > 1:  # each process would clear what the others have started writing
        raise ConfigError("overwrite with several processes would let each clear the others' chunks: replace the "
                          "store in one process first (or choose a new directory)")
    if nproc > 1 and not jax.distributed.is_initialized():
        jax.distributed.initialize(coordinator_address=coord, num_processes=nproc, process_id=pid)
    batch = Batch(devices=jax.local_devices()) if batch is None else batch
    devices = list(batch.devices or jax.local_devices()[:1])
    chunk = cfg[""]["chunk"]
    models: dict = {}
    point_info = []
    for p in points:
        m = p.build_model(models)
        check_fits(p.n, m.d_model, m.n_heads, p.dtype, batch.size)  # before the store is written
        point_info.append({"params": p.params, "num_init": p.num_init, "n": p.n, "d": m.d_model,
                           "times": p.times(m.depth).tolist(), "kernel": p.kernel()})
    _refuse_same_path(points, point_info)
    for e, w in zip(point_info, _widths(points, models, point_info, chunk, batch, len(devices), recorded=False),
                    strict=True):
        e["lanes"] = w  # outside the fingerprint: a store resumes at the width it recorded, on any number of devices
    decides = {"config": decisive(cfg), "lanes": batch.size}
    man = manifest(decides, chunk=chunk, points=point_info, processes=nproc, config=cfg)
    # a store of another configuration is replaced beside it and swapped in when finished: it stays whole until then
    work = replacing(out, man) if overwrite else Path(out)
    existed = work.exists()
    store = SweepStore.open(work, man, overwrite=overwrite)
    widths = _widths(points, models, store.manifest["points"], chunk, batch, len(devices), recorded=True)
    mine = [w for j, w in enumerate(work_items([p.num_init for p in points], chunk)) if j % nproc == pid]
    replicated: dict = {}
    failed = 0  # flows' conditions whose solve did not succeed (result != 0), among those computed

    def compute(i: int, start: int, size: int, advance: Callable[..., None]) -> dict[str, np.ndarray]:
        nonlocal failed
        p = points[i]
        m = p.build_model(models)
        dtype = named_dtype(p.dtype)
        key = id(m), str(dtype)
        if key not in replicated:  # weights placed on the devices once per sweep, not per chunk
            bare = m.replace(embeddings=None, final_ln_w=None, final_ln_b=None).astype(dtype)
            replicated[key] = replicate(bare, mesh_of(devices))
        # a flow's chunk can take minutes: the bar shows the time its solver has reached (the slowest condition)
        t1 = p.run.t1 if isinstance(p.run, FlowRun) and progress else None
        at = None if t1 is None else (lambda t: advance(0, f"t={t:.3g} of {t1:g}"))
        # every chunk of a point has one shape (the last one padded) and one lane width: one compiled program. A
        # point with fewer conditions than a chunk computes only its own (a solve of 8 conditions integrated 4096)
        arrays = p.chunk(replicated[key], start, _rows(chunk, p.num_init), size,
                         batch if widths[i] is None else dataclasses.replace(batch, size=widths[i]), progress=at)
        if at is not None:
            advance(0, "")
        if "result" in arrays:
            failed += int(np.sum(arrays["result"] != 0))
        return arrays

    ran = run_chunks(store, mine, compute, rows=[p.num_init for p in points], chunk=chunk, desc=label,
                     progress=progress, process=pid, info={"process": pid}, discard_if_empty=not existed)
    computed, seconds = ran.computed, ran.seconds
    summary = {"points": len(points), "conditions": sum(p.num_init for p in points), "computed": computed,
               "resumed": ran.resumed, "failed": failed, "nonfinite": sum(ran.nonfinite),
               "nonfinite_per_point": ran.nonfinite, "seconds": round(seconds, 3),
               "conditions_per_second": round(computed / seconds, 1) if seconds > 0 and computed else None,
               "process": pid, "processes": nproc, "devices": [str(d) for d in devices]}
    store.mark_finished(summary, pid)
    swap_in(out, work)
    if log is not None:
        log(summary)
    sw = open_sweep(out)
    sw.summary = summary
    return sw
