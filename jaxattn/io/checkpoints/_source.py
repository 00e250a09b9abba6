"""Reading Hugging Face checkpoints: a local folder or a hub model id, safetensors preferred.

``pytorch_model.bin`` files are read with ``torch.load(..., weights_only=True)`` only, which
refuses anything but plain tensors and containers; nothing is ever unpickled otherwise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import numpy as np

from jaxattn.errors import CheckpointError


@dataclasses.dataclass
class Source:
    config: dict
    tensors: dict  # name -> np.ndarray, as stored in the checkpoint
    info: dict  # provenance: path or id, revision, sha256 of every file read


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_safetensors(path: Path) -> dict:
    from safetensors import safe_open

    out = {}
    try:
        with safe_open(str(path), framework="numpy") as f:
            for k in f.keys():  # noqa: SIM118 -- safetensors' safe_open is not iterable
                try:
                    out[k] = f.get_tensor(k)
                except (TypeError, ValueError):  # bfloat16 has no numpy dtype: go through torch
                    out[k] = _torch_tensor_file(path, k)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path} is not a readable safetensors file ({type(e).__name__}: {e})") from None
    return out


def _torch_tensor_file(path: Path, key: str) -> np.ndarray:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor(key).float().numpy()


def _read_bin(path: Path) -> dict:
    try:
        import torch
    except ImportError:
        raise CheckpointError(f"{path} is a PyTorch .bin file: install torch (the [hf] extra) to read it") from None
    try:
        sd = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path} is not a plain PyTorch state dict that loads with weights_only=True "
                              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(sd, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sd.items()):
        raise CheckpointError(f"{path} is not a plain state dict (a mapping of names to tensors)")
    return {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in sd.items()}


def _index_files(folder: Path, index_name: str) -> list[Path]:
    index = json.loads((folder / index_name).read_text())
    files = sorted(set(index.get("weight_map", {}).values()))
    if not files:
        raise CheckpointError(f"{folder / index_name} lists no weight files")
    return [folder / f for f in files]


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a checkpoint folder, safetensors preferred over .bin."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (folder / single).is_file():
            return [folder / single]
        if (folder / index).is_file():
            files = _index_files(folder, index)
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise CheckpointError(f"sharded checkpoint {folder} lacks shard(s): {', '.join(missing)}")
            return files
    raise CheckpointError(f"{folder} has no model.safetensors, sharded safetensors or pytorch_model.bin")


def _hub_folder(model_id: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{model_id!r} is not a local folder, and huggingface_hub is not installed") from None
    patterns = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors"]
    try:
        folder = Path(snapshot_download(model_id, revision=revision, allow_patterns=patterns))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(model_id, revision=revision,
                                            allow_patterns=["config.json", "pytorch_model*.bin",
                                                            "pytorch_model.bin.index.json"]))
    except Exception as e:
        raise CheckpointError(f"{model_id!r} is neither a local checkpoint folder nor a reachable hub model id "
                              f"({type(e).__name__}; offline machines need a local folder)") from None
    return folder


def read(source, revision: str | None = None) -> Source:
    """Read config and tensors from a local checkpoint folder or a hub model id."""
    path = Path(source)
    if path.is_file():
        raise CheckpointError(f"{source} is a file: give the checkpoint folder (with config.json and the weights)")
    if path.is_dir():
        origin: dict[str, str | None] = {"path": str(path.resolve())}
        folder = path
    elif re.fullmatch(r"[\w.-]+(/[\w.-]+)?", str(source)) and not str(source).startswith((".", "/")):
        folder, origin = _hub_folder(str(source), revision), {"hub_id": str(source), "revision": revision}
    else:
        raise CheckpointError(f"{source} does not exist")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{folder} has no config.json")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg_path} is not valid JSON: {e}") from None
    files = weight_files(folder)
    tensors: dict = {}
    for f in files:
        part = _read_safetensors(f) if f.suffix == ".safetensors" else _read_bin(f)
        dup = set(part) & set(tensors)
        if dup:
            raise CheckpointError(f"tensor {sorted(dup)[0]!r} appears in more than one shard")
        tensors.update(part)
    sha = {p.name: _sha256(p) for p in [cfg_path, *files]}
    return Source(config=config, tensors=tensors, info={**origin, "sha256": sha})
