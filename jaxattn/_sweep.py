"""Chunked, resumable sweeps over many random initial conditions.

The conditions ``0..N-1`` are cut into chunks; each finished chunk is saved atomically in
``out_dir/chunks/``. Running the same sweep again into the same folder skips finished chunks,
so an interrupted sweep resumes where it stopped. Condition ``i`` is always drawn from
``fold_in(key(seed), i)``: the numbers do not depend on the chunk size.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .discrete import D1, Dynamics, simulate
from .errors import ConfigError
from .params import Model
from .results import config_hash, flatten, load_arrays, save_arrays, write_json
from .sampling import init_tokens


def sweep(model: Model, *, num_init: int, n: int, steps: int, seed: int = 0, out_dir=None,
          chunk: int = 1024, init: str = "sphere", dynamics: Dynamics = D1, alpha=1.0, beta=1.0, S=None,
          dtype=jnp.float32, observe: Optional[Callable] = None, aux=None, keep_final: bool = True,
          progress: bool = True, fingerprint: Optional[dict] = None) -> dict[str, np.ndarray]:
    """Simulate ``num_init`` random initial conditions of ``n`` tokens, chunk by chunk.

    Returns flat arrays: ``observables.<name>: [num_init, steps + 1, ...]`` and, with
    ``keep_final``, ``final: [num_init, n, d]``. With ``out_dir`` every chunk is saved and
    reused on a later call with the same ``fingerprint`` (a dict describing the run; a
    different one in the same folder is refused rather than silently mixed).
    """
    if num_init < 1:
        raise ConfigError(f"the number of initial conditions must be >= 1, got {num_init}")
    if chunk < 1:
        raise ConfigError(f"chunk must be >= 1, got {chunk}")
    d = model.d_model
    key = jax.random.key(seed)
    starts = list(range(0, num_init, chunk))
    chunk_dir = None
    if out_dir is not None:
        chunk_dir = Path(out_dir) / "chunks"
        stamp = {"fingerprint": fingerprint or {}, "num_init": num_init, "chunk": chunk, "n": n,
                 "steps": steps, "seed": seed}
        h = config_hash(stamp)
        marker = chunk_dir / "sweep.json"
        if marker.exists():
            old = json.loads(marker.read_text())
            if old.get("hash") != h:
                raise ConfigError(f"{out_dir} holds an unfinished run with another configuration; "
                                  "choose another output directory or delete it")
        write_json(marker, {"hash": h, **stamp})
    bar = None
    if progress and len(starts) > 1:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_init, unit="cond", desc="simulate", file=sys.stderr)
    parts = []
    for start in starts:
        size = min(chunk, num_init - start)
        path = None if chunk_dir is None else chunk_dir / f"chunk_{start:09d}.safetensors"
        if path is not None and path.exists():
            part = load_arrays(path)
        else:
            X0 = init_tokens(key, size, n, d, kind=init, S=S, start=start, dtype=dtype)
            res = simulate(model, X0, steps, dynamics=dynamics, alpha=alpha, beta=beta, S=S, observe=observe, aux=aux,
                           dtype=dtype)
            part = flatten({"observables": res.observables})
            if keep_final:
                part["final"] = np.asarray(res.final)
            if path is not None:
                save_arrays(path, part)
        parts.append(part)
        if bar is not None:
            bar.update(size)
    if bar is not None:
        bar.close()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def finish(out_dir) -> None:
    """Remove the chunk files once the merged results are safely written."""
    shutil.rmtree(Path(out_dir) / "chunks", ignore_errors=True)


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
