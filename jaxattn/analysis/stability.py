"""Equilibria of the token dynamics on the product of spheres, their linearisation and stability,
and where the dynamics ends over many initial conditions.

A :class:`System` is a time-invariant (shared-weight) model with either a discrete map on the unit
sphere (:class:`jaxattn.Dynamics` with ``norm='l2'``: D1, D2, D3) or a flow on it
(:class:`jaxattn.Flow` with ``space='sphere'``: C2, OJA). Its right-hand side is
``map(X)`` or ``f(X)`` for one configuration ``X: [n, d]``.

Equilibria
----------
With ``F = Σ_h O_h V_h`` and a real unit eigenvector ``F v = λ v``:

* consensus ``x_i = ±v`` for every token; bipartite consensus ``x_i = s_i v`` with signs
  ``s_i ∈ {±1}`` not all equal (:func:`consensus`, :func:`bipartite`, :func:`eigen_equilibria`
  enumerates every eigenvector and every sign pattern up to the global flip ``X -> −X``, which maps
  an equilibrium to one of the same stability because every model here is odd in ``X``);
* clustering: tokens sitting on a few points (:func:`clustering`);
* polygonal: the update ``Σ_j a_ij F x_j`` vanishes for every token (:func:`polygon` builds the
  regular polygon on a great circle, whose mean is zero: an equilibrium of the uniform-attention
  models D3 and OJA).

For a map the consensus at ``v`` is a fixed point only when ``1 + αλ > 0`` (otherwise the step
sends ``v`` to ``−v``: a 2-cycle); bipartite consensus needs ``1 + αλ s_i c_i > 0`` for every
token (``c_i = Σ_j a_ij s_j``). :func:`residual` measures ``||map(X) − X||`` or ``||f(X)||``
(Frobenius norm); :func:`refine` polishes a near-equilibrium with Newton's method (optimistix,
linear solves by lineax's SVD, which gives minimum-norm steps where equilibria form a continuum,
as the polygons of D3 do) in tangent coordinates ``X(c) = N(X0 + B c)``.

Linearisation
-------------
:func:`linearise` differentiates the right-hand side with ``jax.jacfwd`` (the ambient Jacobian,
``[n d, n d]``) and restricts it to the tangent space of the product of spheres with an orthonormal
basis ``B_i`` of ``x_i^⊥`` per token: ``J_int = Bᵀ J B`` (``[n (d−1), n (d−1)]``). At a fixed
point of a map ``map(X) = X``, so the same basis serves both ends; at a zero of a flow the
covariant derivative equals the projected ambient one. A map is stable when the spectral radius of
``J_int`` is below 1, a flow when the largest real part is below 0.

Closed forms (the test oracle)
------------------------------
Perturb ``x_i = s_i v + δ_i`` with ``δ_i ⊥ v``. At consensus or bipartite consensus every value
``F x_j = λ s_j v`` points along ``v``, so the first-order change of the attention weights
multiplies a vector along ``v`` and the tangent projection removes it: **only the attention
matrix at the equilibrium, ``A``, enters the intrinsic Jacobian** (also with several heads, since
``V_h x_j = s_j V_h v`` and softmax rows sum to one). Let ``G = Bᵀ F B`` (its eigenvalues are
the other eigenvalues ``λ_m`` of F, since ``Bᵀ F v = 0`` makes F block triangular in ``[v, B]``).

*Map* ``x_i' = N(x_i + α u_i)``, ``u_i = Σ_j a_ij F x_j``: the unnormalised image is
``r_i v + δ_i + α Σ_j a_ij F δ_j`` with ``r_i = s_i + αλ c_i``, and ``dN(y) = P_y / ||y||``, so

    δ_i' = (δ_i + α Σ_j a_ij G δ_j) / ρ_i,        ρ_i = |r_i| = 1 + αλ s_i c_i.

At consensus (``A = 11ᵀ/n``, ``ρ = 1 + αλ_k``) the differential modes (``Σ_i δ_i = 0``) give
``1/(1 + αλ_k)`` with multiplicity ``(n−1)(d−1)`` and the common modes (``δ_i = w``) give
``(1 + αλ_m)/(1 + αλ_k)``, ``m ≠ k``. Hence only the principal consensus can be stable (it needs
``λ_1 > 0``), and for a real spectrum it is when ``α < 2/(|λ_d| − λ_1)`` in case the most negative
eigenvalue has ``|λ_d| > λ_1``.

*Flow* ``ẋ_i = P_{x_i} u_i``: ``δ̇_i = P_v δu_i − <x_i, u_i> δ_i = Σ_j a_ij G δ_j − λ s_i c_i δ_i``.
At consensus the differential modes have eigenvalue ``−λ_k`` (multiplicity ``(n−1)(d−1)``) and
the common modes ``λ_m − λ_k``: again only the principal consensus can be stable, and it is when
``λ_1 > 0`` and ``λ_1 > Re λ_m`` for every other eigenvalue, with no condition on a step.

*Bipartite consensus, one head* (the single-head analysis of the power-method paper's appendix),
``p`` tokens at ``+v`` and ``q = n − p`` at ``−v``: with ``w = β s vᵀ Qᵀ K v`` (``w = 0`` for
uniform attention) the attention is ``e^{±w}`` over ``Z_+ = p e^w + q e^{−w}`` (rows of ``+v``
tokens) or ``Z_− = p e^{−w} + q e^w``, a rank-2 matrix, and

    c_+ = (p e^w − q e^{−w}) / Z_+,   c_− = (p e^{−w} − q e^w) / Z_−,
    ρ_+ = 1 + αλ c_+,                 ρ_− = 1 − αλ c_−.

Perturbations summing to zero inside a group do not feel ``A``: eigenvalues ``1/ρ_+`` (multiplicity
``(p−1)(d−1)``) and ``1/ρ_−`` (``(q−1)(d−1)``). Group-constant perturbations along ``v_m``
give, for each ``m ≠ k``, the 2×2 matrix ``diag(1/ρ_+, 1/ρ_−)(I + αλ_m Â)`` with the row-stochastic
``Â = [[p e^w/Z_+, q e^{−w}/Z_+], [p e^{−w}/Z_−, q e^w/Z_−]]``; it is Schur stable iff
``|det| < 1`` and ``|tr| < 1 + det`` (Jury). For the flow the same blocks read ``−λ c_+``,
``λ c_−`` and ``−diag(λ c_+, −λ c_−) + λ_m Â`` (Hurwitz iff ``tr < 0 < det``).
:func:`single_head_conditions` evaluates these conditions; :func:`linearise` gives the numbers
they are checked against.

Where the dynamics ends
-----------------------
:func:`basins` draws initial conditions (condition ``i`` from ``fold_in(key, i)``), runs them in
chunks through :func:`jaxattn.simulate` or :func:`jaxattn.solve` (a fixed compiled width, so a
condition's end does not depend on the chunking), and :func:`classify` labels each end state:
consensus at ``±v_k``, bipartite consensus at ``v_k`` with its split, polygonal, clustering with
its number of clusters, or not converged (residual above the tolerance). Counts come with Wilson
95% confidence intervals.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.metrics import numerical_rank
from jaxattn.analysis.spectral import eig_sorted, layer_matrices
from jaxattn.analysis.stats import wilson
from jaxattn.dynamics.discrete import Dynamics, step
from jaxattn.dynamics.fields import Flow, velocity
from jaxattn.dynamics.options import Batch, Save
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

    def rhs(self, X: jax.Array) -> jax.Array:
        """``map(X)`` or ``f(X)`` for one configuration ``[n, d] -> [n, d]``."""
        return _rhs(self.kind, self.model, X, self.alpha, self.beta)


def _rhs(kind: Kind, model: Model, X, alpha, beta):
    if isinstance(kind, Dynamics):
        return step(X, 0, model, kind, alpha, beta)
    return velocity(model, X, 0.0, flow=kind, beta=beta)


def _defect(kind: Kind, model: Model, X, alpha, beta):
    """``map(X) − X`` or ``f(X)``: zero exactly at an equilibrium."""
    Y = _rhs(kind, model, X, alpha, beta)
    return Y - X if isinstance(kind, Dynamics) else Y


# ------------------------------------------------------------------ constructors

def consensus(v, n: int, sign: int = 1) -> jax.Array:
    """Every token at ``sign · v`` (``v`` normalised): ``[n, d]``."""
    v = _unit(v)
    return jnp.broadcast_to(sign * v, (n, v.shape[0]))


def bipartite(v, signs: Sequence[int]) -> jax.Array:
    """Token i at ``signs[i] · v``: ``[n, d]`` (all signs equal is consensus)."""
    s = jnp.asarray(signs, dtype=jnp.result_type(float))
    if s.ndim != 1 or not bool(jnp.all(jnp.abs(s) == 1)):
        raise ConfigError("signs must be a sequence of +1 / -1")
    v = _unit(v)
    return s[:, None] * v[None, :]


def sign_patterns(n: int) -> np.ndarray:
    """Every sign pattern with ``s_1 = +1`` (one per antipodal pair): ``[2^(n−1), n]``; row 0 is consensus."""
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    rest = np.array(list(itertools.product([1, -1], repeat=n - 1)), dtype=np.int64).reshape(-1, n - 1)
    return np.concatenate([np.ones((rest.shape[0], 1), np.int64), rest], axis=1)


def clustering(points, assignment: Sequence[int]) -> jax.Array:
    """Token i at ``points[assignment[i]]`` (rows normalised): ``[n, d]``."""
    return l2(jnp.asarray(points))[jnp.asarray(assignment)]


def polygon(n: int, U, phase: float = 0.0) -> jax.Array:
    """``n`` tokens evenly spaced on the great circle spanned by the two columns of ``U: [d, 2]``
    (orthonormalised). For ``n ≥ 2`` their mean vanishes: a polygonal equilibrium of D3 / OJA."""
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


def eigen_equilibria(F, n: int, *, patterns: np.ndarray | None = None, imag_tol: float = 1e-10) -> Candidates:
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

def check_configurations(X, d: int, *, sphere_tol: float = 1e-8) -> np.ndarray:
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
    return jax.vmap(lambda X: jnp.linalg.norm(_defect(kind, model, X, alpha, beta)))(Xs)


def _padded(A: np.ndarray) -> jax.Array:
    """``A: [K, ...]`` padded with copies of its first row to the next power of two, so that batches of
    different sizes share a few compiled shapes (callers slice the result back to ``K``)."""
    K = A.shape[0]
    width = 1 << max(K - 1, 0).bit_length()
    return jnp.asarray(np.concatenate([A, np.broadcast_to(A[:1], (width - K, *A.shape[1:]))]))


def residual(system: System, X) -> np.ndarray:
    """``||map(X) − X||`` (maps) or ``||f(X)||`` (flows), Frobenius norm, per configuration: ``[K]``."""
    A = check_configurations(X, system.d)
    r = _residuals(system.kind, system.model.astype(jnp.float64), _padded(A), system.alpha, system.beta)
    return np.asarray(r)[:A.shape[0]]


# ------------------------------------------------------------------ tangent spaces, Newton

def tangent_basis(X: jax.Array) -> jax.Array:
    """Orthonormal basis of ``x_i^⊥`` for every token: ``[n, d] -> [n, d, d−1]``.

    The QR factorisation of ``[x_i | I]`` puts ``±x_i`` in its first column; the others span its
    orthogonal complement.
    """
    d = X.shape[-1]

    def one(x):
        q, _ = jnp.linalg.qr(jnp.concatenate([x[:, None], jnp.eye(d, dtype=X.dtype)], axis=1))
        return q[:, 1:]

    return jax.vmap(one)(X)


@dataclasses.dataclass
class Refined:
    """Result of :func:`refine`."""

    X: np.ndarray  # [n, d]
    residual: float
    steps: int
    converged: bool
    method: str  # 'newton', or 'newton+levenberg-marquardt' where Newton stalled


def refine(system: System, X0, *, tol: float = 1e-12, max_steps: int = 50) -> Refined:
    """Newton's method (optimistix ``Newton`` with lineax's SVD) for an equilibrium near ``X0: [n, d]``,
    falling back to optimistix's Levenberg-Marquardt where Newton stalls (a continuum of equilibria).

    Unknowns are tangent coordinates ``c: [n (d−1)]`` with ``X(c) = N(X0 + B c)``; equations are
    the tangent components ``Bᵀ(map(X) − X)`` (or ``Bᵀ f(X)``) — as many as unknowns, and zero
    only at an equilibrium near ``X0`` (two unit vectors whose difference is along ``x0_i`` are
    equal unless they are reflections of each other).
    """
    import lineax as lx
    import optimistix as optx

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
        r = _defect(system.kind, model, coords(c), system.alpha, system.beta)
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


# ------------------------------------------------------------------ linearisation

@functools.partial(jax.jit, static_argnums=(0,))
def _jacobians(kind, model, Xs, alpha, beta):
    def one(X):
        n, d = X.shape
        J = jax.jacfwd(lambda Y: _rhs(kind, model, Y, alpha, beta))(X)  # [n, d, n, d]
        B = tangent_basis(X)
        Jint = jnp.einsum("ida,idje,jeb->iajb", B, J, B).reshape(n * (d - 1), n * (d - 1))
        r = jnp.linalg.norm(_defect(kind, model, X, alpha, beta))
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


def linearise(system: System, X, *, residual_tol: float = 1e-8, margin: float = 1e-9,
              chunk: int = 1024) -> Linearisation:
    """Jacobians (ambient and intrinsic) at equilibria ``X: [K, n, d]`` and their stability.

    A map is ``stable`` when the spectral radius of the intrinsic Jacobian is below ``1 − margin``,
    ``unstable`` above ``1 + margin``; a flow when its largest real part is below ``−margin`` /
    above ``margin``; ``marginal`` in between (linearisation cannot decide).
    Refused with one line when a configuration is off the sphere, not finite, or not an equilibrium
    (residual above ``residual_tol``: refine it first with :func:`refine`). ``chunk`` configurations
    are differentiated per compiled call.
    """
    A = check_configurations(X, system.d)
    model = system.model.astype(jnp.float64)
    parts = []
    for a in range(0, A.shape[0], chunk):  # bounded memory: K Jacobians of [n d, n d] each
        B = A[a:a + chunk]
        out = _jacobians(system.kind, model, _padded(B), system.alpha, system.beta)
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


# ------------------------------------------------------------------ closed forms

def consensus_eigenvalues(eigvals, k: int, n: int, *, alpha: float | None = None) -> np.ndarray:
    """Intrinsic Jacobian eigenvalues at consensus on the real eigenvector ``v_k`` (closed form).

    Map (``alpha`` given): ``1/(1 + αλ_k)`` × ``(n−1)(d−1)`` and ``(1 + αλ_m)/(1 + αλ_k)``, ``m ≠ k``.
    Flow (``alpha=None``): ``−λ_k`` × ``(n−1)(d−1)`` and ``λ_m − λ_k``. Returns ``[n (d−1)]`` complex.
    """
    lam = np.asarray(eigvals, complex)
    lk = lam[k]
    others = np.delete(lam, k)
    mult = (n - 1) * (lam.shape[0] - 1)
    if alpha is None:
        return np.concatenate([np.full(mult, -lk), others - lk])
    return np.concatenate([np.full(mult, 1.0 / (1 + alpha * lk)), (1 + alpha * others) / (1 + alpha * lk)])


def consensus_step_bound(eigvals) -> float:
    """Largest step for which the principal consensus of a map is stable: ``2/(|λ_d| − λ_1)`` when the
    most negative eigenvalue has ``|λ_d| > λ_1`` (real spectrum), else ``inf``."""
    lam = np.sort(np.asarray(eigvals).real)
    l1, ld = lam[-1], lam[0]
    return float(2.0 / (abs(ld) - l1)) if -ld > l1 else math.inf


@dataclasses.dataclass
class SingleHeadStability:
    """The single-head closed form at a consensus or bipartite consensus (see the module docstring)."""

    k: int
    p: int  # tokens at +v_k
    q: int  # tokens at -v_k
    w: float  # β s vᵀ Qᵀ K v
    c_plus: float
    c_minus: float
    fixed_point: bool  # maps: ρ_± > 0 (otherwise not an equilibrium); flows: always
    within_plus: bool  # the group at +v_k is stable against perturbations summing to zero in it
    within_minus: bool
    group_modes: bool  # every 2x2 (or 1x1) group-constant block is stable
    eigenvalues: np.ndarray  # [n (d-1)] complex, the closed-form intrinsic spectrum

    @property
    def stable(self) -> bool:
        return self.fixed_point and self.within_plus and self.within_minus and self.group_modes


def single_head_conditions(system: System, k: int, signs: Sequence[int], *, strict: float = 0.0) -> SingleHeadStability:
    """Evaluate the single-head stability conditions at ``x_i = signs[i] v_k`` (``F v_k = λ_k v_k``)."""
    model = system.model
    if model.n_heads != 1:
        raise ConfigError(f"the analytic conditions are for one head; this model has {model.n_heads}")
    kernel = system.kind.attention
    if kernel not in ("softmax", "uniform") or getattr(system.kind, "biases", False):
        raise ConfigError("the analytic conditions need softmax or uniform attention without biases")
    F = system.layer_matrix()
    lam, vec = eig_sorted(F)
    if abs(lam[k].imag) > 1e-10 * max(np.abs(lam).max(), 1e-300):
        raise ConfigError(f"eigenvalue {k} of F is complex: no real consensus direction")
    v = vec[:, k].real / np.linalg.norm(vec[:, k].real)
    s = np.asarray(signs)
    if s[0] < 0:
        s = -s  # the antipodal equilibrium has the same stability
    d = F.shape[0]
    p, q = int(np.sum(s > 0)), int(np.sum(s < 0))
    g = model.schedule[0]
    if kernel == "uniform":
        w = 0.0
    else:
        Q = np.asarray(model.layers.q[g, 0], np.float64)
        K = np.asarray(model.layers.k[g, 0], np.float64)
        w = float(system.beta * float(model.layers.scale[g]) * (Q @ v) @ (K @ v))
    lk = lam[k].real
    others = np.delete(lam, k)
    ew, emw = math.exp(w), math.exp(-w)
    Zp, Zm = p * ew + q * emw, p * emw + q * ew
    cp = (p * ew - q * emw) / Zp
    cm = (p * emw - q * ew) / Zm if q else 0.0
    Ahat = np.array([[p * ew / Zp, q * emw / Zp], [p * emw / Zm if q else 0.0, q * ew / Zm if q else 0.0]])
    eig: list = []
    if system.discrete:
        a = system.alpha
        rp, rm = 1 + a * lk * cp, 1 - a * lk * cm
        fixed = rp > 0 and (q == 0 or rm > 0)
        rp_, rm_ = abs(rp), abs(rm) if q else 1.0
        eig += [1 / rp_] * ((p - 1) * (d - 1)) + [1 / rm_] * (max(q - 1, 0) * (d - 1))
        within_p = p < 2 or rp_ > 1 + strict
        within_m = q < 2 or rm_ > 1 + strict
        ok = True
        for lm in others:
            if q == 0:
                mu = np.array([(1 + a * lm) / rp_])
            else:
                M = np.diag([1 / rp_, 1 / rm_]) @ (np.eye(2) + a * lm * Ahat)
                mu = _eig2(M)
            eig += list(mu)
            ok &= bool(np.all(np.abs(mu) < 1 - strict))
    else:
        fixed = True
        gp, gm = -lk * cp, lk * cm
        eig += [gp] * ((p - 1) * (d - 1)) + [gm] * (max(q - 1, 0) * (d - 1))
        within_p = p < 2 or gp < -strict
        within_m = q < 2 or gm < -strict
        ok = True
        for lm in others:
            mu = np.array([lm - lk]) if q == 0 else _eig2(np.diag([gp, gm]) + lm * Ahat)
            eig += list(mu)
            ok &= bool(np.all(mu.real < -strict))
    return SingleHeadStability(k=k, p=p, q=q, w=w, c_plus=float(cp), c_minus=float(cm), fixed_point=bool(fixed),
                               within_plus=bool(within_p), within_minus=bool(within_m), group_modes=bool(ok),
                               eigenvalues=np.asarray(eig, complex))


def _eig2(M: np.ndarray) -> np.ndarray:
    """Eigenvalues of a 2×2 matrix from its trace and determinant (complex where needed)."""
    tr = M[0, 0] + M[1, 1]
    det = M[0, 0] * M[1, 1] - M[0, 1] * M[1, 0]
    disc = np.sqrt(complex(tr * tr / 4 - det))
    return np.array([tr / 2 + disc, tr / 2 - disc])


# ------------------------------------------------------------------ attention rank

def attention_rank(system: System, X, *, rtol: float = 1e-8) -> np.ndarray:
    """Numerical rank of every head's attention matrix at ``X: [n, d]`` (singular values above
    ``rtol`` times the largest): ``[H]`` ints. 1 at consensus, 2 at bipartite consensus."""
    A = check_configurations(X, system.d)[0]
    lw = system.model.astype(jnp.float64).layers.take(system.model.schedule[0])
    P = np.asarray(probabilities(jnp.asarray(A), lw, system.beta, biases=system.kind.biases,
                                 kernel=system.kind.attention))
    return np.asarray(numerical_rank(jnp.asarray(P), rtol))


# ------------------------------------------------------------------ where the dynamics ends

@dataclasses.dataclass
class Terminal:
    """What one end state is (see :func:`classify`)."""

    label: str  # e.g. 'consensus +v1', 'bipartite v2 3|2', 'clustering 3', 'polygonal', 'not converged'
    kind: str  # 'consensus' | 'bipartite' | 'clustering' | 'polygonal' | 'not converged'
    k: int  # eigen-index (1-based) for consensus / bipartite, else 0
    split: tuple  # (tokens at +v_k, tokens at -v_k) for consensus / bipartite
    clusters: int
    residual: float

    @property
    def group(self) -> str:
        """The label up to the global flip X -> −X (one attractor per antipodal pair)."""
        if self.kind == "consensus":
            return f"consensus v{self.k}"
        if self.kind == "bipartite":
            return f"bipartite v{self.k} {max(self.split)}|{min(self.split)}"
        return self.label


def _clusters(X: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Greedy clustering of the rows of ``X`` within ``tol``: (centres [m, d], assignment [n])."""
    centres: list = []
    assign = np.zeros(X.shape[0], np.int64)
    for i, x in enumerate(X):
        for c, y in enumerate(centres):
            if np.linalg.norm(x - y) < tol:
                assign[i] = c
                break
        else:
            centres.append(x)
            assign[i] = len(centres) - 1
    return np.asarray(centres), assign


