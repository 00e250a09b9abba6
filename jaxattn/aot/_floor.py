"""The floor: the papers' one-head map in the fewest lines of JAX, the program a driver's is held against."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

_HI = jax.lax.Precision.HIGHEST


def floor_observables(X: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The default observables of a batch ``X: [b, n, d]`` in the fewest lines: the diameter from the squared
    differences at d <= 2, from the uncentred Gram form above (a paper script's formula: the cheapest, if not the
    most accurate near consensus), and the cosine consensus from the sum of the unit tokens."""
    _, n, d = X.shape
    if d <= 2:
        sq = ((X[:, :, None, :] - X[:, None, :, :]) ** 2).sum(-1)
    else:
        s = (X * X).sum(-1)
        sq = s[:, :, None] + s[:, None, :] - 2.0 * jnp.einsum("bid,bjd->bij", X, X, precision=_HI)
    m = (X / jnp.linalg.norm(X, axis=-1, keepdims=True)).sum(1)
    return jnp.sqrt(jnp.maximum(sq.max(axis=(1, 2)), 0.0)), 1.0 - ((m * m).sum(-1) - n) / (n * (n - 1.0))


def floor(steps: int, *, alpha: float, beta: float, value: np.ndarray | None = None, observed: bool = False,
          unroll: int = 1) -> Callable[[jax.Array], tuple[jax.Array, tuple | None]]:
    """``X0: [B, n, d] -> (X_steps, observables)``: D1 on the sphere with ``Q = K = I`` and the value matrix ``value``
    (``None``: the identity, the sphere model), ``x_i <- N(x_i + α Σ_j softmax_j(β <x_i, x_j>) V x_j)``, as a paper's
    script writes it (``lax.scan`` of an einsum, the softmax, an einsum and the norm) and nothing else: no checks, no
    blocks, no overflow read as NaN. ``observed``: :func:`floor_observables` after every step; ``unroll``: steps per
    iteration of the loop (``lax.scan(unroll=...)``)."""
    V = None if value is None else jnp.asarray(np.asarray(value).T)

    def loop(X):
        def f(X, _):
            P = jax.nn.softmax(beta * jnp.einsum("bid,bjd->bij", X, X, precision=_HI), axis=-1)
            U = jnp.einsum("bij,bjd->bid", P, X, precision=_HI)
            Y = X + alpha * (U if V is None else jnp.matmul(U, V.astype(U.dtype), precision=_HI))
            Y = Y / jnp.linalg.norm(Y, axis=-1, keepdims=True)
            return Y, (floor_observables(Y) if observed else None)

        return jax.lax.scan(f, X, None, length=steps, unroll=unroll)

    return loop
