"""Configuration files: TOML or JSON, read into plain nested dicts with one clear error when unreadable."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from jaxattn.errors import ConfigError


def _plain(v):
    import numpy as np

    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    raise TypeError(f"got {type(v).__name__} {v!r:.60}")


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list) -> dict:
    """A JSON object whose keys are each given once (``json`` would keep the last of two silently; TOML refuses)."""
    seen: dict = {}
    for k, v in pairs:
        if k in seen:
            raise _Duplicate(k)
        seen[k] = v
    return seen


def load_config(source) -> dict:
    """A configuration from a ``.toml`` file (else JSON) or a mapping, as nested plain dicts."""
    if isinstance(source, Mapping):
        try:  # a NumPy number (np.int64(4), what arithmetic on arrays gives) is the Python number it holds
            return json.loads(json.dumps(source, default=_plain))
        except TypeError as e:
            raise ConfigError(f"a configuration holds numbers, strings, booleans, lists and tables: {e}") from None
    if not isinstance(source, (str, os.PathLike)) or str(source) == "":
        raise ConfigError(f"a configuration is a table (dict) or a path to a TOML or JSON file, got {source!r}")
    p = Path(source)
    if p.is_dir():
        raise ConfigError(f"config file {source} is a directory, not a TOML or JSON file")
    if not p.is_file():
        raise ConfigError(f"config file {source} does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {source} is not a text file (not UTF-8); expected TOML or JSON") from None
    except OSError as e:
        raise ConfigError(f"config file {source} cannot be read: {e.strerror or e}") from None
    try:
        cfg = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise ConfigError(f"config file {source} gives the key {e.args[0]!r} twice: give it once") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise ConfigError(f"config file {source} is not valid {kind}: {e}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"config file {source} must hold a table of option = value")
    return cfg