@functools.partial(jax.jit, static_argnums=(0,))
def _updates(kind, model, Xs, beta):
    lw = model.layers.take(model.schedule[0])

    def one(X):
        from jaxattn.model.attention import attend

        return jnp.linalg.norm(attend(X, lw, beta, biases=kind.biases, kernel=kind.attention), axis=-1).max()

    return jax.vmap(one)(Xs)


def classify(system: System, X, *, tol: float = 1e-7, cluster_tol: float = 1e-4, align_tol: float = 1e-4,
             residual_tol: float | None = None) -> list[Terminal]:
    """Label end states ``X: [K, n, d]`` (see :class:`Terminal`).

    Not converged: residual above ``residual_tol`` (default ``tol``). Tokens closer than
    ``cluster_tol`` share a cluster; a cluster within ``align_tol`` of ``±v_k`` sits at the
    eigenvector (real eigenvectors of F, ``k`` 1-based, largest real part first). Polygonal: the
    update ``Σ_j a_ij F x_j`` is below ``tol`` for every token.
    """
    A = check_configurations(X, system.d, sphere_tol=1e-6)
    model = system.model.astype(jnp.float64)
    r = residual(system, A / np.linalg.norm(A, axis=-1, keepdims=True))
    upd = np.asarray(_updates(system.kind, model, _padded(A), system.beta))[:A.shape[0]]
    lam, vec = eig_sorted(system.layer_matrix())
    real = np.abs(lam.imag) <= 1e-10 * max(np.abs(lam).max(), 1e-300)
    rtol = tol if residual_tol is None else residual_tol
    out = []
    for X1, r1, u1 in zip(A, r, upd, strict=True):
        if not r1 <= rtol:
            out.append(Terminal("not converged", "not converged", 0, (), 0, float(r1)))
            continue
        C, assign = _clusters(X1, cluster_tol)
        m = C.shape[0]
        found: tuple[int, int, int] | None = None
        for k in np.flatnonzero(real):
            v = vec[:, k].real / np.linalg.norm(vec[:, k].real)
            dots = C @ v
            if np.all(np.abs(np.abs(dots) - 1) < align_tol):
                s = np.sign(dots)[assign]
                found = (int(k) + 1, int(np.sum(s > 0)), int(np.sum(s < 0)))
                break
        if found is not None:
            kk, p, q = found
            if q == 0 or p == 0:
                out.append(Terminal(f"consensus {'+' if p else '-'}v{kk}", "consensus", kk, (p, q), m, float(r1)))
            else:
                out.append(Terminal(f"bipartite v{kk} {p}|{q}", "bipartite", kk, (p, q), m, float(r1)))
        elif u1 < tol:
            out.append(Terminal("polygonal", "polygonal", 0, (), m, float(r1)))
        else:
            out.append(Terminal(f"clustering {m}", "clustering", 0, (), m, float(r1)))
    return out


