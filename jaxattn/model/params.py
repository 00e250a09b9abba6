"""Model and layer pytrees.

Weight convention (the ``nn.Linear.weight`` orientation, see docs/models.md): tokens are columns, arrays
are row-major, so a configuration is ``X: [n, d]`` and per head

* ``q: [G, H, d_h, d]``, so that ``queries_h = X @ q[g, h].T``;
* ``k, v: [G, H_kv, d_h, d]`` with ``H_kv`` dividing ``H``: grouped-query attention (GQA) when
  ``H_kv < H``; query head ``h`` reads key/value head ``g(h) = h // (H / H_kv)`` (transformers'
  ``repeat_kv`` order); ``H_kv = H`` is ordinary multi-head attention;
* ``o: [G, H, d, d_h]``, so that the layer matrix is ``F = sum_h o[g, h] @ v[g, g(h)]``.

``G`` is the number of distinct weight sets. The model's depth is its ``schedule``: block ``k``
uses weight set ``schedule[k]``. A shared-weight (ALBERT-like) model therefore holds ``G = 1``
set and a schedule ``(0, 0, ..., 0)``; a layer-varying model holds ``G = L`` sets and the
schedule ``(0, 1, ..., L-1)``. Running more steps than the depth cycles through the schedule
(step ``k`` uses ``schedule[k % depth]``): this is "prolonging" a shared model and "repeated
passes" of a layer-varying one. No weights are ever copied.

The attention kind of every weight set (causal or not, local window, score scale) is data
(``causal``, ``window``, ``scale`` arrays of shape ``[G]``), not a code path.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, no_type_check

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxattn.errors import ConfigError, is_integer, real
from jaxattn.model import concrete, display
from jaxattn.model.forms import identity_members
from jaxattn.model.rope import Rope

# a loaded checkpoint keeps numpy arrays (no float64 truncation while x64 is off); JAX converts them on use
Array = jax.Array | np.ndarray

#: Activations understood by the faithful layers, keyed by the name a HF config uses.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "quick_gelu", "relu", "silu",
               "swish", "tanh", "linear")
NORM_STYLES = ("post", "pre")
#: dtype of the mask members ``causal`` and ``window`` in memory: floats (exact for flags and widths),
#: so that every leaf of a :class:`Model` is inexact and ``jax.grad`` takes a whole model (their
#: gradient is zero). Converted files store them as uint8 and int32.
MASK_DTYPE = np.float32
#: The affine norm of a real model: LayerNorm (``ln*_b`` biases) or RMSNorm (gains only, no centring).
NORM_KINDS = ("layernorm", "rmsnorm")


# not checked at run time (no_type_check, for jaxtyping's checker in the suite): JAX's tree functions rebuild a
# flax.struct tree through its __init__ with leaves of any kind (a filter's bools, ShapeDtypeStructs, None)
@no_type_check
@struct.dataclass
class Layers:
    """Stacked weights of the ``G`` distinct blocks of a model (see the module docstring).

    Optional members are ``None`` when the model has no such tensor (GPT-Neo has no q/k/v
    biases; synthetic models have no LayerNorm or FFN).
    """

    q: Array  # [G, H, d_h, d]
    k: Array  # [G, H_kv, d_h, d]   (H_kv divides H: grouped-query attention when smaller)
    v: Array  # [G, H_kv, d_h, d]
    o: Array  # [G, H, d, d_h]
    causal: Array  # [G] 1.0 causal, 0.0 not (a float, see MASK_DTYPE)
    window: Array  # [G] local window width as a float; 0 means no window
    scale: Array  # [G] float: score scale s (1/sqrt(d_h) for BERT, 1 for GPT-Neo)
    bq: Array | None = None  # [G, H, d_h]
    bk: Array | None = None  # [G, H_kv, d_h]
    bv: Array | None = None  # [G, H_kv, d_h]
    bo: Array | None = None  # [G, d]
    ln1_w: Array | None = None  # [G, d] norm of the attention sublayer (after it: post, before: pre); RMSNorm gains
    ln1_b: Array | None = None  # (None for RMSNorm)
    ln2_w: Array | None = None  # [G, d] norm of the FFN sublayer (None for Phi: one norm feeds both branches)
    ln2_b: Array | None = None
    w1: Array | None = None  # [G, f, d]  (the "up" projection of a gated MLP)
    b1: Array | None = None  # [G, f]
    w2: Array | None = None  # [G, d, f]  ("down")
    b2: Array | None = None  # [G, d]
    wg: Array | None = None  # [G, f, d]  gate of a gated MLP: W2 (act(Wg y + bg) * (W1 y + b1)) + b2
    bg: Array | None = None  # [G, f]

    @property
    def n_sets(self) -> int:
        return self.q.shape[0]

    @property
    def n_heads(self) -> int:
        return self.q.shape[1]

    @property
    def d_head(self) -> int:
        return self.q.shape[2]

    @property
    def n_kv_heads(self) -> int:
        return self.k.shape[1]

    @property
    def kv_group(self) -> int:
        """Query heads per key/value head (1 without GQA)."""
        return self.q.shape[1] // self.k.shape[1]

    @property
    def d_model(self) -> int:
        return self.q.shape[3]

    if TYPE_CHECKING:  # struct.dataclass adds it at run time, out of a type checker's sight
        def replace(self, **updates: Any) -> Layers:
            """A copy with the given members replaced."""

    def take(self, g) -> Layers:
        """The weights of set ``g`` (an int or a traced index), leading axis removed."""
        return jax.tree_util.tree_map(lambda a: a[g], self)


@no_type_check  # as Layers
@struct.dataclass
class Embeddings:
    """Token, position and token-type embeddings (only needed to feed real prompts)."""

    word: Array  # [V, E]
    position: Array | None = None  # [P, E]; None for models whose positions are rotary (RoPE)
    token_type: Array | None = None  # [T, E]
    ln_w: Array | None = None  # [E]
    ln_b: Array | None = None
    proj_w: Array | None = None  # [d, E]  ALBERT's embedding_hidden_mapping_in
    proj_b: Array | None = None  # [d]

    if TYPE_CHECKING:  # struct.dataclass adds it at run time, out of a type checker's sight
        def replace(self, **updates: Any) -> Embeddings:
            """A copy with the given members replaced."""


@no_type_check  # as Layers
@struct.dataclass
class Model:
    """A transformer seen as a dynamical system: weight sets, their schedule, and static facts."""

    layers: Layers
    schedule: tuple = struct.field(pytree_node=False)  # weight set used by each block
    embeddings: Embeddings | None = None
    final_ln_w: Array | None = None  # [d] GPT-2 / GPT-Neo ln_f, Llama's final RMSNorm
    final_ln_b: Array | None = None
    norm_style: str = struct.field(pytree_node=False, default="post")
    activation: str = struct.field(pytree_node=False, default="gelu")
    ln_eps: float = struct.field(pytree_node=False, default=1e-12)
    family: str = struct.field(pytree_node=False, default="synthetic")
    norm_kind: str = struct.field(pytree_node=False, default="layernorm")  # the model's own affine norm
    parallel: bool = struct.field(pytree_node=False, default=False)  # x + Attn(N1 x) + FFN(N2 x) (GPT-NeoX, Phi)
    rope: Rope | None = struct.field(pytree_node=False, default=None)  # rotary embedding of q and k
    embed_scale: float = struct.field(pytree_node=False, default=1.0)  # Gemma: token embeddings times sqrt(d)
    # members (q, k, v, o) whose stacked matrix is the identity in every set, found when the model is built
    # (from_heads): attention then reads them as reshapes (jaxattn.model.forms; verified before each use)
    identity: tuple = struct.field(pytree_node=False, default=())

    if TYPE_CHECKING:  # struct.dataclass adds it at run time, out of a type checker's sight
        def replace(self, **updates: Any) -> Model:
            """A copy with the given members replaced."""

    @property
    def depth(self) -> int:
        return len(self.schedule)

    @property
    def shared(self) -> bool:
        """True when every block uses the same weights (a time-invariant system)."""
        return len(set(self.schedule)) == 1

    @property
    def d_model(self) -> int:
        return self.layers.d_model

    @property
    def n_heads(self) -> int:
        return self.layers.n_heads

    def astype(self, dtype) -> Model:
        """Cast every floating array (weights, scales) to ``dtype``."""

        def cast(a):  # no copy when already of that dtype (models are cast on every simulate call)
            return a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) and a.dtype != dtype else a

        return jax.tree_util.tree_map(cast, self)

    def summary(self) -> str:
        """The model's facts, one per line (``jaxattn inspect``)."""
        return "\n".join(f"{label:<13}{value}" for label, value in self._rows())

    def _rows(self) -> list[tuple[str, str]]:
        lay = self.layers
        kv = f"   kv heads {lay.n_kv_heads} (GQA, {lay.kv_group} per group)" if lay.kv_group > 1 else ""
        has = [name for name in ("bq", "bk", "bv", "bo", "ln1_w", "ln2_w", "w1", "wg")
               if getattr(lay, name) is not None]
        rows = [
            ("family", self.family),
            ("d_model", f"{lay.d_model}   heads {lay.n_heads}   d_head {lay.d_head}" + kv),
            ("depth", f"{self.depth} blocks, {lay.n_sets} weight set(s)"
                      + ("  (shared weights)" if self.shared else "")),
            ("norm style", f"{self.norm_style}-norm{' (parallel attention and MLP)' if self.parallel else ''}   "
                           f"{self.norm_kind}   activation {self.activation}   ln_eps {self.ln_eps:g}"),
        ]
        if display.traced((lay.causal, lay.window, lay.scale)):  # under jit: the masks' values are not known
            rows.append(("attention", "masks and scale traced"))
        else:
            kinds = []
            for g in range(lay.n_sets):
                w = int(lay.window[g])
                kind = "causal" if bool(lay.causal[g]) else "full"
                kinds.append(f"{kind}" + (f"/local{w}" if w else ""))
            rows.append(("attention", ", ".join(sorted(set(kinds)))
                         + f"   scale {np.unique(np.asarray(lay.scale)).round(6).tolist()}"))
        rows.append(("has", ", ".join(has) if has else "attention weights only"))
        if lay.w1 is not None:
            rows.append(("ffn", f"{lay.w1.shape[1]} hidden units" + (" (gated)" if lay.wg is not None else "")))
        if self.rope is not None:
            r = self.rope
            rows.append(("rope", f"{r.dim} of {lay.d_head} dims rotated   theta {r.theta:g}   scaling {r.kind}"
                         + (f" x{r.factor:g}" if r.kind != "default" else "")))
        if self.embeddings is not None:
            e = self.embeddings
            pos = "rotary" if e.position is None else str(e.position.shape[0])
            rows.append(("embeddings", f"vocab {e.word.shape[0]}  positions {pos}  size {e.word.shape[1]}"
                         + (f"  scaled by {self.embed_scale:g}" if self.embed_scale != 1.0 else "")))
        return rows

    def _display(self) -> display.Summary:
        leaves = jax.tree_util.tree_leaves(self)
        count = sum(int(np.prod(display.shape_of(a) or ())) for a in leaves)
        weights = ", ".join(f"{name} {display.array_line(getattr(self.layers, name))}" for name in ("q", "k", "v", "o"))
        bad: list[str] | None = None
        if not display.traced(self):  # reduced where the weights are: one flag per array comes back
            bad = _non_finite({jax.tree_util.keystr(path): a for path, a in jax.tree_util.tree_leaves_with_path(self)})
        which = f" ({', '.join(bad[:4])}{', ...' if len(bad) > 4 else ''})" if bad else ""
        return display.Summary("jaxattn.Model", [
            *self._rows(), ("weights", weights), ("parameters", f"{count:,} in {len(leaves)} arrays"),
            ("non-finite", display.count_line(None if bad is None else len(bad), len(leaves), "arrays") + which)])

    def __repr__(self) -> str:
        return display.text(display.safe(self._display, lambda: f"Model(family={self.family!r}, "
                                                                f"schedule={self.schedule!r})"))

    def _repr_html_(self) -> str:
        return display.as_html(display.safe(self._display, lambda: f"Model(family={self.family!r}, "
                                                                   f"schedule={self.schedule!r})"))


