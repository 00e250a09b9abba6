"""Scores, masks and multi-head self-attention for one configuration ``X: [n, d]``.

All functions act on a single configuration; batches come from ``vmap``. ``lw`` is one weight set
(:meth:`jaxattn.model.params.Layers.take`), so ``lw.q: [H, d_h, d]``, ``lw.k, lw.v: [H_kv, d_h, d]``
(grouped-query attention when ``H_kv < H``: query head ``h`` reads key/value head ``h // (H / H_kv)``),
``lw.o: [H, d, d_h]``. ``rope``: the ``(cos, sin)`` tables ``[n, r]`` of :func:`jaxattn.model.rope.cos_sin`,
applied to queries and keys by token index (``None``: position-free attention). ``form``: how the
products are arranged (:class:`jaxattn.model.forms.Form`; ``None``, the general per-head form); every
form gives the same numbers up to round-off.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike
from jaxtyping import Array, Bool, Float

from jaxattn.errors import ConfigError
from jaxattn.model import fused, precision
from jaxattn.model.backend import gpu_or
from jaxattn.model.forms import GENERAL, Form
from jaxattn.model.params import Layers
from jaxattn.model.precision import full_precision, rounded
from jaxattn.model.rope import rotate


def _per_query_head(a: ArrayLike, H: int) -> jax.Array:
    """Key/value heads ``[H_kv, ...]`` repeated to the ``H`` query heads (GQA; no-op when equal)."""
    a = jnp.asarray(a)
    return a if a.shape[0] == H else jnp.repeat(a, H // a.shape[0], axis=0)


def _broadcast_einsum(spec: str, a: ArrayLike, b: ArrayLike) -> jax.Array:
    """``jnp.einsum(spec, a, b)`` as an elementwise product and a sum (no dot product): XLA's CPU backend
    fuses it, with what surrounds it, into one loop, which beats a dot product over a short axis."""
    ins, out = spec.split("->")
    sa, sb = ins.split(",")
    letters = list(dict.fromkeys(sa + sb))

    def spread(x, s):  # x's axes in the order of `letters`, size-1 axes where x has none
        own = [c for c in letters if c in s]
        x = jnp.transpose(x, [s.index(c) for c in own])
        return x.reshape([x.shape[own.index(c)] if c in s else 1 for c in letters])

    summed = tuple(i for i, c in enumerate(letters) if c not in out)
    r = (spread(a, sa) * spread(b, sb)).sum(axis=summed)
    kept = [c for c in letters if c in out]
    return jnp.transpose(r, [kept.index(c) for c in out])


def _contract(spec: str, a: ArrayLike, b: ArrayLike, form: Form) -> jax.Array:
    a, b = rounded(jnp.asarray(a), jnp.asarray(b))  # bfloat16 operands under Batch(precision='bf16'), in every form
    return jnp.einsum(spec, a, b) if form.products == "einsum" else _broadcast_einsum(spec, a, b)


def _project(X: jax.Array, w: ArrayLike, member: str, form: Form) -> jax.Array:
    """``X @ w[h].T`` for every head, ``[H, n, d_h]``; a reshape where the stacked member is the identity."""
    if member in form.identity:
        H, dh = jnp.shape(w)[:2]
        return X.reshape(X.shape[0], H, dh).transpose(1, 0, 2)
    return _contract("nd,hkd->hnk", X, w, form)


def _pairs(i: jax.Array, j: jax.Array, causal, window) -> jax.Array:
    causal = jnp.asarray(causal) != 0  # a flag (float in a model, see params.MASK_DTYPE)
    window = jnp.asarray(window).astype(jnp.int32)  # positions and window in one integer type (strict promotion)
    ok = jnp.where(causal, j <= i, True)
    return ok & jnp.where(window > 0, jnp.abs(i - j) < window, True)


def allowed(n: int, causal, window) -> Bool[Array, "n n"]:
    """Boolean ``[n, n]`` mask, ``True`` where token i may attend to token j.

    causal: ``j <= i``; window ``w > 0``: ``|i - j| < w`` (with causal, GPT-Neo's
    ``i - w < j <= i``); ``w = 0``: no window. ``causal`` and ``window`` may be traced.

    Examples:
        >>> import jaxattn as ja
        >>> ja.model.attention.allowed(4, True, 2).astype(int).tolist()   # GPT-Neo's local causal window of width 2
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    i = jnp.arange(n, dtype=jnp.int32)[:, None]
    j = jnp.arange(n, dtype=jnp.int32)[None, :]
    return _pairs(i, j, causal, window)


