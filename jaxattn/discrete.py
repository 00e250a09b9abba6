"""Discrete-time models D1–D6 of MATH.md §1 and the batched simulator.

One block map covers every model; a :class:`Dynamics` (static, hashable) says which pieces are on:

=========  ==========================================================================
D1         ``Dynamics()``: ``x_i <- N(x_i + α Σ_h O_h Σ_j a^h_ij V_h x_j)``
D2         D1 on a single-head model with ``O = I`` (``random_model(..., unit_output=True)``)
D3         ``Dynamics(uniform=True)``: ``a_ij = 1/n`` (multi-agent Oja)
D4         ``Dynamics(norm="none")`` on a model with score scale 1 (no normalisation)
D5         ``Dynamics(norm="ellipsoid")`` with ``S``: ``N_S`` in place of ``N``
D6         ``FAITHFUL``: affine LayerNorm, FFN, biases, the model's own pre/post-norm layout
=========  ==========================================================================

Intermediate settings (MATH.md "The paper's simplification") are any other combination.
The block of a model with ``norm_style='post'`` (BERT, ALBERT, synthetic) is
``y = Norm1(x + α Attn(x))``, then with the FFN ``x' = Norm2(y + FFN(y))``.
With ``'pre'`` (GPT-2, GPT-Neo): ``y = x + α Attn(Norm1(x) if pre_ln else x)``, then
``x' = y + FFN(Norm2(y))`` with the FFN and ``x' = Norm2(y)`` without it.
``Norm`` is L2, ``N_S``, the identity or the model's affine LayerNorm (``norm`` option).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import nn
from .attention import attend
from .errors import ConfigError
from .params import Layers, Model

NORMS = ("l2", "ellipsoid", "none", "layernorm")


@dataclasses.dataclass(frozen=True)
class Dynamics:
    """Which pieces of a block are on (static configuration, hashable)."""

    norm: str = "l2"
    ffn: bool = False
    pre_ln: bool = False
    biases: bool = False
    uniform: bool = False

    def __post_init__(self):
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {self.norm!r}")


D1 = Dynamics()
D3 = Dynamics(uniform=True)
D4 = Dynamics(norm="none")
D5 = Dynamics(norm="ellipsoid")
FAITHFUL = Dynamics(norm="layernorm", ffn=True, pre_ln=True, biases=True)


def check_dynamics(model: Model, dyn: Dynamics, S=None) -> None:
    """Refuse combinations the model cannot run, with one clear line."""
    if dyn.ffn and model.layers.w1 is None:
        raise ConfigError("ffn=True but the model has no FFN weights (synthetic models are attention-only)")
    if dyn.norm == "ellipsoid":
        if S is None:
            raise ConfigError("norm='ellipsoid' needs the matrix S")
        S = np.asarray(S)
        d = model.d_model
        if S.shape != (d, d):
            raise ConfigError(f"S must be [{d}, {d}], got {S.shape}")
        if not np.allclose(S, S.T) or np.linalg.eigvalsh((S + S.T) / 2).min() <= 0:
            raise ConfigError("S must be symmetric positive definite")


def block(X: jax.Array, lw: Layers, model: Model, dyn: Dynamics, alpha, beta, S=None,
          return_probs: bool = False):
    """One block (layer) map ``[n, d] -> [n, d]`` for one weight set ``lw``."""

    def norm(y, w, b):
        if dyn.norm == "l2":
            return nn.l2(y)
        if dyn.norm == "ellipsoid":
            return nn.ellipsoid(y, S)
        if dyn.norm == "none":
            return y
        return nn.layer_norm(y, w, b, model.ln_eps)

    def ffn(y):
        act = nn.activation(model.activation)
        h = y @ lw.w1.T
        if dyn.biases and lw.b1 is not None:
            h = h + lw.b1[None, :]
        out = act(h) @ lw.w2.T
        if dyn.biases and lw.b2 is not None:
            out = out + lw.b2[None, :]
        return out

    if model.norm_style == "post":
        upd, A = attend(X, lw, beta, biases=dyn.biases, uniform=dyn.uniform, return_probs=True)
        y = norm(X + alpha * upd, lw.ln1_w, lw.ln1_b)
        if dyn.ffn:
            y = norm(y + ffn(y), lw.ln2_w, lw.ln2_b)
    else:
        h = norm(X, lw.ln1_w, lw.ln1_b) if dyn.pre_ln else X
        upd, A = attend(h, lw, beta, biases=dyn.biases, uniform=dyn.uniform, return_probs=True)
        y = X + alpha * upd
        y = y + ffn(norm(y, lw.ln2_w, lw.ln2_b)) if dyn.ffn else norm(y, lw.ln2_w, lw.ln2_b)
    return (y, A) if return_probs else y


def layer_index(model: Model, k) -> jax.Array:
    """Weight set used by step ``k`` (``k -> k+1``); cycles through the schedule."""
    sched = jnp.asarray(model.schedule, dtype=jnp.int32)
    return sched[jnp.mod(k, model.depth)]


def step(X: jax.Array, k, model: Model, dyn: Dynamics = D1, alpha=1.0, beta=1.0, S=None) -> jax.Array:
    """The step map ``X(k) -> X(k+1)`` of the model at (possibly traced) step ``k``."""
    return block(X, model.layers.take(layer_index(model, k)), model, dyn, alpha, beta, S)


class Simulation(NamedTuple):
    """Result of :func:`simulate`. Leading axes ``[B, steps + 1]`` (step 0 is the initial state)."""

    observables: Any
    final: jax.Array  # [B, n, d]
    trajectory: Optional[jax.Array]  # [B, steps + 1, n, d] when asked for, else None


def _run_one(X0, model, alpha, beta, S, aux, *, steps, dyn, observe, trajectory):
    obs = observe if aux is None else (lambda X, k: observe(X, k, aux))

    def body(X, k):
        Xn = step(X, k, model, dyn, alpha, beta, S)
        out = (obs(Xn, k + 1), Xn if trajectory else None)
        return Xn, out

    first = (obs(X0, jnp.int32(0)), X0 if trajectory else None)
    XT, rest = jax.lax.scan(body, X0, jnp.arange(steps, dtype=jnp.int32))
    both = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    return both[0], XT, both[1]


@functools.partial(jax.jit, static_argnames=("steps", "dyn", "observe", "trajectory", "batch_size"))
def _simulate(X0, model, alpha, beta, S, aux, *, steps, dyn, observe, trajectory, batch_size):
    one = lambda x: _run_one(x, model, alpha, beta, S, aux, steps=steps, dyn=dyn, observe=observe,
                             trajectory=trajectory)
    if batch_size is None:  # note: lax.map without batch_size would run the samples one by one
        return jax.vmap(one)(X0)
    return jax.lax.map(one, X0, batch_size=batch_size)


def simulate(model: Model, X0, steps: int, *, dynamics: Dynamics = D1, alpha=1.0, beta=1.0, S=None,
             observe: Optional[Callable] = None, aux: Any = None, trajectory: bool = False,
             batch_size: Optional[int] = None, dtype=None) -> Simulation:
    """Run ``steps`` block maps from every initial configuration, under ``jit``.

    Args:
        model: the model; step ``k`` uses weight set ``schedule[k % depth]``.
        X0: ``[B, n, d]`` initial configurations (``[n, d]`` is taken as ``B = 1``).
        steps: number of steps (may exceed the depth: prolonged / repeated passes).
        dynamics: which model (see the module docstring).
        alpha: step size α; beta: inverse temperature β (both traced: changing them does not
            recompile). S: ``[d, d]`` matrix for ellipsoid normalisation.
        observe: ``observe(X: [n, d], k: int32) -> pytree`` evaluated at steps ``0..steps``; only
            what it returns is kept. A module-level function is reused across calls without
            recompiling (a fresh lambda recompiles). Default: :func:`jaxattn.metrics.consensus_observables`.
        aux: a pytree of arrays handed to ``observe(X, k, aux)`` as jit inputs (directions,
            tables...): changing them does not recompile, and they are not baked in as constants.
        trajectory: also keep every configuration (``[B, steps + 1, n, d]``; memory grows with B).
        batch_size: run the batch in chunks of this size (memory flat in B); default: all at once.
        dtype: computation dtype (default: that of X0; float32 unless float64 is asked for).

    Returns:
        :class:`Simulation` with observables ``[B, steps + 1, ...]``, the final state and,
        on request, the trajectory.
    """
    from .metrics import consensus_observables  # late import: metrics imports this module's users

    X0 = jnp.asarray(X0)
    if X0.ndim == 2:
        X0 = X0[None]
    if X0.ndim != 3:
        raise ConfigError(f"X0 must be [B, n, d] or [n, d], got shape {tuple(X0.shape)}")
    if X0.shape[-1] != model.d_model:
        raise ConfigError(f"tokens have dimension {X0.shape[-1]} but the model has d={model.d_model}")
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ConfigError(f"steps must be a non-negative integer, got {steps!r}")
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    check_dynamics(model, dynamics, S)
    dtype = jnp.dtype(dtype) if dtype is not None else X0.dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.dtype(jnp.float32)
    # embeddings and the final norm play no part in the dynamics: leave them out of the jit inputs
    model = model.replace(embeddings=None, final_ln_w=None, final_ln_b=None).astype(dtype)
    S = None if S is None else jnp.asarray(S, dtype)
    B = X0.shape[0]
    bs = None if batch_size is None or batch_size >= B else int(batch_size)
    obs, final, traj = _simulate(X0.astype(dtype), model, jnp.asarray(alpha, dtype), jnp.asarray(beta, dtype),
                                 S, aux, steps=int(steps), dyn=dynamics,
                                 observe=observe or consensus_observables, trajectory=trajectory,
                                 batch_size=bs)
    return Simulation(obs, final, traj)
