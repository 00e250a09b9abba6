"""Scores, masks and multi-head self-attention for one configuration ``X: [n, d]``.

All functions act on a single configuration; batches come from ``vmap``. ``lw`` is one weight set
(:meth:`jaxattn.model.params.Layers.take`), so ``lw.q: [H, d_h, d]``, ``lw.k, lw.v: [H_kv, d_h, d]``
(grouped-query attention when ``H_kv < H``: query head ``h`` reads key/value head ``h // (H / H_kv)``),
``lw.o: [H, d, d_h]``. ``rope``: the ``(cos, sin)`` tables ``[n, r]`` of :func:`jaxattn.model.rope.cos_sin`,
applied to queries and keys by token index (``None``: position-free attention).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxattn.errors import ConfigError
from jaxattn.model.params import Layers
from jaxattn.model.rope import rotate


def _per_query_head(a: jax.Array, H: int) -> jax.Array:
    """Key/value heads ``[H_kv, ...]`` repeated to the ``H`` query heads (GQA; no-op when equal)."""
    return a if a.shape[0] == H else jnp.repeat(a, H // a.shape[0], axis=0)


def allowed(n: int, causal, window) -> jax.Array:
    """Boolean ``[n, n]`` mask, ``True`` where token i may attend to token j.

    causal: ``j <= i``; window ``w > 0``: ``|i - j| < w`` (with causal, GPT-Neo's
    ``i - w < j <= i``); ``w = 0``: no window. ``causal`` and ``window`` may be traced.

    Examples:
        >>> import jaxattn as ja
        >>> ja.allowed(4, True, 2).astype(int).tolist()   # GPT-Neo's local causal window of width 2
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    causal = jnp.asarray(causal) != 0  # a flag (float in a model, see params.MASK_DTYPE)
    window = jnp.asarray(window).astype(jnp.int32)  # positions and window in one integer type (strict promotion)
    i = jnp.arange(n, dtype=jnp.int32)[:, None]
    j = jnp.arange(n, dtype=jnp.int32)[None, :]
    ok = jnp.where(causal, j <= i, True)
    return ok & jnp.where(window > 0, jnp.abs(i - j) < window, True)


KERNELS = ("softmax", "uniform", "unnormalised")


def probabilities(X: jax.Array, lw: Layers, beta=1.0, *, biases: bool = False, kernel: str = "softmax",
                  rope=None) -> jax.Array:
    """Attention weights ``A: [H, n, n]`` (``A[h, i, j] = a^h_ij``) of one configuration ``X: [n, d]``.

    Scores are ``e^h_ij = beta * s * <Q_h x_i + b^q_h, K_h x_j + b^k_h>`` on the allowed pairs (with
    ``rope``: ``<R_i (Q_h x_i + b^q_h), R_j (K_h x_j + b^k_h)>``, ``R_i`` the rotation of position ``i``). Kernels:

    * ``'softmax'``: ``a^h_ij = softmax_j(e^h_ij)`` (rows sum to 1);
    * ``'uniform'``: every allowed ``j`` gets the same weight (the multi-agent Oja model);
    * ``'unnormalised'``: ``a^h_ij = exp(e^h_ij) / n`` on the allowed pairs (rows do not sum to 1;
      the default of the clustering papers' public code).

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, mask="causal")
        >>> lw = model.layers.take(0)                          # one weight set
        >>> X = ja.init_tokens(jax.random.key(1), 1, 5, 8)[0]
        >>> A = ja.probabilities(X, lw)
        >>> A.shape, bool(np.allclose(A.sum(-1), 1.0)), bool((np.triu(A[0], 1) == 0).all())
        ((2, 5, 5), True, True)
        >>> np.asarray(ja.probabilities(X, lw, kernel="uniform")[0, 2], np.float64).round(4).tolist()   # row 2
        [0.3333, 0.3333, 0.3333, 0.0, 0.0]
    """
    if kernel not in KERNELS:
        raise ConfigError(f"attention kernel must be one of {KERNELS}, got {kernel!r}")
    n = X.shape[0]
    ok = allowed(n, lw.causal, lw.window)
    H = lw.q.shape[0]
    if kernel == "uniform":
        w = ok.astype(X.dtype)
        return jnp.broadcast_to(w / w.sum(-1, keepdims=True), (H, n, n))
    q = jnp.einsum("nd,hkd->hnk", X, lw.q)
    k = jnp.einsum("nd,hkd->hnk", X, lw.k)
    if biases and lw.bq is not None:
        q = q + lw.bq[:, None, :]
    if biases and lw.bk is not None:
        k = k + lw.bk[:, None, :]
    if rope is not None:
        q, k = rotate(q, *rope), rotate(k, *rope)
    k = _per_query_head(k, H)
    scores = jnp.einsum("hik,hjk->hij", q, k) * (beta * lw.scale)
    if kernel == "unnormalised":
        return jnp.where(ok[None], jnp.exp(scores), 0.0) / n
    scores = jnp.where(ok[None], scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1)


def apply(X: jax.Array, A: jax.Array, lw: Layers, *, biases: bool = False) -> jax.Array:
    """``Σ_h O_h Σ_j A[h, i, j] (V_{g(h)} x_j + b^v_{g(h)}) (+ b^o)`` for given weights ``A: [H, n, n]``
    (``g(h) = h`` without GQA)."""
    v = jnp.einsum("nd,hkd->hnk", X, lw.v)
    if biases and lw.bv is not None:
        v = v + lw.bv[:, None, :]
    v = _per_query_head(v, lw.o.shape[0])
    heads = jnp.einsum("hij,hjk->hik", A, v)  # [H, n, d_h]
    out = jnp.einsum("hik,hdk->id", heads, lw.o)
    if biases and lw.bo is not None:
        out = out + lw.bo[None, :]
    return out


def attend(X: jax.Array, lw: Layers, beta=1.0, *, biases: bool = False, kernel: str = "softmax",
           return_probs: bool = False, rope=None):
    """Multi-head attention update ``Σ_h O_h Σ_j a^h_ij (V_h x_j + b^v_h) (+ b^o)``, shape ``[n, d]``."""
    A = probabilities(X, lw, beta, biases=biases, kernel=kernel, rope=rope)
    out = apply(X, A, lw, biases=biases)
    return (out, A) if return_probs else out
