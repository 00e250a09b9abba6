"""Run directories: atomic files, provenance (configuration, seed, versions, device), arrays.

Arrays are stored as safetensors (flat names such as ``observables.diameter``); every file is
written to a temporary name in the same folder and renamed, so an interrupted run never leaves
a half-written file behind.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxattn.config import record_repr
from jaxattn.dynamics.labelled import versions as versions  # the provenance's versions: one list of packages
from jaxattn.io._atomic import replace_bytes
from jaxattn.io.rundir import claim


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`jaxattn.io._atomic.replace_bytes`); inside a run directory
    the name is first recorded in its marker (:func:`jaxattn.io.rundir.claim`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    claim(path)
    return replace_bytes(path, data)


def save_png(fig, path, dpi: int) -> Path:
    """A matplotlib figure as a PNG file, written atomically (a killed run leaves no half-written figure)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return atomic_write_bytes(path, buf.getvalue())


def weights_sha256(model) -> str:
    """sha256 of every weight a run uses (recorded in run directories and in resume fingerprints)."""
    import hashlib

    import jax

    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_leaves_with_path(model):
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{jax.tree_util.keystr(path)}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    h.update(repr((model.schedule, model.norm_style, model.activation, model.ln_eps, model.family)).encode())
    newer = (model.norm_kind, model.parallel, model.rope, model.embed_scale)
    if newer != ("layernorm", False, None, 1.0):  # the fingerprints of older models stay as they were
        # the RoPE with every field, as its dataclass repr read before it was an equinox Module (whose repr leaves
        # some defaults out): the same text for equal objects, and the stores written then still resume
        rope = "None" if model.rope is None else record_repr(model.rope)
        h.update(f"({model.norm_kind!r}, {model.parallel!r}, {rope}, {model.embed_scale!r})".encode())
    return h.hexdigest()


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def write_json(path, obj: Any) -> Path:
    """Strict JSON (NaN and inf are refused: strict parsers reject them)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default,
                                              allow_nan=False) + "\n")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def device_info() -> dict:
    import jax

    devs = jax.devices()
    return {"backend": jax.default_backend(), "devices": [f"{d.platform}:{d.device_kind}" for d in devs],
            "count": len(devs), "host": platform.node(), "machine": platform.machine(),
            "x64": bool(jax.config.read("jax_enable_x64"))}


def provenance() -> dict:
    """Versions, device and time of a run, recorded next to its configuration."""
    return {"versions": versions(), "device": device_info(),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def config_hash(config: Mapping) -> str:
    """A stable hash of a configuration (used to refuse resuming a run with other settings)."""
    blob = json.dumps(config, sort_keys=True, default=_json_default).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def flatten(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """Nested dicts / tuples of arrays -> ``{"a.b.0": array}``."""
    out: dict[str, np.ndarray] = {}
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(tree, (tuple, list)):
        for i, v in enumerate(tree):
            out.update(flatten(v, f"{prefix}{i}."))
    elif tree is not None:
        out[prefix[:-1] or "value"] = np.ascontiguousarray(np.asarray(tree))
    return out


def save_arrays(path, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> Path:
    """Atomically write a safetensors file of numpy arrays."""
    from safetensors.numpy import save

    data = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    return atomic_write_bytes(path, save(data, metadata=dict(metadata or {})))


def load_arrays(path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))
