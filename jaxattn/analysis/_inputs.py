"""Input checks and batching shared by the cluster analyses (:mod:`jaxattn.analysis.clusters`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.errors import ConfigError


def real_array(X, name: str = "X", min_ndim: int = 2) -> jax.Array:
    """A finite real array with at least ``min_ndim`` axes, refused with one line otherwise."""
    a = X if isinstance(X, jax.Array) else np.asarray(X)
    if jnp.iscomplexobj(a) or not (jnp.issubdtype(a.dtype, jnp.floating) or jnp.issubdtype(a.dtype, jnp.integer)):
        raise ConfigError(f"{name} must hold real numbers, got dtype {a.dtype}")
    if a.ndim < min_ndim or 0 in a.shape[-min_ndim:]:
        raise ConfigError(f"{name} must have shape [..., n, d] with n, d >= 1, got {tuple(a.shape)}")
    if not isinstance(a, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(a))):
        raise ConfigError(f"{name} has non-finite values (NaN or inf)")
    a = jnp.asarray(a)
    return a if jnp.issubdtype(a.dtype, jnp.floating) else a.astype(jnp.result_type(float))


def tolerance(tol) -> float:
    if isinstance(tol, bool) or np.ndim(tol) != 0 or not math.isfinite(float(tol)) or float(tol) < 0:
        raise ConfigError(f"tol must be a finite number >= 0, got {tol!r}")
    return float(tol)


def batched(fn: Callable, X: jax.Array, core: int, *args):
    """Apply ``fn(item, *args)`` (an item has ``core`` trailing axes) over every leading axis of ``X``,
    compiled once per shape (the analyses run on the host loop of a study, one call per condition)."""
    return _batched_jit(fn, core, X, *args)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _batched_jit(fn, core, X, *args):
    lead = X.shape[: X.ndim - core]
    flat = X.reshape((-1, *X.shape[X.ndim - core:]))
    out = jax.vmap(lambda x: fn(x, *args))(flat)
    return jax.tree_util.tree_map(lambda a: a.reshape(lead + a.shape[1:]), out)