def _non_finite(named: dict) -> list[str]:
    """The names of the floating arrays of ``named`` that hold a NaN or an inf. NumPy arrays are read where they
    are; JAX arrays are reduced on their device and only one flag each comes back (no copy of the weights to
    the host on every call). Traced arrays are skipped: they are checked inside the program."""
    flags, on_device = {}, {}
    for name, a in named.items():
        if a is None or isinstance(a, jax.core.Tracer):
            continue
        # the dtype read where the array is (jnp.asarray would copy a NumPy weight to the device to read it)
        if not jnp.issubdtype(a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype, jnp.floating):
            continue
        if isinstance(a, np.ndarray):
            flags[name] = np.all(np.isfinite(a))
        else:
            on_device[name] = a
    if on_device:  # once per set of weight arrays (a model run again is not read again: jaxattn.model.concrete)
        flags.update(concrete.fact(("finite", tuple(on_device)), list(on_device.values()),
                                   lambda: _device_flags(on_device)))
    return [name for name in named if name in flags and not flags[name]]


def _device_flags(named: dict) -> dict:
    with jax.ensure_compile_time_eval():  # concrete weights reduced now, also while a caller's jit traces
        return jax.device_get(_all_finite(named))  # one transfer of every flag, not one per weight


@jax.jit
def _all_finite(named: dict) -> dict:
    # one program for every weight of a model (compiled once per model shape), not an isfinite and a reduction
    # dispatched, and compiled, for each weight of each new shape
    return {name: jnp.all(jnp.isfinite(a)) for name, a in named.items()}