#: The attention kinds: what ``Dynamics(attention=...)``, ``Flow(attention=...)`` and :func:`probabilities` take.
ATTENTIONS = ("softmax", "uniform", "unnormalised")


def _queries_keys(X: jax.Array, lw: Layers, *, biases: bool, rope, form: Form):
    """Queries and keys ``[H, n, e]`` whose inner products are the unscaled scores: per head
    ``(X Q_hᵀ + b^q_h, X K_hᵀ + b^k_h)``, or in the bilinear form ``(X B_h, X)`` with ``B_h = Q_hᵀ K_h``."""
    H = lw.q.shape[0]
    if form.scores == "bilinear":  # no biases, no RoPE (forms.choose): x_iᵀ Q_hᵀ K_h x_j
        B = jnp.einsum("hkd,hke->hde", *rounded(jnp.asarray(lw.q), _per_query_head(lw.k, H)))
        return _contract("nd,hde->hne", X, B, form), jnp.broadcast_to(X[None], (H, *X.shape))
    q = _project(X, lw.q, "q", form)
    k = _project(X, lw.k, "k", form)
    if biases and lw.bq is not None:
        q = q + lw.bq[:, None, :]
    if biases and lw.bk is not None:
        k = k + lw.bk[:, None, :]
    if rope is not None:
        q, k = rotate(q, *rope), rotate(k, *rope)
    return q, _per_query_head(k, H)


@full_precision
def probabilities(X: Float[Array, "n d"], lw: Layers, beta=1.0, *, biases: bool = False, attention: str = "softmax",
                  rope=None, form: Form | None = None) -> Float[Array, "H n n"]:
    """Attention weights ``A: [H, n, n]`` (``A[h, i, j] = a^h_ij``) of one configuration ``X: [n, d]``.

    Scores are ``e^h_ij = beta * s * <Q_h x_i + b^q_h, K_h x_j + b^k_h>`` on the allowed pairs (with
    ``rope``: ``<R_i (Q_h x_i + b^q_h), R_j (K_h x_j + b^k_h)>``, ``R_i`` the rotation of position ``i``).
    ``attention``, the kind of attention (:data:`ATTENTIONS`):

    * ``'softmax'``: ``a^h_ij = softmax_j(e^h_ij)`` (rows sum to 1);
    * ``'uniform'``: every allowed ``j`` gets the same weight (the multi-agent Oja model);
    * ``'unnormalised'``: ``a^h_ij = exp(e^h_ij) / n`` on the allowed pairs (rows do not sum to 1;
      the default of the clustering papers' public code).

    Examples:
        >>> import jax, numpy as np, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, mask="causal")
        >>> lw = model.layers.take(0)                          # one weight set
        >>> X = ja.init_tokens(jax.random.key(1), 1, 5, 8)[0]
        >>> A = ja.model.attention.probabilities(X, lw)
        >>> A.shape, bool(np.allclose(A.sum(-1), 1.0)), bool((np.triu(A[0], 1) == 0).all())
        ((2, 5, 5), True, True)
        >>> A = ja.model.attention.probabilities(X, lw, attention="uniform")
        >>> np.asarray(A[0, 2], np.float64).round(4).tolist()   # row 2
        [0.3333, 0.3333, 0.3333, 0.0, 0.0]
    """
    return with_heads(weights(X, lw, beta, biases=biases, attention=attention, rope=rope, form=form))


def with_heads(A: Float[Array, "*H n n"]) -> Float[Array, "H n n"]:
    """Weights as :func:`weights` gives them, ``[H, n, n]`` in every case (a single head's ``[n, n]`` gets its
    axis back): what every caller outside the step sees."""
    return A[None] if A.ndim == 2 else A


def _single(lw: Layers) -> bool:
    """One query head and one key/value head: the weights are handled as ``[n, n]``, without the head axis.
    A size-1 head axis on an ``n × n`` array makes XLA's CPU backend copy it between fusions at every step
    (the layout of the degenerate axis differs between the dot and the softmax): 1.7x slower at d = 2."""
    return lw.q.shape[0] == 1 and lw.k.shape[0] == 1


