"""The maps' and flows' default observables (diameter, cosine consensus): pure JAX functions of one
configuration ``X: [n, d]``, cheap enough to run inside the jitted simulation. They live with the
drivers that use them by default; :mod:`jaxattn.analysis.metrics` re-exports them with the other
metrics.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxattn.errors import ConfigError
from jaxattn.model.backend import gpu_or


def pairwise_distances(X: Float[Array | np.ndarray, "n d"]) -> Float[Array, "n n"]:
    """``[n, n]`` Euclidean distances ``||x_i - x_j||``.

    Gram form on centred tokens: ``||y_i||² + ||y_j||² − 2<y_i, y_j>`` with ``y = x − mean(x)``.
    Centring keeps the cancellation relative to the spread of the tokens, so distances near
    consensus stay accurate, without the ``[n, n, d]`` array of differences (3x faster in sweeps).
    """
    Y = X - X.mean(axis=0, keepdims=True)
    s = jnp.sum(Y * Y, axis=-1)
    sq = s[:, None] + s[None, :] - 2.0 * (Y @ Y.T)
    # sqrt has an infinite derivative at 0 (the diagonal, tokens at consensus): differentiate only the
    # positive entries, so that gradients of distance observables are finite (the values are unchanged)
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


#: Bytes of pairwise terms one configuration's :func:`diameter` may form at once; more tokens go in row chunks.
DIAMETER_BYTES = 2**27
#: Largest d for which :func:`diameter` sums the squared coordinate differences directly (elementwise, one loop
#: that XLA fuses with the max).
DIRECT_MAX_D = 2
#: Largest d for which :func:`diameter` writes the Gram products as a sum over the d coordinates (elementwise,
#: fused by XLA with the max into one loop) rather than a dot product (a call with a fixed cost per block).
UNROLLED_MAX_D = 4


def _max_squared_distance(X: jax.Array | np.ndarray, Y: jax.Array | np.ndarray, rows: jax.Array,
                          cols: jax.Array) -> jax.Array:
    """``max ||x_i - y_j||²`` over pairs of ``X: [r, d]`` and ``Y: [n, d]``, ``rows``/``cols`` their squared norms
    (unused at d ≤ :data:`DIRECT_MAX_D`, where the differences themselves are squared)."""
    d = X.shape[-1]
    if d <= DIRECT_MAX_D:
        D = (X[:, None, 0] - Y[None, :, 0]) ** 2
        for k in range(1, d):
            D = D + (X[:, None, k] - Y[None, :, k]) ** 2
        return D.max()
    return _gram_squares(X, Y, rows, cols).max()


def _gram_squares(X, Y, rows, cols) -> jax.Array:
    """The squared distances ``[r, n]`` of the Gram form (d > :data:`DIRECT_MAX_D`)."""
    d = X.shape[-1]
    G = sum(X[:, None, k] * Y[None, :, k] for k in range(d)) if d <= UNROLLED_MAX_D else X @ Y.T
    return rows[:, None] + cols[None, :] - 2.0 * G


def diameter(X: Float[Array | np.ndarray, "n d"]) -> Float[Array, ""]:
    """Inter-token distance ``max_{i,j} ||x_i - x_j||`` (0 exactly at consensus).

    At d ≤ :data:`DIRECT_MAX_D` from the squared differences themselves: exact, and measured inside the
    simulation loop on a CPU at d = 2 the cheapest form (the Gram form below costs 3-4x as much there). Above, from
    the Gram form of :func:`pairwise_distances` on centred tokens: the largest squared distance is the squared
    spread itself, so the form's round-off (relative to the spread) stays relative to the result, at any distance
    to consensus, and the products go through one loop (d ≤ :data:`UNROLLED_MAX_D`, summed over the coordinates)
    or a dot product. The square root is taken of the largest squared distance only (``sqrt`` is monotone). Many
    tokens are compared in row chunks, so memory stays linear in ``n``. In a program compiled for a GPU, pairs that
    fit one reduction are checked for a blown-up configuration inside it (:func:`_diameter_at_once`).
    """
    X = jnp.asarray(X)
    n = X.shape[0]
    if max(1, min(n, DIAMETER_BYTES // (X.dtype.itemsize * n))) == n:
        return gpu_or(X, gpu=_diameter_at_once, other=_diameter_by_rows)
    return _diameter_by_rows(X)


def _centred(X: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The tokens the diameter compares (centred for the Gram form) and their squared norms."""
    Y = X - X.mean(axis=0, keepdims=True) if X.shape[1] > DIRECT_MAX_D else X
    return Y, jnp.sum(Y * Y, axis=-1)  # the norms unused (and dropped by XLA) where the differences are squared


