"""Discrete-time models D1–D6 (layers as time steps) and the batched simulator.

One block map covers every model; a :class:`Dynamics` (static, hashable) says which pieces are on:

=========  ==========================================================================
D1         ``Dynamics()``: ``x_i <- N(x_i + α Σ_h O_h Σ_j a^h_ij V_h x_j)``
D2         D1 on a single-head model with ``O = I`` (``random_model(..., unit_output=True)``)
D3         ``Dynamics(attention="uniform")``: ``a_ij = 1/n`` (multi-agent Oja)
D4         ``Dynamics(norm="none")`` on a model with score scale 1 (no normalisation)
D5         ``Dynamics(norm="ellipsoid")`` with ``S``: ``N_S`` in place of ``N``
D6         ``FAITHFUL``: the model's affine norm (LayerNorm or RMSNorm), FFN, biases, RoPE, its own
           pre/post-norm or parallel layout
=========  ==========================================================================

Intermediate settings between D1 and D6 (the power-method paper's simplification drops the FFN
and replaces LayerNorm by L2) are any other combination; ``attention='unnormalised'`` uses the
kernel ``exp(β s <Q x_i, K x_j>) / n`` of the clustering papers' code.
The block of a model with ``norm_style='post'`` (BERT, ALBERT, synthetic) is
``y = Norm1(x + α Attn(x))``, then with the FFN ``x' = Norm2(y + FFN(y))``.
With ``'pre'`` (GPT-2, GPT-Neo): ``y = x + α Attn(Norm1(x) if pre_ln else x)``, then
``x' = y + FFN(Norm2(y))`` with the FFN and ``x' = Norm2(y)`` without it.
A parallel model (GPT-NeoX, Phi) with the FFN: ``x' = x + α Attn(Norm1 x) + FFN(Norm2 x)``.
``Norm`` is L2, ``N_S``, the identity or the model's affine norm (``norm`` option: LayerNorm or RMSNorm).
``rope`` (``'none'`` by default, ``'model'`` for FAITHFUL) rotates queries and keys by token index.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.dynamics.geometry import FLAT, SPHERE, Geometry, check_spd
from jaxattn.dynamics.kernels import choose, fused_simulate
from jaxattn.dynamics.runner import (
    Context,
    cast_floats,
    check_precision,
    check_scalar,
    check_states,
    resolve_dtype,
    run,
)
from jaxattn.errors import ConfigError
from jaxattn.model import nn
from jaxattn.model.attention import KERNELS, apply, probabilities
from jaxattn.model.params import Layers, Model, validate
from jaxattn.model.rope import Rope, cos_sin

NORMS = ("l2", "ellipsoid", "none", "layernorm")
#: Position readings of attention: ``'none'`` position-free (tokens exchangeable; D1's default),
#: ``'model'`` the model's own RoPE where it has one (FAITHFUL), ``'on'`` the model's RoPE or, for a
#: model without one, the standard RoPE (θ = 10⁴ over every head coordinate).
ROPES = ("none", "model", "on")


@dataclasses.dataclass(frozen=True)
class Dynamics:
    """Which pieces of a block are on (static configuration, hashable).

    ``attention`` is the kernel (``'softmax'``, ``'uniform'`` or ``'unnormalised'``, see
    :func:`jaxattn.model.attention.probabilities`); ``uniform=True`` is kept as a synonym of
    ``attention='uniform'``. ``drop_ln2`` removes the FFN of a pre-norm model the way the
    GPT-Consensus code does (the block becomes ``x + Attn(LN1 x)``, ``ln_2`` unused); without it a
    pre-norm block with the FFN off still normalises after the update (the power-method paper's
    simplification). See :data:`NO_FFN`. ``rope`` says how attention reads positions (:data:`ROPES`):
    ``'none'`` position-free (the default: tokens are exchangeable), ``'model'`` the model's own RoPE where
    it has one (:data:`FAITHFUL`), ``'on'`` the model's or, for a model without one, the standard RoPE
    (θ = 10⁴ over every head coordinate) — queries and keys rotated by token index ``0..n-1``.
    """

    norm: str = "l2"
    ffn: bool = False
    pre_ln: bool = False
    biases: bool = False
    uniform: bool = False
    attention: str = "softmax"
    drop_ln2: bool = False  # pre-norm without FFN: the block is x + α Attn(Norm1 x), no norm after it
    rope: str = "none"  # see ROPES: RoPE on queries and keys by token index 0..n-1

    def __post_init__(self):
        if self.rope not in ROPES:
            raise ConfigError(f"rope must be one of {ROPES}, got {self.rope!r}")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.attention not in KERNELS:
            raise ConfigError(f"attention must be one of {KERNELS}, got {self.attention!r}")
        if self.uniform and self.attention == "softmax":
            object.__setattr__(self, "attention", "uniform")
        if self.uniform != (self.attention == "uniform"):
            object.__setattr__(self, "uniform", self.attention == "uniform")


D1 = Dynamics()
D3 = Dynamics(attention="uniform")
D4 = Dynamics(norm="none")
D5 = Dynamics(norm="ellipsoid")
FAITHFUL = Dynamics(norm="layernorm", ffn=True, pre_ln=True, biases=True, rope="model")
#: A real pre-norm model with its FFN removed as in the GPT-Consensus code: ``x + Attn(LN1 x)`` (with the
#: model's own RoPE where it has one).
NO_FFN = Dynamics(norm="layernorm", ffn=False, pre_ln=True, biases=True, drop_ln2=True, rope="model")


def check_dynamics(model: Model, dyn: Dynamics, S=None) -> None:
    """Refuse combinations the model cannot run, with one clear line."""
    if dyn.ffn and model.layers.w1 is None:
        raise ConfigError("ffn=True but the model has no FFN weights (synthetic models are attention-only)")
    if dyn.drop_ln2 and (dyn.ffn or model.norm_style != "pre"):
        raise ConfigError("drop_ln2 removes the FFN sublayer of a pre-norm model (GPT-2, GPT-Neo): use it with "
                          "ffn=False on a pre-norm model")
    if dyn.norm == "ellipsoid":
        check_spd(S, model.d_model)
    if dyn.rope == "on" and model.rope is None and model.layers.d_head < 2:
        raise ConfigError("rope='on' needs heads of at least 2 dimensions")


def rope_of(model: Model, dyn: Dynamics):
    """The :class:`~jaxattn.model.rope.Rope` a dynamics applies to this model, or ``None``."""
    if dyn.rope == "none":
        return None
    if model.rope is not None or dyn.rope == "model":
        return model.rope
    dh = model.layers.d_head
    return Rope(dim=dh - dh % 2)


def _rope_tables(model: Model, dyn: Dynamics, n: int):
    r = rope_of(model, dyn)
    return None if r is None else cos_sin(r, n)


def geometry_of(dyn: Dynamics, S=None) -> Geometry | None:
    """The token space a dynamics retracts onto (``None`` for the affine LayerNorm)."""
    return {"l2": SPHERE, "none": FLAT, "ellipsoid": Geometry("ellipsoid", S)}.get(dyn.norm)


def attention_input(X: jax.Array, lw: Layers, model: Model, dyn: Dynamics) -> jax.Array:
    """What attention reads: ``X``, or ``Norm1(X)`` for a pre-norm model with ``pre_ln``."""
    if model.norm_style == "pre" and dyn.pre_ln:
        return _norm(X, lw.ln1_w, lw.ln1_b, model, dyn)
    return X


def attention_weights(X: jax.Array, lw: Layers, model: Model, dyn: Dynamics, beta) -> jax.Array:
    """The attention weights ``[H, n, n]`` the block applies at state ``X``."""
    return probabilities(attention_input(X, lw, model, dyn), lw, beta, biases=dyn.biases, kernel=dyn.attention,
                         rope=_rope_tables(model, dyn, X.shape[0]))


def _norm(y, w, b, model: Model, dyn: Dynamics, S=None):
    if dyn.norm == "layernorm":  # the model's own affine norm: LayerNorm or RMSNorm
        return nn.affine_norm(y, w, b, model.ln_eps, model.norm_kind)
    geom = geometry_of(dyn, S)
    assert geom is not None  # every norm but layernorm has a geometry
    return geom.retract(y)


def block(X: jax.Array, lw: Layers, model: Model, dyn: Dynamics, alpha, beta, S=None,
          return_probs: bool = False, probs: jax.Array | None = None):
    """One block (layer) map ``[n, d] -> [n, d]`` for one weight set ``lw``.

    ``probs``: the attention weights ``[H, n, n]`` at ``X`` when the caller already has them.
    """

    def ffn(y):  # check_dynamics refuses ffn=True on a model without FFN weights
        return nn.ffn(y, lw, model.activation, biases=dyn.biases)

    norm = lambda y, w, b: _norm(y, w, b, model, dyn, S)
    h = attention_input(X, lw, model, dyn)
    A = attention_weights(X, lw, model, dyn, beta) if probs is None else probs
    upd = apply(h, A, lw, biases=dyn.biases)
    # Phi has one norm feeding both branches: its second norm is the first
    ln2_w, ln2_b = (lw.ln2_w, lw.ln2_b) if lw.ln2_w is not None else (lw.ln1_w, lw.ln1_b)
    if model.norm_style == "post":
        y = norm(X + alpha * upd, lw.ln1_w, lw.ln1_b)
        if dyn.ffn:
            y = norm(y + ffn(y), ln2_w, ln2_b)
    else:
        y = X + alpha * upd
        if dyn.ffn and model.parallel:  # GPT-NeoX, Phi: both branches read the block input
            y = y + ffn(norm(X, ln2_w, ln2_b) if dyn.pre_ln else X)
        elif dyn.ffn:
            y = y + ffn(norm(y, ln2_w, ln2_b))
        elif not dyn.drop_ln2:
            y = norm(y, ln2_w, ln2_b)
    return (y, A) if return_probs else y


def layer_index(model: Model, k) -> jax.Array:
    """Weight set used by step ``k`` (``k -> k+1``); cycles through the schedule.

    Examples:
        >>> import jax, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=4, depth=3, shared=False)
        >>> [int(ja.layer_index(model, k)) for k in range(7)]   # steps beyond the depth cycle
        [0, 1, 2, 0, 1, 2, 0]
    """
    sched = jnp.asarray(model.schedule, dtype=jnp.int32)
    return sched[jnp.mod(k, model.depth)]


def step(X: jax.Array, k, model: Model, dyn: Dynamics = D1, alpha=1.0, beta=1.0, S=None) -> jax.Array:
    """The step map ``X(k) -> X(k+1)`` of the model at (possibly traced) step ``k``."""
    return block(X, model.layers.take(layer_index(model, k)), model, dyn, alpha, beta, S)


class Simulation(NamedTuple):
    """Result of :func:`simulate`. Leading axes ``[B, T]``: ``T`` saved steps (all ``steps + 1``
    by default, step 0 being the initial state; see ``save``)."""

    observables: Any
    final: jax.Array  # [B, n, d]
    trajectory: jax.Array | None  # [B, T, n, d] when asked for, else None


def saved_steps(steps: int, save=None) -> np.ndarray:
    """Step indices at which :func:`simulate` evaluates observables for a ``save`` option:
    ``None`` every step ``0..steps``; an integer ``m`` every m-th step and the last; ``'last'``
    the last step only."""
    if save is None:
        save = 1
    if save == "last":
        return np.asarray([steps])
    if isinstance(save, bool) or not isinstance(save, (int, np.integer)) or save < 1:
        raise ConfigError(f"save must be None, a positive integer or 'last', got {save!r}")
    return np.asarray(sorted(set(range(0, steps, int(save))) | {steps}))


@dataclasses.dataclass(frozen=True)
class _MapProgram:
    """One initial condition through ``steps`` block maps (see :mod:`jaxattn.dynamics.runner`).

    Observations at steps ``0, m, 2m, ... < steps`` and at ``steps``: an outer scan over segments
    of ``m`` steps whose first step shares its attention weights with the observable.
    """

    dyn: Dynamics
    steps: int
    every: int  # m; 0 = observe the last step only
    observe: Callable
    trajectory: bool

    def __call__(self, X0, p):
        model, alpha, beta, S, aux = p
        dyn = self.dyn

        def lw_at(k):
            return model.layers.take(layer_index(model, k))

        def plain(X, k):
            return block(X, lw_at(k), model, dyn, alpha, beta, S), None

        def observed(X, k):
            lw = lw_at(k)
            A = attention_weights(X, lw, model, dyn, beta)
            out = self.observe(k, X, Context(aux, lambda: A))
            return block(X, lw, model, dyn, alpha, beta, S, probs=A), (out, X if self.trajectory else None)

        def run_plain(X, k0, length):
            if length == 0:
                return X
            X, _ = jax.lax.scan(plain, X, k0 + jnp.arange(length, dtype=jnp.int32))
            return X

        m = self.every
        q = self.steps // m if m else 0
        X = X0
        seen = None
        if q:
            def segment(X, j):
                k0 = j * m
                X, rec = observed(X, k0)
                return run_plain(X, k0 + 1, m - 1), rec

            X, seen = jax.lax.scan(segment, X, jnp.arange(q, dtype=jnp.int32))
        r = self.steps - q * m
        if m and r:  # a last, shorter segment: observed at its start like the others
            X, rec = observed(X, jnp.int32(q * m))
            X = run_plain(X, jnp.int32(q * m + 1), r - 1)
            rec = jax.tree_util.tree_map(lambda a: a[None], rec)
            seen = rec if seen is None else jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), seen, rec)
        elif r:
            X = run_plain(X, jnp.int32(0), r)
        kT = jnp.int32(self.steps)
        last = (self.observe(kT, X, Context(aux, lambda: attention_weights(X, lw_at(kT), model, dyn, beta))),
                X if self.trajectory else None)
        if seen is None:
            obs, traj = jax.tree_util.tree_map(lambda a: a[None], last)
        else:
            obs, traj = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), seen, last)
        return obs, X, traj


def simulate(model: Model, X0, steps: int, *, dynamics: Dynamics = D1, alpha=1.0, beta=1.0, S=None,
             observe: Callable | None = None, aux: Any = None, trajectory: bool = False,
             batch_size: int | None = None, dtype=None, save=None, devices=None,
             precision: str = "highest", kernel: str = "auto") -> Simulation:
    """Run ``steps`` block maps from every initial configuration, under ``jit``.

    Args:
        model: the model; step ``k`` uses weight set ``schedule[k % depth]``.
        X0: ``[B, n, d]`` initial configurations (``[n, d]`` is taken as ``B = 1``).
        steps: number of steps (may exceed the depth: prolonged / repeated passes).
        dynamics: which model (see the module docstring).
        alpha: step size α; beta: inverse temperature β (both traced: changing them does not
            recompile). S: ``[d, d]`` matrix for ellipsoid normalisation.
        observe: ``observe(t, X: [n, d], ctx) -> pytree`` evaluated at the saved steps (``t`` the
            step index, ``ctx.aux`` = ``aux``, ``ctx.attention()`` the attention weights
            ``[H, n, n]`` of the step taken from ``X``); only what it returns is kept. A
            module-level function is reused across calls without recompiling (a fresh lambda
            recompiles). Default: :func:`jaxattn.analysis.metrics.consensus_observables`.
        aux: a pytree of arrays handed to the observable as ``ctx.aux`` (jit inputs: changing
            them does not recompile, and they are not baked in as constants).
        trajectory: also keep the configuration at every saved step (``[B, T, n, d]``).
        batch_size: conditions per compiled block (default: a fixed width per backend). Memory is
            flat in ``B``; the numbers of a condition do not depend on ``B`` or on how a sweep is
            split, for a given ``batch_size``.
        dtype: computation dtype (default: that of X0; float32 unless float64 is asked for).
        save: where to evaluate observables: ``None`` every step, an integer ``m`` every m-th
            step and the last, ``'last'`` the last only (see :func:`saved_steps`).
        devices: split the batch over these devices (e.g. ``jax.local_devices()``); default one.
        precision: matrix products in float32 runs: ``'highest'`` (full float32 on every backend,
            the default), ``'tf32'`` or ``'bf16'`` (faster on GPUs, about 1e-3 off after 24 layers).
        kernel: ``'auto'`` (the fused Pallas kernel of :mod:`jaxattn.dynamics.kernels` where it applies,
            on a GPU), ``'fused'`` (force it; interpret mode on a CPU) or ``'plain'``.

    Returns:
        :class:`Simulation` with observables ``[B, T, ...]``, the final state and, on request,
        the trajectory.

    Examples:
        >>> import jax, jax.numpy as jnp, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 4, 5, 8)
        >>> res = ja.simulate(model, X0, steps=6)               # twice the depth: the schedule cycles
        >>> sorted(res.observables), res.observables["diameter"].shape, res.final.shape
        (['cos_consensus', 'diameter'], (4, 7), (4, 5, 8))
        >>> bool(np.allclose(np.linalg.norm(res.final, axis=-1), 1.0, atol=1e-5))   # D1 stays on the sphere
        True

        An observable of one's own: a function of the step, one configuration and the context.

        >>> def row_sums(t, X, ctx):
        ...     return ctx.attention().sum(-1).mean()            # softmax rows sum to one
        >>> obs = ja.simulate(model, X0, steps=3, observe=row_sums, save="last").observables
        >>> obs.shape, bool(np.allclose(obs, 1.0))
        ((4, 1), True)
    """
    from jaxattn.analysis.metrics import consensus_observables  # late import: metrics imports this module's users

    validate(model)  # shapes and finite weights, also for a model edited with `replace`
    if not isinstance(dynamics, Dynamics):
        raise ConfigError(f"dynamics must be a jaxattn.Dynamics (D1, D3, D4, D5, FAITHFUL, NO_FFN or "
                          f"Dynamics(...)), got {dynamics!r}")
    X0 = check_states(X0, model.d_model, normalised=dynamics.norm in ("l2", "ellipsoid"))
    alpha, beta = check_scalar("alpha", alpha), check_scalar("beta", beta)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ConfigError(f"steps must be a non-negative integer, got {steps!r}")
    check_dynamics(model, dynamics, S)
    dtype = resolve_dtype(dtype, X0)
    saved_steps(int(steps), save)  # validates save
    every = 0 if save == "last" else int(save or 1)
    # embeddings and the final norm play no part in the dynamics: leave them out of the jit inputs
    model = model.replace(embeddings=None, final_ln_w=None, final_ln_b=None).astype(dtype)
    S = None if S is None else jnp.asarray(S, dtype)
    program = _MapProgram(dyn=dynamics, steps=int(steps), every=every, observe=observe or consensus_observables,
                          trajectory=bool(trajectory))
    one_device = devices is None or len(list(devices)) <= 1
    choice = (choose(kernel, model, dynamics, observe, trajectory, save, X0.shape[1])
              if one_device or kernel == "plain" else "plain")
    if choice == "fused":
        try:
            with jax.default_matmul_precision(check_precision(precision)):
                obs, final = fused_simulate(model, X0.astype(dtype), int(steps), dyn=dynamics, alpha=alpha,
                                            beta=beta, S=S, save=save)
            return Simulation(obs, final, None)
        except Exception as e:
            if kernel == "fused":
                raise
            # chosen automatically: fall back to the plain path, which computes the same map
            warnings.warn(f"the fused kernel failed on this backend ({type(e).__name__}: {str(e)[:200]}); "
                          "using the plain path (kernel='plain' silences this)", RuntimeWarning, stacklevel=2)
    params = (model, jnp.asarray(alpha, dtype), jnp.asarray(beta, dtype), S, cast_floats(aux, dtype))
    obs, final, traj = run(program, X0.astype(dtype), params, batch_size=batch_size, devices=devices,
                           precision=precision)
    return Simulation(obs, final, traj)
