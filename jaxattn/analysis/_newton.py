"""Newton refinement of a near-equilibrium on the product of spheres (optimistix, lineax's SVD), with a
Levenberg-Marquardt fallback where equilibria form a continuum."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
from jaxtyping import ArrayLike, Float

from jaxattn.analysis._equilibria import System, check_configurations, residual, system_defect, tangent_basis
from jaxattn.errors import ConfigError


@dataclasses.dataclass
class Refined:
    """Result of :func:`refine`."""

    X: np.ndarray  # [n, d]
    residual: float
    steps: int
    converged: bool
    method: str  # 'newton', or 'newton+levenberg-marquardt' where Newton stalled


def refine(system: System, X0: Float[ArrayLike, "n d"], *, tol: float = 1e-12, max_steps: int = 50) -> Refined:
    """Newton's method (optimistix ``Newton`` with lineax's SVD) for an equilibrium near ``X0: [n, d]``,
    falling back to optimistix's Levenberg-Marquardt where Newton stalls (a continuum of equilibria).

    Unknowns are tangent coordinates ``c: [n (d−1)]`` with ``X(c) = N(X0 + B c)``; equations are
    the tangent components ``Bᵀ(map(X) − X)`` (or ``Bᵀ f(X)``) — as many as unknowns, and zero
    only at an equilibrium near ``X0`` (two unit vectors whose difference is along ``x0_i`` are
    equal unless they are reflections of each other).
    """
    A = check_configurations(X0, system.d, sphere_tol=1e-6)
    if A.shape[0] != 1:
        raise ConfigError("refine takes one configuration [n, d]")
    X0 = jnp.asarray(A[0] / np.linalg.norm(A[0], axis=-1, keepdims=True))
    model = system.model.astype(jnp.float64)
    B = tangent_basis(X0)  # [n, d, d-1]
    n, d = X0.shape

    def coords(c):
        Y = X0 + jnp.einsum("nde,ne->nd", B, c.reshape(n, d - 1))
        return Y / jnp.linalg.norm(Y, axis=-1, keepdims=True)

    def fn(c, _):
        r = system_defect(system.kind, model, coords(c), system.alpha, system.beta)
        return jnp.einsum("nde,nd->ne", B, r).reshape(-1)

    target = max(10 * tol, 1e-10)
    newton: Any = optx.root_find(fn, optx.Newton(rtol=tol, atol=tol, linear_solver=lx.SVD()),
                            jnp.zeros(n * (d - 1), jnp.float64), max_steps=max_steps, throw=False)
    c, steps, method = newton.value, int(newton.stats["num_steps"]), "newton"
    r = float(residual(system, np.asarray(coords(c)))[0]) if bool(jnp.all(jnp.isfinite(c))) else math.inf
    if not r <= target:
        # Newton stalls where equilibria form a continuum (its Jacobian is singular along it);
        # Levenberg-Marquardt's damped least squares still converges onto a point of it.
        start = c if r < float(residual(system, np.asarray(X0))[0]) else jnp.zeros_like(c)
        lm: Any = optx.least_squares(fn, optx.LevenbergMarquardt(rtol=tol, atol=tol), start, max_steps=4 * max_steps,
                                throw=False)
        c, steps, method = lm.value, steps + int(lm.stats["num_steps"]), "newton+levenberg-marquardt"
    X = np.asarray(coords(c))
    r = float(residual(system, X)[0]) if np.all(np.isfinite(X)) else math.inf
    return Refined(X=X, residual=r, steps=steps, converged=bool(r <= target), method=method)