def _diameter_by_rows(X: jax.Array) -> jax.Array:
    n, d = X.shape
    Y, s = _centred(X)
    r = max(1, min(n, DIAMETER_BYTES // (X.dtype.itemsize * n)))
    if r == n:
        mx = _max_squared_distance(Y, Y, s, s)
    else:  # rows in chunks of r (the last padded with copies of row 0: no new pair, the same max)
        pad = (-n) % r
        Yp = jnp.concatenate([Y, jnp.broadcast_to(Y[:1], (pad, d))]) if pad else Y
        sp = jnp.concatenate([s, jnp.broadcast_to(s[:1], (pad,))]) if pad else s
        blocks = jax.lax.map(lambda b: _max_squared_distance(b[0], Y, b[1], s),
                             (Yp.reshape(-1, r, d), sp.reshape(-1, r)))
        mx = blocks.max()
    # sqrt has an infinite derivative at 0 (all tokens at one point): differentiate only a positive max.
    # A configuration that blew up is NaN, never 0 (which would read as exact consensus): asked of the tokens'
    # squared norms (a NaN or an infinity in a token makes them non-finite), because XLA's vectorised max over the
    # pairs can drop NaNs (seen on a CPU at 1024 lanes). The n norms rather than the n d coordinates where the Gram
    # form computes them anyway: checking every coordinate cost a third of the diameter in a simulation at d = 16
    pos = mx > 0
    blown = ~jnp.isfinite(Y).all() if d <= DIRECT_MAX_D else ~jnp.isfinite(s).all()
    out = jnp.where(pos, jnp.sqrt(jnp.where(pos, mx, 1.0)), 0.0)
    return jnp.where(blown | jnp.isnan(mx), jnp.nan, out)


def _diameter_at_once(X: jax.Array) -> jax.Array:
    """:func:`diameter` as a GPU compiles it into one reduction: the blown-up check inside it (a pair that is not
    finite, from a NaN or an infinite token, counts as an infinite distance, and an infinite largest distance is
    NaN), and at small d the squared differences as one broadcast (coordinate slices are kernels of their own there).
    Equal to :func:`_diameter_by_rows` to round-off (the same products, summed in another order)."""
    Y, s = _centred(X)
    D = ((Y[:, None, :] - Y[None, :, :]) ** 2).sum(-1) if X.shape[1] <= DIRECT_MAX_D else _gram_squares(Y, Y, s, s)
    mx = jnp.where(jnp.inf > D, D, jnp.inf).max()
    pos = mx > 0  # the square root only of a positive max (sqrt has an infinite derivative at 0)
    out = jnp.where(pos, jnp.sqrt(jnp.where(pos, mx, 1.0)), 0.0)
    return jnp.where(mx < jnp.inf, out, jnp.nan)


def cos_consensus(X: Float[Array | np.ndarray, "n d"]) -> Float[Array, ""]:
    """``1 - mean_{i≠j} cos(x_i, x_j)``: 0 exactly at consensus (all tokens parallel)."""
    n = X.shape[0]
    if n == 1:  # a single token is at consensus
        return jnp.zeros((), X.dtype)
    # Σ_{i≠j} <u_i, u_j> = ||Σ_i u_i||² − Σ_i ||u_i||² = ||Σ_i u_i||² − n with u_i = x_i / ||x_i||: O(n d) instead of
    # the O(n² d) Gram matrix. Σ_i u_i as the product of the inverse norms with X: forming the unit tokens and
    # summing them cost about twice as much inside a simulation on a CPU at d = 16 (as much at d = 2); Σ ||u_i||²
    # (1 each to round-off) would cost another pass. m · m as a sum of products (a dot product of two d-vectors is
    # a call, not d flops).
    m = (1.0 / jnp.sqrt(jnp.sum(X * X, axis=-1))) @ X
    pairs = float(n) * (n - 1)  # a Python float: n (n - 1) overflows a 32-bit integer from n = 46,341 on
    return 1.0 - (jnp.sum(m * m) - n) / pairs


def consensus_observables(t, X: Float[Array | np.ndarray, "n d"], ctx=None) -> dict[str, Float[Array, ""]]:
    """Default observables of :func:`jaxattn.simulate` and :func:`jaxattn.solve` (signature
    ``(t, X, ctx)``): diameter and cosine consensus."""
    return {"diameter": diameter(X), "cos_consensus": cos_consensus(X)}


def check_observe(observe) -> None:
    """Refuse, in one line naming the expected signature, an observable that cannot be called ``observe(t, X, ctx)``
    (``t`` the step or time, ``X: [n, d]`` one configuration, ``ctx`` the context: ``ctx.aux``, ``ctx.attention()``):
    the call inside the traced program raised Python's own ``TypeError`` about positional arguments."""
    name = getattr(observe, "__name__", repr(observe))
    if not callable(observe):
        raise ConfigError(f"Save(observe=...) must be a function observe(t, X, ctx), got {observe!r}")
    try:
        sig = inspect.signature(observe)
    except (TypeError, ValueError):  # a callable whose signature Python cannot read: called as it is
        return
    try:
        sig.bind(0, None, None)
    except TypeError:
        raise ConfigError(f"Save(observe=...) is called as observe(t, X, ctx) (t the step or time, X one "
                          f"configuration [n, d], ctx.aux and ctx.attention()); {name}{sig} cannot take those three "
                          "arguments") from None
