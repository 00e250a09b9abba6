"""The power-method metrics of a model, layer by layer (eqs. 4–5 of the power-method paper): how far the
tokens tilt towards the principal eigenvector of every layer matrix ``F = Σ_h O_h V_h``, against the baselines
over all its eigendirections — ``layers.csv`` of ``jaxattn analyze``, for any model and initial conditions."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from jaxattn.analysis.observables import alignment_observables, alignment_tables
from jaxattn.analysis.spectral import Spectrum, cumulative_products, layer_matrices, spectrum
from jaxattn.dynamics.discrete import D1, Dynamics, simulate
from jaxattn.dynamics.options import Batch, Save
from jaxattn.model.params import Model


def layer_table(obs: dict, spec: Spectrum, schedule, steps: int, run: str) -> list[dict]:
    """Per-step rows (eqs. 4–5): the layer of step k maps state k to k+1."""
    g = lambda name: obs[f"observables.{name}"].astype(np.float64)
    r1b, r1a = g("rho1_before"), g("rho1_after")
    r2b, r2a = g("rho2_before"), g("rho2_after")
    rbb, rba = g("rhobar_before"), g("rhobar_after")
    phi, diam, cosc = g("rho_phi"), g("diameter"), g("cos_consensus")
    rank = g("attn_rank") if "observables.attn_rank" in obs else None
    rows = []
    for k in range(steps):
        s = schedule[k % len(schedule)]
        d1 = r1a[:, k + 1] - r1b[:, k]
        d2 = r2a[:, k + 1] - r2b[:, k]
        db = rba[:, k + 1] - rbb[:, k]
        lam = spec.eigvals[s, 0]
        row: dict[str, Any] = {
            "run": run, "step": k, "weight_set": int(s), "case": int(spec.case[s]),
            "lambda1_re": float(lam.real), "lambda1_im": float(lam.imag), "gap": float(spec.gap[s]),
            "rho1": float(r1a[:, k + 1].mean()), "rho1_std": float(r1a[:, k + 1].std()),
            "drho1": float(d1.mean()), "drho1_std": float(d1.std()), "P1": float((d1 > 0).mean()),
            "rho2": float(r2a[:, k + 1].mean()), "drho2": float(d2.mean()), "P2": float((d2 > 0).mean()),
            "rhobar": float(rba[:, k + 1].mean()), "rhobar_std": float(rba[:, k + 1].std()),
            "drhobar": float(db.mean()), "drhobar_std": float(db.std()),
            # the probability that the direction-averaged ρ̄ grows: not the paper's P̄ (the mean over the
            # eigendirections of their own probabilities P_k, jaxattn.analysis.directions), hence its own name
            "P_rhobar": float((db > 0).mean()),
            "rho_phi": float(phi[:, k + 1].mean()),
            "diameter": float(diam[:, k + 1].mean()), "cos_consensus": float(cosc[:, k + 1].mean()),
            "attn_rank": float(rank[:, k].mean()) if rank is not None else float("nan"),
        }
        row["holds"] = bool(row["drho1"] > 0 and row["P1"] > 0.5 and row["drho1"] > row["drhobar"])
        rows.append(row)
    return rows


def alignment(model: Model, X0: Float[ArrayLike, "B n d"], steps: int | None = None, *, dynamics: Dynamics = D1,
              alpha=1.0, beta=1.0, order: str = "real", batch: Batch = Batch(), dtype=None,
              run: str = "main") -> list[dict]:
    """Per-layer power-method metrics (ρ1, Δρ1, P1 against ρ̄, Δρ̄ and the probability ``P_rhobar`` that ρ̄ grows,
    the 2-D subspace, Φ's eigenvector, consensus) of ``model`` from the initial conditions ``X0: [B, n, d]``.

    Computed as observables inside the jitted simulation: no trajectory is kept (``batch``: how the
    simulation runs, as in :func:`jaxattn.simulate`). Returns one row (dict) per step, as in ``layers.csv``
    of ``jaxattn analyze`` (``run`` names the run in the rows).

    Examples:
        >>> import jax, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 16, 5, 8, kind="gaussian")
        >>> rows = ja.alignment(model, X0)
        >>> len(rows), [r["step"] for r in rows]
        (3, [0, 1, 2])
        >>> {"rho1", "drho1", "P1", "rhobar", "drhobar", "P_rhobar", "holds"} <= set(rows[0])
        True
        >>> all(0.0 <= r["rho1"] <= 1.0 and 0.0 <= r["P1"] <= 1.0 for r in rows)
        True
    """
    steps = model.depth if steps is None else steps
    spec = spectrum(model, order=order, alpha=alpha)
    Fs = layer_matrices(model)[[model.schedule[k % model.depth] for k in range(steps)]]
    _, u1 = cumulative_products(Fs, order, alpha)
    X0 = jnp.asarray(X0)
    tab = alignment_tables(spec, model.schedule, steps, u1, beta, X0.dtype if dtype is None else dtype)
    res = simulate(model, X0, steps, dynamics=dynamics, alpha=alpha, beta=beta,
                   save=Save(observe=alignment_observables, aux=tab), batch=batch,
                   dtype=dtype)
    obs = {f"observables.{k}": np.asarray(v) for k, v in res.observables.items()}
    return layer_table(obs, spec, model.schedule, steps, run)


__all__ = ["alignment", "layer_table"]
