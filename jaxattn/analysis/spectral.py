"""Spectral analysis of the layer matrices ``F = Σ_h O_h V_h``.

Eigen-decompositions of non-symmetric matrices run on the host in float64 with LAPACK (through
NumPy, batched over layers), independently of whether JAX has float64 enabled, and outside the
jitted simulation: their results enter the simulation as plain arrays.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from jaxtyping import ArrayLike, Float, Inexact

from jaxattn.errors import ConfigError, real
from jaxattn.model import display
from jaxattn.model.params import Model, repeat_kv

ORDERS = ("real", "modulus", "step")


def layer_matrices(model: Model) -> Float[np.ndarray, "G d d"]:
    """``F[g] = Σ_h O_h V_{g(h)}`` of every weight set, ``[G, d, d]`` float64 (shared models: once);
    with grouped-query attention ``V_{g(h)}`` is the value head query head ``h`` shares.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> F = ja.layer_matrices(model)
        >>> F.shape, F.dtype
        ((3, 8, 8), dtype('float64'))
        >>> lw = model.layers
        >>> bool(np.allclose(F[1], lw.o[1, 0] @ lw.v[1, 0] + lw.o[1, 1] @ lw.v[1, 1], atol=1e-6))
        True
    """
    o = np.asarray(model.layers.o, np.float64)
    v = np.asarray(repeat_kv(model.layers.replace(v=np.asarray(model.layers.v, np.float64))).v)  # GQA: V_{g(h)}
    return np.einsum("ghdk,ghke->gde", o, v)


def _order_keys(lam: np.ndarray, order: str, alpha: float) -> np.ndarray:
    if order == "real":
        return lam.real
    if order == "modulus":
        return np.abs(lam)
    if order == "step":
        return np.abs(1.0 + alpha * lam)
    raise ConfigError(f"order must be one of {ORDERS}, got {order!r}")


def _canonical_sign(v: np.ndarray) -> np.ndarray:
    """Fix the phase of each column: its largest-modulus entry becomes real positive."""
    idx = np.argmax(np.abs(v), axis=-2)
    piv = np.take_along_axis(v, idx[..., None, :], axis=-2)
    return v * (np.abs(piv) / np.where(piv == 0, 1, piv))


def eig_sorted(F: Float[ArrayLike, "*G d d"], order: str = "real",
               alpha: float = 1.0) -> tuple[Inexact[np.ndarray, "*G d"], Inexact[np.ndarray, "*G d d"]]:
    """Eigenpairs of ``F: [..., d, d]`` sorted by ``order`` (descending), unit eigenvectors: complex arrays where
    any eigenvalue is complex, real ones otherwise (NumPy's ``eig``).

    Ties in the key (a conjugate pair) put the eigenvalue with positive imaginary part first,
    so a complex pair is always adjacent. Returns ``(lam [..., d], vecs [..., d, d])``.
    """
    alpha = real("alpha", alpha)
    if order not in ORDERS:
        raise ConfigError(f"order must be one of {ORDERS}, got {order!r}")
    F = np.asarray(F, np.float64)
    lam, vec = np.linalg.eig(F)
    key = _order_keys(lam, order, alpha)
    # round the key so that the two members of a conjugate pair tie exactly
    scale = np.maximum(np.abs(key).max(axis=-1, keepdims=True), 1e-300)
    rk = np.round(key / scale, 12)
    idx = np.lexsort((-lam.imag, -rk), axis=-1)
    lam = np.take_along_axis(lam, idx, axis=-1)
    vec = np.take_along_axis(vec, idx[..., None, :], axis=-1)
    vec = vec / np.linalg.norm(vec, axis=-2, keepdims=True)
    return lam, _canonical_sign(vec)


def _orthonormal(cols: np.ndarray) -> np.ndarray:
    q, _ = np.linalg.qr(cols)
    return q


@dataclasses.dataclass
class Spectrum:
    """Spectral facts of every weight set (leading axis ``G``). See :func:`spectrum`. A terminal or a notebook shows
    a summary (the cases, λ1 and the gap of the first sets, the shapes) rather than the arrays."""

    F: np.ndarray  # [G, d, d]
    eigvals: np.ndarray  # [G, d] complex, sorted
    eigvecs: np.ndarray  # [G, d, d] complex, columns, unit norm
    case: np.ndarray  # [G] 1 real dominant, 2 complex dominant pair, 3 near-degenerate
    gap: np.ndarray  # [G] Re λ1 − Re λ2 (case 2: Re λ1 − Re λ3)
    collinearity: np.ndarray  # [G] |<v1, v2>|
    v1: np.ndarray  # [G, d] principal eigenvector (complex in case 2)
    subspace: np.ndarray  # [G, d, 2] orthonormal basis of the relevant 2-D subspace
    directions: np.ndarray  # [G, d, d] real orthonormalised basis of every eigendirection
    direction_group: np.ndarray  # [G, d] int: which eigendirection each column belongs to
    n_directions: np.ndarray  # [G] number of eigendirections (a complex pair counts once)
    order: str = "real"

    @property
    def lambda1(self) -> np.ndarray:
        return self.eigvals[:, 0]

    def _summary(self) -> display.Summary:
        G, d = self.eigvals.shape
        cases = {1: "real dominant", 2: "complex dominant pair", 3: "near-degenerate"}
        counts = [f"{int(np.sum(self.case == c))} {name}" for c, name in cases.items() if np.any(self.case == c)]
        lam = self.lambda1
        shown = lambda x: f"{x.real:.4g}" + (f"{x.imag:+.4g}i" if np.iscomplexobj(lam) and x.imag else "")
        values = ", ".join(shown(x) for x in lam[:6]) + (", ..." if G > 6 else "")
        return display.Summary("jaxattn.Spectrum", [
            ("dimensions", f"weight sets: {G}, d: {d}"),
            ("order", self.order),
            ("cases", ", ".join(counts)),
            ("lambda1", values),
            ("gap", ", ".join(f"{g:.4g}" for g in self.gap[:6]) + (", ..." if G > 6 else "")),
            ("directions", ", ".join(str(int(k)) for k in self.n_directions[:6]) + (", ..." if G > 6 else "")),
            ("F", display.array_line(self.F)),
            ("eigvecs", display.array_line(self.eigvecs)),
            ("non-finite", display.count_line(int(np.sum(~np.isfinite(self.eigvals).all(axis=1))), G,
                                              "weight sets"))])

    def __repr__(self) -> str:
        return display.text(display.safe(self._summary, lambda: display.fields_repr(self, ("order", "case", "gap"))))

    def _repr_html_(self) -> str:
        return display.as_html(display.safe(self._summary,
                                            lambda: display.fields_repr(self, ("order", "case", "gap"))))


def _directions(lam: np.ndarray, vec: np.ndarray, imag_tol: float):
    """Real bases of every eigendirection: a real eigenvector, or a complex pair's 2-D subspace."""
    d = lam.shape[0]
    cols, groups = [], []
    j = g = 0
    while j < d:
        if abs(lam[j].imag) > imag_tol and j + 1 < d:
            pair = _orthonormal(np.stack([vec[:, j].real, vec[:, j].imag], axis=1))
            cols += [pair[:, 0], pair[:, 1]]
            groups += [g, g]
            j += 2
        else:
            r = vec[:, j].real
            cols.append(r / np.linalg.norm(r))
            groups.append(g)
            j += 1
        g += 1
    return np.stack(cols, axis=1), np.asarray(groups), g


def _as_matrices(x) -> np.ndarray:
    """Layer matrices as float64; a model name or path is refused with the way to load it (this layer does no
    I/O: loading lives in :mod:`jaxattn.io`)."""
    if isinstance(x, (str, bytes, os.PathLike)):
        raise ConfigError(f"spectrum takes a Model or layer matrices [G, d, d], not the name {str(x)!r}; "
                          f"load it first: ja.spectrum(ja.load_any({str(x)!r}))")
    try:
        return np.asarray(x, np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"spectrum takes a Model or layer matrices [G, d, d], got {type(x).__name__}") from None


def spectrum(model_or_F, *, order: str = "real", alpha: float = 1.0, gap_tol: float = 1e-3,
             collinear_tol: float = 0.9, imag_tol: float = 1e-9) -> Spectrum:
    """Eigen-decomposition of every layer matrix with the case analysis (1 real dominant, 2 complex pair,
    3 no strict dominance).

    Args:
        model_or_F: a :class:`Model` or stacked matrices ``[G, d, d]`` (or one ``[d, d]``).
        order: principal = largest real part (``'real'``, the default), modulus, or ``|1 + αλ|``.
        gap_tol: case 3 when ``Re λ1 − Re λ2 < gap_tol · max|λ|``.
        collinear_tol: case 3 when ``|<v1, v2>| > collinear_tol``.
        imag_tol: an eigenvalue with ``|Im λ| <= imag_tol · max|λ|`` counts as real.

    Examples:
        >>> import numpy as np, jaxattn as ja
        >>> sp = ja.spectrum(np.diag([3.0, 1.0, -5.0]))          # one [d, d] matrix is G = 1
        >>> sp.case, sp.lambda1.real, sp.gap                     # case 1: a real dominant eigenvalue
        (array([1]), array([3.]), array([2.]))
        >>> np.abs(sp.v1.real)
        array([[1., 0., 0.]])
        >>> ja.spectrum(np.diag([3.0, 1.0, -5.0]), order="modulus").lambda1.real
        array([-5.])
        >>> ja.spectrum(np.array([[0.0, -1.0], [1.0, 0.0]])).case   # eigenvalues ±i: a complex pair
        array([2])
    """
    for name, v in (("alpha", alpha), ("gap_tol", gap_tol), ("collinear_tol", collinear_tol),
                    ("imag_tol", imag_tol)):
        real(name, v)
    F = layer_matrices(model_or_F) if isinstance(model_or_F, Model) else _as_matrices(model_or_F)
    if F.ndim == 2:
        F = F[None]
    if F.ndim != 3 or F.shape[1] != F.shape[2]:
        raise ConfigError(f"layer matrices must be [G, d, d], got {F.shape}")
    if not np.all(np.isfinite(F)):
        raise ConfigError("layer matrices have non-finite entries")
    lam, vec = eig_sorted(F, order, alpha)
    G, d = lam.shape
    radius = np.abs(lam).max(axis=1)
    cases, gaps, coll, v1s, subs, dirs, groups, ndirs = [], [], [], [], [], [], [], []
    for g in range(G):
        tol = imag_tol * max(radius[g], 1e-300)
        v1, v2 = vec[g, :, 0], vec[g, :, min(1, d - 1)]
        c = float(np.abs(np.vdot(v1, v2))) if d > 1 else 0.0
        if abs(lam[g, 0].imag) > tol and d > 1:
            case = 2
            gap = lam[g, 0].real - (lam[g, 2].real if d > 2 else -np.inf)
            sub = _orthonormal(np.stack([v1.real, v1.imag], axis=1))
        else:
            gap = lam[g, 0].real - lam[g, 1].real if d > 1 else np.inf
            case = 3 if (gap < gap_tol * max(radius[g], 1e-300) or c > collinear_tol) else 1
            v1 = v1.real / np.linalg.norm(v1.real)
            # span(v1, v2) (v2's real part if λ2 starts a complex pair)
            sub = _orthonormal(np.stack([v1, v2.real], axis=1)) if d > 1 else v1[:, None]
        D, grp, nd = _directions(lam[g], vec[g], tol)
        cases.append(case)
        gaps.append(gap)
        coll.append(c)
        v1s.append(v1.astype(complex))
        subs.append(sub)
        dirs.append(D)
        groups.append(grp)
        ndirs.append(nd)
    return Spectrum(F=F, eigvals=lam, eigvecs=vec, case=np.asarray(cases), gap=np.asarray(gaps, float),
                    collinearity=np.asarray(coll), v1=np.stack(v1s), subspace=np.stack(subs),
                    directions=np.stack(dirs), direction_group=np.stack(groups), n_directions=np.asarray(ndirs),
                    order=order)


def cumulative_products(Fs: Float[ArrayLike, "T d d"], order: str = "real",
                        alpha: float = 1.0) -> tuple[Float[np.ndarray, "T d d"], Inexact[np.ndarray, "T d"]]:
    """``Φ(k) = F(k) ⋯ F(1)`` for the sequence ``Fs: [T, d, d]``, renormalised at each step
    (scale does not change eigenvectors), and the principal eigenvector ``u1(k)`` of each.

    Returns ``(Phi [T, d, d], u1 [T, d] complex)``.

    Examples:
        >>> import numpy as np, jaxattn as ja
        >>> Fs = np.stack([np.diag([2.0, 1.0]), np.diag([1.0, 3.0])])
        >>> Phi, u1 = ja.analysis.spectral.cumulative_products(Fs)
        >>> Phi.shape, u1.shape
        ((2, 2, 2), (2, 2))
        >>> np.abs(u1.real)          # F(1) favours e1; F(2) F(1) = diag(2, 3) favours e2
        array([[1., 0.],
               [0., 1.]])
    """
    Fs = np.asarray(Fs, np.float64)
    phis = []
    P = np.eye(Fs.shape[-1])
    for F in Fs:
        P = F @ P
        P = P / np.linalg.norm(P)
        phis.append(P)
    Phi = np.stack(phis)
    _, vec = eig_sorted(Phi, order, alpha)
    return Phi, vec[:, :, 0]


def lyapunov_exponents(Fs: Float[ArrayLike, "T d d"], *, affine_alpha: float | None = None) -> Float[np.ndarray, " d"]:
    """Lyapunov exponents of the product ``F(T) ⋯ F(1)`` by repeated QR (Oseledets), sorted
    descending: ``(1/T) Σ_k log |diag R_k|``. With ``affine_alpha`` the factors are ``I + α F``.

    Examples:
        >>> import numpy as np, jaxattn as ja
        >>> Fs = np.stack([np.diag([2.0, 0.5])] * 10)          # the same map ten times
        >>> ja.analysis.spectral.lyapunov_exponents(Fs).round(6)                  # log 2, log 0.5
        array([ 0.693147, -0.693147])
    """
    Fs = np.asarray(Fs, np.float64)
    d = Fs.shape[-1]
    Q = np.eye(d)
    acc = np.zeros(d)
    for F in Fs:
        M = F if affine_alpha is None else np.eye(d) + affine_alpha * F
        Q, R = np.linalg.qr(M @ Q)
        acc += np.log(np.maximum(np.abs(np.diag(R)), 1e-300))
    return np.sort(acc / len(Fs))[::-1]
