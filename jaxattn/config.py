"""The one configuration mechanism: typed dataclasses whose fields are options.

A field declared with :func:`option` (a configuration dataclass) or with :func:`about` (an option record such as
:class:`jaxattn.Dynamics`, through :func:`static` or :func:`flag`) carries its help, its allowed values (taken from
the constants of the module that implements them, never retyped) and a check. Everything else is derived from those
declarations:

* the command-line options of a command (:func:`add_argument`; a list option is one comma-separated
  argument, a boolean a ``--x/--no-x`` pair);
* the keys of a config file and their checks (:func:`check_value`, :func:`from_mapping`): no silent
  coercion, one line naming the key;
* the sweep schema (:data:`jaxattn.sweeps.grid.SCHEMA`: the options of the objects that run a grid point, by
  section) and the studies' configurations (``jaxattn.studies.<name>.Config``).

So adding an option, or a value of one (a normalisation, an attention kind), touches the module that
implements it and nothing that lists options.
"""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import equinox as eqx
import numpy as np

from jaxattn.errors import SEEDS, SEEDS_SHOWN, ConfigError

Check = Callable[[Any], "str | None"]


@dataclasses.dataclass(frozen=True)
class Spec:
    """One option, resolved from its dataclass field: ``name`` its key, ``types`` accepted (of the items, for a
    list), default, ``choices``, ``check`` (returns what is wrong, or ``None``), ``help``; ``axis``: a list given in
    a sweep makes it a grid axis; ``flag``: its command-line name when not the key; ``field``: the field that holds
    it (the key when empty); ``only``: ``'discrete'`` or ``'continuous'`` when only maps or only flows use it;
    ``removed``: values once allowed, each with why it is refused now."""

    name: str
    types: tuple
    default: Any
    optional: bool = False
    is_list: bool = False
    choices: tuple | None = None
    check: Check | None = None
    help: str = ""
    axis: bool = True
    flag: str | None = None
    field: str = ""
    only: str | None = None
    removed: tuple[tuple[Any, str], ...] = ()

    @property
    def cli(self) -> str:
        """The command-line option, ``--num-init``."""
        return "--" + (self.flag or self.name).replace("_", "-")

    @property
    def dest(self) -> str:
        """The ``argparse`` attribute it is stored in."""
        return (self.flag or self.name).replace("-", "_")


def about(help: str, *, choices: Iterable | None = None, check: Check | None = None, axis: bool = True,
          flag: str | None = None, key: str | None = None, default: Any = dataclasses.MISSING, hint: Any = None,
          only: str | None = None, removed: Mapping[Any, str] | None = None) -> dict:
    """The metadata that makes a field an option (see the module docstring): its ``help``, allowed ``choices``,
    ``check``, whether a list of values in a sweep is an ``axis``, its command-line ``flag`` when not the key. The
    field of an option record (:func:`static`, :func:`flag`) may also say its configuration ``key`` when that is not
    the field's name (``Batch.precision`` is ``matmul_precision``), the configuration's ``default`` and type
    (``hint``) when the field's own are wider than a file can hold (``Save.every``: ``None`` means every step, which
    a configuration has always written ``1``), ``only`` which kind of dynamics uses it (``'discrete'``), and values
    ``removed`` with the reason each is now refused."""
    if only not in (None, "discrete", "continuous"):
        raise ValueError(f"about(only=...) must be None, 'discrete' or 'continuous', got {only!r}")
    return {"option": {"help": help, "choices": None if choices is None else tuple(choices), "check": check,
                       "axis": axis, "flag": flag, "key": key, "default": default, "hint": hint, "only": only,
                       "removed": tuple((removed or {}).items())}}


def option(default: Any, help: str, *, choices: Iterable | None = None, check: Check | None = None,
           axis: bool = True, flag: str | None = None) -> Any:
    """A dataclass field that is an option (see the module docstring). A list default is copied per instance."""
    meta = about(help, choices=choices, check=check, axis=axis, flag=flag)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def static(default: Any = dataclasses.MISSING, *, converter: Callable[[Any], Any] | None = None,
           option: dict | None = None) -> Any:
    """A field of an option record: every option of a driver or a model (:class:`jaxattn.Save`, ``Batch``,
    ``Dynamics``, ``Flow``, ``Solver``, ``Form``, ``Rope``) is an :class:`equinox.Module` of such fields, checked
    in ``__check_init__``. Static: hashed into the compiled program (a changed option recompiles), never a traced
    leaf. ``converter`` gives a value its one spelling before the check (an integer from a NumPy integer, a tuple
    from a list); ``option`` (:func:`about`) makes it a key of a sweep's configuration (and of the commands that
    list it), declared here once (:func:`specs`)."""
    metadata = option or {}
    if converter is None:
        return eqx.field(default=default, static=True, metadata=metadata)
    return eqx.field(default=default, static=True, converter=converter, metadata=metadata)


