"""Linearisation at equilibria: the ambient Jacobian of the right-hand side (``jax.jacfwd``), its
restriction to the tangent space of the product of spheres, and the stability verdict (spectral radius
of a map, largest real part of a flow)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from jaxattn.analysis._equilibria import System, check_configurations, padded, system_defect, system_rhs, tangent_basis
from jaxattn.errors import ConfigError


@functools.partial(jax.jit, static_argnums=(0,))
def _jacobians(kind, model, Xs, alpha, beta):
    def one(X):
        n, d = X.shape
        J = jax.jacfwd(lambda Y: system_rhs(kind, model, Y, alpha, beta))(X)  # [n, d, n, d]
        B = tangent_basis(X)
        Jint = jnp.einsum("ida,idje,jeb->iajb", B, J, B).reshape(n * (d - 1), n * (d - 1))
        r = jnp.linalg.norm(system_defect(kind, model, X, alpha, beta))
        return J.reshape(n * d, n * d), Jint, r

    return jax.vmap(one)(Xs)


@dataclasses.dataclass
class Linearisation:
    """Jacobians at ``K`` equilibria and their classification (see :func:`linearise`)."""

    ambient: np.ndarray  # [K, n d, n d]
    intrinsic: np.ndarray  # [K, n(d-1), n(d-1)]
    eigenvalues: np.ndarray  # [K, n(d-1)] complex, of the intrinsic Jacobian, most unstable first
    ambient_eigenvalues: np.ndarray  # [K, n d] complex
    growth: np.ndarray  # [K] spectral radius (maps) or largest real part (flows)
    status: np.ndarray  # [K] 'stable' | 'unstable' | 'marginal'
    residual: np.ndarray  # [K]
    discrete: bool

    @property
    def stable(self) -> np.ndarray:
        return self.status == "stable"


def linearisation_bytes(num: int, n: int, d: int) -> int:
    """Host memory that :func:`linearise` keeps for ``num`` configurations of ``n`` tokens in ``d`` dimensions:
    the ambient and intrinsic Jacobians with their (complex) eigenvalues, and the configurations themselves."""
    nd, ni = n * d, n * (d - 1)
    return 8 * num * (nd * nd + ni * ni + 2 * ni + 2 * nd + nd + n)


def linearise(system: System, X: Float[ArrayLike, "*K n d"], *, residual_tol: float = 1e-8, margin: float = 1e-9,
              chunk: int = 1024) -> Linearisation:
    """Jacobians (ambient and intrinsic) at equilibria ``X: [K, n, d]`` and their stability.

    A map is ``stable`` when the spectral radius of the intrinsic Jacobian is below ``1 − margin``,
    ``unstable`` above ``1 + margin``; a flow when its largest real part is below ``−margin`` /
    above ``margin``; ``marginal`` in between (linearisation cannot decide).
    Refused with one line when a configuration is off the sphere, not finite, or not an equilibrium
    (residual above ``residual_tol``: refine it first with :func:`jaxattn.analysis._newton.refine`).
    ``chunk`` configurations are differentiated per compiled call.
    """
    A = check_configurations(X, system.d)
    model = system.model.astype(jnp.float64)
    parts = []
    for a in range(0, A.shape[0], chunk):  # bounded memory: K Jacobians of [n d, n d] each
        B = A[a:a + chunk]
        out = _jacobians(system.kind, model, padded(B), system.alpha, system.beta)
        parts.append([np.asarray(o)[:B.shape[0]] for o in out])
    J, Jint, r = (np.concatenate([p[i] for p in parts]) for i in range(3))
    bad = np.flatnonzero(~(r <= residual_tol))
    if bad.size:
        i = int(bad[0])
        raise ConfigError(f"configuration {i} has residual {r[i]:.2e} > {residual_tol:g}: not an equilibrium, so "
                          "there is nothing to linearise at (polish it with refine or raise residual_tol)")
    J, Jint = np.asarray(J), np.asarray(Jint)
    ev = np.linalg.eigvals(Jint) if Jint.shape[-1] else np.zeros(Jint.shape[:-1], complex)
    ev_amb = np.linalg.eigvals(J)
    if system.discrete:
        key = np.abs(ev)
        growth = key.max(axis=-1, initial=0.0)
        status = np.where(growth < 1 - margin, "stable", np.where(growth > 1 + margin, "unstable", "marginal"))
    else:
        key = ev.real
        growth = key.max(axis=-1, initial=-np.inf)
        status = np.where(growth < -margin, "stable", np.where(growth > margin, "unstable", "marginal"))
    order = np.argsort(-key, axis=-1, kind="stable")
    return Linearisation(ambient=J, intrinsic=Jint, eigenvalues=np.take_along_axis(ev, order, -1),
                         ambient_eigenvalues=ev_amb, growth=growth, status=status.astype(object), residual=r,
                         discrete=system.discrete)