def _silent(t, X, ctx=None):
    return jnp.zeros((), X.dtype)


def settle(system: System, X0, *, steps: int = 500, t1: float = 100.0, batch_size: int = 64,
           rtol: float = 1e-10, atol: float = 1e-12) -> np.ndarray:
    """End states ``[B, n, d]`` (float64) after ``steps`` maps or at time ``t1`` of the flow.

    ``batch_size`` is the compiled width: a condition's end state does not depend on how the batch
    is split into calls.
    """
    from jaxattn.dynamics.continuous import solve
    from jaxattn.dynamics.discrete import simulate

    X0 = jnp.asarray(X0, jnp.float64)
    if isinstance(system.kind, Dynamics):
        sim = simulate(system.model, X0, int(steps), dynamics=system.kind, alpha=system.alpha, beta=system.beta,
                       save=Save(every="last", observe=_silent), batch=Batch(size=batch_size, path="plain"),
                       dtype=jnp.float64)
        return np.asarray(sim.final)
    assert isinstance(system.kind, Flow)
    sol = solve(system.model, X0, float(t1), flow=system.kind, beta=system.beta,
                save=Save(ts=np.asarray([float(t1)]), observe=_silent), batch=Batch(size=batch_size),
                rtol=rtol, atol=atol, dtype=jnp.float64, max_steps=200_000)
    final = np.array(sol.final)
    final[np.asarray(sol.result) != 0] = np.nan  # a failed solve is reported as not converged
    return final


