"""The canonical safetensors layout: a :class:`~jaxattn.model.params.Model` as flat tensors + metadata.

Tensor names are the pytree paths of the model (``layers.q``, ``embeddings.word``,
``final_ln_w``...), in the column convention (docs/models.md). One metadata entry, ``jaxattn``,
holds a JSON object with the format version, the static fields of the model (schedule, norm
style, activation, LayerNorm eps, family; since version 2 also the norm kind, the parallel block,
the rotary embedding and the embedding scale) and the provenance of the conversion (source, sha256
of the source files, options). Shared weights are stored once: a shared ALBERT holds one set
and a schedule that repeats it.

Version 2 (grouped-query attention, RoPE, RMSNorm, gated MLPs) adds the tensors ``layers.wg`` and
``layers.bg`` (gate), lets ``layers.k``/``layers.v`` hold fewer heads than ``layers.q`` (the key/value
head grouping is their ratio) and ``embeddings.position`` be absent. Version 1 files read unchanged:
every new static field then takes the value that reproduces version 1 (LayerNorm, sequential block,
no RoPE, unscaled embeddings).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxattn.errors import CheckpointError, ConfigError, path_arg
from jaxattn.io.results import atomic_write_bytes
from jaxattn.model.params import EMBEDDING_FIELDS, LAYER_FIELDS, MASK_DTYPE, Embeddings, Layers, Model, validate
from jaxattn.model.rope import Rope

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
_LAYER_FIELDS = LAYER_FIELDS
_EMB_FIELDS = EMBEDDING_FIELDS
_REQUIRED = ("layers.q", "layers.k", "layers.v", "layers.o", "layers.causal", "layers.window", "layers.scale")
#: static fields new in version 2, with the values that reproduce a version-1 file
_V2_DEFAULTS = {"norm_kind": "layernorm", "parallel": False, "rope": None, "embed_scale": 1.0}


def to_arrays(model: Model) -> dict[str, np.ndarray]:
    """Flat ``{name: array}`` of every tensor of the model (None members are left out)."""
    out = {}
    for f in _LAYER_FIELDS:
        a = getattr(model.layers, f)
        if a is not None:
            a = np.asarray(a)
            if f == "causal":  # flags and widths on disk as integers (floats in memory: MASK_DTYPE)
                a = (a != 0).astype(np.uint8)
            elif f == "window":
                a = a.astype(np.int32)
            out[f"layers.{f}"] = a
    if model.embeddings is not None:
        for f in _EMB_FIELDS:
            a = getattr(model.embeddings, f)
            if a is not None:
                out[f"embeddings.{f}"] = np.asarray(a)
    for f in ("final_ln_w", "final_ln_b"):
        a = getattr(model, f)
        if a is not None:
            out[f] = np.asarray(a)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def content_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (in name order): stored at conversion
    and checked on load, so a modified or corrupted file is refused instead of silently used."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def static_meta(model: Model) -> dict:
    return {"schedule": list(model.schedule), "norm_style": model.norm_style, "activation": model.activation,
            "ln_eps": model.ln_eps, "family": model.family, "norm_kind": model.norm_kind,
            "parallel": model.parallel, "rope": None if model.rope is None else model.rope.to_json(),
            "embed_scale": model.embed_scale}


def from_arrays(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> Model:
    """Inverse of :func:`to_arrays` + :func:`static_meta`; validates the result."""
    missing = [k for k in _REQUIRED if k not in arrays]
    if missing:
        raise CheckpointError(f"converted file lacks tensor(s): {', '.join(missing)}")
    known = ({f"layers.{f}" for f in _LAYER_FIELDS} | {f"embeddings.{f}" for f in _EMB_FIELDS}
             | {"final_ln_w", "final_ln_b"})
    extra = sorted(set(arrays) - known)
    if extra:
        raise CheckpointError(f"converted file has unexpected tensor(s): {', '.join(extra[:5])}")
    get = lambda k: None if k not in arrays else np.asarray(arrays[k])
    lay: dict[str, Any] = {f: get(f"layers.{f}") for f in _LAYER_FIELDS}  # the required ones are checked above
    lay["causal"] = lay["causal"].astype(MASK_DTYPE)
    lay["window"] = lay["window"].astype(MASK_DTYPE)
    emb = None
    if "embeddings.word" in arrays:
        emb_members: dict[str, Any] = {f: get(f"embeddings.{f}") for f in _EMB_FIELDS}
        emb = Embeddings(**emb_members)
    v2 = {k: meta.get(k, default) for k, default in _V2_DEFAULTS.items()}
    try:
        rope = None if v2["rope"] is None else Rope.from_json(dict(v2["rope"]))
    except (ConfigError, TypeError, ValueError) as e:
        raise CheckpointError(f"converted file has invalid RoPE metadata ({e})") from None
    try:
        model = Model(layers=Layers(**lay), schedule=tuple(int(s) for s in meta["schedule"]), embeddings=emb,
                      final_ln_w=get("final_ln_w"), final_ln_b=get("final_ln_b"), norm_style=meta["norm_style"],
                      activation=meta["activation"], ln_eps=float(meta["ln_eps"]), family=meta["family"],
                      norm_kind=v2["norm_kind"], parallel=bool(v2["parallel"]), rope=rope,
                      embed_scale=float(v2["embed_scale"]))
    except KeyError as e:
        raise CheckpointError(f"converted file metadata lacks {e.args[0]!r}") from None
    return validate(model)


def safetensors_path(path, name: str) -> Path:
    """``path`` as the file a converted model is written to: it must end in ``.safetensors`` (a ``.txt``, or any
    other kind of file, is refused rather than replaced by weights). ``name``: the argument, as the error says it."""
    path = path_arg(name, path)
    if path.suffix != ".safetensors":
        got = f"ends in {path.suffix}" if path.suffix else "has no suffix"
        raise ConfigError(f"{name} must end in .safetensors (the format written), got {str(path)!r}, which {got}")
    return path


def save_checkpoint(model: Model, path, info: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` in the canonical layout at ``path`` (atomically). ``info``: provenance to record.

    An existing file at ``path`` is replaced, as NumPy's, PyTorch's and safetensors' own savers replace theirs (the
    command line's ``convert`` refuses one without ``--overwrite``); ``path`` must end in ``.safetensors``, the
    format written, so that no other kind of file (a ``.txt``) is replaced by weights. The model is validated
    first: a mis-shaped or non-finite tensor is refused, naming it, and nothing is written.
    """
    from safetensors.numpy import save as st_save

    path = safetensors_path(path, "save_checkpoint: path")
    validate(model)
    arrays = to_arrays(model)
    meta = {"format_version": FORMAT_VERSION, **static_meta(model), **dict(info or {}),
            "content_sha256": content_sha256(arrays)}
    blob = st_save(arrays, metadata={"jaxattn": json.dumps(meta, sort_keys=True)})
    return atomic_write_bytes(path, blob)


