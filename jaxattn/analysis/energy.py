"""The interaction energy of tokens on the sphere and its critical points (dynamic metastability).

For tokens ``x_1, …, x_n`` on the unit sphere ``S^{d−1}`` and an inverse temperature ``β``,

    E(X) = (1 / (2 β n²)) Σ_{i,j} exp(β (⟨x_i, x_j⟩ − 1))

lies in ``(0, 1/(2β)]``, its maximum reached when all tokens coincide. With ``Q = K = V = I`` the flow
C2 (softmax attention, tokens on the sphere) increases it: ``dE/dt = Σ_i (n² e^β / Z_i) |P_{x_i} g_i|² ≥ 0``
with ``g_i = ∂E/∂x_i`` and ``Z_i`` the row normaliser of the attention (a gradient flow of ``E`` in a
metric weighted by ``Z_i``). A configuration of several point clusters is (nearly) critical, and the
kind of critical point is read from the Riemannian Hessian of ``E`` on the product of spheres:

    Hess E(X)[v]_i = P_{x_i} (Σ_j ∇²_{ij} E v_j) − ⟨x_i, g_i⟩ v_i,      v_i ∈ T_{x_i} S^{d−1}

(the Euclidean Hessian projected on the tangent spaces, plus the correction for the curvature of the
sphere). The Euclidean Hessian comes from ``jax.hessian``. ``E`` is invariant under a common rotation of
all tokens, so the Hessian has ``d(d−1)/2`` directions that say nothing about the kind of point (exactly
zero at a critical point); :func:`hessian_spectrum` removes them before the eigenvalues are taken. A
**strict saddle** has an eigenvalue above ``tol`` and one below ``−tol`` (``tol`` relative to the
largest eigenvalue in modulus); a local maximum has none above.

Pure JAX for the energy, its gradient and Hessian (batched over leading axes); eigenvalues on the host
in float64 (LAPACK), whatever JAX's precision.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxattn.analysis._inputs import batched, real_array
from jaxattn.errors import ConfigError


def _beta(beta) -> float:
    b = float(beta)
    if not math.isfinite(b) or b <= 0:
        raise ConfigError(f"beta must be a finite number > 0, got {beta!r}")
    return b


def _states(X) -> jax.Array:
    X = real_array(X)
    if X.ndim < 2 or X.shape[-1] < 2:
        raise ConfigError(f"tokens on a sphere: X must be [..., n, d] with d >= 2, got shape {tuple(X.shape)}")
    return X


def _energy_one(X: jax.Array, beta) -> jax.Array:
    n = X.shape[0]
    G = X @ X.T
    return jnp.sum(jnp.exp(beta * (G - 1.0))) / (2.0 * beta * n * n)


def energy(X: Float[ArrayLike, "*B n d"], beta) -> Float[Array, "*B"]:
    """``E(X) = (1/(2βn²)) Σ_ij exp(β(⟨x_i, x_j⟩ − 1))`` of configurations ``[..., n, d]``.

    Examples:
        >>> import numpy as np
        >>> X = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])   # two tokens together, one at a right angle
        >>> round(float(energy(X, 2.0)) * 2 * 2.0 * 9, 6)        # Σ_ij: five pairs at 1, four at e^-2
        5.541341
    """
    X = _states(X)
    return batched(_energy_one, X, 2, jnp.asarray(_beta(beta), X.dtype))


def _gradient_one(X: jax.Array, beta) -> jax.Array:
    n = X.shape[0]
    return jnp.exp(beta * (X @ X.T - 1.0)) @ X / (n * n)


def euclidean_gradient(X: Float[ArrayLike, "*B n d"], beta) -> Float[Array, "*B n d"]:
    """``g_i = ∂E/∂x_i = (1/n²) Σ_j exp(β(⟨x_i, x_j⟩ − 1)) x_j`` (``E`` extended to all of ``R^{n×d}``)."""
    X = _states(X)
    return batched(_gradient_one, X, 2, jnp.asarray(_beta(beta), X.dtype))


def riemannian_gradient(X: Float[ArrayLike, "*B n d"], beta) -> Float[Array, "*B n d"]:
    """``grad E(X)_i = P_{x_i} g_i``, the gradient of ``E`` on the product of spheres (tokens of norm 1)."""
    X = _states(X)
    g = euclidean_gradient(X, beta)
    return g - X * jnp.sum(X * g, axis=-1, keepdims=True)


def _riemannian_hessian_one(X: jax.Array, beta) -> jax.Array:
    n, d = X.shape
    H = jax.hessian(_energy_one)(X, beta)  # [n, d, n, d], the Euclidean Hessian
    g = _gradient_one(X, beta)
    P = jnp.eye(d, dtype=X.dtype)[None] - X[:, :, None] * X[:, None, :]  # [n, d, d] tangent projectors
    PHP = jnp.einsum("iab,ibjc,jcd->iajd", P, H, P)
    radial = jnp.sum(X * g, axis=-1)  # ⟨x_i, g_i⟩: the curvature correction, -⟨x_i, g_i⟩ P_i on block (i, i)
    corr = jnp.einsum("ij,iab->iajb", jnp.diag(radial), P)
    return (PHP - corr).reshape(n * d, n * d)


def riemannian_hessian(X: Float[ArrayLike, "*B n d"], beta) -> Float[Array, "*B nd nd"]:
    """The Riemannian Hessian of ``E`` at ``X`` (tokens of norm 1) as a symmetric ``[n·d, n·d]`` matrix in the
    ambient coordinates (token-major: row ``i·d + a``), acting on tangent vectors and zero on the normals:
    ``P ∇²E P − diag(⟨x_i, g_i⟩) P`` with ``P`` the block diagonal of the tangent projectors. Batched over
    leading axes; the Euclidean Hessian ``∇²E`` is ``jax.hessian``'s."""
    X = _states(X)
    return batched(_riemannian_hessian_one, X, 2, jnp.asarray(_beta(beta), X.dtype))


