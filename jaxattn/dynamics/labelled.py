"""Results as labelled arrays (xarray) and as compact summaries: the one home of the dimension names.

A map's and a flow's results (:class:`~jaxattn.dynamics.discrete.Simulation`,
:class:`~jaxattn.dynamics.continuous.Solution`) and a sweep store (:meth:`jaxattn.io.store.Sweep.to_xarray`, and
the ``dimension_names`` of its Zarr arrays) name their axes alike:

=============  ============================================================================
``condition``  the initial conditions of a batch (a store's rows)
``step``       the saved steps of a map (their step numbers as the coordinate)
``t``          the saved times of a flow
``token``      the tokens of a configuration
``coord``      the coordinates of a token (the model's width ``d``)
=============  ============================================================================

An observable with more axes than ``[condition, step]`` names the others ``<name>_dim_<k>`` (``k`` counting from
2, its axis in the array). xarray is imported when a Dataset is asked for (it costs a third of a second).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.errors import ConfigError
from jaxattn.model import display

CONDITION, STEP, TIME, TOKEN, COORD = "condition", "step", "t", "token", "coord"
#: The dimensions every labelled result may have (a grid's axes must be named otherwise).
DIMENSIONS = (CONDITION, STEP, TIME, TOKEN, COORD)
#: The packages whose versions a run records (its provenance, a Dataset's ``versions`` attribute).
PACKAGES = ("jaxattn", "jax", "jaxlib", "numpy", "flax", "diffrax", "safetensors", "transformers", "torch")


def versions() -> dict:
    """The versions of Python and of the :data:`PACKAGES` installed."""
    out = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def extra_dims(name: str, ndim: int, lead: int) -> list[str]:
    """The names of the axes of the variable ``name`` after its ``lead`` named ones: ``<name>_dim_<k>``."""
    return [f"{name}_dim_{k}" for k in range(lead, ndim)]


def observable_dims(name: str, ndim: int, time_dim: str, batched: bool = True) -> tuple[str, ...]:
    """``(condition, step | t, <name>_dim_2, ...)``: the axes of an observable's array (without ``condition`` for
    one configuration)."""
    lead = [CONDITION, time_dim] if batched else [time_dim]
    return (*lead, *extra_dims(name, ndim, len(lead)))[:ndim]


#: The variables of a labelled result besides its observables (an observable of one of these names, or of a
#: dimension's, is called ``observables.<name>``).
RESERVED = ("final", "trajectory", "result", "num_steps", "finished", "finite")


def variable_name(stored: str) -> str:
    """The variable that a sweep store's array ``stored`` becomes (its name in the store, ``/`` or ``.`` between
    its parts): ``observables/diameter`` is ``diameter``, a single observable ``observables`` is ``observable``,
    ``final``, ``result``... keep their names."""
    for sep in ("/", "."):
        if stored.startswith(f"observables{sep}"):
            name = stored[len("observables") + 1:]
            return f"observables.{name}" if name in RESERVED or name in DIMENSIONS else name
    return "observable" if stored == "observables" else stored


def stored_dims(stored: str, ndim: int, time_dim: str) -> tuple[str, ...]:
    """The ``dimension_names`` of a sweep store's array ``stored`` (rows per condition): an observable's
    :func:`observable_dims`, ``final`` ``(condition, token, coord)``, any other ``(condition, <name>_dim_1, ...)``."""
    name = variable_name(stored)
    if stored == "final" and ndim == 3:
        return (CONDITION, TOKEN, COORD)
    if stored == "observables" or stored.startswith(("observables/", "observables.")):
        return observable_dims(name, ndim, time_dim)
    return (CONDITION, *extra_dims(name, ndim, 1))[:ndim]


def leaves(tree: Any, name: str = "observable") -> dict[str, Any]:
    """The arrays of an observables pytree by name: a dict's keys (nested ones joined by ``.``, as
    :func:`jaxattn.io.results.flatten` names them), a sequence's indices after ``name``; a single array is
    ``name``."""
    out: dict[str, Any] = {}

    def walk(t: Any, prefix: str) -> None:
        if isinstance(t, Mapping):
            for k, v in t.items():
                walk(v, f"{prefix}{k}.")
        elif isinstance(t, (tuple, list)):
            for i, v in enumerate(t):
                walk(v, f"{prefix}{i}.")
        elif t is not None:
            out[prefix[:-1]] = t

    walk(tree, "" if isinstance(tree, Mapping) else f"{name}.")
    return out


def saved(first: Any, final: Any) -> int:
    """The number of saved steps or times of a result: the axis after the conditions of its first observable (or
    trajectory) ``first``, the conditions being those of its ``final`` states ``[*B, n, d]``."""
    shape, lead = display.shape_of(first), display.shape_of(final)
    if shape is None or lead is None:
        raise ConfigError("a result's observables and final states must be arrays")
    return shape[len(lead) - 2]


def host(x: Any, what: str) -> np.ndarray:
    """``x`` as a NumPy array; a traced value (inside ``jit``, ``vmap``, ``grad``) is refused in one line."""
    if isinstance(x, jax.core.Tracer):
        raise ConfigError(f"to_xarray reads values: {what} is traced (call it outside jax.jit, vmap or grad)")
    return np.asarray(x)


def attrs_text(value: Any) -> Any:
    """An attribute value any xarray backend can write (netCDF takes numbers, strings and arrays): a dict or list
    as JSON text, ``None`` left out (by the caller), a NumPy scalar as a number."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, np.generic):
        return value.item()
    return value


