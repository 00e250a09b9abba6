"""Trajectory files: the states a run saved, for a movie (``trajectory.safetensors`` of a run directory).

A trajectory is ``[T, n, d]``, or ``K`` panels drawn side by side: ``[K, T, n, d]`` or a list of ``K``
``[T, n_k, d_k]`` with one ``T``. The file holds one ``trajectory.<k> [T, n_k, d_k]`` per panel, the saved
times ``ts [T]`` and the observables ``observables.<name> [K, T]``; its metadata the titles (JSON), the time
label, a note and ``format = jaxattn-trajectory``. ``metastability``, ``simulate --movie`` and ``solve --movie``
write one; ``jaxattn movie RUN_DIR`` draws it (:func:`jaxattn.plotting.movie`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxattn.errors import ConfigError, path_arg
from jaxattn.io.results import save_arrays

#: The ``format`` a trajectory file's metadata names.
FORMAT = "jaxattn-trajectory"


def panels(trajectory: Any) -> list[np.ndarray]:
    """The panels ``[T, n, d]`` (float64) of ``trajectory`` (``[T, n, d]``, ``[K, T, n, d]`` or a list of
    ``[T, n_k, d_k]``), checked: real, finite, one number of saved states."""
    if isinstance(trajectory, (list, tuple)):
        arrays = [np.asarray(a) for a in trajectory]
    else:
        a = np.asarray(trajectory)
        arrays = list(a) if a.ndim == 4 else [a]
    if not arrays:
        raise ConfigError("no trajectory to draw")
    out = []
    for a in arrays:
        if a.ndim != 3 or 0 in a.shape:
            raise ConfigError(f"a trajectory is [T, n, d], [K, T, n, d] (K side by side) or a list of [T, n, d], "
                              f"got a panel of shape {a.shape}")
        if not np.issubdtype(a.dtype, np.floating) and not np.issubdtype(a.dtype, np.integer):
            raise ConfigError(f"a trajectory holds real numbers, got dtype {a.dtype}")
        if not np.all(np.isfinite(a)):
            raise ConfigError("the trajectory has non-finite values (NaN or inf): a failed run cannot be drawn")
        out.append(a.astype(np.float64))
    if len({a.shape[0] for a in out}) > 1:
        raise ConfigError(f"the panels must have one number of saved states, got {[a.shape[0] for a in out]}")
    return out


def save_trajectory(path, trajectory: Any, ts: Any, *, observables: Mapping[str, Any] | None = None,
                    titles: Sequence[str] = (), time_label: str = "t", note: str = "") -> Path:
    """A trajectory for :func:`jaxattn.plotting.movie` and ``jaxattn movie`` as a safetensors file: one
    ``trajectory.<k> [T, n, d]`` per panel, ``ts [T]``, ``observables.<name> [K, T]`` (each ``[T]`` or
    ``[K, T]``); titles, the time label and a note in its metadata. An existing file at ``path`` is replaced (the
    Python convention, as :func:`jaxattn.plotting.movie`); a path that does not end in ``.safetensors`` is
    refused.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> from jaxattn.io.trajectory import load_trajectory, save_trajectory
        >>> X = np.zeros((4, 3, 2)); X[..., 0] = 1.0                                   # [T, n, d]
        >>> path = save_trajectory(os.path.join(tempfile.mkdtemp(), "t.safetensors"), X, np.arange(4.0),
        ...                        observables={"E": np.ones(4)}, titles=["at rest"])
        >>> tr = load_trajectory(path); tr["trajectory"][0].shape, tr["observables"]["E"].shape, tr["titles"]
        ((4, 3, 2), (1, 4), ['at rest'])
    """
    path = path_arg("save_trajectory: path", path)
    if path.suffix != ".safetensors":
        raise ConfigError(f"a trajectory file is a .safetensors file, got {path.name!r}")
    trajs = panels(trajectory)
    K, T = len(trajs), trajs[0].shape[0]
    arrays = {f"trajectory.{k}": a for k, a in enumerate(trajs)} | {"ts": np.asarray(ts, np.float64).reshape(T)}
    for name, v in (observables or {}).items():
        arrays[f"observables.{name}"] = np.broadcast_to(np.asarray(v, np.float64), (K, T)).copy()
    meta = {"format": FORMAT, "titles": json.dumps(list(titles)), "time_label": time_label, "note": note}
    return save_arrays(path, arrays, meta)


def load_trajectory(path) -> dict[str, Any]:
    """What :func:`save_trajectory` wrote: ``{trajectory (a list of [T, n, d]), ts, observables, titles,
    time_label, note}``; a file that is not one is refused in one line."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    path = Path(path)
    try:
        arrays = load_file(str(path))
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
    except Exception as e:  # a truncated or foreign file: one line
        raise ConfigError(f"{path} is not a readable trajectory file: {e}") from None
    K = sum(k.startswith("trajectory.") for k in arrays)
    if meta.get("format") != FORMAT or not K or "ts" not in arrays:
        raise ConfigError(f"{path} is not a jaxattn trajectory file")
    return {"trajectory": [arrays[f"trajectory.{k}"] for k in range(K)], "ts": arrays["ts"],
            "observables": {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("observables.")},
            "titles": json.loads(meta.get("titles", "[]")), "time_label": meta.get("time_label", "t"),
            "note": meta.get("note", "")}


__all__ = ["FORMAT", "load_trajectory", "panels", "save_trajectory"]