def flag(default: bool, *, option: dict | None = None) -> Any:
    """A true/false field of an option record: :func:`static`, a NumPy boolean kept as a Python one (a NumPy value
    would be an array among the static fields, which equinox warns about, and a JSON record could not hold it)."""
    return static(default, converter=lambda v: bool(v) if isinstance(v, np.bool_) else v, option=option)


def record_repr(record: Any) -> str:
    """``Name(field=value, ...)`` with every field, defaults included (:class:`equinox.Module`'s own repr leaves
    the defaults out): a stable text for fingerprints recorded with a run (a store stamped with it resumes)."""
    fields = ", ".join(f"{f.name}={getattr(record, f.name)!r}" for f in dataclasses.fields(record))
    return f"{type(record).__name__}({fields})"


def _types(hint) -> tuple[tuple, bool, bool]:
    """``(accepted types, optional, is_list)`` of a field's annotation: ``int``, ``float`` (an int is accepted),
    ``bool``, ``str``, unions of them, ``X | None``, ``list[X]`` or ``Sequence[X]`` (a list or a tuple, checked
    into a list)."""
    optional = False
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    out: list = []
    is_list = False
    for a in args:
        if a is type(None):
            optional = True
        elif typing.get_origin(a) in (list, collections.abc.Sequence):  # given as any sequence, kept as a list
            is_list = True
            out.extend(_types(typing.get_args(a)[0])[0])
        elif a is float:
            out.extend((int, float))
        else:
            out.append(a)
    return tuple(dict.fromkeys(out)), optional, is_list


def specs(cls: type) -> dict[str, Spec]:
    """The options of a configuration dataclass or an option record, by key (fields not declared with
    :func:`option` or :func:`about` are not options)."""
    # a copy, with a list default copied too (as a default_factory gives one per call): the cache stays as declared
    return {k: dataclasses.replace(v, default=list(v.default)) if isinstance(v.default, list) else v
            for k, v in _specs(cls).items()}


@functools.cache  # a class's declarations do not change; a grid builds its objects from them at every point
def _specs(cls: type) -> dict[str, Spec]:
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("option")
        if meta is None:
            continue
        meta = dict(meta)
        key, hint, default = meta.pop("key") or f.name, meta.pop("hint"), meta.pop("default")
        typs, optional, is_list = _types(hints[f.name] if hint is None else hint)
        if default is dataclasses.MISSING:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
        out[key] = Spec(key, typs, default, optional=optional, is_list=is_list, field=f.name, **meta)
    return out


def _names(typs: tuple) -> str:
    return "/".join(t.__name__ for t in typs if not (t is int and float in typs))


def _python(v):
    """A NumPy scalar (``np.int64(3)``, ``np.float32(0.5)``, ``np.bool_(True)``: what arithmetic on arrays gives a
    Python caller) as the Python number it holds, so that it is checked, hashed and recorded as one."""
    import numpy as np

    return v.item() if isinstance(v, (np.integer, np.floating, np.bool_)) else v


def _check_item(where: str, spec: Spec, v):
    if v is None and spec.optional and not spec.is_list:
        return None
    v = _python(v)
    if (isinstance(v, bool) and bool not in spec.types) or not isinstance(v, spec.types):
        raise ConfigError(f"{where}: expected {_names(spec.types)}, got {v!r}")
    if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(f"{where}: must be finite, got {v!r}")
    why = next((why for old, why in spec.removed if old == v), None)
    if why is not None:
        raise ConfigError(f"{where}: got {v!r}: {why}")
    if spec.choices is not None and v not in spec.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(map(str, spec.choices))}, got {v!r}")
    if spec.check is not None:
        msg = spec.check(v)
        if msg:
            raise ConfigError(f"{where}: {msg}, got {v!r}")
    return v


