"""Chunked, resumable runs of one configuration over many random initial conditions (``simulate``
and ``analyze``), on the verified store of :mod:`jaxattn.io.store`: a one-point grid, whose point
(:class:`jaxattn.sweeps.grid.Point`, holding the model given) computes every chunk as a grid's points do, run by the
chunk loop :func:`jaxattn.sweep_grid` runs on too (:mod:`jaxattn.sweeps._chunks`). Its store's fingerprint is the
stamp of the options it was called with, as it has been since its first stores, so that those still resume.

The conditions ``0..N-1`` are cut into chunks; each finished chunk is written to
``out_dir/.jaxattn-sweep/`` (grid point ``p0000``) with a checksum. Running the same sweep again into the
same folder skips the chunks that verify and recomputes the others (half-written, truncated, zeroed); a
folder holding a run with another configuration — any option that changes the numbers, the weights
themselves included (their sha256 is part of the fingerprint) — is refused rather than mixed, and a run
stopped before its first chunk (refused, interrupted) removes the store it created. Condition ``i`` is
always drawn from ``fold_in(key(seed), i)`` and every chunk is computed in blocks of one width (``Batch(size=...)``,
else the default for the chunk's conditions), recorded in the store: a resumed run keeps it, so its numbers are the
same bits as an uninterrupted run's; at a given width they do not depend on the chunk size, and runs at other widths
agree to round-off. :func:`finish` removes only the folder the tool created.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from jaxattn.config import record_repr
from jaxattn.dynamics import (
    check_scalar,
    default_lanes,
    lanes_for,
    memory_limit,
    resolve_dtype,
    working_bytes,
)
from jaxattn.dynamics.discrete import D1, Dynamics, check_dynamics, check_steps
from jaxattn.dynamics.options import Batch, Save, check_batch, check_save, moved
from jaxattn.errors import ConfigError, is_integer, positive_int
from jaxattn.errors import seed as check_seed
from jaxattn.io.results import weights_sha256
from jaxattn.io.store import SweepStore, manifest
from jaxattn.model.params import Model, validate
from jaxattn.model.sampling import MAX_CONDITIONS  # one seed names 2^32 conditions (32-bit fold_in)
from jaxattn.sweeps._chunks import run_chunks, work_items
from jaxattn.sweeps._point import MapRun, Point

STORE = ".jaxattn-sweep"  # the only folder :func:`finish` removes
CHUNK_BUDGET = 256 * 2**20  # bytes of host arrays per chunk when the chunk size is chosen automatically
PIECES = 8  # progress updates (separate calls) per chunk, so that a big chunk is not silent


def auto_chunk(n: int, d: int, steps: int, *, keep_final: bool, dtype, lanes: int | None = None) -> int:
    """Conditions per chunk from a memory budget (:data:`CHUNK_BUDGET`).

    A chunk holds its initial states ``[C, n, d]``, the observables ``[C, steps + 1, k]`` (``k`` = 8
    scalars assumed) and, with ``keep_final``, the final states: the chunk size is the largest multiple
    of the runner's lane width whose arrays fit the budget, between one lane block and 65,536.
    """
    lanes = lanes or default_lanes()
    per = jnp.dtype(dtype).itemsize * (n * d * (2 if keep_final else 1) + 8 * (steps + 1))
    c = min(CHUNK_BUDGET // per, 65_536)
    return int(max(lanes, c // lanes * lanes))


def check_fits(n: int, d: int, heads: int, dtype, size: int | None = None) -> None:
    """Refuse, before anything is allocated, conditions of ``n`` tokens whose block of the runner cannot fit on
    the device (:func:`jaxattn.dynamics._runner.working_bytes`: the attention matrices grow like ``n²``). The
    runner refuses the same, but only once a chunk's initial states are drawn: ``n = 10^11`` aborted in native
    code while drawing them, leaving a started run behind."""
    per = working_bytes(n, d, heads, dtype)
    lanes = lanes_for(size, per)
    have = memory_limit()
    if lanes * per > have // 2:
        what = "one initial condition" if lanes == 1 else f"one block of {lanes} initial conditions"
        raise ConfigError(f"n = {n:,} tokens (d = {d}, {heads} head(s)) need about {lanes * per / 2**30:,.3g} GiB "
                          f"for {what}, more than half the device's {have / 2**30:,.3g} GiB: lower n"
                          + ("" if lanes == 1 else " or Batch(size=...)"))


def check_kept(num_init: int, n: int, d: int, steps: int, dtype, keep_final: bool) -> None:
    """Refuse, before computing, results that cannot be held in memory at the end: a sweep returns every
    condition's observables (about 8 scalars per saved step) and, with ``keep_final``, its final state."""
    per = jnp.dtype(dtype).itemsize * (8 * (steps + 1) + (n * d if keep_final else 0))
    have = memory_limit()
    if num_init * per > have // 2:
        raise ConfigError(f"the results of {num_init:,} initial conditions ({n} tokens, {steps} steps"
                          + (", final states kept" if keep_final else "") + f") need about "
                          f"{num_init * per / 2**30:,.3g} GiB in memory, more than half the machine's "
                          f"{have / 2**30:,.3g} GiB: fewer conditions" + (" or no final states" if keep_final else "")
                          + " (or a sweep_grid store, read point by point)")


