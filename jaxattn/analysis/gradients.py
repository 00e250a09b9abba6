"""Gradients as a research tool: which layer matters, steering by gradient, critical parameters by
Newton's method, and a whole parameter grid in one call.

Everything here differentiates the simulators themselves (:func:`jaxattn.simulate` composes with
``jax.grad``, ``jax.jvp`` and ``jax.vmap``); eigenvectors, where a measure needs them, are computed
on the host from the unperturbed weights and held fixed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxattn.analysis import metrics
from jaxattn.analysis._optim import optax_step
from jaxattn.analysis.spectral import spectrum
from jaxattn.analysis.steering import _unit, entering_states
from jaxattn.dynamics.discrete import D1, Dynamics, Simulation, simulate
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import ConfigError, real
from jaxattn.model.params import Model, validate
from jaxattn.model.precision import full_precision


def unshared(model: Model) -> Model:
    """The same model with one weight set per block (schedule ``0..L-1``), so that a gradient or a
    perturbation reaches one block alone even when blocks share their weights.

    Examples:
        >>> import jax, jaxattn as ja
        >>> m = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3)        # shared weights
        >>> m.schedule, ja.analysis.gradients.unshared(m).schedule, ja.analysis.gradients.unshared(m).layers.o.shape
        ((0, 0, 0), (0, 1, 2), (3, 2, 8, 4))
    """
    idx = np.asarray(model.schedule)
    layers = jax.tree_util.tree_map(lambda a: a[idx], model.layers)
    return model.replace(layers=layers, schedule=tuple(range(model.depth)))


def _bare(model: Model) -> Model:
    return model.replace(embeddings=None, final_ln_w=None, final_ln_b=None)


# ------------------------------------------------------------------ which layer matters
def principal_basis(model: Model, *, block: int = -1, order: str = "real",
                    alpha: float = 1.0) -> Float[np.ndarray, "d 2"]:
    """``[d, 2]``: (Re v1, Im v1) of the principal eigenvector of ``block``'s layer matrix (host, float64).

    ``||[Re v1, Im v1]ᵀ x|| / ||x||`` is ``|v1ᴴ x| / ||x||``: the power-method study's ρ1 (``Im v1 = 0``
    unless the dominant eigenvalue is a complex pair).
    """
    spec = spectrum(model, order=order, alpha=alpha)
    v = spec.v1[model.schedule[block % model.depth]]
    return np.stack([v.real, v.imag], axis=-1)


def mean_rho1(model: Model, X0: Float[ArrayLike, "B n d"], basis: Float[ArrayLike, "d r"], *, steps: int | None = None,
              dynamics: Dynamics = D1, alpha=1.0, beta=1.0, batch: Batch = Batch(), dtype=None) -> Float[Array, ""]:
    """Mean over conditions and tokens of ``||basisᵀ x|| / ||x||`` after ``steps`` blocks (default: the
    depth) from ``X0: [B, n, d]``; differentiable in the model, ``X0``, α and β (``basis`` is data)."""
    steps = model.depth if steps is None else steps
    res = simulate(model, X0, steps, dynamics=dynamics, alpha=alpha, beta=beta, save=Save(every="last"),
                   batch=batch, dtype=dtype)
    return jnp.mean(metrics.rho_subspace(res.final, jnp.asarray(basis, res.final.dtype)))


@full_precision
def layer_sensitivity(model: Model, X0: Float[ArrayLike, "B n d"], *, dynamics: Dynamics = D1, alpha=1.0, beta=1.0,
                      order: str = "real", batch: Batch = Batch(), dtype=None) -> list[dict]:
    """Which layer matters for the power-method alignment: the sensitivity of ``R`` = mean ρ1 after the
    last block (the alignment of every final token with the principal eigenvector ``v1`` of the last
    block's ``F = Σ_h O_h V_h``, as ``analyze`` measures it) to every block's weights.

    ``v1`` is computed on the host from the unperturbed weights and held fixed. One ``jax.grad`` with
    respect to every block's ``Q, K, V, O`` (blocks that share weights get one copy each, see
    :func:`unshared`) gives one row per block ``k``:

    * ``dR_dlogF``: ``d R / dε`` for ``F_k → (1 + ε) F_k`` (every ``O_h`` of block ``k`` scaled), i.e.
      ``Σ ⟨∂R/∂O_k, O_k⟩``. It is the derivative along ``F_k`` itself: the dynamics depend on the
      products ``O_h V_h`` head by head (each acts on its own attention average), not on ``F`` alone,
      so ``∂R/∂F`` does not exist, while this direction is defined, dimensionless (comparable between
      layers of different norms), equal to scaling ``V_k`` instead (checked: ``Σ ⟨∂R/∂V_k, V_k⟩``) or
      to a step size ``α_k`` of block ``k`` alone, and leaves the eigenvectors of ``F_k`` unchanged:
      for this derivative, holding ``v1`` fixed is exact.
    * ``dR_dlogbeta``: ``d R / dε`` for the scores of block ``k`` scaled by ``1 + ε`` (``Q_k`` scaled:
      a temperature ``β_k`` of that block alone).
    * ``grad_O``, ``grad_V``, ``grad_Q``, ``grad_K``: Frobenius norms of the gradients (``v1`` fixed).
    * ``cos_O``: ``dR_dlogF / (||∂R/∂O_k|| ||O_k||)``, the share of the gradient along ``O_k``.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 16, 5, 8, kind="gaussian")
        >>> rows = ja.layer_sensitivity(model, X0)
        >>> [r["block"] for r in rows], sorted(rows[0])[:4]
        ([0, 1, 2], ['R', 'block', 'cos_O', 'dR_dlogF'])
        >>> bool(np.isclose(rows[0]["R"], ja.alignment(model, X0)[-1]["rho1"], atol=1e-5))  # analyze's ρ1
        True
    """
    validate(model)
    X0 = jnp.asarray(X0)
    basis = principal_basis(model, order=order, alpha=alpha)
    base = unshared(_bare(model))
    lay = base.layers
    W = {k: jnp.asarray(getattr(lay, k)) for k in ("q", "k", "v", "o")}

    def R(w):
        m = base.replace(layers=lay.replace(**w))
        return mean_rho1(m, X0, basis, dynamics=dynamics, alpha=alpha, beta=beta, batch=batch, dtype=dtype)

    value, g = jax.value_and_grad(R)(W)
    g = {k: np.asarray(v, np.float64) for k, v in g.items()}
    w = {k: np.asarray(v, np.float64) for k, v in W.items()}
    fro = lambda a: float(np.sqrt(np.sum(a * a)))
    rows = []
    for k in range(model.depth):
        along_o = float(np.sum(g["o"][k] * w["o"][k]))
        scale = fro(g["o"][k]) * fro(w["o"][k])
        rows.append({"block": k, "weight_set": int(model.schedule[k]), "R": float(value),
                     "dR_dlogF": along_o, "dR_dlogF_via_V": float(np.sum(g["v"][k] * w["v"][k])),
                     "dR_dlogbeta": float(np.sum(g["q"][k] * w["q"][k])),
                     "grad_O": fro(g["o"][k]), "grad_V": fro(g["v"][k]), "grad_Q": fro(g["q"][k]),
                     "grad_K": fro(g["k"][k]), "cos_O": along_o / scale if scale > 0 else 0.0})
    return rows


# ------------------------------------------------------------------ steering by gradient
def final_alignment(X: Float[Array, "*B n d"], u: Float[ArrayLike, " d"]) -> Float[Array, "*B n"]:
    """``|<x, u>| / ||x||`` of every token of ``X: [..., n, d]`` (``u`` a unit vector)."""
    return jnp.abs(X @ u) / jnp.linalg.norm(X, axis=-1)


@dataclasses.dataclass
class GradientSteer:
    """Result of :func:`gradient_steer`."""

    target: float
    reached: bool  # False when even the largest radius tried stays below the target
    delta_o: np.ndarray  # [H, d, d_h] the change of the block's output weights
    norm: float  # ||ΔO||_F (= the radius of the search)
    alignment: np.ndarray  # [B, n] per-token alignment with u after the last block, at ΔO
    norm_below: float  # the largest radius tried whose best ΔO stays below the target (0: none)
    align_below: float  # its mean alignment
    model: Model  # the steered model (a new weight set for the block when its set is shared)
    evaluations: list  # (radius, best mean alignment) in the order tried
    singular_values: np.ndarray  # of ΔO as a [d, H d_h] matrix (how far from rank 1)
    u_overlap: float  # |<left singular vector 1 of ΔO, u>|

    @property
    def align_mean(self) -> float:
        return float(self.alignment.mean())

    @property
    def align_q01(self) -> float:
        return float(np.quantile(self.alignment, 0.01))


def apply_delta_o(model: Model, delta: Float[ArrayLike, "H d d_h"], *, block: int = -1) -> Model:
    """``model`` with ``O`` of ``block`` replaced by ``O + delta`` (``delta: [H, d, d_h]``); a new weight
    set for that block alone when its set is shared with other blocks (as :func:`jaxattn.steer` does)."""
    b = block % model.depth
    g = model.schedule[b]
    lay = model.layers
    sched = list(model.schedule)
    if sum(1 for s in sched if s == g) > 1:
        lay = jax.tree_util.tree_map(lambda a: jnp.concatenate([jnp.asarray(a), jnp.asarray(a)[g:g + 1]]), lay)
        sched[b] = g = lay.n_sets - 1
    o = jnp.asarray(lay.o)
    return model.replace(layers=lay.replace(o=o.at[g].add(jnp.asarray(delta, o.dtype))), schedule=tuple(sched))


@full_precision
def gradient_steer(model: Model, u: Float[ArrayLike, " d"], X0: Float[ArrayLike, "B n d"], target: float = 0.99, *,
                   block: int = -1, dynamics: Dynamics = D1, alpha=1.0, beta=1.0, dtype=None, iterations: int = 150,
                   lr: float = 0.05, rtol: float = 0.01, radius0: float | None = None, radius_max: float = 1e9,
                   init=None) -> GradientSteer:
    """The smallest change ``ΔO`` of ``block``'s output weights (default: the last block) found by gradient
    ascent whose mean alignment ``|<x, u>| / ||x||`` of the final tokens from ``X0: [B, n, d]`` reaches
    ``target``.

    ``min ||ΔO||_F`` subject to ``A(ΔO) >= target`` is solved in its dual form: for a radius ``r``, Adam
    (``iterations`` steps of rate ``lr``) maximises ``A(r P / ||P||)`` over the direction ``P``; the
    smallest ``r`` whose best direction reaches the target is found by bracketing (factors of 2 from
    ``radius0``, default ``||O||_F`` of the block) and bisection in ``log r`` down to ``r_hi / r_lo <=
    1 + rtol``. Each search starts from the best direction found so far; the first from ``init``
    (``[H, d, d_h]``), by default ``∇A`` at ``ΔO = 0`` (steepest ascent, no construction assumed).
    Gradient ascent finds local maxima: the answer is a feasible ``ΔO`` (an upper bound on the true
    smallest norm), with the radius just below it whose search stayed below the target. The blocks
    before ``block`` run once (they do not depend on ``ΔO``).

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=2, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 8, 4, 8, kind="gaussian")
        >>> res = ja.gradient_steer(model, np.eye(8)[0], X0, target=0.9, iterations=60)
        >>> res.reached, res.align_mean >= 0.9, res.delta_o.shape
        (True, True, (2, 8, 4))
        >>> bool(np.isclose(res.norm, np.linalg.norm(res.delta_o), rtol=1e-5))
        True
    """
    import optax

    if not (0 < target < 1):
        raise ConfigError(f"the steering target must be in (0, 1), got {target}")
    if not (0 < rtol < 1) or iterations < 1 or not (lr > 0):
        raise ConfigError("need 0 < rtol < 1, iterations >= 1 and lr > 0")
    validate(model)
    d = model.d_model
    u_np = _unit(u, d, "u")
    b = block % model.depth
    X0 = jnp.asarray(X0)
    entering = entering_states(model, X0, block=b, dynamics=dynamics, alpha=alpha, beta=beta, dtype=dtype)
    tail = unshared(_bare(model).replace(schedule=model.schedule[b:]))  # block b is set 0 of the tail
    o_all = jnp.asarray(tail.layers.o)  # converted models hold NumPy arrays
    o0 = o_all[0]
    ftype = o0.dtype if dtype is None else jnp.dtype(dtype)
    uj = jnp.asarray(u_np, ftype)

    def per_token(delta):
        m = tail.replace(layers=tail.layers.replace(o=o_all.at[0].add(delta.astype(o_all.dtype))))
        fin = simulate(m, entering, tail.depth, dynamics=dynamics, alpha=alpha, beta=beta, save=Save(every="last"),
                       dtype=dtype).final
        return final_alignment(fin, uj.astype(fin.dtype))

    A = lambda delta: jnp.mean(per_token(delta))
    opt = optax.adam(lr)

    @jax.jit
    def ascend(r, P0):  # maximise A on the sphere ||ΔO|| = r; keep the best iterate
        f = lambda P: -A(r * P / jnp.linalg.norm(P))

        def step(carry, _):
            P, state, best, best_P = carry
            val, grad = jax.value_and_grad(f)(P)
            better = val < best
            best, best_P = jnp.where(better, val, best), jnp.where(better, P, best_P)
            P, state = optax_step(opt, grad, state, P)
            return (P / jnp.linalg.norm(P) * jnp.sqrt(P.size), state, best, best_P), None

        P0 = P0 / jnp.linalg.norm(P0) * jnp.sqrt(P0.size)  # entries of order 1 for Adam's rate
        carry = (P0, opt.init(P0), jnp.asarray(jnp.inf, P0.dtype), P0)
        (P, _, best, best_P), _ = jax.lax.scan(step, carry, None, length=iterations)
        last = f(P)
        return jnp.where(last < best, P, best_P), -jnp.minimum(last, best)

    P = jax.grad(A)(jnp.zeros_like(o0, ftype)) if init is None else jnp.asarray(init, ftype)
    if P.shape != o0.shape or not bool(jnp.all(jnp.isfinite(P))) or float(jnp.linalg.norm(P)) == 0:
        raise ConfigError(f"init must be a finite non-zero array of shape {tuple(o0.shape)} "
                          "(the gradient at ΔO = 0 vanished: give a starting direction)")
    evals: list = []
    found: dict = {}

    def best_at(r, P0):
        if r not in found:
            Pb, a = ascend(jnp.asarray(r, ftype), P0)
            found[r] = (Pb, float(a))
            evals.append((float(r), float(a)))
        return found[r]

    r = float(np.linalg.norm(np.asarray(o0, np.float64))) if radius0 is None else float(radius0)
    if not (math.isfinite(r) and 0 < r <= radius_max):
        raise ConfigError(f"radius0 must be in (0, radius_max], got {r}")
    lo = 0.0
    P, a = best_at(r, P)
    if a >= target:  # halve until the target is missed
        hi = r
        while hi / 2 > 1e-12:
            Pd, ad = best_at(hi / 2, P)
            if ad < target:
                lo = hi / 2
                break
            hi, P = hi / 2, Pd
    else:  # double until it is reached
        while True:
            lo = r
            if r * 2 > radius_max:
                hi = r
                break
            r *= 2
            P, a = best_at(r, P)
            if a >= target:
                hi = r
                break
    reached = found[hi][1] >= target
    P = found[hi][0]
    if reached and lo > 0:
        while hi / lo > 1 + rtol:
            mid = math.sqrt(lo * hi)
            Pm, am = best_at(mid, P)
            if am >= target:
                hi, P = mid, Pm
            else:
                lo = mid
    delta = hi * found[hi][0] / jnp.linalg.norm(found[hi][0])
    align = np.asarray(per_token(delta), np.float64)
    dn = np.asarray(delta, np.float64)
    H, dd, dh = dn.shape
    left, s, _ = np.linalg.svd(dn.transpose(1, 0, 2).reshape(dd, H * dh), full_matrices=False)
    steered = validate(apply_delta_o(model, dn.astype(np.asarray(model.layers.o).dtype), block=b))
    return GradientSteer(target=float(target), reached=bool(align.mean() >= target), delta_o=dn,
                         norm=float(np.linalg.norm(dn)), alignment=align, norm_below=float(lo),
                         align_below=found[lo][1] if lo in found else float("nan"), model=steered,
                         evaluations=evals, singular_values=s, u_overlap=float(abs(left[:, 0] @ u_np)))


# ------------------------------------------------------------------ critical parameters by Newton's method
#: Observables of one configuration ``X: [n, d]`` that :func:`critical_beta` takes by name.
OBSERVABLES: dict[str, Callable] = {"cos_consensus": metrics.cos_consensus, "diameter": metrics.diameter,
                                    "mean_distance": metrics.mean_distance}


LOG_BETA_MAX = 30.0  # critical_beta searches β in [e^-30, e^30]


@dataclasses.dataclass
class CriticalBeta:
    """Result of :func:`critical_beta`."""

    beta: float  # where the observable crosses the level
    value: float  # the batch mean of the observable at ``beta``
    slope: float  # its derivative with respect to β there
    level: float
    steps: int  # Newton iterations
    success: bool  # optimistix's verdict (converged within max_steps)


def batch_observable(model: Model, X0: Float[ArrayLike, "B n d"], steps: int | None = None,
                     observable: str | Callable = "cos_consensus", *, dynamics: Dynamics = D1, alpha=1.0,
                     batch: Batch = Batch(), dtype=None) -> Callable[[Any], Float[Array, ""]]:
    """``β ↦`` the batch mean of ``observable`` (a name in :data:`OBSERVABLES` or a function of one
    configuration ``[n, d]``) after ``steps`` blocks (default: the depth) from ``X0``: a smooth scalar
    function of β to differentiate, solve or ``vmap``."""
    fn = OBSERVABLES.get(observable) if isinstance(observable, str) else observable
    if fn is None:
        raise ConfigError(f"unknown observable {observable!r}; known: {', '.join(OBSERVABLES)} (or a function)")
    steps = model.depth if steps is None else steps
    X0 = jnp.asarray(X0)

    def f(beta):
        fin = simulate(model, X0, steps, dynamics=dynamics, alpha=alpha, beta=beta, save=Save(every="last"),
                       batch=batch, dtype=dtype).final
        return jnp.mean(jax.vmap(fn)(fin))

    return full_precision(f)  # the observable's own products too, where the caller traces f


@full_precision
def critical_beta(model: Model, X0: Float[ArrayLike, "B n d"], level: float, *,
                  observable: str | Callable = "cos_consensus", steps: int | None = None, beta0: float = 1.0,
                  dynamics: Dynamics = D1, alpha=1.0, rtol: float | None = None, atol: float | None = None,
                  max_steps: int = 50, batch: Batch = Batch(), dtype=None) -> CriticalBeta:
    """The inverse temperature β at which the batch mean of ``observable`` after ``steps`` blocks from
    ``X0`` equals ``level``, by Newton's method (``optimistix.Newton``; derivatives by forward-mode
    differentiation through the whole simulation) from ``beta0``.

    Newton runs in ``log β`` (β stays positive; the observables vary on a log scale of β); ``rtol``
    and ``atol`` are optimistix's tolerances on ``log β`` (default 1e-10 in float64, 1e-5 in float32).
    Newton converges to a crossing near ``beta0`` — quadratically, in a handful of simulations — or
    fails (``success`` False) when the level is not crossed nearby; with several crossings, the one
    found depends on ``beta0``. A coarse :func:`beta_grid` is a cheap way to find a start.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 64, 5, 8)
        >>> f = ja.analysis.gradients.batch_observable(model, X0)                   # β -> mean final cos_consensus
        >>> level = float(f(10.0))                               # a level crossed at β = 10
        >>> c = ja.critical_beta(model, X0, level, beta0=15.0)
        >>> c.success, round(c.beta, 3), c.slope > 0
        (True, 10.0, True)
    """
    import optimistix as optx

    real("beta0", beta0, positive=True)
    f = batch_observable(model, X0, steps, observable, dynamics=dynamics, alpha=alpha, batch=batch,
                         dtype=dtype)
    ftype = jnp.asarray(X0).dtype if dtype is None else jnp.dtype(dtype)
    tol = 1e-10 if ftype == jnp.float64 else 1e-5
    rtol, atol = tol if rtol is None else rtol, tol if atol is None else atol
    # a step off a plateau can overshoot by many decades: clip log β so that it ends as a failed solve
    # (success False) rather than as a non-finite β inside the simulation
    # and a NaN step (a zero slope: the level is not crossed here) goes back to the start, also a failed solve
    y0 = jnp.asarray(math.log(beta0), ftype)

    def beta_of(y):
        return jnp.exp(jnp.clip(jnp.where(jnp.isnan(y), y0, y), -LOG_BETA_MAX, LOG_BETA_MAX))

    sol: Any = optx.root_find(lambda y, _: f(beta_of(y)) - level, optx.Newton(rtol=rtol, atol=atol), y0,
                              max_steps=max_steps, throw=False)
    beta = float(beta_of(sol.value))
    value, slope = jax.value_and_grad(f)(jnp.asarray(beta, ftype))
    return CriticalBeta(beta=beta, value=float(value), slope=float(slope), level=float(level),
                        steps=int(sol.stats["num_steps"]), success=bool(sol.result == optx.RESULTS.successful))


# ------------------------------------------------------------------ a whole grid in one call
def beta_grid(model: Model, X0: Float[ArrayLike, "B n d"], betas: Float[ArrayLike, " G"] | Sequence[float],
              steps: int | None = None, **kwargs) -> Simulation:
    """:func:`jaxattn.simulate` at every β of ``betas`` in one ``jax.vmap``-ed call: observables
    ``[G, B, T, ...]`` and final states ``[G, B, n, d]`` (``G = len(betas)``). Other options are
    :func:`jaxattn.simulate`'s. The numbers are those of ``sweep_grid`` with ``dynamics.beta`` as an
    axis (the same conditions, the same map) in one compiled program.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3)
        >>> X0 = ja.init_tokens(jax.random.key(1), 4, 5, 8)
        >>> res = ja.beta_grid(model, X0, [0.5, 1.0, 2.0])
        >>> res.observables["diameter"].shape, res.final.shape
        ((3, 4, 4), (3, 4, 5, 8))
        >>> one = ja.simulate(model, X0, 3, beta=2.0)
        >>> bool(np.allclose(res.observables["diameter"][2], one.observables["diameter"], atol=1e-6))
        True
    """
    steps = model.depth if steps is None else steps
    X0 = jnp.asarray(X0)
    b = np.asarray(betas, np.float64).reshape(-1)
    if b.size == 0 or not np.all(np.isfinite(b)):
        raise ConfigError(f"betas must be a non-empty list of finite numbers, got {betas!r}")
    dtype = kwargs.get("dtype") or X0.dtype
    return jax.vmap(lambda beta: simulate(model, X0, steps, beta=beta, **kwargs))(jnp.asarray(b, dtype))
