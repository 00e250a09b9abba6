"""Equilibria of the token dynamics on the product of spheres: the :class:`System` (a time-invariant model
with a map or a flow on the unit sphere), its right-hand side and residual, constructors of consensus,
bipartite, clustering and polygonal configurations, the candidates at the eigenvectors of ``F``, the
tangent bases of the product of spheres, and the attention rank at a configuration. The mathematics is in
:mod:`jaxattn.analysis.stability`."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxattn.analysis.metrics import numerical_rank
from jaxattn.analysis.spectral import eig_sorted, layer_matrices
from jaxattn.dynamics.discrete import Dynamics, step
from jaxattn.dynamics.fields import Flow, velocity
from jaxattn.errors import ConfigError
from jaxattn.model.attention import probabilities
from jaxattn.model.nn import l2
from jaxattn.model.params import Model, validate

Kind = Dynamics | Flow


# ------------------------------------------------------------------ the system

@dataclasses.dataclass(frozen=True)
class System:
    """A time-invariant model on the product of unit spheres: a map (``Dynamics``) or a flow (``Flow``).

    ``alpha`` is the step of a map (unused by flows), ``beta`` the inverse temperature.
    """

    model: Model
    kind: Kind
    alpha: float = 1.0
    beta: float = 1.0

    def __post_init__(self):
        validate(self.model)
        if not self.model.shared:
            raise ConfigError("equilibria need a time-invariant system: use a shared-weight model (one weight set)")
        if isinstance(self.kind, Dynamics):
            if self.kind.norm != "l2" or self.kind.ffn or self.kind.drop_ln2:
                raise ConfigError("stability analysis covers maps on the unit sphere: Dynamics(norm='l2', ffn=False)")
        elif isinstance(self.kind, Flow):
            if self.kind.space != "sphere" or self.kind.rescaled:
                raise ConfigError("stability analysis covers flows on the unit sphere: Flow(space='sphere')")
        else:
            raise ConfigError(f"kind must be a jaxattn.Dynamics or jaxattn.Flow, got {self.kind!r}")
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
                raise ConfigError(f"{name} must be a finite number, got {v!r}")

    @property
    def discrete(self) -> bool:
        return isinstance(self.kind, Dynamics)

    @property
    def d(self) -> int:
        return self.model.d_model

    def layer_matrix(self) -> np.ndarray:
        """``F = Σ_h O_h V_h`` ``[d, d]`` float64."""
        return layer_matrices(self.model)[self.model.schedule[0]]


def system_rhs(kind: Kind, model: Model, X, alpha, beta):
    """``map(X)`` of a map or ``f(X)`` of a flow, for one configuration ``[n, d]``."""
    if isinstance(kind, Dynamics):
        return step(X, 0, model, kind, alpha, beta)
    return velocity(model, X, 0.0, flow=kind, beta=beta)


def system_defect(kind: Kind, model: Model, X, alpha, beta):
    """``map(X) − X`` or ``f(X)``: zero exactly at an equilibrium."""
    Y = system_rhs(kind, model, X, alpha, beta)
    return Y - X if isinstance(kind, Dynamics) else Y


# ------------------------------------------------------------------ constructors

def consensus(v: Float[ArrayLike, " d"], n: int, sign: int = 1) -> Float[Array, "n d"]:
    """Every token at ``sign · v`` (``v`` normalised): ``[n, d]``."""
    v = _unit(v)
    return jnp.broadcast_to(sign * v, (n, v.shape[0]))


def bipartite(v: Float[ArrayLike, " d"], signs: Sequence[int]) -> Float[Array, "n d"]:
    """Token i at ``signs[i] · v``: ``[n, d]`` (all signs equal is consensus)."""
    s = jnp.asarray(signs, dtype=jnp.result_type(float))
    if s.ndim != 1 or not bool(jnp.all(jnp.abs(s) == 1)):
        raise ConfigError("signs must be a sequence of +1 / -1")
    v = _unit(v)
    return s[:, None] * v[None, :]


def sign_patterns(n: int) -> Int[np.ndarray, "P n"]:
    """Every sign pattern with ``s_1 = +1`` (one per antipodal pair): ``[2^(n−1), n]``; row 0 is consensus."""
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    rest = np.array(list(itertools.product([1, -1], repeat=n - 1)), dtype=np.int64).reshape(-1, n - 1)
    return np.concatenate([np.ones((rest.shape[0], 1), np.int64), rest], axis=1)


def clustering(points: Float[ArrayLike, "k d"], assignment: Sequence[int]) -> Float[Array, "n d"]:
    """Token i at ``points[assignment[i]]`` (rows normalised): ``[n, d]``."""
    return l2(jnp.asarray(points))[jnp.asarray(assignment)]


def polygon(n: int, U: Float[ArrayLike, "d 2"], phase: float = 0.0) -> Float[Array, "n d"]:
    """``n`` tokens evenly spaced on the great circle spanned by the two columns of ``U: [d, 2]``
    (orthonormalised). For ``n ≥ 2`` their mean vanishes: a polygonal equilibrium of D3 / C2_OJA."""
    U = np.linalg.qr(np.asarray(U, np.float64))[0]
    th = phase + 2 * np.pi * np.arange(n) / n
    return jnp.asarray(np.cos(th)[:, None] * U[None, :, 0] + np.sin(th)[:, None] * U[None, :, 1])


@dataclasses.dataclass
class Candidates:
    """Consensus and bipartite equilibria at the real eigenvectors of ``F`` (see :func:`eigen_equilibria`)."""

    X: np.ndarray  # [K, n, d]
    k: np.ndarray  # [K] eigen-index (0-based, order of largest real part first)
    signs: np.ndarray  # [K, n]
    eigvals: np.ndarray  # [d] eigenvalues of F (sorted, complex)
    eigvecs: np.ndarray  # [d, d] real unit eigenvectors (columns; NaN for complex ones)

    @property
    def is_consensus(self) -> np.ndarray:
        return np.all(self.signs == self.signs[:, :1], axis=1)


def eigen_equilibria(F: Float[ArrayLike, "d d"], n: int, *, patterns: Int[np.ndarray, "P n"] | None = None,
                     imag_tol: float = 1e-10) -> Candidates:
    """Consensus and bipartite consensus at every real eigenvector of ``F: [d, d]`` and every sign
    pattern (default :func:`sign_patterns`; give ``patterns [P, n]`` to sample them instead)."""
    F = np.asarray(F, np.float64)
    lam, vec = eig_sorted(F)
    real = np.abs(lam.imag) <= imag_tol * max(np.abs(lam).max(), 1e-300)
    V = np.where(real[None, :], vec.real, np.nan)
    V = V / np.linalg.norm(np.nan_to_num(V), axis=0, keepdims=True).clip(1e-300)
    pats = sign_patterns(n) if patterns is None else np.asarray(patterns, np.int64)
    if pats.ndim != 2 or pats.shape[1] != n or not np.all(np.abs(pats) == 1):
        raise ConfigError(f"patterns must be [P, {n}] of +1 / -1")
    Xs, ks, ss = [], [], []
    for k in np.flatnonzero(real):
        for s in pats:
            Xs.append(s[:, None] * V[None, :, k])
            ks.append(k)
            ss.append(s)
    d = F.shape[0]
    return Candidates(X=np.asarray(Xs).reshape(-1, n, d), k=np.asarray(ks, np.int64),
                      signs=np.asarray(ss).reshape(-1, n), eigvals=lam, eigvecs=V)


def _unit(v) -> jax.Array:
    v = jnp.asarray(v)
    if v.ndim != 1 or not bool(jnp.all(jnp.isfinite(v))) or float(jnp.linalg.norm(v)) == 0:
        raise ConfigError("an equilibrium direction must be a finite non-zero vector [d]")
    return v / jnp.linalg.norm(v)


# ------------------------------------------------------------------ checks and residuals

def check_configurations(X: Float[ArrayLike, "*K n d"], d: int, *,
                         sphere_tol: float = 1e-8) -> Float[np.ndarray, "K n d"]:
    """``X`` as float64 ``[K, n, d]`` (``[n, d]`` is ``K = 1``), refused unless finite and on the sphere."""
    A = np.asarray(X)
    if A.dtype.kind not in "fi":
        raise ConfigError(f"configurations must be real numbers, got dtype {A.dtype}")
    A = A.astype(np.float64)
    if A.ndim == 2:
        A = A[None]
    if A.ndim != 3 or A.shape[-1] != d or A.shape[0] == 0 or A.shape[1] == 0:
        raise ConfigError(f"configurations must be [K, n, {d}] or [n, {d}], got shape {np.shape(X)}")
    if not np.all(np.isfinite(A)):
        raise ConfigError("configuration has non-finite entries (NaN or inf)")
    off = np.abs(np.linalg.norm(A, axis=-1) - 1.0).max()
    if off > sphere_tol:
        raise ConfigError(f"configuration is off the unit sphere (a token norm differs from 1 by {off:.2e}); "
                          "normalise the tokens first")
    return A


@functools.partial(jax.jit, static_argnums=(0,))
def _residuals(kind, model, Xs, alpha, beta):
    return jax.vmap(lambda X: jnp.linalg.norm(system_defect(kind, model, X, alpha, beta)))(Xs)


def padded(A: np.ndarray) -> jax.Array:
    """``A: [K, ...]`` padded with copies of its first row to the next power of two, so that batches of
    different sizes share a few compiled shapes (callers slice the result back to ``K``)."""
    K = A.shape[0]
    width = 1 << max(K - 1, 0).bit_length()
    return jnp.asarray(np.concatenate([A, np.broadcast_to(A[:1], (width - K, *A.shape[1:]))]))


def residual(system: System, X: Float[ArrayLike, "*K n d"]) -> Float[np.ndarray, " K"]:
    """``||map(X) − X||`` (maps) or ``||f(X)||`` (flows), Frobenius norm, per configuration: ``[K]``."""
    A = check_configurations(X, system.d)
    r = _residuals(system.kind, system.model.astype(jnp.float64), padded(A), system.alpha, system.beta)
    return np.asarray(r)[:A.shape[0]]


# ------------------------------------------------------------------ tangent spaces

def tangent_basis(X: Float[Array, "n d"]) -> Float[Array, "n d d-1"]:
    """Orthonormal basis of ``x_i^⊥`` for every token: ``[n, d] -> [n, d, d−1]``.

    The QR factorisation of ``[x_i | I]`` puts ``±x_i`` in its first column; the others span its
    orthogonal complement.
    """
    d = X.shape[-1]

    def one(x):
        q, _ = jnp.linalg.qr(jnp.concatenate([x[:, None], jnp.eye(d, dtype=X.dtype)], axis=1))
        return q[:, 1:]

    return jax.vmap(one)(X)


def attention_rank(system: System, X: Float[ArrayLike, "n d"], *, rtol: float = 1e-8) -> Int[np.ndarray, " H"]:
    """Numerical rank of every head's attention matrix at ``X: [n, d]`` (singular values above
    ``rtol`` times the largest): ``[H]`` ints. 1 at consensus, 2 at bipartite consensus."""
    A = check_configurations(X, system.d)[0]
    lw = system.model.astype(jnp.float64).layers.take(system.model.schedule[0])
    P = np.asarray(probabilities(jnp.asarray(A), lw, system.beta, biases=system.kind.biases,
                                 attention=system.kind.attention))
    return np.asarray(numerical_rank(jnp.asarray(P), rtol))

