"""A fused Pallas kernel for the attention-only block maps (D1–D5) and the choice between it and
the plain JAX path.

The plain path (:func:`jaxattn.simulate`) lets XLA run each block as separate operations: the
projections ``[B, n, 3d]``, the scores ``[B, H, n, n]`` and the update go to device memory and back
at every layer. For the small tokens of most sweeps (d ≤ 128, n ≤ 128) a condition and one layer's
weights fit on chip, so :func:`fused_simulate` keeps each condition on chip through **all** the
steps (one program per condition): projections, masked softmax (or uniform, or unnormalised)
attention, output, residual, normalisation (L2, ``N_S`` or none), and the default observables
(diameter and cosine consensus) computed on chip at every step. Only the initial tokens, the
weights, the final tokens and the observables cross device memory.

It is written for Pallas' Triton lowering, which it selects on a GPU: every array has a power-of-two
size (the tokens, coordinates, head dimensions, heads, weight sets and steps are padded, see
:func:`fused_simulate`) and every product is a 2-D ``dot`` of at least 16 rows and columns. The two
H200 runs of ``make gpu-check`` stopped in that lowering (an array of shape ``(16, 5, 8)``, a batched
dot); ``tests/test_kernels.py`` now lowers every case to Triton for CUDA on a CPU with ``jax.export``. The third
(2026-11-28, jax 0.11.2) compiled it: every case at d <= 16 agreed with the plain path (float32 within 6e-7,
float64 within 7e-16), d = 128 asked for more shared memory than the chip has (which :func:`shared_bytes` now
foresees), and on W1's shape (d = 64, n = 32, 24 layers) it took 2.5 times the plain path's time.

Selection (:func:`choose_path`, from ``Batch(path=...)``): ``'fused'`` forces the kernel where it applies — an
attention-only dynamics without biases (``Dynamics`` with norm ``'l2'``, ``'ellipsoid'`` or ``'none'``), the default
observables at every step or the last, no trajectory, ``n, d ≤ 128``, and on a GPU a footprint that fits its shared
memory — (on a CPU it runs in Pallas interpret mode, which is how the test suite checks it), ``'plain'`` forbids it.
``'auto'`` picks it only where it applies *and* the backend is in :data:`PROVEN_ON`: the backends on which a run of
``make gpu-check`` (``scripts/gpu_check.py``) has shown it to agree with the plain path and to be faster. None has
yet (correct on an H200 but slower on the one shape timed), so ``'auto'`` is the plain path everywhere, and a forced
``'fused'`` that fails to compile is refused in one line naming the cause.
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


#: Shared memory one block may opt into, in bytes, by CUDA compute capability (NVIDIA's tables; the H200's 232,448 is
#: also what its refusals reported). A device not listed is left to the compiler.
SHARED_MEMORY = {"7.0": 98_304, "7.5": 65_536, "8.0": 166_912, "8.6": 101_376, "8.7": 166_912, "8.9": 101_376,
                 "9.0": 232_448, "10.0": 232_448, "12.0": 101_376}


def shared_bytes(n: int, d: int, heads: int, head_dim: int, itemsize: int) -> int:
    """The shared memory the Triton-compiled kernel asks for per program: one weight set of the four projections
    for every head (``4 H d_h D`` elements) and 8 bytes per token coordinate, at the padded sizes, plus 52 bytes.
    Fitted to the four refusals of an H200 (n = 10 and 128 at d = 128, H = 4, float32 and float64), which it gives to
    the byte; the shapes that compiled there (d <= 64) come out far under its 232,448."""
    N, D, DH, HP = _padded(n, d, head_dim, heads)
    return 4 * HP * DH * D * itemsize + 8 * N * D + 52


def _shared_memory_limit() -> int | None:
    """What one block of the default GPU may use, ``None`` off a GPU (interpret mode has no limit) or where the device
    is not in :data:`SHARED_MEMORY`."""
    if jax.default_backend() != "gpu":
        return None
    return SHARED_MEMORY.get(str(getattr(jax.devices()[0], "compute_capability", "")))


class KernelTooBig(ConfigError):
    """A forced fused kernel refused before compiling: its footprint exceeds the GPU's shared memory."""


