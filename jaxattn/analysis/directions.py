"""Increments along every eigendirection of the layer matrices (eqs. 4–5 of the power-method paper for
each eigendirection, not only the principal one).

The paper's baselines (§3.2): ``Δρ̄`` is the mean over all eigendirections of the increment ``Δρ_k``,
and ``P̄`` the mean over all eigendirections of the probability of increment ``P_k`` — the fraction of
tokens whose correlation with direction ``k`` grows through the layer. ``P̄`` is therefore not the
probability that the direction-averaged correlation ``ρ̄`` grows (which is what the per-token
``ρ̄`` observable of :func:`jaxattn.analysis.observables.alignment_observables` gives); it needs every
token's correlation with every direction before and after the layer, so it is computed here from
trajectories, ``chunk`` initial conditions at a time (memory flat in the number of conditions).
A complex pair counts as one direction, its real 2-D subspace, as in the paper's eq. (6).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from jaxattn.analysis.spectral import spectrum
from jaxattn.dynamics.discrete import D1, Dynamics, simulate
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import ConfigError, positive_int


class DirectionIncrements(NamedTuple):
    """Per step ``k`` (the layer mapping state ``k`` to ``k+1``) and eigendirection ``j`` of that layer
    (sorted as the spectrum, principal first; NaN past the layer's number of directions)."""

    P: np.ndarray  # [T, D] fraction of tokens whose correlation with direction j grows
    drho: np.ndarray  # [T, D] mean increment of the correlation with direction j
    lam: np.ndarray  # [T, D] complex: the eigenvalue of direction j (the first of a complex pair)
    n_dirs: np.ndarray  # [T] number of eigendirections of the layer
    tokens: int  # tokens counted per step (conditions × n)


def _nothing(t, X, ctx) -> dict:
    return {}


def _correlations(X: np.ndarray, basis: np.ndarray, groups: np.ndarray, n_dirs: int) -> np.ndarray:
    """``ρ_j(x) = ||U_jᵀ x|| / ||x||`` for every token of ``X: [..., d]`` and direction ``j``: ``[..., n_dirs]``."""
    p = (X @ basis) ** 2  # [..., d] squared coordinate along every basis column
    onehot = np.zeros((basis.shape[1], n_dirs))
    onehot[np.arange(basis.shape[1]), groups] = 1.0
    return np.sqrt(p @ onehot) / np.linalg.norm(X, axis=-1, keepdims=True)


def direction_increments(model, X0: Float[ArrayLike, "B n d"], steps: int | None = None, *, dynamics: Dynamics = D1,
                         alpha: float = 1.0, beta: float = 1.0, order: str = "real", chunk: int = 64, dtype=None,
                         batch: Batch = Batch()) -> DirectionIncrements:
    """``P_k`` and ``Δρ_k`` of every eigendirection of every layer, from the initial conditions ``X0: [B, n, d]``
    run through ``steps`` steps (default: the depth) of ``dynamics``.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> from jaxattn.analysis.directions import direction_increments
        >>> model = ja.random_model(jax.random.key(0), d=6, heads=2, depth=2, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 8, 4, 6)
        >>> inc = direction_increments(model, X0)
        >>> inc.P.shape, inc.tokens
        ((2, 6), 32)
        >>> bool(np.all((inc.P[~np.isnan(inc.P)] >= 0) & (inc.P[~np.isnan(inc.P)] <= 1)))
        True
    """
    positive_int("chunk", chunk)
    X0 = np.asarray(X0)
    if X0.ndim != 3 or X0.shape[-1] != model.d_model:
        raise ConfigError(f"X0 must be [B, n, {model.d_model}], got shape {X0.shape}")
    steps = model.depth if steps is None else positive_int("steps", steps)
    spec = spectrum(model, order=order, alpha=alpha)
    d = model.d_model
    sets = [model.schedule[k % model.depth] for k in range(steps)]
    up = np.zeros((steps, d))
    inc = np.zeros((steps, d))
    count = 0
    for start in range(0, X0.shape[0], chunk):
        Xc = jnp.asarray(X0[start:start + chunk])
        res = simulate(model, Xc, steps, dynamics=dynamics, alpha=alpha, beta=beta,
                       save=Save(trajectory=True, observe=_nothing), batch=batch, dtype=dtype)
        traj = np.asarray(jax.device_get(res.trajectory), np.float64)  # [b, steps + 1, n, d]
        for k, g in enumerate(sets):
            nd = int(spec.n_directions[g])
            before = _correlations(traj[:, k], spec.directions[g], spec.direction_group[g], nd)
            after = _correlations(traj[:, k + 1], spec.directions[g], spec.direction_group[g], nd)
            delta = (after - before).reshape(-1, nd)
            up[k, :nd] += (delta > 0).sum(axis=0)
            inc[k, :nd] += delta.sum(axis=0)
        count += traj.shape[0] * traj.shape[2]
    nds = np.asarray([int(spec.n_directions[g]) for g in sets])
    P = np.full((steps, d), np.nan)
    drho = np.full((steps, d), np.nan)
    lam = np.full((steps, d), np.nan, complex)
    for k, g in enumerate(sets):
        nd = nds[k]
        P[k, :nd] = up[k, :nd] / count
        drho[k, :nd] = inc[k, :nd] / count
        first = np.flatnonzero(np.diff(np.concatenate([[-1], spec.direction_group[g]])))  # first column of each
        lam[k, :nd] = spec.eigvals[g][first]
    return DirectionIncrements(P, drho, lam, nds, count)


def direction_rows(inc: DirectionIncrements) -> list[dict]:
    """One row per step: the principal direction's ``P_1``, ``Δρ_1`` against the paper's baselines ``P̄`` (mean of
    ``P_k`` over every eigendirection) and ``Δρ̄``, and where ``P_1`` ranks among the ``P_k``."""
    rows = []
    for k in range(inc.P.shape[0]):
        nd = int(inc.n_dirs[k])
        P, dr = inc.P[k, :nd], inc.drho[k, :nd]
        rows.append({"step": k, "directions": nd, "tokens": inc.tokens, "P1": float(P[0]),
                     "Pbar": float(P.mean()), "P_median": float(np.median(P)),
                     "P_above_half": float(np.mean(P > 0.5)), "P1_rank": int(np.sum(P[0] < P) + 1),
                     "drho1": float(dr[0]), "drhobar": float(dr.mean()),
                     "lambda1_re": float(inc.lam[k, 0].real), "lambda1_im": float(inc.lam[k, 0].imag)})
    return rows