def tangent_basis(X: ArrayLike) -> np.ndarray:
    """An orthonormal basis of each tangent space, ``[..., n, d, d−1]`` (float64, host): columns orthogonal to
    ``x_i`` and to each other (the last ``d − 1`` left singular vectors of ``x_i`` as a ``d × 1`` matrix)."""
    X = np.asarray(X, np.float64)
    u, _, _ = np.linalg.svd(X[..., :, None], full_matrices=True)  # [..., n, d, d]; u[..., 0] ∥ x_i
    return u[..., 1:]


def rotation_directions(X: ArrayLike) -> np.ndarray:
    """The tangent vectors ``(A x_i)_i`` of the common rotations, one per basis skew matrix ``A = e_a e_bᵀ −
    e_b e_aᵀ`` (``a < b``): ``[..., d(d−1)/2, n·d]`` (float64, host). ``E`` is constant along them."""
    X = np.asarray(X, np.float64)
    d = X.shape[-1]
    out = []
    for a in range(d):
        for b in range(a + 1, d):
            v = np.zeros_like(X)
            v[..., a] = -X[..., b]  # (A x)_a = -x_b
            v[..., b] = X[..., a]   # (A x)_b = x_a
            out.append(v.reshape((*X.shape[:-2], -1)))
    return np.stack(out, axis=-2)


def _normalised(X) -> np.ndarray:
    X = np.asarray(X, np.float64)
    if X.ndim < 2 or X.shape[-1] < 2:
        raise ConfigError(f"tokens on a sphere: X must be [..., n, d] with d >= 2, got shape {X.shape}")
    norm = np.linalg.norm(X, axis=-1, keepdims=True)
    if not np.all(np.isfinite(X)) or np.any(norm == 0):
        raise ConfigError("X must be finite tokens of nonzero norm")
    return X / norm


