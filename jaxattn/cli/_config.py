"""Configuration resolution of the commands whose options have defaults: command line > config file (JSON or
TOML, or a finished run's ``config.json``, replayed) > defaults; every value is checked by its option's
declaration (:mod:`jaxattn.config`)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping

from jaxattn.config import Spec, check_value, parse_list
from jaxattn.errors import ConfigError, JaxattnError
from jaxattn.io import load_config

#: Options a replayed ``config.json`` does not carry over: the output directory and the permission to replace it.
NOT_REPLAYED = ("out", "overwrite")
#: Options that only describe a random model (refused with a converted one: it brings its own).
RANDOM_ONLY = ("d", "heads", "depth", "shared", "weights", "value", "mask", "scale")


def _load_config(path: str) -> dict:
    out: dict = {}
    for k, v in load_config(path).items():
        key = k.replace("-", "_")
        if key in out:  # num-init and num_init: one option given twice
            raise JaxattnError(f"config file {path} gives {key} twice (as {k!r} and as another spelling): give it once")
        out[key] = v
    return out


def _check(key: str, value, option: Spec, path: str | None = None):
    """A value checked by its option's :class:`~jaxattn.config.Spec` (one ``JaxattnError`` line); one from the
    config file ``path`` is said to be: ``config value n: must be > 0, got -3 (in c.toml)``."""
    try:
        return check_value(key, option, value)
    except ConfigError as e:
        raise JaxattnError(f"config value {e} (in {path})" if path else str(e)) from None


def resolve(args: argparse.Namespace, defaults: Mapping[str, Spec]) -> dict:
    """Command line > config file > defaults. Unknown config keys are refused; values are checked.
    A finished run's own ``config.json`` is accepted as a config (its ``config`` table is replayed).

    ``defaults``: the command's options (``{dest: Spec}``, see :mod:`jaxattn.config`); every value, from the
    command line or a config file, is checked by its :class:`~jaxattn.config.Spec`. Besides the options, the
    result holds ``_given`` (the options set on the command line or in the file) and ``_where`` (for those set
    in the file: how an error names them, ``d = 8 in FILE``).
    """
    cfg = _load_config(args.config) if getattr(args, "config", None) else {}
    replay = "command" in cfg and isinstance(cfg.get("config"), dict)
    if replay:  # a run directory's config.json
        if cfg["command"] != args.command:
            raise JaxattnError(f"{args.config} is the config of a `{cfg['command']}` run, not `{args.command}`")
        cfg = replayed(cfg, defaults, args.config)
        if cfg.get("model", "random") == "random" and getattr(args, "model", None) not in (None, "random"):
            # the replayed run's random model is replaced by the one named now: its dimensions do not apply
            cfg = {k: v for k, v in cfg.items() if k not in RANDOM_ONLY}
    tables = [k for k, v in cfg.items() if isinstance(v, dict)]
    if tables and not replay:  # a sweep-style file: [model] d = 8 gave "expected str" (for model) or "unknown"
        k = tables[0]
        inner = next(iter(cfg[k]), "d")
        raise JaxattnError(f"config file {args.config}: [{k}] is a table, as in a `jaxattn sweep` grid; "
                           f"`jaxattn {args.command}` takes its options flat, one per line ({inner} = ..., not "
                           f"[{k}] {inner} = ...)" + (", and model = names the model (random, minilm or a file)"
                                                      if k == "model" else ""))
    known = set(defaults)
    unknown = sorted(set(cfg) - known)
    if unknown:
        close = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in unknown}
        hint = "; ".join(f"{k}: did you mean {c[0]}?" for k, c in close.items() if c)
        raise JaxattnError(f"unknown option(s) in config file: {', '.join(unknown)} (in {args.config}"
                           + (f"; {hint})" if hint else ")"))
    cfg = {k: _check(k, v, defaults[k], args.config) for k, v in cfg.items()}
    out = {}
    for k, default in defaults.items():
        v = getattr(args, k, None)
        if v is not None:  # argparse checked the type and the choices, not the rest
            v = _check(default.cli, v, default)
        out[k] = v if v is not None else cfg.get(k, default.default)
    # a replay records every option: those at their default were not chosen (an option that changes nothing in
    # that run is refused only if the run set it)
    chosen = {k for k in cfg if not (replay and cfg[k] == defaults[k].default)}
    out["_given"] = {k for k in defaults if getattr(args, k, None) is not None or k in chosen}
    out["_options"] = dict(defaults)  # how an error names each option (jaxattn.cli._shared.as_flags)
    out["_where"] = {k: f"{k} = {cfg[k]!r} in {args.config}" + (" (replayed)" if replay else "")
                     for k in chosen if getattr(args, k, None) is None}
    return out


#: What a run's ``config.json`` records in its ``config`` table besides the options: not replayed, not refused.
#: (``uniform_attention``: runs before ``--attention``, replayed as ``attention = 'uniform'``.)
RECORDED = ("model_summary", "model_dims", "weights_sha256", "uniform_attention")


def where(cfg: dict, key: str, flag: str | None = None) -> str:
    """How an error names the option ``key``: its flag when it came from the command line, else the config file
    and value it came from (an option the user did not type is not blamed on a flag)."""
    return cfg.get("_where", {}).get(key) or flag or "--" + key.replace("_", "-")


def replayed(run: dict, defaults: Mapping, path: str = "config.json") -> dict:
    """The options of a finished run's ``config.json``: its ``config`` table and the model it ran on (the studies
    record the model beside the table; ``analyze`` a random model's dimensions in ``model_dims``). A converted
    model brings its own dimensions, so the random-model options that ``simulate`` records are not replayed;
    nor are :data:`NOT_REPLAYED`. A key that is neither an option nor one of :data:`RECORDED` is refused: it was
    written by another version or edited in, and dropping it would replay another run than the one recorded."""
    unknown = sorted(k for k in run["config"] if k not in defaults and k not in NOT_REPLAYED and k not in RECORDED)
    if unknown:
        raise JaxattnError(f"{path} records {', '.join(unknown)}, which `jaxattn {run['command']}` does not take "
                           "(another jaxattn version, or an edited file): remove it to replay the rest")
    # where the run went and whether it could replace a finished one are not options of the run: a replay goes to
    # its own --out (or the default) and replaces nothing unless --overwrite is given now
    cfg = {k: v for k, v in run["config"].items() if k in defaults and k not in NOT_REPLAYED}
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
    # runs before list options were lists recorded them as the command line's text ("gammas": "1,10,100")
    return {k: _listed(k, defaults[k], v, path) if isinstance(v, str) and getattr(defaults[k], "is_list", False)
            else v for k, v in cfg.items()}


def _listed(key: str, option: Spec, text: str, path: str) -> list:
    """The comma-separated ``text`` of a list option in the file ``path``, parsed as on the command line."""
    try:
        return parse_list(option, text)
    except argparse.ArgumentTypeError as e:
        raise JaxattnError(f"config value {key}: {e} (in {path})") from None