@dataclasses.dataclass
class Basins:
    """Result of :func:`basins`."""

    terminals: list  # [num] Terminal
    table: list  # rows: group, count, fraction, ci_low, ci_high (most frequent first)
    num: int


def basins(system: System, num: int, n: int, key, *, chunk: int = 256, steps: int = 500, t1: float = 100.0,
           batch_size: int = 64, tol: float = 1e-7, progress=None, **classify_kw) -> Basins:
    """Run ``num`` random initial conditions (uniform on the sphere, condition ``i`` from
    ``fold_in(key, i)``) to their end, ``chunk`` at a time, and count where they end.

    The counts do not depend on ``chunk``: every condition is drawn and run the same way whatever
    call it falls in. Each row of the table gives the basin fraction with its Wilson 95% interval.
    """
    from jaxattn.model.sampling import init_tokens

    for name, v in (("num", num), ("n", n), ("chunk", chunk), ("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    terms: list = []
    for start in range(0, num, chunk):
        b = min(chunk, num - start)
        X0 = init_tokens(key, b, n, system.d, start=start, dtype=jnp.float64)
        final = settle(system, X0, steps=steps, t1=t1, batch_size=batch_size)
        ok = np.all(np.isfinite(final), axis=(1, 2))
        safe = np.where(ok[:, None, None], final, np.asarray(X0))
        tm = classify(system, safe / np.linalg.norm(safe, axis=-1, keepdims=True), tol=tol, **classify_kw)
        for i in np.flatnonzero(~ok):
            tm[i] = Terminal("not converged", "not converged", 0, (), 0, math.inf)
        terms += tm
        if progress:
            progress(f"{start + b}/{num} initial conditions")
    counts: dict = {}
    for t in terms:
        counts[t.group] = counts.get(t.group, 0) + 1
    table = []
    for g, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lo, hi = wilson(c, num)
        table.append({"end": g, "count": c, "fraction": c / num, "ci_low": lo, "ci_high": hi})
    return Basins(terminals=terms, table=table, num=num)
