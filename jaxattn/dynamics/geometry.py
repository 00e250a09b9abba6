"""Where the tokens live: the sphere, an ellipsoid ``E_S`` or flat space, as one object.

A :class:`Geometry` carries the two operations the models need:

* ``retract(Y)``: the normalisation a discrete model applies after its update (``y / ||y||`` on the
  sphere, ``y / sqrt(yᵀ S y)`` on ``E_S = {x : xᵀ S x = 1}``, the identity in flat space);
* ``project(X, V)``: the tangent projection a flow applies to its vector field
  (``v − <x, v> x`` on the unit sphere, ``v − (xᵀ S v) x`` on ``E_S``, ``v`` in flat space).

The discrete models are retraction-Euler steps of the flows: ``x ← retract(x + α f(x))`` and
``ẋ = project(x, f(x))`` share ``f``, and as ``α → 0`` the maps converge to the flows at ``t = kα``.

``project`` divides by ``xᵀ S x`` rather than assuming it is 1: then ``d/dt (xᵀ S x) = 2 xᵀ S ẋ = 0``
exactly for the vector field as computed, and a solver's round-off cannot make the constraint drift
through the projection itself.
"""

from __future__ import annotations

from typing import Any, no_type_check

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import ArrayLike, Float

from jaxattn.errors import ConfigError
from jaxattn.model.backend import gpu_or

SPACES = ("sphere", "ellipsoid", "flat")
#: The spaces (and normalisations) that need the matrix ``S``, an array: Python arguments, not command-line or
#: configuration-file values.
NEEDS_S = ("ellipsoid",)


# not checked at run time (no_type_check, for jaxtyping's checker in the suite): JAX's tree functions rebuild a
# flax.struct tree through its __init__ with leaves of any kind (a filter's bools, ShapeDtypeStructs, None)
@no_type_check
@struct.dataclass
class Geometry:
    """A token space. ``kind`` is static; ``S: [d, d]`` (ellipsoid only) is an array leaf."""

    kind: str = struct.field(pytree_node=False, default="sphere")
    S: jax.Array | np.ndarray | None = None

    def _metric(self, X, V):
        """``<x_i, V_i>_S`` per token: ``[..., n, d] x [..., n, d] -> [..., n]``."""
        if self.kind == "ellipsoid":
            return jnp.sum((X @ self.S) * V, axis=-1)
        return jnp.sum(X * V, axis=-1)

    def retract(self, Y: jax.Array) -> jax.Array:
        """Normalisation over the last axis (the discrete models' ``N`` or ``N_S``).

        A token whose squared norm overflowed (an update too large for the precision) comes out NaN, not
        ``y / inf = 0``: a zero token would read as a finite state, at consensus with the others. In a program
        compiled for a GPU the sphere divides ``y`` by its largest coordinate first (:func:`_scaled_unit`).
        """
        if self.kind == "flat":
            return Y
        if self.kind == "sphere":
            return gpu_or(Y, gpu=_scaled_unit, other=lambda Y: self._checked(Y))
        return self._checked(Y)

    def _checked(self, Y: jax.Array) -> jax.Array:
        m = self._metric(Y, Y)[..., None]
        return jnp.where(m < jnp.inf, Y / jnp.sqrt(m), jnp.nan)

    def project(self, X: jax.Array, V: jax.Array) -> jax.Array:
        """Tangent projection of ``V`` at ``X`` (both ``[..., n, d]``)."""
        if self.kind == "flat":
            return V
        return V - (self._metric(X, V) / self._metric(X, X))[..., None] * X

    def constraint(self, X: jax.Array) -> jax.Array:
        """Signed distance off the manifold per token: ``xᵀ S x − 1`` (0 in flat space)."""
        if self.kind == "flat":
            return jnp.zeros(X.shape[:-1], X.dtype)
        return self._metric(X, X) - 1.0


def _scaled_unit(Y: jax.Array) -> jax.Array:
    """``y / ||y||`` with ``y`` divided by its largest coordinate first: no sum of squares can overflow (a finite ``y``
    gets its direction, an infinite or NaN one is NaN), and XLA's GPU compiler fuses both reductions with the division
    into one kernel, where the checked form's select after the division is a second (:mod:`jaxattn.model.backend`).
    The scale is a constant of the derivative: the direction does not depend on it."""
    Z = Y / jax.lax.stop_gradient(jnp.abs(Y).max(axis=-1, keepdims=True))
    return Z * jax.lax.rsqrt(jnp.sum(Z * Z, axis=-1, keepdims=True))


SPHERE = Geometry("sphere")
FLAT = Geometry("flat")


def check_spd(S: Float[ArrayLike, "d d"] | None, d: int) -> Any:
    """``S`` as a float64 array, refused unless it is a finite symmetric positive definite ``[d, d]``."""
    if S is None:
        raise ConfigError("the ellipsoid needs the matrix S")
    if isinstance(S, jax.core.Tracer):  # differentiated or vmapped: the shape now, the values in the program
        if S.shape != (d, d):
            raise ConfigError(f"S must be [{d}, {d}], got shape {tuple(S.shape)}")
        bad = (~jnp.all(jnp.isfinite(S)) | ~jnp.allclose(S, S.T, rtol=1e-12, atol=1e-12 * jnp.abs(S).max())
               | (jnp.linalg.eigvalsh((S + S.T) / 2).min() <= 0))
        return eqx.error_if(S, bad, "S must be a finite symmetric positive definite matrix")
    S = np.asarray(S)
    if S.shape != (d, d):
        raise ConfigError(f"S must be [{d}, {d}], got shape {S.shape}")
    if not np.issubdtype(S.dtype, np.floating) and not np.issubdtype(S.dtype, np.integer):
        raise ConfigError(f"S must be a real matrix, got dtype {S.dtype}")
    S = S.astype(np.float64)
    if not np.all(np.isfinite(S)):
        raise ConfigError("S has non-finite entries")
    if not np.allclose(S, S.T, rtol=1e-12, atol=1e-12 * max(np.abs(S).max(), 1e-300)):
        raise ConfigError("S must be symmetric (S = Sᵀ)")
    if np.linalg.eigvalsh((S + S.T) / 2).min() <= 0:
        raise ConfigError("S must be positive definite (all eigenvalues > 0)")
    return S


def ellipsoid(S: Float[ArrayLike, "d d"], dtype=None) -> Geometry:
    """The ellipsoid ``E_S = {x : xᵀ S x = 1}`` (``S`` symmetric positive definite, checked)."""
    S = check_spd(S, np.shape(S)[0] if np.ndim(S) == 2 else -1)
    return Geometry("ellipsoid", jnp.asarray(S, dtype))


def geometry(kind: str, S: Float[ArrayLike, "d d"] | None = None, d: int | None = None, dtype=None) -> Geometry:
    """The geometry named ``kind`` (``'sphere'``, ``'ellipsoid'`` with ``S``, ``'flat'``)."""
    if kind not in SPACES:
        raise ConfigError(f"space must be one of {SPACES}, got {kind!r}")
    if kind == "ellipsoid":
        if S is None:
            raise ConfigError("the ellipsoid needs the matrix S")
        if d is not None:
            check_spd(S, d)
        return ellipsoid(S, dtype)
    return Geometry(kind)
