"""Configuration files: TOML or JSON, read into plain nested dicts with one clear error when unreadable."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path

from jaxattn.errors import ConfigError


def load_config(source) -> dict:
    """A configuration from a ``.toml`` file (else JSON) or a mapping, as nested plain dicts."""
    if isinstance(source, Mapping):
        return json.loads(json.dumps(source))
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
        cfg = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise ConfigError(f"config file {source} is not valid {kind}: {e}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"config file {source} must hold a table of option = value")
    return cfg
