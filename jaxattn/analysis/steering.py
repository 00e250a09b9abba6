"""Rank-1 steering of the last layer.

``O' = O + β u zᵀ`` with ``zᵀ = wᵀ Vstack⁻¹`` (least squares when ``Vstack`` is singular), so
that ``F' = O' Vstack = F + β u wᵀ``; ``β = γ · |λ1(F)|``. For large β the principal eigenpair
of ``F'`` is about ``(β wᵀu, u)``: tokens leaving the last layer align with ``u``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxattn.analysis._optim import optax_step
from jaxattn.analysis.spectral import eig_sorted, layer_matrices, spectrum
from jaxattn.dynamics import check_scalar, traced
from jaxattn.dynamics.discrete import D1, simulate
from jaxattn.dynamics.options import Batch
from jaxattn.errors import ConfigError
from jaxattn.model import nn
from jaxattn.model.params import Model, validate
from jaxattn.model.precision import full_precision


@dataclasses.dataclass
class SteerInfo:
    beta: float | Array  # the gain actually added, β = γ |λ1| (a tracer under a transformation)
    z: np.ndarray | Array  # [d] with zᵀ Vstack = wᵀ (least squares; traced when u, w or the weights are)
    residual: float | Array  # ||zᵀ Vstack − wᵀ||: 0 when Vstack is invertible
    weight_set: int  # index of the modified (possibly new) weight set


def _unit(u, d, name):
    u = np.asarray(u, np.float64).reshape(-1)
    if u.shape != (d,) or not np.all(np.isfinite(u)) or np.linalg.norm(u) == 0:
        raise ConfigError(f"{name} must be a finite non-zero vector of length d={d}")
    return u / np.linalg.norm(u)


def _traced_vector(v, d, name, *, unit: bool):
    """A traced direction: its shape checked while tracing, its values inside the program."""
    v = jnp.reshape(v, (-1,))
    if v.shape != (d,):
        raise ConfigError(f"{name} must be a finite non-zero vector of length d={d}")
    nrm = jnp.linalg.norm(v)
    v = eqx.error_if(v, ~jnp.all(jnp.isfinite(v)) | (nrm == 0), f"{name} must be a finite non-zero vector")
    return v / nrm if unit else v


def _plan(model: Model, g: int, w, host: bool):
    """``|λ1(F_g)|`` (the eigenvalue of largest real part) and ``z`` with ``zᵀ Vstack = wᵀ`` (least
    squares): on the host in float64 for concrete weights, in JAX (differentiable) for traced ones."""
    lay = model.layers
    H, dh, d = lay.n_heads, lay.d_head, lay.d_model
    if host:
        lam, _ = eig_sorted(layer_matrices(model)[g])
        # rows of every query head (a GQA value head repeated for each query head that reads it)
        # np.asarray before indexing: indexing a concrete jax array under jit would stage a tracer
        Vstack = np.repeat(np.asarray(lay.v, np.float64)[g], lay.kv_group, axis=0).reshape(H * dh, d)
        z, *_ = np.linalg.lstsq(Vstack.T, w, rcond=None)  # Vstackᵀ z = w  <=>  zᵀ Vstack = wᵀ
        return float(np.abs(lam[0])), z, float(np.linalg.norm(Vstack.T @ z - w))
    v, o = jnp.repeat(jnp.asarray(lay.v[g]), lay.kv_group, axis=0), jnp.asarray(lay.o[g])
    ev = jnp.linalg.eigvals(jnp.einsum("hdk,hke->de", o, v))
    Vs = v.reshape(H * dh, d)
    zt = jnp.linalg.pinv(Vs.T) @ w
    return jnp.abs(ev[jnp.argmax(ev.real)]), zt, jnp.linalg.norm(Vs.T @ zt - w)


def steer(model: Model, u: Float[ArrayLike, " d"], gamma: float | Float[Array, ""] = 10.0,
          w: Float[ArrayLike, " d"] | None = None, *, block: int = -1) -> tuple[Model, SteerInfo]:
    """Return a model whose block ``block`` (default: the last) has layer matrix ``F + β u wᵀ``.

    ``u`` is normalised; ``w`` (default ``u``) is used as given; ``β = γ |λ1(F)|``.

    When the block's weight set is also used by other blocks (shared weights), a new set is
    appended for that block alone, so the other blocks keep their weights.

    Composes with ``jax.jit``, ``jax.vmap`` and ``jax.grad`` with respect to ``gamma``, ``u``, ``w``
    and the weights (traced weights take the eigenvalue and the least-squares solve in JAX, on a CPU
    backend: XLA has no non-symmetric eigensolver on GPUs). Concrete inputs are computed on the host in
    float64, as the spectra are.

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> u = np.eye(8)[0]
        >>> steered, info = ja.steer(model, u, gamma=10.0)
        >>> info.weight_set, round(info.residual, 9)     # the last block's set; exact (V invertible)
        (2, 0.0)
        >>> dF = ja.layer_matrices(steered)[2] - ja.layer_matrices(model)[2]
        >>> bool(np.allclose(dF, info.beta * np.outer(u, u), atol=1e-5))   # F + β u uᵀ
        True
        >>> bool(np.isclose(info.beta, 10.0 * abs(ja.spectrum(model).lambda1[2])))   # β = γ |λ1(F)|
        True
        >>> shared = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3)
        >>> s2, info2 = ja.steer(shared, u, gamma=10.0)
        >>> s2.schedule, info2.weight_set                # a new set for the last block only
        ((0, 0, 1), 1)
    """
    d = model.d_model
    u = _traced_vector(u, d, "u", unit=True) if traced(u) else _unit(u, d, "u")
    if w is None:
        w = u
    elif traced(w):  # used as given (not normalised), so that wᵀu = 1 can be imposed for the exact spectral shift
        w = _traced_vector(w, d, "w", unit=False)
    else:
        w = np.asarray(w, np.float64).reshape(-1)
        if w.shape != (d,) or not np.all(np.isfinite(w)):
            raise ConfigError(f"w must be a finite vector of length d={d}")
    gamma = check_scalar("gamma", gamma)
    depth = model.depth
    b = block % depth
    g = model.schedule[b]
    lay = model.layers
    host_weights = not traced((lay.o, lay.v))
    lam1, z, residual = _plan(model, g, w, host_weights and not traced(w))
    beta = gamma * lam1
    H, dh = lay.n_heads, lay.d_head
    delta = (beta * jnp.outer(u, z) if traced((beta, u, z)) else beta * np.outer(u, z))  # [d, d]
    o_g = (np.asarray(lay.o, np.float64)[g] if not traced((delta, lay.o)) else jnp.asarray(lay.o)[g])
    o_new = (o_g + delta.reshape(d, H, dh).transpose(1, 0, 2)).astype(lay.o.dtype)
    shared_use = sum(1 for s in model.schedule if s == g) > 1
    if shared_use:  # a new weight set for the steered block alone
        cat = lambda a: (jnp.concatenate([a, a[g:g + 1]]) if traced(a)
                         else np.concatenate([np.asarray(a), np.asarray(a)[g:g + 1]]))
        new = jax.tree_util.tree_map(cat, lay)
        gi = lay.n_sets
        sched = list(model.schedule)
        sched[b] = gi
    else:  # the other tensors are never mutated: share them, copy only o below
        new = lay
        gi, sched = g, list(model.schedule)
    o_all: Any
    if traced(o_new) or traced(new.o):
        o_all = jnp.asarray(new.o).at[gi].set(o_new)
    else:
        o_all = np.array(new.o)
        o_all[gi] = o_new
    new = new.replace(o=o_all)
    steered = validate(model.replace(layers=new, schedule=tuple(sched)))
    return steered, SteerInfo(beta=beta, z=z, residual=residual, weight_set=gi)


@full_precision
def precompensate(model: Model, u: Float[ArrayLike, " d"], *, block: int = -1, steps: int = 400, lr: float = 0.05,
                  seed: int = 0, layernorm: bool = True, signs: str = "both") -> Float[np.ndarray, " d"]:
    """A direction ``u'`` to steer the attention of ``block`` towards when the FFN is kept, so
    that the block's output points along ``u`` (the paper's pre-compensation, by numerical
    inversion).

    Post-norm (BERT, ALBERT): with a large gain the attention update is ``≈ c u'``, so the block
    output is ``g(u') = Norm2(y + FFN(y))`` with ``y = Norm1(u')``. The rank-1 steering sends a token to
    ``+u'`` or to ``−u'`` by the sign of its component, and the FFN is not odd (``g(−u') ≠ −g(u')``), so
    ``signs="both"`` (default) maximises ``cos²(g(u'), u) + cos²(g(−u'), u)``: the tokens sent either way
    end along ``±u``; ``signs="plus"`` maximises ``cos(g(u'), u)`` alone (the tokens sent to ``−u'`` are
    left to the FFN). Gradient ascent (Adam); ``Norm`` is the model's affine LayerNorm (``layernorm=True``)
    or L2. Pre-norm (GPT-2, GPT-Neo): the output is ``c u' + FFN(Norm2(u'))`` and the bounded FFN term
    vanishes against ``c``, so ``u`` itself is returned.
    """
    if signs not in ("both", "plus"):
        raise ConfigError(f"signs must be 'both' or 'plus', got {signs!r}")
    lay = model.layers
    if lay.w1 is None:
        raise ConfigError("precompensation needs a model with FFN weights")
    d = model.d_model
    u_np = _unit(u, d, "u")
    if model.norm_style == "pre":
        return u_np
    ftype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    u = jnp.asarray(u_np, ftype)
    lw = jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, ftype) if np.issubdtype(np.asarray(a).dtype, np.floating) else a,
        lay.take(model.schedule[block % model.depth]))
    def norm(y, w_, b_):
        return nn.layer_norm(y, w_, b_, model.ln_eps) if layernorm else nn.l2(y)

    def cos(p):  # cos(g(p), u)
        y = norm(p[None, :], lw.ln1_w, lw.ln1_b)
        h = y + nn.ffn(y, lw, model.activation)
        o = norm(h, lw.ln2_w, lw.ln2_b)[0]
        return jnp.dot(o, u) / jnp.linalg.norm(o)

    def loss(p):
        return -(cos(p) ** 2 + cos(-p) ** 2) if signs == "both" else -cos(p)

    import optax

    opt = optax.adam(lr)  # Adam on the unnormalised direction (the loss is scale-invariant)

    def update(carry, _):
        p, state = carry
        return optax_step(opt, jax.grad(loss)(p), state, p), None

    p = u + 0.01 * jax.random.normal(jax.random.key(seed), (d,), ftype)
    (p, _), _ = jax.jit(lambda p: jax.lax.scan(update, (p, opt.init(p)), None, length=steps))(p)
    out = np.asarray(p, np.float64)
    return out / np.linalg.norm(out)


def entering_states(model: Model, X0: Float[ArrayLike, "B n d"], *, block: int = -1, dynamics=None, alpha=1.0, beta=1.0,
                    dtype=None, batch: Batch = Batch()) -> Float[Array, "B n d"]:
    """The states ``[B, n, d]`` entering ``block`` from ``X0``: the blocks before the steered one do not
    depend on the gain, so a sweep over gains runs them once (``X0`` itself for the first block). ``batch``:
    :func:`jaxattn.simulate`'s."""
    b = block % model.depth
    if b == 0:
        return jnp.asarray(X0)
    return simulate(model, X0, b, dynamics=D1 if dynamics is None else dynamics, alpha=alpha, beta=beta,
                    dtype=dtype, batch=batch).final