#: The members of :class:`Layers` and :class:`Embeddings`, in declaration order (the converted-file
#: layout and the checks iterate over these).
LAYER_FIELDS = tuple(f.name for f in dataclasses.fields(Layers))
EMBEDDING_FIELDS = tuple(f.name for f in dataclasses.fields(Embeddings))


def _most(*sizes: int) -> int:
    """The size most of ``sizes`` agree on (the first of them on a tie)."""
    return max(sizes, key=sizes.count)


def validate(model: Model) -> Model:
    """Check shapes, the schedule and finiteness; raise :class:`ConfigError` with one clear line."""
    if not isinstance(model, Model):  # None, a name, a dict: one line rather than an AttributeError
        raise ConfigError(f"model must be a jaxattn Model (ja.load_any('minilm'), ja.random_model(...)), got "
                          f"{type(model).__name__} {model!r:.60}")
    lay = model.layers
    for name, axes in (("q", "G, H, d_h, d"), ("k", "G, H_kv, d_h, d"), ("v", "G, H_kv, d_h, d"),
                       ("o", "G, H, d, d_h")):
        if getattr(lay, name).ndim != 4:
            raise ConfigError(f"tensor '{name}' must be [{axes}], got shape {tuple(getattr(lay, name).shape)}")
    # each size is what most of the attention tensors that carry it say (q first on a tie), so that the tensor named
    # below is the odd one out: a mis-shaped q alone was reported as a wrong k
    q, k, v, o = (tuple(getattr(lay, name).shape) for name in ("q", "k", "v", "o"))
    G = _most(q[0], k[0], v[0], o[0])
    H, Hkv = _most(q[1], o[1]), _most(k[1], v[1])
    dh, d = _most(q[2], k[2], v[2], o[3]), _most(q[3], k[3], v[3], o[2])
    if Hkv < 1 or H % Hkv:
        raise ConfigError(f"{H} query heads cannot be grouped over {Hkv} key/value heads "
                          "(the number of key/value heads must divide the number of heads)")
    want = {"q": (G, H, dh, d), "k": (G, Hkv, dh, d), "v": (G, Hkv, dh, d), "o": (G, H, d, dh),
            "causal": (G,), "window": (G,), "scale": (G,),
            "bq": (G, H, dh), "bk": (G, Hkv, dh), "bv": (G, Hkv, dh), "bo": (G, d),
            "ln1_w": (G, d), "ln1_b": (G, d), "ln2_w": (G, d), "ln2_b": (G, d)}
    if lay.w1 is not None:
        f = lay.w1.shape[1]
        want.update({"w1": (G, f, d), "b1": (G, f), "w2": (G, d, f), "b2": (G, d), "wg": (G, f, d), "bg": (G, f)})
    for name, shape in want.items():
        a = getattr(lay, name)
        if a is not None and tuple(a.shape) != shape:
            raise ConfigError(f"tensor '{name}' has shape {tuple(a.shape)}, expected {shape}")
    if (lay.w1 is None) != (lay.w2 is None):
        raise ConfigError("FFN needs both w1 and w2")
    if lay.w1 is None and (lay.wg is not None or lay.bg is not None):
        raise ConfigError("a gate weight (wg) needs the FFN weights w1 and w2")
    if lay.bg is not None and lay.wg is None:
        raise ConfigError("a gate bias (bg) needs the gate weight wg")
    if model.norm_kind not in NORM_KINDS:
        raise ConfigError(f"norm_kind must be one of {NORM_KINDS}, got {model.norm_kind!r}")
    if model.rope is not None and model.rope.dim > dh:
        raise ConfigError(f"RoPE rotates {model.rope.dim} dimensions but the heads have {dh}")
    real("embed_scale", model.embed_scale, positive=True)
    if not model.schedule:
        raise ConfigError("schedule is empty: a model needs at least one block")
    if any(not is_integer(g, 0) or g >= G for g in model.schedule):
        raise ConfigError(f"schedule {model.schedule} refers to weight sets outside 0..{G - 1}")
    if model.norm_style not in NORM_STYLES:
        raise ConfigError(f"norm_style must be one of {NORM_STYLES}, got {model.norm_style!r}")
    if model.activation not in ACTIVATIONS:
        raise ConfigError(f"unsupported activation {model.activation!r}; supported: {', '.join(ACTIVATIONS)}")
    if not isinstance(lay.window, jax.core.Tracer) and np.any(np.asarray(lay.window) < 0):
        raise ConfigError("attention windows must be >= 0 (0 = no window)")
    named = {name: getattr(lay, name) for name in LAYER_FIELDS}  # integer members are skipped by _non_finite
    named.update(final_ln_w=model.final_ln_w, final_ln_b=model.final_ln_b)
    if model.embeddings is not None:
        named.update({f"embeddings.{name}": getattr(model.embeddings, name) for name in EMBEDDING_FIELDS})
    bad = _non_finite(named)
    if bad:
        raise ConfigError(f"tensor '{bad[0]}' has non-finite values (NaN or inf)")
    return model


