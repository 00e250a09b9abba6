"""Two statements of the power-method paper about shared-weight models, measured on synthetic ones:

* **Case 3** (§2.1.3, ALBERT-base/large): when ``λ1`` and ``λ2`` are close and ``v1``, ``v2`` nearly collinear,
  the tokens sit in ``span(v1, v2)`` long before they align with ``v1``: convergence is slow
  (``case3.csv``: ρ1 and ρ(span(v1, v2)) step by step, for such a model and for a control with the same
  ``λ1``, ``v1`` and a separated, orthogonal ``v2``);
* **Theorem 1** (§2.1.1, Supp. D.4.1): with symmetric ``F``, full attention and shared weights, the consensus at
  ``±v1`` is locally asymptotically stable and every other consensus unstable (``theorem1.csv``: the
  Jacobian of the multi-head map at every consensus ``±v_k`` against the closed form of the Oja system,
  Lemma 3), and the tokens converge to it from almost every start (``theorem1_ends.csv``), also beyond the
  theorem (causal attention, a non-symmetric ``F``).

Float64 throughout (in a scope; the caller's JAX setting is left as it was).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.alignment import alignment
from jaxattn.analysis.spectral import eig_sorted
from jaxattn.analysis.stability import System, basins, consensus_eigenvalues, eigen_equilibria, linearise
from jaxattn.dynamics.discrete import D1
from jaxattn.io.results import atomic_write_text
from jaxattn.model.params import Model
from jaxattn.model.sampling import init_tokens, random_model
from jaxattn.studies.skeleton import csv_text


def with_layer_matrix(key, F: np.ndarray, depth: int, mask: str = "full") -> Model:
    """A shared single-head model (``O = I``, Gaussian ``Q, K``) with layer matrix ``F``, applied ``depth`` times."""
    d = F.shape[0]
    m = random_model(key, d, 1, depth, unit_output=True, mask=mask, dtype=jnp.float64)
    return m.replace(layers=m.layers.replace(v=jnp.asarray(F, jnp.float64)[None, None]))


def near_degenerate(key, d: int, lam1: float = 1.0, lam2: float = 0.97, cos12: float = 0.99,
                    rest: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """``F = P diag(λ) P⁻¹`` with ``λ1 > λ2`` close, unit eigenvectors ``|<v1, v2>| = cos12`` and the other ``d − 2``
    eigenvalues uniform in ``[−rest, rest]`` along random directions; and the control with ``λ2 = rest`` and ``v2``
    orthogonal to ``v1`` (the same ``λ1``, ``v1`` and other eigenpairs). Returns ``(F, F_control)``."""
    k1, k2 = jax.random.split(key)
    Q, _ = np.linalg.qr(np.asarray(jax.random.normal(k1, (d, d), jnp.float64)))
    others = np.asarray(jax.random.uniform(k2, (d - 2,), jnp.float64, -rest, rest))
    v1, e2 = Q[:, 0], Q[:, 1]
    v2 = cos12 * v1 + np.sqrt(1 - cos12 ** 2) * e2
    P = np.column_stack([v1, v2, Q[:, 2:]])
    Pc = np.column_stack([v1, e2, Q[:, 2:]])
    F = P @ np.diag([lam1, lam2, *others]) @ np.linalg.inv(P)
    Fc = Pc @ np.diag([lam1, rest, *others]) @ np.linalg.inv(Pc)
    return F, Fc


def case3(key, num: int, n: int, d: int, depth: int, prolong: int) -> list[dict]:
    """ρ1 and ρ(2-D) step by step over ``prolong × depth`` steps of D1 (α = β = 1) for the near-degenerate model
    and its control, from the same ``num`` Gaussian initial conditions of ``n`` tokens."""
    kf, km, kx = jax.random.split(key, 3)
    F, Fc = near_degenerate(kf, d)
    X0 = init_tokens(kx, num, n, d, kind="gaussian", dtype=jnp.float64)
    rows = []
    for name, M in (("near_degenerate", F), ("control", Fc)):
        lam, vec = eig_sorted(M)
        for r in alignment(with_layer_matrix(km, M, depth), X0, prolong * depth, dtype=jnp.float64):
            rows.append({"model": name, "step": r["step"] + 1, "depth": depth, "case": r["case"],
                         "lambda1": float(lam[0].real), "lambda2": float(lam[1].real),
                         "v1_v2": float(abs(np.vdot(vec[:, 0], vec[:, 1]))), "rho1": r["rho1"], "rho2": r["rho2"],
                         "diameter": r["diameter"]})
    return rows


def theorem1(key, d: int, heads: int, n: int, num: int, steps: int) -> tuple[list[dict], list[dict]]:
    """The multi-head map (D1, α = β = 1) of a shared model with a symmetric ``F`` (eigenvalues: 1 and ``d − 1``
    uniform in ``(−0.9, 0.9)``, so no step bound applies): every consensus ``±v_k`` linearised (``jax.jacfwd``)
    next to the closed form ``1/(1 + λ_k)``, ``(1 + λ_m)/(1 + λ_k)``; and where ``num`` random starts end, for
    this model and beyond the theorem (causal attention; a non-symmetric ``F`` with the same spectrum)."""
    ks, km, kb, ka = jax.random.split(key, 4)
    spec = np.concatenate([[1.0], np.asarray(jax.random.uniform(ks, (d - 1,), jnp.float64, -0.9, 0.9))])
    sym = random_model(km, d, heads, value="symmetric", spectrum=spec, dtype=jnp.float64)
    sy = System(sym, D1, 1.0, 1.0)
    cand = eigen_equilibria(sy.layer_matrix(), n, patterns=np.ones((1, n), np.int64))
    lin = linearise(sy, cand.X)
    lam = cand.eigvals
    rows = []
    for i, k in enumerate(cand.k):
        closed = consensus_eigenvalues(lam, int(k), n, alpha=1.0)
        rows.append({"k": int(k) + 1, "lambda_k": float(lam[k].real), "status": str(lin.status[i]),
                     "radius": float(lin.growth[i]), "radius_closed_form": float(np.abs(closed).max()),
                     "heads": heads, "d": d, "n": n})
    # beyond the theorem: the same spectrum with causal attention, and a non-symmetric F
    P = np.asarray(jax.random.normal(ka, (d, d), jnp.float64))
    asym = with_layer_matrix(km, P @ np.diag(spec) @ np.linalg.inv(P), 1)
    causal = random_model(km, d, heads, value="symmetric", spectrum=spec, mask="causal", dtype=jnp.float64)
    ends = []
    for name, model in (("symmetric", sym), ("causal", causal), ("non_symmetric", asym)):
        res = basins(System(model, D1, 1.0, 1.0), num, n, kb, steps=steps)
        for r in res.table:
            ends.append({"model": name, "heads": model.n_heads, "end": r["end"], "count": r["count"], "starts": num,
                         "fraction": r["fraction"], "ci_low": r["ci_low"], "ci_high": r["ci_high"]})
    return rows, ends


def study(out: Path, num: int = 200, n: int = 10, d: int = 16, depth: int = 12, prolong: int = 40,
          heads: int = 2, theorem_d: int = 6, steps: int = 1000, seed: int = 0) -> None:
    """Write ``case3.csv``, ``theorem1.csv`` and ``theorem1_ends.csv`` into ``out``."""
    with jax.enable_x64(True):
        key = jax.random.key(seed)
        out = Path(out)
        atomic_write_text(out / "case3.csv", csv_text(case3(jax.random.fold_in(key, 1), num, n, d, depth, prolong)))
        lin, ends = theorem1(jax.random.fold_in(key, 2), theorem_d, heads, n, num, steps)
        atomic_write_text(out / "theorem1.csv", csv_text(lin))
        atomic_write_text(out / "theorem1_ends.csv", csv_text(ends))