def weights(X: Float[Array, "n d"], lw: Layers, beta, *, biases: bool, attention: str, rope,
            form: Form | None) -> Float[Array, "*H n n"]:
    """:func:`probabilities`, ``[n, n]`` for a single head (:func:`_single`), ``[H, n, n]`` otherwise."""
    if attention not in ATTENTIONS:
        raise ConfigError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    form = GENERAL if form is None else form
    n = X.shape[0]
    one = _single(lw)
    H = lw.q.shape[0]
    ok = _mask(n, lw, form)
    if attention == "uniform":
        w = jnp.ones((n, n), X.dtype) if ok is None else ok.astype(X.dtype)
        w = w / w.sum(-1, keepdims=True)
        return w if one else jnp.broadcast_to(w, (H, n, n))
    scores, ok = _scores(X, lw, beta, ok, biases=biases, rope=rope, form=form)
    if attention == "unnormalised":
        return (jnp.exp(scores) if ok is None else jnp.where(ok, jnp.exp(scores), 0.0)) / n
    if ok is not None:
        scores = jnp.where(ok, scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1)


def _mask(n: int, lw: Layers, form: Form) -> jax.Array | None:
    """The ``[n, n]`` mask of the allowed pairs; ``None`` where the form is unmasked (verified by the form): no
    ``n × n`` mask to form and select through at every step."""
    return allowed(n, lw.causal, lw.window) if form.masked else None


def _scores(X: jax.Array, lw: Layers, beta, ok: jax.Array | None, *, biases: bool, rope, form: Form):
    """The scores ``β s <q_i, k_j>``, ``[n, n]`` for a single head (:func:`_single`), ``[H, n, n]`` otherwise,
    and the mask ``ok`` (``[n, n]``, or ``None``) broadcast to them."""
    q, k = _queries_keys(X, lw, biases=biases, rope=rope, form=form)
    if _single(lw):
        return _contract("ik,jk->ij", q[0], k[0], form) * (beta * lw.scale), ok
    return _contract("hik,hjk->hij", q, k, form) * (beta * lw.scale), None if ok is None else ok[None]


def _attend_softmax(X: jax.Array, lw: Layers, beta, *, biases: bool, rope, form: Form) -> jax.Array:
    """The softmax update with its division after the weighted sum: ``Σ_j e_ij v_j / Σ_j e_ij`` with
    ``e_ij = exp(s_ij − max_j s_ij)``, the same shift as :func:`jax.nn.softmax`. Equal to applying the
    normalised weights up to round-off, with ``n d_h`` divisions per head instead of ``n²`` and one pass
    fewer over the ``n × n`` array: on a CPU, 1.2-1.7x faster steps at d = 2-64 (``benchmarks/papers.py``;
    none at d = 16, n = 32)."""
    scores, ok = _scores(X, lw, beta, _mask(X.shape[0], lw, form), biases=biases, rope=rope, form=form)
    if ok is not None:
        scores = jnp.where(ok, scores, -jnp.inf)
    e = jnp.exp(scores - jax.lax.stop_gradient(scores.max(-1, keepdims=True)))
    heads = _weighted_sum(X, e, lw, biases=biases, form=form)
    return _output(heads / e.sum(-1).reshape(*heads.shape[:-1], 1), lw, biases=biases, form=form)


def _values(X: jax.Array, lw: Layers, *, biases: bool, form: Form) -> jax.Array:
    """What the attention weights average, ``[H, n, f]``: ``X V_hᵀ + b^v_h`` per head, or ``X`` itself in the
    bilinear form (``V_h`` is folded into ``F_h = O_h V_h``)."""
    H = lw.o.shape[0]
    if form.values == "bilinear":
        return jnp.broadcast_to(X[None], (H, *X.shape))
    v = _project(X, lw.v, "v", form)
    if biases and lw.bv is not None:
        v = v + lw.bv[:, None, :]
    return _per_query_head(v, H)


def _output(heads: jax.Array, lw: Layers, *, biases: bool, form: Form) -> jax.Array:
    """``Σ_h O_h heads_h`` (bilinear form: ``Σ_h F_h heads_h``) ``(+ b^o)``, ``[n, d]``."""
    if form.values == "bilinear":
        F = jnp.einsum("hdk,hke->hde", *rounded(jnp.asarray(lw.o), _per_query_head(lw.v, lw.o.shape[0])))
        out = _contract("hid,hed->ie", heads, F, form)
    elif "o" in form.identity:
        out = heads.transpose(1, 0, 2).reshape(heads.shape[1], -1)
    else:
        out = _contract("hik,hdk->id", heads, lw.o, form)
    if biases and lw.bo is not None:
        out = out + lw.bo[None, :]
    return out