def _too_big(model, n: int, dtype) -> str | None:
    """Why the kernel cannot fit on this GPU's chip (``dtype``: the run's), before a compilation that would fail
    after seconds."""
    limit = _shared_memory_limit()
    if limit is None:
        return None
    _, H, dh, d = model.layers.q.shape
    dtype = jnp.dtype(model.layers.q.dtype if dtype is None else dtype)
    need = shared_bytes(n, d, H, dh, dtype.itemsize)
    if need <= limit:
        return None
    return (f"the fused kernel needs about {need:,} bytes of shared memory per condition at n = {n}, d = {d}, "
            f"{H} heads in {dtype.name}; this GPU has {limit:,}")


def choose_path(path: str, model, dyn, observe, trajectory: bool, every, n: int, dtype=None) -> str:
    """``'fused'`` or ``'plain'`` for a simulation whose ``Batch(path=...)`` is ``path`` and whose
    ``Save(every=...)`` is ``every``, run in ``dtype`` (default: the weights') (see the module docstring)."""
    if path not in PATHS:
        raise ConfigError(f"Batch(path=...) must be one of {', '.join(PATHS)}, got {path!r}")
    if path == "plain":
        return "plain"
    why = applies(model, dyn, observe, trajectory, every) or (
        f"the fused kernel supports n <= {MAX_TOKENS} tokens" if n > MAX_TOKENS else None)
    big = None if why else _too_big(model, n, dtype)
    if path == "fused":
        if big:
            raise KernelTooBig(big)
        if why:
            raise ConfigError(why)
        return "fused"
    why = why or big
    return "fused" if why is None and jax.default_backend() in PROVEN_ON else "plain"


def _pow2(x: int, least: int = 1) -> int:
    """The smallest power of two ``>= max(x, least)``."""
    return max(least, 1 << max(x - 1, 0).bit_length())


def _padded(n: int, d: int, head_dim: int, heads: int) -> tuple[int, int, int, int]:
    """The kernel's padded tokens, coordinates, head dimension and heads (:func:`fused_simulate`), which
    :func:`shared_bytes` sizes too."""
    return _pow2(n, DOT_MIN), _pow2(d, DOT_MIN), _pow2(head_dim, DOT_MIN), _pow2(heads)


#: Smallest padded extent of the axes that enter a matrix product: Triton's ``tl.dot`` needs at least 16 rows and
#: columns (and a float64 product at least 16 rows and a depth of 16).
DOT_MIN = 16


def _dot(a, b, ca: int, cb: int):
    """A 2-D matrix product contracting axis ``ca`` of ``a`` with axis ``cb`` of ``b``, with no batch axes (the only
    kind Pallas' Triton lowering takes). Its precision is the caller's (the driver's ``Batch(precision=...)``)."""
    return jax.lax.dot_general(a, b, (((ca,), (cb,)), ((), ())))


def _row0(X, rows):
    """Row 0 of ``X: [N, D]`` as ``[D]``, by a masked sum (the Triton lowering has no slices of a loaded block)."""
    return jnp.sum(jnp.where((rows == 0)[:, None], X, 0.0), axis=0)


def _observe(X, n: int, rows):
    """Diameter and cosine consensus of one padded configuration ``X: [N, D]`` whose first ``n`` rows are the tokens
    (the rows after them are copies of row 0, which add no pair to the diameter; the columns after ``d`` are 0)."""
    real = rows < n
    mu = jnp.sum(jnp.where(real[:, None], X, 0.0), axis=0) / n
    Y = X - mu[None, :]
    s = jnp.sum(Y * Y, axis=-1)
    sq = s[:, None] + s[None, :] - 2.0 * _dot(Y, Y, 1, 1)
    diam = jnp.sqrt(jnp.maximum(jnp.max(sq), 0.0))
    inv = jnp.where(real, 1.0 / jnp.sqrt(jnp.sum(X * X, axis=-1)), 0.0)
    m = jnp.sum(X * inv[:, None], axis=0)
    cos = 1.0 - (jnp.sum(m * m) - n) / (n * (n - 1)) if n > 1 else jnp.zeros_like(diam)
    return diam, cos