def read_meta(path) -> dict:
    """The ``jaxattn`` metadata of a converted file."""
    from safetensors import safe_open

    path = Path(path)
    if path.is_dir():  # a checkpoint folder, most likely: it is converted first
        raise CheckpointError(f"{path} is a directory, not a converted .safetensors file (a checkpoint folder is "
                              "converted with `jaxattn convert FOLDER --out FILE` or jaxattn.convert)")
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist or is not a file")
    try:
        with safe_open(str(path), framework="numpy") as f:
            raw = (f.metadata() or {}).get("jaxattn")
    except Exception as e:  # safetensors raises its own error types for corrupt headers
        raise CheckpointError(f"{path} is not a readable safetensors file ({type(e).__name__}: {e})") from None
    if raw is None:
        raise CheckpointError(f"{path} is a safetensors file but not a jaxattn model (no 'jaxattn' metadata); "
                              "convert the checkpoint first with `jaxattn convert`")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError:
        raise CheckpointError(f"{path} has corrupt jaxattn metadata") from None
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise CheckpointError(f"{path} has format version {meta.get('format_version')}, "
                              f"this jaxattn reads versions {', '.join(map(str, READABLE_VERSIONS))}")
    return meta


def load(path) -> Model:
    """Load a converted file as a :class:`~jaxattn.model.params.Model` (arrays in their stored dtype)."""
    from safetensors.numpy import load_file

    meta = read_meta(path)
    try:
        arrays = load_file(str(path))
    except Exception as e:
        raise CheckpointError(f"{path} is truncated or corrupt ({type(e).__name__}: {e})") from None
    want = meta.get("content_sha256")
    if want is None:
        raise CheckpointError(f"{path} carries no content checksum (written by an older jaxattn): convert the "
                              "checkpoint again with `jaxattn convert`")
    if content_sha256(arrays) != want:
        raise CheckpointError(f"{path}: the tensor data do not match the checksum recorded at conversion (the file "
                              "was modified or corrupted); convert the checkpoint again")
    return from_arrays(arrays, meta)
