"""Parallel hyperplanes (a simple positive top eigenvalue of ``V`` in the clustering paper): the coordinate
of each token along the top eigenvector ``φ_1`` (``⟨ψ_1, z⟩`` with ``ψ_1`` the left eigenvector,
``⟨ψ_1, φ_1⟩ = 1``; for a symmetric ``V`` it is ``⟨φ_1, z⟩``), and the number of its distinct values.
Eigenpairs are computed on the host in float64 with LAPACK."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxattn.analysis._inputs import real_array, tolerance
from jaxattn.analysis._linkage import count_clusters, gap_clusters
from jaxattn.errors import ConfigError
from jaxattn.model.paper import check_value_matrix


class TopEigen(NamedTuple):
    """The eigenvalue of largest modulus of a real matrix and its eigenvectors (float64, host)."""

    value: complex
    right: np.ndarray  # [d] unit right eigenvector φ_1 (real when the eigenvalue is real)
    left: np.ndarray  # [d] left eigenvector ψ_1 with <ψ_1, φ_1> = 1


def top_eigen(V: Float[ArrayLike, "d d"]) -> TopEigen:
    """Top-modulus eigenpair of ``V: [d, d]``; ``φ_1`` is real with its largest entry positive when
    the eigenvalue is real."""
    V = check_value_matrix(V)
    lam, R = np.linalg.eig(V)
    i = int(np.argmax(np.abs(lam) + 1e-12 * np.abs(lam).max() * (lam.imag >= 0)))
    phi = R[:, i]
    if abs(lam[i].imag) <= 1e-12 * max(abs(lam[i]), 1e-300):
        phi = phi.real
        phi = phi * np.sign(phi[np.argmax(np.abs(phi))])
    phi = phi / np.linalg.norm(phi)
    lamL, L = np.linalg.eig(V.T)
    j = int(np.argmin(np.abs(lamL - lam[i])))
    psi = L[:, j]
    psi = psi / (psi @ phi)
    if np.isrealobj(phi):
        psi = psi.real
    return TopEigen(complex(lam[i]), phi, psi)


def coordinate(X: Float[ArrayLike, "*B n d"], V: Float[ArrayLike, "d d"]) -> Float[Array, "*B n"]:
    """Coordinate of every token along the top eigenvector ``φ_1`` of ``V``: ``⟨ψ_1, x_i⟩``.

    ``X: [..., n, d]`` -> ``[..., n]``. Needs a real top eigenvalue (else :class:`ConfigError`).
    """
    X = real_array(X)
    V = check_value_matrix(V, X.shape[-1])
    top = top_eigen(V)
    if abs(top.value.imag) > 1e-12 * abs(top.value):
        raise ConfigError(f"the top eigenvalue of V is complex ({top.value:.4g}): there is no real φ_1")
    return jnp.einsum("...nd,d->...n", X, jnp.asarray(top.left, X.dtype))


class Hyperplanes(NamedTuple):
    # [...] distinct values of the coordinate at the tolerance
    count: jax.Array  # type: ignore[assignment]  # NamedTuple field shadows tuple.count; the name is public API
    gap_count: jax.Array  # [...] tolerance-free count
    values: jax.Array  # [..., n] the coordinates


def hyperplanes(X: Float[ArrayLike, "*B n d"], V: Float[ArrayLike, "d d"], tol) -> Hyperplanes:
    """How many parallel hyperplanes ``{⟨ψ_1, x⟩ = c}`` hold the tokens ``X: [..., n, d]``."""
    tol = tolerance(tol)
    c = coordinate(X, V)
    pts = c[..., None]
    return Hyperplanes(count_clusters(pts, tol), gap_clusters(pts).count, c)