def clean_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): attrs_text(v) for k, v in attrs.items() if v is not None}


def dataset(observables: Any, final: Any, trajectory: Any, *, time_dim: str, times: np.ndarray | None,
            per_condition: Mapping[str, Any] | None = None, attrs: Mapping[str, Any] | None = None):
    """An ``xarray.Dataset`` of a result: every observable (by :func:`leaves`' names), ``final``, the trajectory
    when there is one and the ``per_condition`` arrays (a flow's ``result``, ``num_steps``), with integer
    coordinates for the conditions, tokens and coordinates and ``times`` for the saved steps or times (``None``:
    not known, the axis has no coordinate)."""
    import xarray as xr

    final = host(final, "final")
    if final.ndim not in (2, 3):
        raise ConfigError(f"to_xarray: the final states must be [B, n, d] or [n, d], got shape {final.shape}")
    batched = final.ndim == 3
    lead = [CONDITION] if batched else []
    data: dict[str, tuple] = {}
    reserved = {*RESERVED, *(per_condition or {})}
    for name, a in leaves(observables).items():
        a = host(a, f"observable {name!r}")
        if a.ndim < len(lead) + 1 or (times is not None and a.shape[len(lead)] != len(times)):
            want = ", ".join([*lead, time_dim]) + ("" if times is None else f" = {len(times)}")
            raise ConfigError(f"to_xarray: observable {name!r} has shape {a.shape}, not [{want}, ...]: give the "
                              "steps and the Save the map ran with")
        key = f"observables.{name}" if name in reserved or name in DIMENSIONS else name
        data[key] = (observable_dims(name, a.ndim, time_dim, batched), a)
    data["final"] = ((*lead, TOKEN, COORD), final)
    if trajectory is not None:
        data["trajectory"] = ((*lead, time_dim, TOKEN, COORD), host(trajectory, "trajectory"))
    for name, a in (per_condition or {}).items():
        a = host(a, name)
        data[name] = ((*lead, *extra_dims(name, a.ndim, len(lead))), a)
    coords: dict[str, Any] = {TOKEN: np.arange(final.shape[-2]), COORD: np.arange(final.shape[-1])}
    if times is not None:
        coords[time_dim] = np.asarray(times)
    if batched:
        coords[CONDITION] = np.arange(final.shape[0])
    info = {"kind": "map" if time_dim == STEP else "flow", "versions": versions(), **(attrs or {})}
    return xr.Dataset(data, coords=coords, attrs=clean_attrs(info))


def nonfinite(final: Any) -> tuple[int | None, int]:
    """``(conditions whose final state is not finite, conditions)``; ``None`` for traced or abstract values (not
    read). NumPy and CPU arrays are read in place; others are reduced on their device (:func:`finite_rows`)."""
    shape = display.shape_of(final)
    if shape is None or len(shape) < 2:
        raise TypeError("not a batch of final states")
    total = int(np.prod(shape[:-2], dtype=np.int64))
    if isinstance(final, jax.core.Tracer) or not isinstance(final, (np.ndarray, jax.Array)):
        return None, total  # traced, or abstract (jax.eval_shape): no values to read
    return int(np.sum(~finite_rows(final))), total


def finite_rows(final: Any) -> np.ndarray:
    """``[*B]`` bool on the host: the conditions whose ``[n, d]`` state is finite. NumPy and CPU arrays are read in
    place (no program compiled per shape); others are reduced on their device (:func:`finite_flags`: one flag per
    condition comes back, not the states)."""
    if isinstance(final, np.ndarray) or all(dev.platform == "cpu" for dev in final.devices()):
        return np.isfinite(np.asarray(final)).all(axis=(-2, -1))
    return np.asarray(finite_flags(final))


@jax.jit
def finite_flags(X: jax.Array) -> jax.Array:
    """``[*B]`` bool: the conditions whose ``[n, d]`` state is finite (:attr:`Simulation.ok`)."""
    # one program per shape: `jnp.all(jnp.isfinite(X), ...)` dispatched two, each compiled for every new shape and
    # kept by JAX for the life of the process (benchmarks/shape_memory.py)
    return jnp.all(jnp.isfinite(X), axis=(-2, -1))


def observables_line(observables: Any, per_line: int = 3) -> str:
    """The observables of a result, ``name (shape) dtype`` each, a few per line."""
    items = [f"{name} {display.array_line(a)}" for name, a in leaves(observables).items()]
    if not items:
        return "none"
    return "\n".join("; ".join(items[i:i + per_line]) for i in range(0, len(items), per_line))


def dims_line(sizes: Sequence[tuple[str, int | str]]) -> str:
    return ", ".join(f"{name}: {size}" for name, size in sizes)