def steered_alignment(model: Model, u: Float[ArrayLike, " d"], gamma: float, X0: Float[ArrayLike, "B n d"], *,
                      w: Float[ArrayLike, " d"] | None = None, block: int = -1, dynamics=None, alpha=1.0, beta=1.0,
                      dtype=None, entering: Float[ArrayLike, "B n d"] | None = None,
                      along: Float[ArrayLike, " d"] | None = None, batch: Batch = Batch(),
                      signed: bool = False) -> tuple[Float[np.ndarray, "B n"], Model, SteerInfo]:
    """Steer ``block`` with gain ``gamma`` and run the dynamics of the steered model from ``X0: [B, n, d]``
    through all its blocks; return ``|<x, a>| / ||x||`` for every final token (``[B, n]``; ``signed``: the
    cosine ``<x, a> / ||x||`` itself, which tells the tokens sent to ``+a`` from those sent to ``−a``) with
    ``a`` the unit direction ``along`` (default ``u``), the model and the steering information. ``dynamics``
    defaults to D1. ``entering``: the states entering ``block`` (:func:`entering_states`), when several
    gains share them; only the blocks from ``block`` on then run. ``batch``: :func:`jaxattn.simulate`'s."""
    u_n = _unit(u, model.d_model, "u")
    ms, info = steer(model, u_n, gamma, w, block=block)
    b = block % ms.depth
    if entering is None:
        entering = entering_states(ms, X0, block=b, dynamics=dynamics, alpha=alpha, beta=beta, dtype=dtype,
                                   batch=batch)
    tail = ms.replace(schedule=ms.schedule[b:])  # the steered block and those after it
    res = simulate(tail, entering, tail.depth, dynamics=D1 if dynamics is None else dynamics, alpha=alpha,
                   beta=beta, dtype=dtype, batch=batch)
    F = np.asarray(res.final, np.float64)
    a = u_n if along is None else _unit(along, model.d_model, "along")
    cos = (F @ a) / np.linalg.norm(F, axis=-1)
    return (cos if signed else np.abs(cos)), ms, info


