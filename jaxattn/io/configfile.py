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
    if not p.is_file():
        raise ConfigError(f"config file {source} does not exist")
    text = p.read_text()
    try:
        cfg = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise ConfigError(f"config file {source} is not valid {kind}: {e}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"config file {source} must hold a table of option = value")
    return cfg