def hessian_spectrum(X: ArrayLike, beta, *, rotations: bool = False) -> np.ndarray:
    """Eigenvalues (ascending, float64) of the Riemannian Hessian of ``E`` on the tangent space of the product
    of spheres at ``X: [..., n, d]``: ``n(d−1)`` of them, or, without ``rotations`` (the default), those on the
    complement of the common-rotation directions (along which ``E`` is constant): ``n(d−1) − r`` with ``r``
    the dimension they span (``d(d−1)/2`` for tokens spanning ``R^d``; fewer for tokens in a smaller set, e.g.
    ``d − 1`` for one point cluster). In a batch, configurations with fewer eigenvalues than the most are
    padded with NaN at the end. The tokens are normalised first: a solver's states leave the sphere by its
    tolerance, and at a cluster the curvature sought (``e^{−β(1 − cos δ)}`` of the terms) is far smaller
    than what a norm of ``1 + 1e-8`` adds to them."""
    X = _normalised(X)
    lead, (n, d) = X.shape[:-2], X.shape[-2:]
    flat = X.reshape((-1, n, d))
    m, k = flat.shape[0], n * (d - 1)
    with jax.enable_x64(True):  # float64 eigenvalues whatever the caller's JAX precision
        H = np.asarray(riemannian_hessian(jnp.asarray(flat), beta), np.float64).reshape(m, n, d, n * d)
    U = tangent_basis(flat)  # [m, n, d, d-1]
    # Uᵀ H U block by block (the basis is block diagonal): matrix products of size d, never [n·d, n(d-1)]
    A = (np.swapaxes(U, -1, -2) @ H).reshape(m, k, n, d)  # rows in tangent coordinates
    Ht = np.swapaxes(np.swapaxes(A, 1, 2) @ U, 1, 2).reshape(m, k, k)  # [m, j, row, q] -> [m, row, (j, q)]
    Ht = 0.5 * (Ht + np.swapaxes(Ht, -1, -2))
    if rotations:
        return np.linalg.eigvalsh(Ht).reshape((*lead, k))
    rot = rotation_directions(flat).reshape(m, -1, n, d)  # [m, r, n, d]
    R = (np.swapaxes(rot, 1, 2) @ U)  # [m, n, r, d-1]: the rotation directions in tangent coordinates
    R = np.swapaxes(R, 1, 2).reshape(m, -1, k)
    _, s, vt = np.linalg.svd(R, full_matrices=False)
    rank = np.sum(s > 1e-10 * np.maximum(s[:, :1], 1e-300), axis=-1)
    out = np.full((m, k - int(rank.min())), np.nan)
    # on the complement of the rotation directions V (orthonormal rows): P Ht P + c VᵀV with P = I − VᵀV has the
    # eigenvalues sought and c on the rotations, r times; c above every eigenvalue of Ht puts those last
    c = 2.0 * np.max(np.abs(Ht), axis=(-1, -2), keepdims=True) * k + 1.0
    for r in np.unique(rank):  # per rank of the rotation directions
        sel = rank == r
        V, Hs = vt[sel, :r], Ht[sel]
        Vt = np.swapaxes(V, -1, -2)
        HV = Hs @ Vt  # [m', k, r]
        PHP = Hs - Vt @ np.swapaxes(HV, -1, -2) - HV @ V + Vt @ (V @ HV) @ V
        lam = np.linalg.eigvalsh(PHP + c[sel] * (Vt @ V))
        out[sel, : k - r] = lam[:, : k - r]
    return out.reshape(lead + out.shape[-1:])


class CriticalKind(NamedTuple):
    """What the Hessian says about configurations ``[...]`` (see :func:`classify`)."""

    lambda_min: np.ndarray  # [...] smallest eigenvalue (rotations removed)
    lambda_max: np.ndarray  # [...] largest eigenvalue
    positive: np.ndarray  # [...] eigenvalues above tol · max |λ|
    negative: np.ndarray  # [...] eigenvalues below −tol · max |λ|
    strict_saddle: np.ndarray  # [...] bool: at least one of each
    gradient: np.ndarray  # [...] norm of the Riemannian gradient, relative to max |λ| (0 at a critical point)


def classify(X: ArrayLike, beta, *, tol: float = 1e-12) -> CriticalKind:
    """The kind of (near-)critical point of ``E`` at configurations ``X: [..., n, d]`` (normalised first): the
    signs of the Riemannian Hessian's eigenvalues with the common rotations removed, an eigenvalue counting as
    positive (negative) when above ``tol`` (below ``−tol``) times the largest eigenvalue in modulus (the
    round-off of the eigenvalues is about 1e-15 of it). A strict saddle has both; a local maximum only
    negative ones.

    Examples:
        >>> import numpy as np
        >>> two = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]])   # two antipodal clusters
        >>> bool(classify(two, 4.0).strict_saddle), bool(classify(two[:2], 4.0).strict_saddle)  # and one
        (True, False)
    """
    if not (isinstance(tol, (int, float)) and 0 <= tol < 1):
        raise ConfigError(f"tol must be a number in [0, 1), got {tol!r}")
    X = _normalised(X)
    lam = hessian_spectrum(X, beta)
    scale = np.maximum(np.nanmax(np.abs(lam), axis=-1), np.finfo(np.float64).tiny)
    pos = np.sum(lam > tol * scale[..., None], axis=-1)  # NaN padding compares False
    neg = np.sum(lam < -tol * scale[..., None], axis=-1)
    with jax.enable_x64(True):
        grad = np.asarray(riemannian_gradient(jnp.asarray(np.asarray(X, np.float64)), beta), np.float64)
    gnorm = np.sqrt(np.sum(grad * grad, axis=(-1, -2))) / scale
    return CriticalKind(np.nanmin(lam, axis=-1), np.nanmax(lam, axis=-1), pos, neg, (pos > 0) & (neg > 0), gnorm)


__all__ = ["CriticalKind", "classify", "energy", "euclidean_gradient", "hessian_spectrum", "riemannian_gradient",
           "riemannian_hessian", "rotation_directions", "tangent_basis"]