def apply(X: Float[Array, "n d"], A: Float[Array, "H n n"], lw: Layers, *, biases: bool = False,
          form: Form | None = None) -> Float[Array, "n d"]:
    """``Σ_h O_h Σ_j A[h, i, j] (V_{g(h)} x_j + b^v_{g(h)}) (+ b^o)`` for given weights ``A: [H, n, n]``
    (``g(h) = h`` without GQA)."""
    if A.ndim == 3 and A.shape[0] == 1 and _single(lw):
        A = A[0]
    return apply_weights(X, A, lw, biases=biases, form=form)


def apply_weights(X: Float[Array, "n d"], A: Float[Array, "*H n n"], lw: Layers, *, biases: bool,
                  form: Form | None) -> Float[Array, "n d"]:
    """:func:`apply` for weights as :func:`weights` gives them (``[n, n]`` for a single head)."""
    form = GENERAL if form is None else form
    return _output(_weighted_sum(X, A, lw, biases=biases, form=form), lw, biases=biases, form=form)


def _weighted_sum(X: jax.Array, A: jax.Array, lw: Layers, *, biases: bool, form: Form) -> jax.Array:
    """``Σ_j A[h, i, j] v^h_j`` per head, ``[H, n, f]``, for weights ``[H, n, n]`` or a single head's ``[n, n]``
    (without the head axis)."""
    v = _values(X, lw, biases=biases, form=form)
    return _contract("ij,jk->ik", A, v[0], form)[None] if A.ndim == 2 else _contract("hij,hjk->hik", A, v, form)


def _attend_chunked(X: jax.Array, lw: Layers, beta, *, biases: bool, attention: str, rope, form: Form) -> jax.Array:
    """The update of :func:`attend` over chunks of ``form.key_chunk`` keys, never forming ``[H, n, n]``: a
    running maximum ``m``, normaliser ``l`` and weighted sum per query (the online softmax), so memory
    grows like ``n``. Same numbers as the formed attention up to round-off."""
    n = X.shape[0]
    c = min(form.key_chunk or n, n)
    pad = (-n) % c
    H = lw.q.shape[0]
    i = jnp.arange(n, dtype=jnp.int32)[:, None]

    def padded(a):  # keys beyond n: zeros, masked out below
        return jnp.pad(a, ((0, 0), (0, pad), (0, 0))) if pad else a

    v = padded(_values(X, lw, biases=biases, form=form))
    if attention != "uniform":
        q, k = _queries_keys(X, lw, biases=biases, rope=rope, form=form)
        k = padded(k)
    m0 = jnp.full((H, n), -jnp.inf, X.dtype)
    s0 = jnp.zeros((H, n), X.dtype)
    acc0 = jnp.zeros((H, n, v.shape[-1]), X.dtype)

    def chunk(carry, j0):
        m, norm, acc = carry
        j = j0 + jnp.arange(c, dtype=jnp.int32)[None, :]
        ok = ((_pairs(i, j, lw.causal, lw.window) if form.masked else True) & (j < n))[None]  # [1, n, c]
        vc = jax.lax.dynamic_slice_in_dim(v, j0, c, axis=1)
        if attention == "uniform":
            w = jnp.broadcast_to(ok, (H, n, c)).astype(X.dtype)
            return (m, norm + w.sum(-1), acc + _contract("hij,hjk->hik", w, vc, form)), None
        kc = jax.lax.dynamic_slice_in_dim(k, j0, c, axis=1)
        s = _contract("hik,hjk->hij", q, kc, form) * (beta * lw.scale)
        if attention == "unnormalised":
            w = jnp.where(ok, jnp.exp(s), 0.0)
            return (m, norm, acc + _contract("hij,hjk->hik", w, vc, form)), None
        s = jnp.where(ok, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(-1))
        base = jnp.where(jnp.isfinite(m_new), m_new, 0.0)  # a row with no allowed key yet: nothing to rescale
        corr = jnp.exp(m - base)
        p = jnp.exp(s - base[..., None])
        return (m_new, norm * corr + p.sum(-1), acc * corr[..., None] + _contract("hij,hjk->hik", p, vc, form)), None

    starts = jnp.arange(0, n + pad, c, dtype=jnp.int32)
    (_, norm, acc), _ = jax.lax.scan(chunk, (m0, s0, acc0), starts)
    heads = acc / n if attention == "unnormalised" else acc / norm[..., None]
    return _output(heads, lw, biases=biases, form=form)