def parse_mask(mask: str) -> tuple[bool, int]:
    """``'full'``, ``'causal'`` or ``'local:W'`` (causal, window W) -> (causal, window).

    Examples:
        >>> from jaxattn.model.params import parse_mask
        >>> parse_mask("full"), parse_mask("causal"), parse_mask("local:4")
        ((False, 0), (True, 0), (True, 4))
    """
    if mask == "full":
        return False, 0
    if mask == "causal":
        return True, 0
    if mask.startswith("local:"):
        try:
            w = int(mask.split(":", 1)[1])
        except ValueError:
            w = -1
        if w < 1:
            raise ConfigError(f"local mask needs a positive window, e.g. 'local:4', got {mask!r}")
        return True, w
    raise ConfigError(f"mask must be 'full', 'causal' or 'local:W', got {mask!r}")


def from_heads(q, k, v, o, *, schedule=None, masks="full", scale=None, bq=None, bk=None, bv=None,
               bo=None, family="synthetic", **extra) -> Model:
    """Build a validated :class:`Model` from stacked head weights.

    Args:
        q, k, v: ``[G, H, d_h, d]``; o: ``[G, H, d, d_h]``.
        schedule: weight set of each block; default ``range(G)``.
        masks: one mask string for every set or a sequence of ``G`` (see :func:`parse_mask`).
        scale: score scale per set (scalar or ``[G]``); default ``1/sqrt(d_h)``.

    Examples:
        >>> import jax.numpy as jnp, numpy as np, jaxattn as ja
        >>> q = jnp.eye(4).reshape(1, 2, 2, 4)                        # G = 1 set, H = 2 heads, d_h = 2, d = 4
        >>> o = jnp.eye(4).reshape(4, 2, 2).transpose(1, 0, 2)[None]  # O_h: the columns head h owns
        >>> model = ja.model.params.from_heads(q, q, q, o, schedule=(0, 0, 0), masks="causal")
        >>> model.depth, model.shared
        (3, True)
        >>> bool(model.layers.causal[0]), round(float(model.layers.scale[0]), 6)   # s = 1/sqrt(d_h)
        (True, 0.707107)
        >>> bool((ja.layer_matrices(model)[0] == np.eye(4)).all())                 # F = Σ_h O_h V_h = I
        True
    """
    q, k, v, o = (jnp.asarray(a) for a in (q, k, v, o))
    if q.ndim != 4 or o.ndim != 4:
        raise ConfigError(f"q/k/v must be [G, H, d_h, d] and o [G, H, d, d_h]; got q {q.shape}, o {o.shape}")
    model_extra = {key: extra.pop(key) for key in ("rope", "norm_kind", "parallel", "embed_scale") if key in extra}
    G, _, dh, _ = q.shape
    masks = [masks] * G if isinstance(masks, str) else list(masks)
    if len(masks) != G:
        raise ConfigError(f"{len(masks)} masks given for {G} weight sets")
    parsed = [parse_mask(m) for m in masks]
    scale = 1.0 / np.sqrt(dh) if scale is None else scale
    layers = Layers(q=q, k=k, v=v, o=o,
                    causal=jnp.asarray([c for c, _ in parsed], dtype=MASK_DTYPE),
                    window=jnp.asarray([w for _, w in parsed], dtype=MASK_DTYPE),
                    scale=jnp.broadcast_to(jnp.asarray(scale, dtype=q.dtype), (G,)),
                    bq=bq, bk=bk, bv=bv, bo=bo, **extra)
    schedule = tuple(range(G)) if schedule is None else tuple(int(s) for s in schedule)
    return validate(Model(layers=layers, schedule=schedule, family=family, identity=identity_members(layers),
                          **model_extra))


def repeat_kv(lw: Layers) -> Layers:
    """``lw`` with its key/value heads repeated to one per query head (``k, v: [..., H, d_h, d]``):
    the explicit form of grouped-query attention, ``F = Σ_h O_h V_{g(h)}``. Works on stacked
    weights ``[G, ...]`` and on one set."""
    group = lw.q.shape[-3] // lw.k.shape[-3]
    if group == 1:
        return lw
    def rep(a, axis):  # numpy stays numpy (float64 on the host even with x64 off)
        if a is None:
            return None
        return np.repeat(a, group, axis=axis) if isinstance(a, np.ndarray) else jnp.repeat(a, group, axis=axis)

    return lw.replace(k=rep(lw.k, -3), v=rep(lw.v, -3), bk=rep(lw.bk, -2), bv=rep(lw.bv, -2))
