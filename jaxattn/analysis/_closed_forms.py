"""Closed forms of the linearisation at consensus and bipartite consensus (the test oracle of
:func:`jaxattn.analysis._linearisation.linearise`; derivations in :mod:`jaxattn.analysis.stability`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike, Complex, Int, Shaped

from jaxattn.analysis._equilibria import System
from jaxattn.analysis.spectral import eig_sorted
from jaxattn.errors import ConfigError


def consensus_eigenvalues(eigvals: Shaped[ArrayLike, " d"], k: int | np.integer, n: int, *,
                          alpha: float | None = None) -> Complex[np.ndarray, " m"]:
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


def consensus_step_bound(eigvals: Shaped[ArrayLike, " d"]) -> float:
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


def single_head_conditions(system: System, k: int, signs: Sequence[int] | Int[np.ndarray, " n"], *,
                           strict: float = 0.0) -> SingleHeadStability:
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