def _fusable(X: jax.Array, lw: Layers, rope, form: Form) -> bool:
    """Whether :func:`_attend_fused` computes this update: per-head projections as dot products, the attention
    formed whole, no RoPE, and sizes, dtype and precision the kernel takes (:func:`jaxattn.model.fused.applies`)."""
    H, dh = lw.q.shape[:2]
    return (form.kernel and form.scores == form.values == "heads" and form.products == "einsum"
            and form.key_chunk is None and rope is None
            and fused.applies(X.shape[0], H, dh, X.dtype, precision.setting()))


def _attend_fused(X: jax.Array, lw: Layers, beta, *, biases: bool, form: Form) -> jax.Array:
    """The softmax update with the attention in one kernel (:func:`jaxattn.model.fused.softmax_attention`): the
    projections written tokens major, ``[n, H·d_h]``, the layout the kernel reads and the output product takes, so
    nothing is transposed; the scores stay in the kernel."""
    n = X.shape[0]
    H, dh = lw.q.shape[:2]

    def project(w, b, member):  # [n, H_w d_h], the heads side by side
        p = X if member in form.identity else _contract("nd,hkd->nhk", X, w, form).reshape(n, -1)
        if biases and b is not None:
            p = p + jnp.reshape(b, -1)[None, :]
        if p.shape[1] != H * dh:  # grouped-query attention: each key/value head serves H / H_kv query heads
            p = jnp.repeat(p.reshape(n, -1, dh), H // (p.shape[1] // dh), axis=1).reshape(n, H * dh)
        return p

    q = project(lw.q, lw.bq, "q") * (beta * lw.scale)
    k, v = project(lw.k, lw.bk, "k"), project(lw.v, lw.bv, "v")
    ok = _mask(n, lw, form)
    bias = None if ok is None else jnp.where(ok, 0.0, -jnp.inf).astype(X.dtype)
    heads = fused.softmax_attention(q, k, v, H, bias=bias, precision=precision.setting())
    out = heads if "o" in form.identity else _contract("nhk,hdk->nd", heads.reshape(n, H, dh), lw.o, form)
    if biases and lw.bo is not None:
        out = out + lw.bo[None, :]
    return out


@full_precision
def attend(X: Float[Array, "n d"], lw: Layers, beta=1.0, *, biases: bool = False, attention: str = "softmax",
           return_probs: bool = False, rope=None, form: Form | None = None):
    """Multi-head attention update ``Σ_h O_h Σ_j a^h_ij (V_h x_j + b^v_h) (+ b^o)``, shape ``[n, d]``.

    With ``form.key_chunk`` (and not ``return_probs``) the update is evaluated over chunks of keys without
    forming the ``[H, n, n]`` weights; otherwise, without ``return_probs``, softmax attention divides the
    weighted sum by the row sums instead of normalising the weights first (same numbers to round-off); in a program
    compiled for a GPU the weights are normalised first (XLA fuses that into its softmax kernel)."""
    form = GENERAL if form is None else form
    if form.key_chunk is not None and not return_probs:
        if attention not in ATTENTIONS:
            raise ConfigError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        return _attend_chunked(X, lw, beta, biases=biases, attention=attention, rope=rope, form=form)
    if attention == "softmax" and not return_probs:
        # a GPU fuses the normalisation of the weights into its softmax kernel, where the row sums of the division
        # after the sum are a reduction kernel of their own at every step (jaxattn.model.backend); on an NVIDIA GPU
        # a few tokens' attention is one Triton kernel where it applies (jaxattn.model.fused)
        cuda = (lambda X: _attend_fused(X, lw, beta, biases=biases, form=form)) if _fusable(X, lw, rope, form) else None
        return gpu_or(X, gpu=lambda X: apply_weights(X, weights(X, lw, beta, biases=biases, attention=attention,
                                                                rope=rope, form=form), lw, biases=biases, form=form),
                      cuda=cuda, other=lambda X: _attend_softmax(X, lw, beta, biases=biases, rope=rope, form=form))
    A = weights(X, lw, beta, biases=biases, attention=attention, rope=rope, form=form)
    out = apply_weights(X, A, lw, biases=biases, form=form)
    return (out, with_heads(A)) if return_probs else out