def _kernel(x_ref, sets_ref, q_ref, k_ref, v_ref, o_ref, causal_ref, window_ref, scale_ref, ab_ref, s_ref,
            xo_ref, diam_ref, cos_ref, *, n: int, heads: int, steps: int, norm: str, attention: str, every: bool):
    """One condition: ``x_ref: [1, N, D]``, padded to powers of two (rows after ``n`` copies of token 0, columns
    after ``d`` zero; the weights' padded rows and columns are zero, so the padded columns stay zero). No array has
    more than two axes and every product is a 2-D ``dot``: what Pallas' Triton lowering accepts."""
    X = x_ref[0]  # [N, D]
    N = X.shape[0]
    alpha, beta = ab_ref[0], ab_ref[1]
    i = jax.lax.broadcasted_iota(jnp.int32, (N, N), 0)
    j = jax.lax.broadcasted_iota(jnp.int32, (N, N), 1)
    rows = jax.lax.broadcasted_iota(jnp.int32, (N,), 0)

    def record(k, X):
        d_, c_ = _observe(X, n, rows)
        diam_ref[0, pl.ds(k, 1)] = jnp.broadcast_to(d_, (1,))
        cos_ref[0, pl.ds(k, 1)] = jnp.broadcast_to(c_, (1,))

    if every:
        record(0, X)

    def step(k, X):
        g = sets_ref[k]
        # padded keys never attend; padded queries attend like any token (their rows are reset below)
        ok = ((j < n) & jnp.where(causal_ref[g] > 0, j <= i, True)
              & jnp.where(window_ref[g] > 0, jnp.abs(i - j) < window_ref[g], True))
        upd = jnp.zeros_like(X)
        for h in range(heads):
            # unnormalised weights W and their row normaliser z; the division comes after the weighted sum
            # (N d_h divisions instead of N², as the plain path's softmax)
            z: jax.Array | float
            if attention == "uniform":
                W = ok.astype(X.dtype)
                z = jnp.sum(W, axis=-1, keepdims=True)
            else:
                S = _dot(_dot(X, q_ref[g, h], 1, 1), _dot(X, k_ref[g, h], 1, 1), 1, 1) * (beta * scale_ref[g])
                if attention == "unnormalised":
                    W, z = jnp.where(ok, jnp.exp(S), 0.0), float(n)
                else:
                    S = jnp.where(ok, S, -jnp.inf)
                    W = jnp.exp(S - jnp.max(S, axis=-1, keepdims=True))
                    z = jnp.sum(W, axis=-1, keepdims=True)
            upd = upd + _dot(_dot(W, _dot(X, v_ref[g, h], 1, 1), 1, 0) / z, o_ref[g, h], 1, 1)
        Y = X + alpha * upd
        if norm != "none":  # a token whose squared norm overflowed is NaN, not Y / inf = 0 (as Geometry.retract)
            m = jnp.sum((Y if norm == "l2" else _dot(Y, s_ref[...], 1, 0)) * Y, axis=-1, keepdims=True)
            Y = jnp.where(m < jnp.inf, Y / jnp.sqrt(m), jnp.nan)
        # the padded rows back to copies of token 0: finite (a zero row would normalise to NaN, and NaN times a
        # zero weight is NaN) and no new pair for the diameter
        Y = jnp.where((rows < n)[:, None], Y, _row0(Y, rows)[None, :])
        if every:
            record(k + 1, Y)
        return Y

    X = jax.lax.fori_loop(0, steps, step, X)
    if not every:
        record(0, X)
    xo_ref[0] = X


def _triton_params():
    """Pallas' Triton compiler parameters, which select that lowering on a GPU (jax 0.10's default for
    ``pallas_call`` there is Mosaic GPU); ``None`` where this jax has no Triton backend."""
    try:
        from jax.experimental.pallas import triton as pltriton
    except ImportError:  # pragma: no cover - a jax without the Triton backend
        return None
    return pltriton.CompilerParams()