def check_value(where: str, spec: Spec, v):
    """``v`` checked against ``spec`` (type, finiteness, a value removed with its reason, choices, check), or a
    :class:`ConfigError` naming ``where``. A list option takes a list (or tuple) whose every item is checked, and
    returns a list."""
    if spec.is_list:
        if not isinstance(v, (list, tuple)):
            raise ConfigError(f"{where}: expected a list of {_names(spec.types)}, got {v!r}")
        if not v:
            raise ConfigError(f"{where}: give at least one value")
        items = [_check_item(f"{where}[{i}]", spec, x) for i, x in enumerate(v)]
        repeated = next((x for i, x in enumerate(items) if x in items[:i]), None)
        if repeated is not None:  # the same table row, count or ensemble computed twice
            raise ConfigError(f"{where}: {repeated!r} is given twice, which would compute it twice: give it once")
        return items
    return _check_item(where, spec, v)


def from_mapping(cls: type, mapping: Mapping, *, prefix: str = ""):
    """An instance of the configuration dataclass ``cls`` from a mapping of its option names (``-`` or ``_``)
    to values, each checked; unknown keys are refused with the known ones listed."""
    known = specs(cls)
    values = {}
    for name, v in mapping.items():
        key = str(name).replace("-", "_")
        if key not in known:
            raise ConfigError(f"unknown key '{prefix}{key}' (known: {', '.join(known)})")
        values[known[key].field or key] = check_value(prefix + key, known[key], v)
    return cls(**values)


def _item_parser(spec: Spec) -> Callable[[str], Any]:
    """Text of the command line to one item of the option's type (an int or float before a str)."""
    order = [t for t in (int, float, str) if t in spec.types]

    def parse(text: str):
        for t in order:
            try:
                return t(text)
            except ValueError:
                continue
        raise argparse.ArgumentTypeError(f"expected {_names(spec.types)}, got {text!r}")

    parse.__name__ = _names(spec.types)  # argparse names the type in its error
    return parse


def _list_parser(spec: Spec) -> Callable[[str], list]:
    item = _item_parser(spec)

    def parse(text: str) -> list:
        parts = [s.strip() for s in text.split(",")]
        if not all(parts):  # "1,,2" or "1,2,": an item left out by mistake, not one to drop silently
            raise argparse.ArgumentTypeError(f"item {parts.index('') + 1} of {text!r} is empty")
        return [item(s) for s in parts]

    parse.__name__ = f"comma-separated {_names(spec.types)}"
    return parse


def parse_list(spec: Spec, text: str) -> list:
    """A list option written as on the command line, ``"3,4,5"``, as its list (the items parsed by type)."""
    return _list_parser(spec)(text)


def add_argument(group, spec: Spec, default: Any = dataclasses.MISSING) -> None:
    """The command-line option of ``spec`` in ``group`` (a parser or argument group). Its value is ``None``
    when not given, so that a config file and the default can be told from the command line; the help
    ends with the default."""
    default = spec.default if default is dataclasses.MISSING else default
    shown = ",".join(map(str, default)) if isinstance(default, list) else default
    # the choices of a list option are not argparse's (it sees one string): they go in the help
    choices = f" (among {', '.join(map(str, spec.choices))})" if spec.choices and spec.is_list else ""
    text = (f"{spec.help}{choices}" + (f" [{shown}]" if default is not None else "")).replace("%", "%%")
    if spec.types == (bool,):
        group.add_argument(spec.cli, dest=spec.dest, action=argparse.BooleanOptionalAction, default=None, help=text)
    elif spec.is_list:
        group.add_argument(spec.cli, dest=spec.dest, type=_list_parser(spec), metavar="A,B,...",
                           help=f"comma-separated: {text}")
    else:
        metavar = None if spec.choices else spec.dest.upper()
        group.add_argument(spec.cli, dest=spec.dest, type=_item_parser(spec), metavar=metavar, help=text,
                           **({"choices": spec.choices} if spec.choices else {}))


def plain(kinds: Iterable, needs_array: Iterable) -> tuple:
    """The ``kinds`` that one value names in a file or on a command line (those ``needs_array``, such as an
    ellipsoid's matrix S, are for Python): an option's choices."""
    return tuple(k for k in kinds if k not in needs_array)


# ---------------------------------------------------------------- checks shared by the declarations
def positive(v) -> str | None:
    return None if v > 0 else "must be > 0"


def non_negative(v) -> str | None:
    return None if v >= 0 else "must be >= 0"


def at_least(k: int) -> Check:
    def check(v):
        return None if v >= k else f"must be >= {k}"
    return check


def seed(v) -> str | None:
    return None if v in SEEDS else f"must be in {SEEDS_SHOWN}"


__all__ = ["Spec", "about", "add_argument", "at_least", "check_value", "from_mapping", "non_negative", "option",
           "parse_list", "plain", "positive", "seed", "specs"]
