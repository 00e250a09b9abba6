"""Configuration resolution of the commands whose options have defaults: command line > config file (JSON or
TOML, or a finished run's ``config.json``, replayed) > defaults; config-file values are type-checked."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping

from jaxattn.config import Spec, check_value
from jaxattn.errors import ConfigError, JaxattnError

#: Options that only describe a random model (refused with a converted one: it brings its own).
RANDOM_ONLY = ("d", "heads", "depth", "shared", "weights", "value", "mask", "scale")


def _load_config(path: str) -> dict:
    from jaxattn.io.configfile import load_config

    return {k.replace("-", "_"): v for k, v in load_config(path).items()}


def _check_type(key: str, value, default):
    """Config-file values must have the type of the option's default (no silent coercion)."""
    if value is None or default is None:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            raise JaxattnError(f"config value {key} must be finite, got {value!r}")
    elif isinstance(default, str) and isinstance(value, list):
        # a list option (gammas, tokens, ...) is one comma-separated string on the command line; config files and
        # replayed config.json files may hold it as a list
        ok = all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value)
        value = ",".join(map(str, value))
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise JaxattnError(f"config value {key} must be {type(default).__name__}, got {value!r}")
    return value


def _check(key: str, value, option, prefix: str = "config value "):
    """A value checked by its option's :class:`~jaxattn.config.Spec` (one ``JaxattnError`` line)."""
    if not isinstance(option, Spec):
        return _check_type(key, value, option)
    try:
        return check_value(key, option, value)
    except ConfigError as e:
        raise JaxattnError(f"{prefix}{e}") from None


def _resolve(args: argparse.Namespace, defaults: Mapping) -> dict:
    """Command line > config file > defaults. Unknown config keys are refused; values are checked.
    A finished run's own ``config.json`` is accepted as a config (its ``config`` table is replayed).

    ``defaults``: the command's options (``{dest: Spec}``, see :mod:`jaxattn.config`), each config-file value
    checked by its :class:`~jaxattn.config.Spec`; or plain defaults (``{name: default}``), whose type is checked.
    """
    cfg = _load_config(args.config) if getattr(args, "config", None) else {}
    if "command" in cfg and isinstance(cfg.get("config"), dict):  # a run directory's config.json
        if cfg["command"] != args.command:
            raise JaxattnError(f"{args.config} is the config of a `{cfg['command']}` run, not `{args.command}`")
        cfg = _replayed(cfg, defaults)
    known = set(defaults)
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise JaxattnError(f"unknown option(s) in config file: {', '.join(unknown)}")
    cfg = {k: _check(k, v, defaults[k]) for k, v in cfg.items()}
    out = {}
    for k, default in defaults.items():
        v = getattr(args, k, None)
        if v is not None and isinstance(default, Spec):  # argparse checked the type and the choices, not the rest
            v = _check(default.cli, v, default, prefix="")
        out[k] = v if v is not None else cfg.get(k, default.default if isinstance(default, Spec) else default)
    out["_given"] = {k for k in defaults if getattr(args, k, None) is not None or k in cfg}
    return out


def _replayed(run: dict, defaults: Mapping) -> dict:
    """The options of a finished run's ``config.json``: its ``config`` table and the model it ran on (the studies
    record the model beside the table; ``analyze`` a random model's dimensions in ``model_dims``). A converted
    model brings its own dimensions, so the random-model options that ``simulate`` records are not replayed."""
    cfg = {k: v for k, v in run["config"].items() if k in defaults}
    if "model" in defaults and isinstance(run.get("model"), str):
        cfg.setdefault("model", run["model"])
    dims = run.get("model_dims")
    if run["config"].get("uniform_attention") and "attention" in defaults:  # runs before --attention
        cfg.setdefault("attention", "uniform")
    if cfg.get("model", "random") != "random":
        cfg = {k: v for k, v in cfg.items() if k not in RANDOM_ONLY}
    elif isinstance(dims, dict):
        cfg.update({k: dims[k] for k in ("d", "heads", "depth", "shared") if k in dims and k in defaults})
        masks = set(dims.get("masks", ()))
        if len(masks) == 1 and "mask" in defaults:  # recorded per weight set as 'full', 'causal', 'causal/local:W'
            cfg["mask"] = masks.pop().replace("causal/local:", "local:")
    return cfg