@dataclasses.dataclass
class SteerTarget:
    target: float  # the mean alignment asked for
    reached: bool  # False when even the largest gain tried (``gamma``) stays below the target
    gamma: float  # the smallest gain found whose mean alignment reaches the target (upper bracket)
    alignment: np.ndarray  # [B, n] alignments measured at ``gamma``
    gamma_below: float  # the lower bracket: its mean alignment stays below the target (0: none tried below)
    align_below: float  # mean alignment at ``gamma_below``
    beta: float  # β = γ |λ1| added at ``gamma``
    gap: float  # spectral gap of the steered block's layer matrix at ``gamma`` (as in :func:`spectrum`)
    lambda1_re: float  # Re λ1 of the steered block's layer matrix at ``gamma``
    residual: float
    evaluations: list  # (γ, mean alignment) in the order tried

    @property
    def align_mean(self) -> float:
        return float(self.alignment.mean())


def steer_to_target(model: Model, u: Float[ArrayLike, " d"], target: float, X0: Float[ArrayLike, "B n d"], *,
                    w: Float[ArrayLike, " d"] | None = None, block: int = -1, dynamics=None, alpha=1.0, beta=1.0,
                    dtype=None, gamma0: float = 1.0, rtol: float = 0.01, gamma_min: float = 1e-6,
                    gamma_max: float = 1e9, batch: Batch = Batch()) -> SteerTarget:
    """The smallest gain ``γ`` whose mean alignment with ``u`` (measured by running the steered model's
    dynamics from ``X0``) reaches ``target``, by bisection in ``log γ``.

    A bracket is first found by factors of 10 from ``gamma0`` (down to ``gamma_min``, up to
    ``gamma_max``); it is then halved in ``log γ`` until ``γ_hi / γ_lo ≤ 1 + rtol``. The answer is the
    upper end (it reaches the target); the lower end, which does not, is returned as well. With a
    mean alignment that is not monotone in ``γ`` this is a local answer: a gain that reaches the target
    with a gain within ``rtol`` below it that does not.
    """
    if not (0 < target < 1):
        raise ConfigError(f"the steering target must be in (0, 1), got {target}")
    if not (0 < rtol < 1) or not (0 < gamma_min <= gamma0 <= gamma_max):
        raise ConfigError("need 0 < rtol < 1 and 0 < gamma_min <= gamma0 <= gamma_max")
    evals = []
    cache = {}
    entering = entering_states(model, X0, block=block, dynamics=dynamics, alpha=alpha, beta=beta, dtype=dtype,
                               batch=batch)

    def mean_at(g):
        if g not in cache:
            a, ms, info = steered_alignment(model, u, g, X0, w=w, block=block, dynamics=dynamics, alpha=alpha,
                                            beta=beta, dtype=dtype, entering=entering, batch=batch)
            cache[g] = (a, ms, info)
            evals.append((float(g), float(a.mean())))
        return float(cache[g][0].mean())

    g = float(gamma0)
    if mean_at(g) >= target:  # walk down until the target is missed
        hi, lo = g, 0.0
        while hi / 10 >= gamma_min:
            if mean_at(hi / 10) < target:
                lo = hi / 10
                break
            hi = hi / 10
    else:  # walk up until it is reached
        lo = g
        while lo * 10 <= gamma_max:
            if mean_at(lo * 10) >= target:
                hi = lo * 10
                break
            lo = lo * 10
        else:  # not reachable within gamma_max
            hi = lo
    reached = mean_at(hi) >= target
    if reached and lo > 0:
        while hi / lo > 1 + rtol:
            mid = float(np.sqrt(lo * hi))
            if mean_at(mid) >= target:
                hi = mid
            else:
                lo = mid
    a, ms, info = cache[hi]
    b = ms.schedule[block % ms.depth]
    sp = spectrum(layer_matrices(ms)[b])
    lam, gap = sp.eigvals[0], float(sp.gap[0])
    return SteerTarget(target=float(target), reached=bool(reached), gamma=float(hi), alignment=a,
                       gamma_below=float(lo), align_below=float(cache[lo][0].mean()) if lo in cache else float("nan"),
                       beta=float(info.beta), gap=gap, lambda1_re=float(lam[0].real), residual=float(info.residual),
                       evaluations=evals)