@moved
def sweep(model: Model, *, num_init: int, n: int, steps: int, seed: int = 0, out_dir=None, chunk: int | None = None,
          init: str = "sphere", dynamics: Dynamics = D1, alpha=1.0, beta=1.0, S: Float[ArrayLike, "d d"] | None = None,
          save: Save = Save(), batch: Batch = Batch(), dtype="float32", keep_final: bool = True, progress: bool = True,
          fingerprint: dict | None = None, stats: dict | None = None, overwrite: bool = False) -> dict[str, np.ndarray]:
    """Simulate ``num_init`` random initial conditions of ``n`` tokens, chunk by chunk.

    Returns flat arrays: ``observables.<name>: [num_init, T, ...]`` and, with ``keep_final``,
    ``final: [num_init, n, d]``. With ``out_dir`` every chunk is stored and verified and an
    interrupted run resumes (see the module docstring); ``fingerprint`` adds what else decides the
    numbers; a store of another configuration there is refused, or with ``overwrite`` replaced in place (it is a
    cache of chunks: ``simulate --overwrite`` replaces a finished run as a whole, :mod:`jaxattn.io.rundir`). ``chunk``
    (conditions per stored chunk) defaults to :func:`auto_chunk`; each chunk is
    computed in a few pieces so the progress bar moves within it. ``stats`` (a dict) receives
    ``computed`` and ``resumed`` condition counts and the ``chunk`` size used. ``save``, ``batch`` and
    ``dtype`` are :func:`jaxattn.simulate`'s (a sweep keeps observables and final states, so
    ``Save(trajectory=True)`` is refused); the draws are ``dtype``'s.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3)
        >>> out = ja.sweep(model, num_init=6, n=5, steps=3, chunk=4, progress=False)
        >>> {k: v.shape for k, v in sorted(out.items())}
        {'final': (6, 5, 8), 'observables.cos_consensus': (6, 4), 'observables.diameter': (6, 4)}
        >>> X0 = ja.init_tokens(jax.random.key(0), 6, 5, 8)            # the same conditions, in one batch
        >>> ref = ja.simulate(model, X0, steps=3)                       # in one block of 8 lanes, the sweep's of 4
        >>> bool(np.allclose(ref.observables["diameter"], out["observables.diameter"], rtol=0, atol=1e-6))
        True
    """
    save = check_save(save, "sweep", kind="map")  # before anything is written
    batch = check_batch(batch, "sweep")
    if save.trajectory:
        raise ConfigError("sweep keeps observables and final states, not trajectories: Save(trajectory=True) is "
                          "for simulate")
    # what simulate would refuse, refused before a store is written (a refused run leaves nothing behind)
    if not isinstance(dynamics, Dynamics):
        raise ConfigError(f"dynamics must be a jaxattn.Dynamics, got {dynamics!r}")
    validate(model)
    check_dynamics(model, dynamics, S)
    alpha, beta = check_scalar("alpha", alpha), check_scalar("beta", beta)
    dtype = resolve_dtype(dtype)
    lanes = lanes_for(batch.size) * (1 if batch.devices is None else len(batch.devices))
    if chunk is None:
        chunk = auto_chunk(n, model.d_model, steps, keep_final=keep_final, dtype=dtype, lanes=lanes) \
            if is_integer(n, 1) and is_integer(steps, 0) else 1024
    for name, v in (("num_init", num_init), ("chunk", chunk), ("n", n)):
        positive_int(name, v)
    steps = check_steps(steps)  # before the store's manifest names the saved steps
    if num_init > MAX_CONDITIONS:
        raise ConfigError(f"num_init = {num_init:,} is beyond the {MAX_CONDITIONS:,} (2^32) conditions one seed names; "
                          "split the run over several seeds")
    seed = check_seed("seed", seed)
    d = model.d_model
    check_fits(n, d, model.n_heads, dtype, batch.size)  # before the store and the first draw
    check_kept(num_init, n, d, steps, dtype, keep_final)
    # a few pieces of one fixed size (one compiled program), so the bar moves within a chunk, all at one lane width
    # that the chunk decides (its conditions per device; not the last chunk's, nor the piece's): a stored run records
    # it and resumes at it, so that it is bit-identical to itself resumed
    span = min(chunk, num_init)  # a chunk larger than the run computes only the run's conditions
    devices = 1 if batch.devices is None else len(batch.devices)
    # the run is a one-point grid: its point's run computes every chunk, as a grid's points do
    point = Point(params={}, num_init=num_init, seed=seed, dtype=jnp.dtype(dtype).name, keep_final=keep_final, n=n,
                  init=init, model=model, run=MapRun(dynamics, alpha=alpha, beta=beta, steps=steps, S=S), save=save,
                  batch=batch, observables=())
    width = point.lanes(model, -(-span // devices))

    def pieces_of(width: int | None) -> int:  # conditions per simulate call: whole lane blocks, under the budget
        lanes = (width or lanes_for(None)) * devices
        piece = min(span, -(-span // (PIECES * lanes)) * lanes)
        held = jnp.dtype(dtype).itemsize * piece * (n * d * (2 if keep_final else 1) + 8 * (steps + 1))
        if held > memory_limit() // 2:  # a piece's states and results are held at once
            raise ConfigError(f"chunk = {chunk:,} computes {piece:,} conditions at a time, about {held / 2**30:,.3g} "
                              f"GiB of states and results, more than half the machine's {memory_limit() / 2**30:,.3g} "
                              "GiB: give a smaller chunk (default: from a 256 MiB budget)")
        return piece

    piece = pieces_of(width)
    store, existed = None, True
    if out_dir is not None:
        stamp = {"fingerprint": fingerprint or {}, "weights": weights_sha256(model), "num_init": num_init,
                 "chunk": chunk, "n": n, "steps": steps, "seed": seed, "init": init, "dynamics": record_repr(dynamics),
                 "alpha": float(alpha), "beta": float(beta), "dtype": jnp.dtype(dtype).name, "keep_final": keep_final,
                 "observe": getattr(save.observe, "__qualname__", repr(save.observe)),
                 "S": None if S is None else np.asarray(S, np.float64).tolist(),
                 # only when not the default, so that stores written before the option existed still resume
                 **({"precision": batch.precision} if batch.precision != "highest" else {}),
                 **({"every": save.every} if save.every is not None else {}),
                 **({"save_steps": list(save.steps)} if save.steps is not None else {}),
                 **({"lanes": batch.size} if batch.size is not None else {}),
                 **({"path": batch.path} if batch.path != "auto" else {})}
        existed = (Path(out_dir) / STORE).exists()
        # the grid's layout: a one-point grid whose `decides` is the stamp (its fingerprint is the stamp's hash,
        # as before the layouts were one: stores written then, with the stamp under `stamp`, still resume)
        entry = {"params": {}, "num_init": num_init, "n": n, "d": d,
                 "times": point.times(model.depth).tolist(),
                 "kernel": "plain",  # the path of its chunks (a removed fused kernel was the other)
                 "lanes": width}  # outside the fingerprint: a run resumes at the width it recorded
        store = SweepStore.open(Path(out_dir) / STORE, manifest(stamp, chunk=chunk, points=[entry]),
                                overwrite=overwrite)
        kept = store.manifest["points"][0]
        # a store written before the width was recorded ran at the uncapped default of then
        recorded = kept["lanes"] if "lanes" in kept else point.lanes(model, None)
        if recorded != width:
            width, piece = recorded, pieces_of(recorded)
    run_batch = batch if width is None else dataclasses.replace(batch, size=width)

    def compute(i: int, start: int, size: int, advance: Callable[[int], None]) -> dict[str, np.ndarray]:
        pieces = []
        for p0 in range(0, size, piece):  # non-finite conditions are counted and reported by the caller
            pieces.append(point.chunk(model, start + p0, piece, min(piece, size - p0), run_batch))
            advance(min(piece, size - p0))
        return {k: np.concatenate([q[k] for q in pieces]) for k in pieces[0]}

    ran = run_chunks(store, work_items([num_init], chunk), compute, rows=[num_init], chunk=chunk, desc="simulate",
                     progress=progress, keep=True, discard_if_empty=not existed)
    if stats is not None:
        stats.update(computed=ran.computed, resumed=ran.resumed, chunk=chunk)
    return {k.replace("observables/", "observables.", 1): v for k, v in ran.arrays[0].items()}


def finish(out_dir) -> None:
    """Remove the chunk store once the merged results are safely written (only the tool's folder)."""
    shutil.rmtree(Path(out_dir) / STORE, ignore_errors=True)


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