@functools.partial(jax.jit, static_argnames=("n", "heads", "steps", "norm", "attention", "every", "interpret"))
def _fused(X0, sets, q, k, v, o, causal, window, scale, ab, S, *, n, heads, steps, norm, attention, every, interpret):
    """The kernel over a padded batch ``X0: [B, N, D]`` (one program per condition)."""
    B, N, D = X0.shape
    G, H, DH, _ = q.shape
    T = sets.shape[0] + 1 if every else 1  # the observation blocks, padded to a power of two like ``sets``
    T = _pow2(T)
    whole = lambda *shape: pl.BlockSpec(shape, lambda b: (0,) * len(shape))
    kern = functools.partial(_kernel, n=n, heads=heads, steps=steps, norm=norm, attention=attention, every=every)
    return pl.pallas_call(
        kern,
        out_shape=(jax.ShapeDtypeStruct((B, N, D), X0.dtype), jax.ShapeDtypeStruct((B, T), X0.dtype),
                   jax.ShapeDtypeStruct((B, T), X0.dtype)),
        grid=(B,),
        in_specs=[pl.BlockSpec((1, N, D), lambda b: (b, 0, 0)), whole(sets.shape[0]), whole(G, H, DH, D),
                  whole(G, H, DH, D), whole(G, H, DH, D), whole(G, H, D, DH), whole(G), whole(G), whole(G), whole(2),
                  whole(D, D)],
        out_specs=(pl.BlockSpec((1, N, D), lambda b: (b, 0, 0)), pl.BlockSpec((1, T), lambda b: (b, 0)),
                   pl.BlockSpec((1, T), lambda b: (b, 0))),
        compiler_params=None if interpret else _triton_params(),
        interpret=interpret,
    )(X0, sets, q, k, v, o, causal, window, scale, ab, S)


def _pad(a, shape):
    """``a`` with zeros appended to reach ``shape``."""
    return jnp.pad(a, [(0, t - s) for s, t in zip(a.shape, shape, strict=True)])


def fused_simulate(model, X0, steps: int, *, dyn, alpha, beta, S=None, every=None, interpret: bool | None = None):
    """The fused path of :func:`jaxattn.simulate` (validated inputs, cast model): returns
    ``(observables, final)`` with observables ``{'diameter', 'cos_consensus'}: [B, T]``.

    Every axis is padded to a power of two (the axes of matrix products to at least :data:`DOT_MIN`), as Pallas'
    Triton lowering requires: tokens with copies of token 0 (masked as keys, reset after every step), coordinates
    and head dimensions with zeros (zero weights keep them zero), weight sets, heads and steps with zeros."""
    B, n, d = X0.shape
    lay = model.layers
    dtype = X0.dtype
    G, H, dh, _ = lay.q.shape
    N, D, DH, HP = _padded(n, d, dh, H)
    GP = _pow2(G)
    Xp = jnp.concatenate([X0, jnp.broadcast_to(X0[:, :1], (B, N - n, d))], axis=1) if n < N else X0
    Xp = _pad(Xp, (B, N, D))
    sets = jnp.asarray([model.schedule[k % model.depth] for k in range(max(steps, 1))], jnp.int32)
    sets = _pad(sets, (_pow2(sets.shape[0]),))
    w = lambda a, shape: _pad(a.astype(dtype), shape)
    q, k, v = (w(a, (GP, HP, DH, D)) for a in (lay.q, lay.k, lay.v))
    o = w(lay.o, (GP, HP, D, DH))
    ab = jnp.asarray([alpha, beta], dtype)
    Sm = _pad(jnp.eye(d, dtype=dtype) if S is None else jnp.asarray(S, dtype), (D, D))
    interpret = jax.default_backend() != "gpu" if interpret is None else interpret
    final, diam, cos = _fused(Xp, sets, q, k, v, o, _pad(lay.causal.astype(jnp.int32), (GP,)),
                              _pad(lay.window.astype(jnp.int32), (GP,)), _pad(lay.scale.astype(dtype), (GP,)), ab, Sm,
                              n=n, heads=H, steps=int(steps), norm=dyn.norm, attention=dyn.attention,
                              every=every != "last", interpret=interpret)
    T = steps + 1 if every != "last" else 1
    return {"diameter": diam[:, :T], "cos_consensus": cos[:, :T]}, final[:, :n, :d]
