"""A fused Pallas kernel for the attention-only block maps (D1–D5) and the choice between it and
the plain JAX path.

The plain path (:func:`jaxattn.simulate`) lets XLA run each block as separate operations: the
projections ``[B, n, 3d]``, the scores ``[B, H, n, n]`` and the update go to device memory and back
at every layer. For the small tokens of most sweeps (d ≤ 128, n ≤ 128) one tile of conditions and
one layer's weights fit on chip, so :func:`fused_simulate` keeps a tile of ``tile`` conditions on
chip through **all** the steps: projections, masked softmax (or uniform, or unnormalised) attention,
output, residual, normalisation (L2, ``N_S`` or none), and the default observables (diameter and
cosine consensus) computed on chip at every step. Only the initial tile, the weights, the final
tile and the observables cross device memory.

Selection (:func:`choose_path`, from ``Batch(path=...)``): ``'fused'`` forces the kernel where it applies — an
attention-only dynamics without biases (``Dynamics`` with norm ``'l2'``, ``'ellipsoid'`` or ``'none'``), the default
observables at every step or the last, no trajectory, ``n, d ≤ 128`` — (on a CPU it runs in Pallas
interpret mode, which is how the test suite checks it), ``'plain'`` forbids it. ``'auto'`` picks it
only where it applies *and* the backend is in :data:`PROVEN_ON`: the backends on which a run of
``make gpu-check`` (``scripts/gpu_check.py``) has shown it to agree with the plain path and to be
faster. None has yet (on the two H200 runs Pallas' Triton lowering refused the kernel), so ``'auto'`` is the plain
path everywhere, and a forced ``'fused'`` that fails to compile is refused in one line naming the cause.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from jaxattn.dynamics.observables import consensus_observables
from jaxattn.dynamics.options import PATHS
from jaxattn.errors import ConfigError

MAX_TOKENS = 128
MAX_DIM = 128
#: Backends on which ``Batch(path='auto')`` uses the fused kernel. Empty until a GPU run of ``make gpu-check`` shows the
#: kernel correct and faster there (docs/gpu.md records what was measured): nothing unproven runs by default.
PROVEN_ON: tuple[str, ...] = ()


def applies(model, dyn, observe, trajectory: bool, every) -> str | None:
    """``None`` if the fused kernel can run this simulation, else the reason it cannot."""
    if dyn.ffn or dyn.biases or dyn.pre_ln or dyn.drop_ln2 or dyn.norm == "layernorm":
        return "the fused kernel runs attention-only dynamics (no FFN, biases, pre-norm or LayerNorm)"
    if getattr(dyn, "rope", "none") != "none" or model.layers.k.shape[1] != model.layers.q.shape[1]:
        return "the fused kernel runs position-free multi-head attention (no RoPE, no grouped-query attention)"
    if observe not in (None, consensus_observables):
        return "the fused kernel computes the default observables (diameter, cos_consensus) only"
    if trajectory:
        return "the fused kernel keeps no trajectory"
    if every not in (None, 1, "last"):
        return "the fused kernel observes every step or the last one"
    if model.layers.d_model > MAX_DIM:
        return f"the fused kernel supports d <= {MAX_DIM}"
    return None


def choose_path(path: str, model, dyn, observe, trajectory: bool, every, n: int) -> str:
    """``'fused'`` or ``'plain'`` for a simulation whose ``Batch(path=...)`` is ``path`` and whose
    ``Save(every=...)`` is ``every`` (see the module docstring)."""
    if path not in PATHS:
        raise ConfigError(f"Batch(path=...) must be one of {', '.join(PATHS)}, got {path!r}")
    if path == "plain":
        return "plain"
    why = applies(model, dyn, observe, trajectory, every) or (
        f"the fused kernel supports n <= {MAX_TOKENS} tokens" if n > MAX_TOKENS else None)
    if path == "fused":
        if why:
            raise ConfigError(why)
        return "fused"
    return "fused" if why is None and jax.default_backend() in PROVEN_ON else "plain"


def _observe(X):
    """Diameter and cosine consensus of every configuration of a tile ``X: [T, n, d]``."""
    n = X.shape[1]
    Y = X - X.mean(axis=1, keepdims=True)
    G = jnp.einsum("tid,tjd->tij", Y, Y)
    s = jnp.einsum("tii->ti", G)
    sq = s[:, :, None] + s[:, None, :] - 2.0 * G
    diam = jnp.sqrt(jnp.maximum(sq, 0.0)).max(axis=(1, 2))
    U = X / jnp.sqrt(jnp.sum(X * X, axis=-1, keepdims=True))
    C = jnp.einsum("tid,tjd->tij", U, U)
    cos = 1.0 - (C.sum(axis=(1, 2)) - jnp.einsum("tii->t", C)) / max(n * (n - 1), 1)
    if n == 1:
        cos = jnp.zeros_like(cos)
    return diam, cos


def _kernel(x_ref, sets_ref, q_ref, k_ref, v_ref, o_ref, causal_ref, window_ref, scale_ref, ab_ref, s_ref,
            xo_ref, diam_ref, cos_ref, *, steps: int, norm: str, attention: str, every: bool):
    X = x_ref[...]  # [T, n, d]
    n = X.shape[1]
    alpha, beta = ab_ref[0], ab_ref[1]
    i = jax.lax.broadcasted_iota(jnp.int32, (n, n), 0)
    j = jax.lax.broadcasted_iota(jnp.int32, (n, n), 1)

    def record(k, X):
        d_, c_ = _observe(X)
        diam_ref[:, pl.ds(k, 1)] = d_[:, None]
        cos_ref[:, pl.ds(k, 1)] = c_[:, None]

    if every:
        record(0, X)

    def step(k, X):
        g = sets_ref[k]
        q, kk, v, o = q_ref[g], k_ref[g], v_ref[g], o_ref[g]  # [H, dh, d], [H, d, dh]
        ok = (jnp.where(causal_ref[g] > 0, j <= i, True)
              & jnp.where(window_ref[g] > 0, jnp.abs(i - j) < window_ref[g], True))
        if attention == "uniform":
            w = ok.astype(X.dtype)
            A = jnp.broadcast_to((w / w.sum(-1, keepdims=True))[None, None], (X.shape[0], q.shape[0], n, n))
        else:
            Qx = jnp.einsum("tnd,hkd->thnk", X, q)
            Kx = jnp.einsum("tnd,hkd->thnk", X, kk)
            S = jnp.einsum("thik,thjk->thij", Qx, Kx) * (beta * scale_ref[g])
            if attention == "unnormalised":
                A = jnp.where(ok[None, None], jnp.exp(S), 0.0) / n
            else:
                S = jnp.where(ok[None, None], S, -jnp.inf)
                S = S - S.max(axis=-1, keepdims=True)
                E = jnp.exp(S)
                A = E / E.sum(axis=-1, keepdims=True)
        Vx = jnp.einsum("tnd,hkd->thnk", X, v)
        upd = jnp.einsum("thik,hdk->tid", jnp.einsum("thij,thjk->thik", A, Vx), o)
        Y = X + alpha * upd
        if norm == "l2":
            Y = Y / jnp.sqrt(jnp.sum(Y * Y, axis=-1, keepdims=True))
        elif norm == "ellipsoid":
            Sm = s_ref[...]
            Y = Y / jnp.sqrt(jnp.einsum("tnd,de,tne->tn", Y, Sm, Y))[..., None]
        if every:
            record(k + 1, Y)
        return Y

    X = jax.lax.fori_loop(0, steps, step, X)
    if not every:
        record(0, X)
    xo_ref[...] = X


@functools.partial(jax.jit, static_argnames=("steps", "norm", "attention", "every", "tile", "interpret"))
def _fused(X0, sets, q, k, v, o, causal, window, scale, ab, S, *, steps, norm, attention, every, tile, interpret):
    B, n, d = X0.shape
    G, H, dh, _ = q.shape
    T = steps + 1 if every else 1
    whole = lambda *shape: pl.BlockSpec(shape, lambda b: (0,) * len(shape))
    kern = functools.partial(_kernel, steps=steps, norm=norm, attention=attention, every=every)
    return pl.pallas_call(
        kern,
        out_shape=(jax.ShapeDtypeStruct((B, n, d), X0.dtype), jax.ShapeDtypeStruct((B, T), X0.dtype),
                   jax.ShapeDtypeStruct((B, T), X0.dtype)),
        grid=(B // tile,),
        in_specs=[pl.BlockSpec((tile, n, d), lambda b: (b, 0, 0)), whole(steps), whole(G, H, dh, d), whole(G, H, dh, d),
                  whole(G, H, dh, d), whole(G, H, d, dh), whole(G), whole(G), whole(G), whole(2), whole(d, d)],
        out_specs=(pl.BlockSpec((tile, n, d), lambda b: (b, 0, 0)), pl.BlockSpec((tile, T), lambda b: (b, 0)),
                   pl.BlockSpec((tile, T), lambda b: (b, 0))),
        interpret=interpret,
    )(X0, sets, q, k, v, o, causal, window, scale, ab, S)


def fused_simulate(model, X0, steps: int, *, dyn, alpha, beta, S=None, every=None, tile: int = 16,
                   interpret: bool | None = None):
    """The fused path of :func:`jaxattn.simulate` (validated inputs, cast model): returns
    ``(observables, final)`` with observables ``{'diameter', 'cos_consensus'}: [B, T]``."""
    B, n, d = X0.shape
    lay = model.layers
    dtype = X0.dtype
    pad = (-B) % tile
    Xp = jnp.concatenate([X0, jnp.broadcast_to(X0[:1], (pad, n, d))]) if pad else X0
    sets = jnp.asarray([model.schedule[k % model.depth] for k in range(max(steps, 1))], jnp.int32)
    ab = jnp.asarray([alpha, beta], dtype)
    Sm = jnp.eye(d, dtype=dtype) if S is None else jnp.asarray(S, dtype)
    interpret = jax.default_backend() != "gpu" if interpret is None else interpret
    final, diam, cos = _fused(Xp, sets, lay.q, lay.k, lay.v, lay.o, lay.causal.astype(jnp.int32),
                              lay.window.astype(jnp.int32), lay.scale.astype(dtype), ab, Sm, steps=int(steps),
                              norm=dyn.norm, attention=dyn.attention, every=every != "last", tile=tile,
                              interpret=interpret)
    return {"diameter": diam[:B], "cos_consensus": cos[:B]}, final[:B]
