"""Exact forms of one attention layer, and the choice between them.

Every form computes the same update ``u_i = Σ_h O_h Σ_j a^h_ij (V_h x_j + b^v_h) (+ b^o)`` with
``a^h_ij`` from the scores ``β s <Q_h x_i + b^q_h, K_h x_j + b^k_h>``; they differ only in how the
products are arranged, so the choice is a matter of speed and memory, never of the numbers (in
float64 every form agrees with every other to round-off, ≤ 1e-12 after the steps the tests take):

* **per-head projections** (``'heads'``, the general form): ``q = X Q_hᵀ``, ``k = X K_hᵀ``,
  ``v = X V_hᵀ``, then ``O_h``: ``2 n d (H d_h + 2 H_kv d_h) + 2 n d H d_h`` flops for the projections
  and ``4 n² H d_h`` for the scores and the weighted sum.
* **identity members**: where a stacked matrix ``[Q_1; …; Q_H]`` (or ``K``, ``V``, or ``O = [O_1 … O_H]``)
  is the identity — ``random_model(weights="identity", value="identity")`` and the clustering paper's
  ``Q = K = I`` — its projection is a reshape of ``X``, not a product. Which members are the identity is
  a static fact of the :class:`~jaxattn.model.params.Model` (``Model.identity``), found once when the
  model is built and verified against concrete weights before it is used (a model edited with
  ``replace`` cannot mislead it); traced weights (a gradient with respect to them) never use it.
* **bilinear** (``'bilinear'``, the papers' notation): scores ``X B_h Xᵀ`` with ``B_h = Q_hᵀ K_h`` and
  output ``Σ_h (A_h X) F_hᵀ`` with ``F_h = O_h V_h``: ``2 n d² + 2 n² d`` flops per head and side,
  cheaper than the projections for full-rank heads (``H = 1``, ``d_h = d``) whose members are not the
  identity, dearer for many small heads. Not with the biases or RoPE of the side it would fold.
* **products** (``'einsum'`` or ``'broadcast'``): contractions as XLA dot products, or as elementwise
  products and a sum. Never chosen automatically: measured on a CPU with jax 0.10 (``benchmarks/papers.py``,
  interleaved rounds) the broadcast form was at best even with the dot products at d = 2 and up to 4.8x
  slower at d = 3 (the weighted sum over keys does not fuse); it stays available to force, and tested.
* **unmasked** (``masked=False``): where no weight set has a causal flag or a window (verified on the
  concrete model, like the identity members), the scores are used as they are, without forming the
  ``n × n`` mask and selecting through it at every step.
* **one kernel** (``kernel``): in a program compiled for an NVIDIA GPU, the softmax attention of a few tokens
  (16 to 128, heads 16 to 128 wide, float32) is one Triton kernel that reads the projections as they are written
  and keeps the scores on chip (:mod:`jaxattn.model.fused`); XLA's own program transposes the projections and
  passes the ``n × n`` scores through device memory three times. On by default; nothing changes on other devices.
* **key chunks** (``key_chunk``): the weighted sum evaluated over chunks of keys with a running maximum
  and sum (the online softmax of flash attention), so a configuration never holds its ``n × n``
  attention: memory grows like ``n`` instead of ``n²``. Chosen where the materialised attention of one
  condition would not fit the block budget (tens of thousands of tokens: the mean-field regime).

:func:`choose` makes the choice from static facts only (shapes, identity members, biases, RoPE, the
attention kind, the masks, the memory budget) before anything is traced; :func:`describe` reports it;
``Batch(form=...)`` forces one (tests, benchmarks).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.config import static
from jaxattn.errors import ConfigError, integer, is_integer
from jaxattn.model import concrete

#: The members whose projection may be the identity.
MEMBERS = ("q", "k", "v", "o")
SIDES = ("heads", "bilinear")
PRODUCTS = ("einsum", "broadcast")
#: Bytes the key-chunked form may spend on one chunk of scores of one condition.
CHUNK_BYTES = 2**26


class Form(eqx.Module):
    """How one attention layer is evaluated (static, hashable; see the module docstring).

    Attributes:
        scores: ``'heads'`` (per-head projections) or ``'bilinear'`` (``X B_h Xᵀ``).
        values: ``'heads'`` or ``'bilinear'`` (``Σ_h (A_h X) F_hᵀ``).
        identity: the members (``'q'``, ``'k'``, ``'v'``, ``'o'``) read as a reshape instead of a product;
            only valid where the model's stacked member is the identity (:func:`choose` verifies it).
        products: ``'einsum'`` or ``'broadcast'``.
        key_chunk: keys per chunk of the online softmax; ``None``: the ``n × n`` attention is formed.
        masked: apply the layers' causal flags and windows; ``False`` only where every weight set has
            neither (:func:`choose` verifies it).
        kernel: in a program compiled for an NVIDIA GPU, a few tokens' softmax attention as one Triton kernel
            whose scores stay on chip (:mod:`jaxattn.model.fused`), where it applies; ``False``: XLA's own kernels
            (the comparison ``make gpu-check`` times). Nothing changes elsewhere.

    Examples:
        >>> import jaxattn as ja
        >>> ja.model.forms.Form(values="bilinear")                  # the other fields at the general form's
        Form(values='bilinear')
        >>> ja.model.forms.Form(scores="sideways")
        Traceback (most recent call last):
        ...
        jaxattn.errors.ConfigError: Form(scores=...) must be one of heads, bilinear, got 'sideways'
    """

    scores: str = static("heads")
    values: str = static("heads")
    identity: tuple[str, ...] = static((), converter=lambda ids: _members(ids))
    products: str = static("einsum")
    key_chunk: int | None = static(None, converter=lambda v: int(v) if is_integer(v) else v)
    masked: bool = static(True, converter=lambda v: bool(v) if isinstance(v, np.bool_) else v)
    kernel: bool = static(True)

    def __check_init__(self):
        for name in ("scores", "values"):
            if getattr(self, name) not in SIDES:
                raise ConfigError(f"Form({name}=...) must be one of {', '.join(SIDES)}, got {getattr(self, name)!r}")
        if self.products not in PRODUCTS:
            raise ConfigError(f"Form(products=...) must be one of {', '.join(PRODUCTS)}, got {self.products!r}")
        if not isinstance(self.identity, tuple):
            raise ConfigError(f"Form(identity=...) must name members among {', '.join(MEMBERS)}, got "
                              f"{self.identity!r}")
        integer("Form(key_chunk=...)", self.key_chunk, none=True)
        for name in ("masked", "kernel"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"Form({name}=...) must be True or False, got {getattr(self, name)!r}")


def _members(ids):
    """Members named in any order or container as one spelling per set (the order of ``MEMBERS``); anything
    else as given, for the check to refuse."""
    try:
        named = not isinstance(ids, str) and all(m in MEMBERS for m in ids)
    except TypeError:  # not iterable
        return ids
    return tuple(m for m in MEMBERS if m in ids) if named else ids


#: Today's general form (per-head projections, dot products, the attention formed).
GENERAL = Form()


def _stacked(name: str, a) -> np.ndarray | None:
    """Member ``name`` of stacked weights (``q, k, v: [G, H, d_h, d]``, ``o: [G, H, d, d_h]``) as ``[G, d, d]``
    matrices ``[Q_1; …; Q_H]`` (``O = [O_1 … O_H]``), or ``None`` where they are not square."""
    a = np.asarray(a)
    G, H = a.shape[:2]
    if name == "o":
        d, dh = a.shape[2:]
        return a.transpose(0, 2, 1, 3).reshape(G, d, H * dh) if H * dh == d else None
    dh, d = a.shape[2:]
    return a.reshape(G, H * dh, d) if H * dh == d else None


def _is_identity(name: str, a, heads: int) -> bool:
    """Whether member ``name`` (array ``a``) is concrete and its stacked matrix is the identity in every set (read
    once per array: :mod:`jaxattn.model.concrete`)."""
    if isinstance(a, jax.core.Tracer) or a.shape[1] != heads:  # traced, or grouped-query k/v
        return False
    if not jnp.issubdtype(a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype, jnp.floating):
        return False

    def read() -> bool:
        m = _stacked(name, a)
        return m is not None and bool(np.array_equal(m, np.broadcast_to(np.eye(m.shape[-1], dtype=m.dtype),
                                                                        m.shape)))

    return concrete.fact(("identity", name), [a], read)


def identity_members(layers) -> tuple[str, ...]:
    """The members of ``layers`` (:class:`~jaxattn.model.params.Layers`) whose stacked matrix is exactly the
    identity in every weight set; none of a traced member (its value is unknown, its derivative wanted).

    Examples:
        >>> import jax, jaxattn as ja
        >>> ja.model.forms.identity_members(ja.random_model(jax.random.key(0), 4, weights="identity").layers)
        ('q', 'k')
        >>> m = ja.random_model(jax.random.key(0), 4, heads=2, weights="identity", value="identity")
        >>> ja.model.forms.identity_members(m.layers)        # two heads reading their own coordinates
        ('q', 'k', 'v', 'o')
    """
    return tuple(m for m in MEMBERS if _is_identity(m, getattr(layers, m), layers.q.shape[1]))


def verified_identity(model) -> tuple[str, ...]:
    """The members ``model.identity`` flags that are concrete and still the identity (only those are read:
    no host copy of a real model's weights)."""
    lay = model.layers
    return tuple(m for m in getattr(model, "identity", ()) if _is_identity(m, getattr(lay, m), lay.q.shape[1]))


def unmasked(layers) -> bool:
    """Whether no weight set of ``layers`` has a causal flag or a window (concrete values only: a traced
    flag may be anything, so it keeps the mask). Reads two numbers per weight set."""
    flags = (layers.causal, layers.window)
    if any(isinstance(f, jax.core.Tracer) for f in flags):
        return False
    return concrete.fact("unmasked", flags, lambda: all(not np.any(np.asarray(f) != 0) for f in flags))


def _costs(n: int, d: int, H: int, Hkv: int, dh: int, ids: tuple[str, ...]) -> dict:
    """Flops per condition and step of each side in each form (see the module docstring)."""
    proj = lambda m, heads: 0 if m in ids else 2 * n * d * heads * dh
    return {
        ("scores", "heads"): proj("q", H) + proj("k", Hkv) + 2 * n * n * H * dh,
        ("scores", "bilinear"): H * (2 * n * d * d + 2 * n * n * d),
        ("values", "heads"): proj("v", Hkv) + 2 * n * n * H * dh + proj("o", H),
        ("values", "bilinear"): H * (2 * n * n * d + 2 * n * d * d),
    }


def attention_bytes(n: int, heads: int, dtype) -> int:
    """Bytes of the materialised attention of one condition: scores, weights and one temporary ``[H, n, n]``."""
    return 3 * heads * n * n * jnp.dtype(dtype).itemsize


def key_chunk_for(n: int, heads: int, dtype) -> int:
    """Keys per chunk so that one chunk of scores and weights stays within :data:`CHUNK_BYTES`."""
    per_key = 3 * heads * n * jnp.dtype(dtype).itemsize
    return int(max(1, min(n, CHUNK_BYTES // per_key)))


def choose(model, n: int, *, attention: str = "softmax", biases: bool = False, rope: bool = False, dtype=jnp.float32,
           budget: int | None = None) -> Form:
    """The cheapest exact :class:`Form` of ``model``'s layers for configurations of ``n`` tokens.

    Static facts only: the shapes, the verified identity members (:func:`verified_identity`), whether
    biases (``biases``: the dynamics applies the model's biases) or RoPE are in effect, the attention kind, the
    causal flags and windows, and ``budget``, the bytes one condition's materialised attention may take
    (``None``: no limit); beyond it the attention is evaluated over key chunks.

    Examples:
        >>> import jax, jaxattn as ja
        >>> sphere = ja.random_model(jax.random.key(0), 16, weights="identity", value="identity", scale=1.0)
        >>> ja.model.forms.choose(sphere, 32)           # X Xᵀ, the softmax, A X: nothing else, no mask
        Form(identity=('q', 'k', 'v', 'o'), masked=False)
        >>> ja.model.forms.choose(sphere, 100_000, budget=2**30).key_chunk   # 120 GB of attention: key chunks
        55
        >>> full = ja.random_model(jax.random.key(0), 16)               # one full-rank head: the papers' B and F
        >>> f = ja.model.forms.choose(full, 32)
        >>> f.scores, f.values
        ('bilinear', 'bilinear')
        >>> ja.model.forms.choose(ja.random_model(jax.random.key(0), 4, mask="causal"), 32).masked
        True
    """
    lay = model.layers
    has = lambda *names: biases and any(getattr(lay, b) is not None for b in names)
    H = lay.q.shape[1]
    chunk = None
    if budget is not None and attention_bytes(n, H, dtype) > budget:
        chunk = key_chunk_for(n, H, dtype)
    return _choose(n, H, lay.k.shape[1], lay.q.shape[2], lay.q.shape[3], verified_identity(model),
                   attention=attention, score_bias=has("bq", "bk"), value_bias=has("bv"), rope=rope, chunk=chunk,
                   masked=not unmasked(lay))


@functools.lru_cache(maxsize=256)
def _choose(n: int, H: int, Hkv: int, dh: int, d: int, ids: tuple[str, ...], *, attention: str, score_bias: bool,
            value_bias: bool, rope: bool, chunk: int | None, masked: bool) -> Form:
    # the choice from the static facts alone, made once per set of them (a Form is immutable, so it is shared)
    cost = _costs(n, d, H, Hkv, dh, ids)
    scores = "heads"
    if attention != "uniform" and not rope and not score_bias:
        scores = "bilinear" if cost["scores", "bilinear"] < cost["scores", "heads"] else "heads"
    values = "bilinear" if not value_bias and cost["values", "bilinear"] < cost["values", "heads"] else "heads"
    ids = tuple(m for m in ids if not ((m in "qk" and scores == "bilinear") or (m in "vo" and values == "bilinear")))
    return Form(scores=scores, values=values, identity=ids, key_chunk=chunk, masked=masked)


def check_form(form, model) -> Form:
    """A forced ``form`` refused with one line where it cannot compute ``model``'s update exactly."""
    if not isinstance(form, Form):
        raise ConfigError(f"form must be a jaxattn.model.forms.Form or 'auto', got {form!r}")
    lay = model.layers
    wrong = [m for m in form.identity if not _is_identity(m, getattr(lay, m), lay.q.shape[1])]
    if wrong:
        raise ConfigError(f"Form(identity={form.identity}) but the model's {', '.join(wrong)} "
                          f"{'is' if len(wrong) == 1 else 'are'} not the identity")
    if not form.masked and not unmasked(lay):
        raise ConfigError("Form(masked=False) but the model has a causal mask or a window (or traced flags)")
    return form


def describe(form: Form) -> str:
    """One line saying how a layer is evaluated under ``form``.

    Examples:
        >>> import textwrap, jaxattn as ja
        >>> form = ja.model.forms.Form(identity=("q", "k", "v", "o"), products="broadcast")
        >>> print(textwrap.fill(ja.model.forms.describe(form), 100))
        scores: per-head projections (q, k read as reshapes); values: per-head projections (v, o read as
        reshapes); broadcast products; n x n attention formed
    """
    def side(kind, members):
        if kind == "bilinear":
            return "bilinear form (B = s Q^T K)" if members == "qk" else "bilinear form (F = O V)"
        skip = [m for m in members if m in form.identity]
        return "per-head projections" + (f" ({', '.join(skip)} read as reshapes)" if skip else "")

    chunk = f"online softmax over chunks of {form.key_chunk} keys" if form.key_chunk else "n x n attention formed"
    return (f"scores: {side(form.scores, 'qk')}; values: {side(form.values, 'vo')}; {form.products} products; "
            f"{chunk}" + ("" if form.masked else "; no mask") + ("" if form.kernel else "; XLA's kernels on a GPU"))
