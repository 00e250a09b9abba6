"""Discrete-time models D1–D6 (layers as time steps) and the batched simulator.

One block map covers every model; a :class:`Dynamics` (static, hashable) says which pieces are on:

=========  ==========================================================================
D1         ``Dynamics()``: ``x_i <- N(x_i + α Σ_h O_h Σ_j a^h_ij V_h x_j)``
D2         ``Dynamics(unit_output=True)``: D1 on a single-head model with ``O = I``
           (``random_model(..., heads=1, unit_output=True)``; any other model is refused)
D3         ``Dynamics(attention="uniform")``: ``a_ij = 1/n`` (multi-agent Oja)
D4         ``Dynamics(norm="none")`` on a model with score scale 1 (no normalisation)
D5         ``Dynamics(norm="ellipsoid")`` with ``S``: ``N_S`` in place of ``N``
D6         ``FAITHFUL``: the model's affine norm (LayerNorm or RMSNorm), FFN, biases, RoPE, its own
           pre/post-norm or parallel layout
=========  ==========================================================================

Intermediate settings between D1 and D6 (the power-method paper's simplification drops the FFN
and replaces LayerNorm by L2) are any other combination; ``attention='unnormalised'`` uses the
kernel ``exp(β s <Q x_i, K x_j>) / n`` (the clustering paper's flow before its rows are normalised; its
public code normalises them, i.e. softmax).
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
import math
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxattn.config import about, flag, plain, static
from jaxattn.dynamics import labelled
from jaxattn.dynamics._runner import (
    Context,
    block_budget,
    cast_floats,
    check_scalar,
    check_states,
    check_weights,
    checked,
    lanes_for,
    resolve_dtype,
    run,
    scalar_of,
    traced,
    wider_dtype,
    working_bytes,
)
from jaxattn.dynamics.geometry import FLAT, NEEDS_S, SPHERE, Geometry, check_spd
from jaxattn.dynamics.labelled import finite_flags
from jaxattn.dynamics.observables import consensus_observables
from jaxattn.dynamics.options import ATTENTION, BIASES, Batch, Save, check_batch, check_save, moved
from jaxattn.errors import ConfigError, NonFiniteWarning, integer
from jaxattn.errors import every as every_period
from jaxattn.model import display, nn
from jaxattn.model.attention import ATTENTIONS, apply_weights, attend, weights, with_heads
from jaxattn.model.forms import GENERAL, Form, check_form
from jaxattn.model.forms import choose as choose_form
from jaxattn.model.params import Layers, Model, validate
from jaxattn.model.precision import full_precision
from jaxattn.model.rope import Rope, cos_sin

if TYPE_CHECKING:
    import xarray

NORMS = ("l2", "ellipsoid", "none", "layernorm")
#: Position readings of attention: ``'none'`` position-free (tokens exchangeable; D1's default),
#: ``'model'`` the model's own RoPE where it has one (FAITHFUL), ``'on'`` the model's RoPE or, for a
#: model without one, the standard RoPE (θ = 10⁴ over every head coordinate).
ROPES = ("none", "model", "on")


class Dynamics(eqx.Module):
    """Which pieces of a block are on (static configuration, hashable).

    ``attention`` is the kernel (``'softmax'``, ``'uniform'`` or ``'unnormalised'``, see
    :func:`jaxattn.model.attention.probabilities`). ``unit_output`` asks for a single-head model with
    ``O = I`` (:data:`D2`) and refuses any other. ``drop_ln2`` removes the FFN of a pre-norm model the way the
    GPT-Consensus code does (the block becomes ``x + Attn(LN1 x)``, ``ln_2`` unused); without it a
    pre-norm block with the FFN off still normalises after the update (the power-method paper's
    simplification). See :data:`NO_FFN`. ``rope`` says how attention reads positions (:data:`ROPES`):
    ``'none'`` position-free (the default: tokens are exchangeable), ``'model'`` the model's own RoPE where
    it has one (:data:`FAITHFUL`), ``'on'`` the model's or, for a model without one, the standard RoPE
    (θ = 10⁴ over every head coordinate) — queries and keys rotated by token index ``0..n-1``.
    """

    # each field is also a key of a sweep's configuration and an option of `jaxattn simulate` (`about`: its help and
    # the values a file can name; an ellipsoid's matrix S is for Python)
    norm: str = static("l2", option=about("normalisation after the update", choices=plain(NORMS, NEEDS_S)))
    ffn: bool = flag(False, option=about("keep the FFN (converted models)"))
    pre_ln: bool = flag(False, option=about("pre-norm models (GPT-2, GPT-Neo): keep ln_1 before attention"))
    biases: bool = flag(False, option=BIASES)
    attention: str = static("softmax", option=ATTENTION)
    drop_ln2: bool = flag(False, option=about("pre-norm models without the FFN: the block is x + α Attn(LN1 x), no "
                                              "norm after it (the GPT-Consensus reading)"))
    rope: str = static("none", option=about(
        "positions in attention: 'none' position-free (tokens exchangeable), 'model' the model's own RoPE (Llama, "
        "GPT-NeoX...), 'on' the model's or the standard RoPE (θ = 10⁴)", choices=ROPES))
    unit_output: bool = flag(False, option=about("D2, one head with O = I (a random model is drawn so; a converted "
                                                 "one must have it)"))

    def __check_init__(self):
        if self.rope not in ROPES:
            raise ConfigError(f"rope must be one of {ROPES}, got {self.rope!r}")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.attention not in ATTENTIONS:
            raise ConfigError(f"attention must be one of {ATTENTIONS}, got {self.attention!r}")


D1 = Dynamics()
D2 = Dynamics(unit_output=True)
D3 = Dynamics(attention="uniform")
D4 = Dynamics(norm="none")
D5 = Dynamics(norm="ellipsoid")
FAITHFUL = Dynamics(norm="layernorm", ffn=True, pre_ln=True, biases=True, rope="model")
#: A real pre-norm model with its FFN removed as in the GPT-Consensus code: ``x + Attn(LN1 x)`` (with the
#: model's own RoPE where it has one).
NO_FFN = Dynamics(norm="layernorm", ffn=False, pre_ln=True, biases=True, drop_ln2=True, rope="model")


def check_dynamics(model: Model, dyn: Dynamics,
                   S: Float[ArrayLike, "d d"] | None = None) -> Float[ArrayLike, "d d"] | None:
    """Refuse combinations the model cannot run, with one clear line; return ``S`` checked (for the
    ellipsoid; a traced ``S`` carries its value check into the program)."""
    if dyn.ffn and model.layers.w1 is None:
        raise ConfigError("ffn=True but the model has no FFN weights (synthetic models are attention-only)")
    # an attention-only model has none of the pieces these read; a converted one runs FAITHFUL (pre_ln and biases
    # on) with what its family has: a post-norm model ignores pre_ln, a bias-free one biases
    lay = model.layers
    if dyn.norm == "layernorm" and lay.ln1_w is None:
        raise ConfigError("norm='layernorm' but the model has no LayerNorm weights (random models are attention-only)")
    if dyn.pre_ln and lay.ln1_w is None:
        raise ConfigError("pre_ln=True applies to pre-norm models (GPT-2, GPT-Neo); this one has no norm weights "
                          "(random models are attention-only)")
    if dyn.biases and lay.ln1_w is None and all(getattr(lay, b) is None for b in ("bq", "bk", "bv", "bo")):
        raise ConfigError("biases=True but the model has no biases (random models are drawn without them)")
    if dyn.drop_ln2 and (dyn.ffn or model.norm_style != "pre"):
        raise ConfigError("drop_ln2 removes the FFN sublayer of a pre-norm model (GPT-2, GPT-Neo): use it with "
                          "ffn=False on a pre-norm model")
    if dyn.unit_output and not _unit_output(lay.o):
        raise ConfigError("unit_output=True (D2) needs a single-head model with O = I, e.g. "
                          "random_model(key, d, heads=1, unit_output=True)")
    if dyn.norm == "ellipsoid":
        S = check_spd(S, model.d_model)
    if dyn.rope == "on" and model.rope is None and model.layers.d_head < 2:
        raise ConfigError("rope='on' needs heads of at least 2 dimensions")
    return S


def _unit_output(o) -> bool:
    """``O: [G, H, d, d_h]`` is one head with ``O = I`` in every weight set (a traced ``O``: its shape only)."""
    if o.shape[1] != 1 or o.shape[2] != o.shape[3]:
        return False
    return isinstance(o, jax.core.Tracer) or bool(np.all(np.asarray(o) == np.eye(o.shape[2])))


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


def geometry_of(dyn: Dynamics, S: Float[Array, "d d"] | Float[np.ndarray, "d d"] | None = None) -> Geometry | None:
    """The token space a dynamics retracts onto (``None`` for the affine LayerNorm)."""
    return {"l2": SPHERE, "none": FLAT, "ellipsoid": Geometry("ellipsoid", S)}.get(dyn.norm)


def attention_input(X: Float[Array, "n d"], lw: Layers, model: Model, dyn: Dynamics) -> Float[Array, "n d"]:
    """What attention reads: ``X``, or ``Norm1(X)`` for a pre-norm model with ``pre_ln``."""
    if model.norm_style == "pre" and dyn.pre_ln:
        return _norm(X, lw.ln1_w, lw.ln1_b, model, dyn)
    return X


def _weights_at(X, lw, model, dyn, beta, form):
    """The attention weights the block applies at state ``X`` (``form``: how the products are arranged, see
    :mod:`jaxattn.model.forms`; the weights are formed whatever its ``key_chunk``), ``[n, n]`` for a single head
    (no size-1 head axis on the ``n × n`` arrays of the hot loop, see :func:`jaxattn.model.attention._single`)."""
    return weights(attention_input(X, lw, model, dyn), lw, beta, biases=dyn.biases,
                   attention=dyn.attention, rope=_rope_tables(model, dyn, X.shape[0]), form=form)


def _norm(y, w, b, model: Model, dyn: Dynamics, S=None):
    """The block's normalisation of ``y``. A token whose update overflowed is non-finite whatever the norm makes of
    it: where the statistic a norm divides by is not finite (``y / inf`` is a zero token, read as a finite state at
    consensus; a LayerNorm then returns its bias), the token is NaN: the sphere's and the ellipsoid's squared norm
    (:meth:`~jaxattn.dynamics.geometry.Geometry.retract`), the affine norms' variance or mean square (computed as
    they compute it, so XLA forms it once). Flat space has no norm: its tokens are what the update made them."""
    if dyn.norm == "layernorm":  # the model's own affine norm: LayerNorm or RMSNorm
        if model.norm_kind == "rmsnorm":
            stat = (y * y).mean(-1, keepdims=True)
        else:
            stat = ((y - y.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True)
        return jnp.where(stat < jnp.inf, nn.affine_norm(y, w, b, model.ln_eps, model.norm_kind), jnp.nan)
    geom = geometry_of(dyn, S)
    assert geom is not None  # every norm but layernorm has a geometry
    return geom.retract(y)  # NaN where the squared norm overflowed


@full_precision
def block(X: Float[Array, "n d"], lw: Layers, model: Model, dyn: Dynamics, alpha, beta,
          S: Float[ArrayLike, "d d"] | None = None, return_probs: bool = False,
          probs: Float[Array, "*H n n"] | None = None, form: Form | None = None):
    """One block (layer) map ``[n, d] -> [n, d]`` for one weight set ``lw``.

    ``probs``: the attention weights ``[H, n, n]`` at ``X`` (``[n, n]`` for a single head: the step's own layout,
    without a size-1 head axis) when the caller already has them. ``form``: how the attention's products are arranged
    (:func:`jaxattn.model.forms.choose`; ``None``: the general per-head form). Without ``probs`` or
    ``return_probs`` the normalised weights are never formed (:func:`jaxattn.model.attention.attend`: the softmax
    divides after the weighted sum, or over key chunks).
    """

    def ffn(y):  # check_dynamics refuses ffn=True on a model without FFN weights
        return nn.ffn(y, lw, model.activation, biases=dyn.biases)

    norm = lambda y, w, b: _norm(y, w, b, model, dyn, S)
    h = attention_input(X, lw, model, dyn)
    form = GENERAL if form is None else form
    if probs is None and not return_probs:  # the weights are not needed: attend arranges the update freely
        A = None
        upd = attend(h, lw, beta, biases=dyn.biases, attention=dyn.attention, rope=_rope_tables(model, dyn, X.shape[0]),
                     form=form)
    else:
        A = _weights_at(X, lw, model, dyn, beta, form) if probs is None else probs
        upd = apply_weights(h, A, lw, biases=dyn.biases, form=form)
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
    if not return_probs:
        return y
    assert A is not None  # the attend branch above is taken only without return_probs
    return y, with_heads(A)


def form_of(model: Model, dyn: Dynamics, n: int, dtype, form: Form | str = "auto") -> Form:
    """How the layers of ``model`` are evaluated for ``n`` tokens under ``dyn``: ``form`` itself when it is a
    :class:`~jaxattn.model.forms.Form` (checked against the model), else the cheapest exact one
    (:func:`jaxattn.model.forms.choose`; the attention goes over key chunks when one condition's would
    exceed the backend's block budget).

    Examples:
        >>> import jax, jaxattn as ja
        >>> sphere = ja.random_model(jax.random.key(0), 3, weights="identity", value="identity", scale=1.0)
        >>> from jaxattn.dynamics.discrete import form_of
        >>> form_of(sphere, ja.D1, 32, "float32").identity                  # X Xᵀ, the softmax and A X only
        ('q', 'k', 'v', 'o')
        >>> form_of(sphere, ja.D1, 100_000, "float32").key_chunk is not None   # the mean-field regime
        True
    """
    if form != "auto":
        return check_form(form, model)
    return choose_form(model, n, attention=dyn.attention, biases=dyn.biases, rope=rope_of(model, dyn) is not None,
                  dtype=dtype, budget=block_budget())


def layer_index(model: Model, k: Int[ArrayLike, ""]) -> Int[Array, ""]:
    """Weight set used by step ``k`` (``k -> k+1``); cycles through the schedule.

    Examples:
        >>> import jax, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=4, depth=3, shared=False)
        >>> [int(ja.dynamics.discrete.layer_index(model, k)) for k in range(7)]   # steps beyond the depth cycle
        [0, 1, 2, 0, 1, 2, 0]
    """
    sched = jnp.asarray(model.schedule, dtype=jnp.int32)
    return sched[jnp.mod(k, model.depth)]


def step(X: Float[Array, "n d"], k: Int[ArrayLike, ""], model: Model, dyn: Dynamics = D1, alpha=1.0, beta=1.0,
         S: Float[ArrayLike, "d d"] | None = None) -> Float[Array, "n d"]:
    """The step map ``X(k) -> X(k+1)`` of the model at (possibly traced) step ``k``."""
    return block(X, model.layers.take(layer_index(model, k)), model, dyn, alpha, beta, S)


class Simulation(NamedTuple):
    """Result of :func:`simulate`. Leading axes ``[B, T]``: ``T`` saved steps (all ``steps + 1``
    by default, step 0 being the initial state; see :class:`jaxattn.Save`).

    A pytree (``jit`` and ``vmap`` return it); :meth:`to_xarray` labels its arrays, and a terminal or a notebook
    shows a summary of it (shapes, dtypes, how many conditions ended non-finite) rather than its numbers.
    """

    observables: Any
    final: jax.Array  # [B, n, d]
    trajectory: jax.Array | None  # [B, T, n, d] when asked for, else None

    @property
    def ok(self) -> jax.Array:
        """``[B]`` bool: the final state of each condition is finite (``False`` where the map overflowed;
        :func:`simulate` warns when any is)."""
        return finite_flags(self.final)

    def to_xarray(self, steps: int | None = None, save: Save | None = None, *,
                  attrs: Mapping[str, Any] | None = None) -> xarray.Dataset:
        """The result as an ``xarray.Dataset``: each observable ``(condition, step, ...)``, ``final``
        ``(condition, token, coord)`` and the trajectory ``(condition, step, token, coord)`` when kept, the step
        numbers as the ``step`` coordinate (``condition``, ``token``, ``coord`` count from 0; no ``condition`` for
        :func:`simulate_one`'s single configuration).

        ``steps`` and ``save``: those :func:`simulate` ran with, which say the saved steps (:func:`saved_steps`);
        without ``steps`` the ``step`` axis has no coordinate (a result does not record which steps it saved: select
        by position, ``isel``). ``attrs``: the run's configuration, seed... (a dict or list is kept as JSON text,
        which every xarray backend writes), beside ``kind = 'map'`` and the ``versions`` (JSON) of the packages.

        Examples:
            >>> import jax, jaxattn as ja
            >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3)
            >>> X0 = ja.init_tokens(jax.random.key(1), 4, 5, 8)
            >>> ds = ja.simulate(model, X0, steps=6, save=ja.Save(every=2)).to_xarray(6, ja.Save(every=2))
            >>> dict(ds.sizes), ds.step.values.tolist()
            ({'condition': 4, 'step': 4, 'token': 5, 'coord': 8}, [0, 2, 4, 6])
            >>> ds.diameter.dims, ds.diameter.sel(step=6).mean("condition").shape   # the mean over conditions
            (('condition', 'step'), ())
        """
        save = None if save is None else check_save(save, "to_xarray", kind="map")
        times = None if steps is None else saved_steps(check_steps(steps), None if save is None else save.when)
        info = {"steps": steps, "every": None if save is None else save.every}
        return labelled.dataset(self.observables, self.final, self.trajectory, time_dim=labelled.STEP,
                                 times=times, attrs={**info, **(attrs or {})})

    def _summary(self) -> display.Summary:
        bad, total = labelled.nonfinite(self.final)
        *lead, n, d = display.shape(self.final)
        first = next(iter(labelled.leaves(self.observables).values()), self.trajectory)
        sizes = [(labelled.CONDITION, total)] if lead else []
        if first is not None:
            sizes.append((labelled.STEP + " (saved)", labelled.saved(first, self.final)))
        sizes += [(labelled.TOKEN, n), (labelled.COORD, d)]
        return display.Summary("jaxattn.Simulation", [
            ("dimensions", labelled.dims_line(sizes)),
            ("observables", labelled.observables_line(self.observables)),
            ("final", display.array_line(self.final)),
            ("trajectory", display.array_line(self.trajectory)),
            ("non-finite", display.count_line(bad, total))])

    def __repr__(self) -> str:
        return display.text(display.safe(self._summary, lambda: display.fields_repr(self, self._fields)))

    def _repr_html_(self) -> str:
        return display.as_html(display.safe(self._summary, lambda: display.fields_repr(self, self._fields)))


def saved_steps(steps: int, every=None) -> Int[np.ndarray, " T"]:
    """Step indices at which a map evaluates observables for ``Save(every=...)``: ``None`` every step
    ``0..steps``; an integer ``m`` every m-th step and the last; ``'last'`` the last step only; a tuple (``Save.when``
    of ``Save(steps=...)``) those steps, refused beyond ``steps``.

    Examples:
        >>> import jaxattn as ja
        >>> ja.dynamics.discrete.saved_steps(7, 3).tolist(), ja.dynamics.discrete.saved_steps(7, "last").tolist()
        ([0, 3, 6, 7], [7])
    """
    if isinstance(every, tuple):  # Save(steps=...): the steps listed, within the run
        if every[-1] > steps:
            raise ConfigError(f"Save(steps=...) lists step {every[-1]}, beyond the run's {steps} steps")
        return np.asarray(every)
    if every is None:
        every = 1
    if every_period("Save(every=...)", every) == "last":
        return np.asarray([steps])
    return np.asarray(sorted(set(range(0, steps, int(every))) | {steps}))


def _scan(f: Callable, carry, ks: jax.Array, unroll: int = 1):
    """``lax.scan(f, carry, ks)`` arranged for reverse-mode differentiation in ``O(√L)`` memory.

    The ``L`` steps run as an outer scan over ``⌈√L⌉``-step segments, each segment rematerialised
    (``jax.checkpoint``) and each step too: a gradient stores the states at segment boundaries and,
    while one segment is differentiated, that segment's states — about ``2√L`` states instead of ``L``
    states and all their attention weights. (Keeping a segment's intermediates instead of recomputing
    each step was measured slower as well as larger on a CPU: the saved attention weights cost more
    memory traffic than the recomputation.) Without differentiation the steps, their order and their
    arithmetic are those of the plain scan (``checkpoint`` only changes what autodiff saves).
    ``unroll``: steps per iteration of each loop (``lax.scan(unroll=...)``, :class:`~jaxattn.Batch`): the same
    arithmetic in fewer iterations, each of which costs a GPU a launch and a check of its own.
    """
    L = ks.shape[0]
    f = jax.checkpoint(f, prevent_cse=False)
    s = math.isqrt(L - 1) + 1 if L > 1 else 1  # ⌈√L⌉
    s = -(-s // unroll) * unroll  # whole iterations of `unroll` steps in a segment (no remainder loop in each)
    q, r = divmod(L, s)
    if q <= 1:
        return jax.lax.scan(f, carry, ks, unroll=min(unroll, max(L, 1)))
    inner = jax.checkpoint(lambda c, kk: jax.lax.scan(f, c, kk, unroll=min(unroll, s)), prevent_cse=False)
    carry, out = jax.lax.scan(inner, carry, ks[: q * s].reshape(q, s))
    out = jax.tree_util.tree_map(lambda a: a.reshape((q * s, *a.shape[2:])), out)
    if r:
        carry, rest = jax.lax.scan(f, carry, ks[q * s:], unroll=min(unroll, r))
        out = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), out, rest)
    return carry, out


def _evolve(X0, model: Model, alpha, beta, S, aux, start, *, dyn: Dynamics, steps: int, every: int | tuple[int, ...],
            observe: Callable, trajectory: bool, pass_norm: bool, form: Form = GENERAL, unroll: int = 1):
    """The map core: ``steps`` blocks from one configuration ``X0: [n, d]``, starting at global step
    ``start`` (the weight set of step ``k`` is ``schedule[k % depth]``), returning
    ``(observables [T, ...], final [n, d], trajectory [T, n, d] | None)``.

    Observations at local steps ``0, m, 2m, ... < steps`` and at ``steps`` (``m = every``; ``0``: the
    last only): an outer scan over segments of ``m`` steps whose first step shares its attention weights with the
    observable when the observable asks for them (a tuple ``every``: the steps listed, see :func:`_listed`).
    ``pass_norm``: the model's final norm (``ln_f``) after every block that ends a pass (global step ``k`` with
    ``(k + 1) % depth == 0``), as calling a real model pass after pass does. ``form``: how each layer's attention
    is evaluated (:mod:`jaxattn.model.forms`); ``unroll`` the steps of each loop iteration (:func:`_scan`).
    """
    depth = model.depth
    observe = checked(observe)

    def lw_at(k):
        return model.layers.take(layer_index(model, k))

    def advance(X, k, probs=None):
        Y = block(X, lw_at(k), model, dyn, alpha, beta, S, probs=probs, form=form)
        if pass_norm and model.final_ln_w is not None:
            ln_f = nn.affine_norm(Y, model.final_ln_w, model.final_ln_b, model.ln_eps, model.norm_kind)
            Y = jnp.where((k + 1) % depth == 0, ln_f, Y)
        return Y

    def on_demand(X, k):  # ctx.attention at step k: the weights formed once, if asked for (known while tracing)
        asked: list = []

        def attention():
            if not asked:
                asked.append(_weights_at(X, lw_at(k), model, dyn, beta, form))
            return with_heads(asked[0])

        return attention, asked

    def look(X, k):  # the record at step k, and the attention weights the step from X will use
        attention, asked = on_demand(X, k)
        rec = (observe(k, X, Context(aux, attention)), X if trajectory else None)
        # Weights the observable asked for are shared with the step (one attention evaluation); otherwise the
        # step is the unobserved one (:func:`attend`, which never normalises the weights). The key-chunked form
        # never hands formed weights to the step: it exists so that they are never formed.
        return rec, (asked[0] if asked and not form.key_chunk else None)

    def plain(X, k):
        return advance(X, k), None

    def run_plain(X, k0, length):
        if length == 0:
            return X
        X, _ = _scan(plain, X, k0 + jnp.arange(length, dtype=jnp.int32), unroll)
        return X

    start = jnp.asarray(start, jnp.int32)
    if isinstance(every, tuple):
        return _listed(X0, every, steps, start, advance, on_demand, observe, aux, trajectory, unroll)
    m = every
    q = steps // m if m else 0
    X = X0
    seen = None
    if q:
        def segment(X, j):
            k0 = start + j * m
            rec, A = look(X, k0)
            return run_plain(advance(X, k0, A), k0 + 1, m - 1), rec

        X, seen = _scan(segment, X, jnp.arange(q, dtype=jnp.int32), unroll)
    r = steps - q * m
    if m and r:  # a last, shorter segment: observed at its start like the others
        k0 = start + q * m
        rec, A = look(X, k0)
        X = run_plain(advance(X, k0, A), k0 + 1, r - 1)
        rec = jax.tree_util.tree_map(lambda a: a[None], rec)
        seen = rec if seen is None else jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), seen, rec)
    elif r:
        X = run_plain(X, start, r)
    kT = start + steps
    # the last state's observable: attention of the step that would follow, computed only if asked for
    last = (observe(kT, X, Context(aux, on_demand(X, kT)[0])), X if trajectory else None)
    if seen is None:
        obs, traj = jax.tree_util.tree_map(lambda a: a[None], last)
    else:
        obs, traj = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), seen, last)
    return obs, X, traj


def _listed(X0, listed: tuple[int, ...], steps: int, start, advance: Callable, on_demand: Callable, observe: Callable,
            aux, trajectory: bool, unroll: int = 1):
    """:func:`_evolve` for ``Save(steps=...)``: one scan over every step that records at the ``listed`` local steps
    (sorted, within ``0..steps``) into buffers of ``len(listed)`` rows carried along. One program whatever the
    steps listed (a segment per gap would compile a loop per distinct gap), holding the listed steps only (a
    step's row is found by a binary search, not in a table of every step); the record sits in a ``cond`` on the
    step, which depends on the step alone, so it stays a branch under ``vmap`` and costs nothing at other steps.
    The observable's attention is formed for the record (not shared with the step, as a period's segments do).
    Under reverse-mode differentiation the checkpoints of the scan hold the buffers too (about √steps copies):
    differentiate a long run with a trajectory through ``Save(every=...)``."""
    at = jnp.asarray(listed, jnp.int32)

    def record(X, j):
        k = start + j
        return observe(k, X, Context(aux, on_demand(X, k)[0])), X if trajectory else None

    rows = jax.eval_shape(record, X0, jnp.int32(0))
    kept = jax.tree_util.tree_map(lambda a: jnp.zeros((len(listed), *a.shape), a.dtype), rows)

    def keep(kept, X, j):
        slot = jnp.minimum(jnp.searchsorted(at, j), len(listed) - 1)
        put = lambda kept: jax.tree_util.tree_map(lambda a, r: a.at[slot].set(r), kept, record(X, j))
        return jax.lax.cond(at[slot] == j, put, lambda kept: kept, kept)

    def one(carry, j):
        X, kept = carry
        return (advance(X, start + j), keep(kept, X, j)), None

    X = X0
    if steps:
        (X, kept), _ = _scan(one, (X0, kept), jnp.arange(steps, dtype=jnp.int32), unroll)
    obs, traj = keep(kept, X, jnp.int32(steps))
    return obs, X, traj


def _every(every) -> int | tuple[int, ...]:
    """``Save.when`` as :func:`_evolve`'s ``every``: a segment length (0: the last step only) or the listed steps."""
    if isinstance(every, tuple):
        return every
    return 0 if every == "last" else int(every or 1)


@dataclasses.dataclass(frozen=True)
class _MapProgram:
    """:func:`_evolve` as a runner program (see :mod:`jaxattn.dynamics._runner`)."""

    dyn: Dynamics
    steps: int
    every: int | tuple[int, ...]  # m (0 = observe the last step only), or the steps to observe
    observe: Callable
    trajectory: bool
    pass_norm: bool = False
    form: Form = GENERAL
    unroll: int = 1

    def __call__(self, X0, p):
        model, alpha, beta, S, aux, start = p
        return _evolve(X0, model, alpha, beta, S, aux, start, dyn=self.dyn, steps=self.steps, every=self.every,
                       observe=self.observe, trajectory=self.trajectory, pass_norm=self.pass_norm, form=self.form,
                       unroll=self.unroll)


def check_steps(steps) -> int:
    return integer("steps", steps, minimum=0)


@full_precision
@moved
def simulate_one(model: Model, X0: Float[ArrayLike, "n d"], steps: int, *, dynamics: Dynamics = D1, alpha=1.0, beta=1.0,
                 S: Float[ArrayLike, "d d"] | None = None, save: Save = Save(), start=0,
                 pass_norm: bool = False) -> Simulation:
    """The map of one configuration ``X0: [n, d]``: the pure core that :func:`simulate`,
    :func:`jaxattn.dynamics.faithful.forward` and :func:`jaxattn.repeated_passes` run for every condition.

    No batching, no casting, no host-side value checks: a pure function of ``(model, X0, alpha, beta,
    S, save.aux, start)`` that composes with ``jax.jit``, ``jax.vmap``, ``jax.grad``, ``jax.jvp`` and
    ``jax.jacfwd``. Options are those of :func:`simulate`; ``start`` is the global step of the first
    block (its weight set is ``schedule[start % depth]``; observables see ``t = start + k``), and
    ``pass_norm`` applies the model's final norm after every block that ends a pass (see
    :func:`jaxattn.repeated_passes`). Long maps are differentiated with rematerialisation: memory grows
    like the square root of the number of steps.

    Returns:
        :class:`Simulation` without the batch axis: observables ``[T, ...]``, ``final: [n, d]``,
        ``trajectory: [T, n, d]`` or ``None``.

    Examples:
        >>> import jax, jax.numpy as jnp, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 1, 5, 8)[0]
        >>> res = ja.simulate_one(model, X0, 3)
        >>> res.observables["diameter"].shape, res.final.shape
        ((4,), (5, 8))
        >>> g = jax.grad(lambda b: ja.simulate_one(model, X0, 3, beta=b).observables["diameter"][-1])(1.0)
        >>> g.shape                                       # d(final diameter)/dβ
        ()
    """
    if not isinstance(dynamics, Dynamics):
        raise ConfigError(f"dynamics must be a jaxattn.Dynamics, got {dynamics!r}")
    save = check_save(save, "simulate_one", kind="map")
    X0 = jnp.asarray(X0)
    if X0.ndim != 2 or X0.shape[-1] != model.d_model:
        raise ConfigError(f"X0 must be one configuration [n, {model.d_model}], got shape {tuple(X0.shape)} "
                          "(simulate runs batches)")
    S = check_dynamics(model, dynamics, S)
    steps = check_steps(steps)
    saved_steps(steps, save.when)  # listed steps within the run, or one line
    # the state carries the weights' precision (float32 tokens through a float64 model run in float64)
    X0 = X0.astype(wider_dtype(X0, model))
    form = form_of(model, dynamics, X0.shape[0], X0.dtype)  # traced weights: no identity member is used
    obs, final, traj = _evolve(X0, model, alpha, beta, S, save.aux, start, dyn=dynamics, steps=steps,
                               every=_every(save.when), observe=save.observe or consensus_observables,
                               trajectory=bool(save.trajectory), pass_norm=bool(pass_norm), form=form)
    return Simulation(obs, final, traj)


@moved
def simulate(model: Model, X0: Float[ArrayLike, "*B n d"], steps: int, *, dynamics: Dynamics = D1, alpha=1.0, beta=1.0,
             S: Float[ArrayLike, "d d"] | None = None, save: Save = Save(), batch: Batch = Batch(),
             dtype=None) -> Simulation:
    """Run ``steps`` block maps from every initial configuration, under ``jit``.

    Args:
        model: the model; step ``k`` uses weight set ``schedule[k % depth]``.
        X0: ``[B, n, d]`` initial configurations (``[n, d]`` is taken as ``B = 1``).
        steps: number of steps (may exceed the depth: prolonged / repeated passes).
        dynamics: which model (see the module docstring).
        alpha: step size α (> 0); beta: inverse temperature β (both traced: changing them does not
            recompile). S: ``[d, d]`` matrix for ellipsoid normalisation.
        save: what is kept (:class:`jaxattn.Save`): the steps at which the observable is evaluated
            (``every``: every step by default, every m-th and the last, or the last only), the observable
            ``observe(t, X, ctx)`` (``t`` the step index, ``ctx.attention()`` the attention weights of the
            step taken from ``X``; default :func:`jaxattn.analysis.metrics.consensus_observables`) and its
            ``aux``, and the trajectory. ``Save(ts=...)`` (times of a flow) is refused.
        batch: how the batch runs (:class:`jaxattn.Batch`): conditions per compiled block (default: the
            backend's width, capped for a small batch at less than twice ``B``: :func:`lanes_of`; for a fixed
            ``size`` a condition's numbers are the same bits however the batch is split, for other widths the
            same to round-off), devices and matrix-product precision.
        dtype: computation dtype, a name (``'float32'``), a NumPy or a JAX dtype (default: that of X0;
            float32 unless float64 is asked for).

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
        >>> obs = ja.simulate(model, X0, steps=3, save=ja.Save(every="last", observe=row_sums)).observables
        >>> obs.shape, bool(np.allclose(obs, 1.0))
        ((4, 1), True)
    """
    validate(model)  # shapes and finite weights, also for a model edited with `replace`
    if not isinstance(dynamics, Dynamics):
        raise ConfigError(f"dynamics must be a jaxattn.Dynamics (D1, D3, D4, D5, FAITHFUL, NO_FFN or "
                          f"Dynamics(...)), got {dynamics!r}")
    save = check_save(save, "simulate", kind="map")
    batch = check_batch(batch, "simulate")
    X0 = check_states(X0, model.d_model, normalised=dynamics.norm in ("l2", "ellipsoid"))
    # α is the step size: α <= 0 is no step of the papers' maps (α -> 0+ is their flow), refused rather than run
    alpha, beta = check_scalar("alpha", alpha, positive=True), check_scalar("beta", beta)
    steps = check_steps(steps)
    S = check_dynamics(model, dynamics, S)
    dtype = resolve_dtype(dtype, X0)
    # embeddings and the final norm play no part in the dynamics: leave them out of the jit inputs
    model = check_weights(model.replace(embeddings=None, final_ln_w=None, final_ln_b=None).astype(dtype))
    S = None if S is None else jnp.asarray(S, dtype)
    form = form_of(model, dynamics, X0.shape[1], dtype, batch.form)
    if form.key_chunk is not None and batch.size is None:  # one such condition fills the device: no padded lanes
        batch = dataclasses.replace(batch, size=1)
    saved_steps(steps, save.when)  # listed steps within the run, or one line
    program = _MapProgram(dyn=dynamics, steps=steps, every=_every(save.when),
                          observe=save.observe or consensus_observables, trajectory=bool(save.trajectory), form=form,
                          unroll=batch.unroll)
    params = (model, scalar_of(alpha, dtype), scalar_of(beta, dtype), S, cast_floats(save.aux, dtype), np.int32(0))
    cost, one_head = _condition_bytes(model, X0.shape[1], dtype, form, steps, save)
    obs, final, traj = run(program, X0.astype(dtype), params, batch=batch, condition_bytes=cost,
                           one_head_bytes=one_head)
    res = Simulation(obs, final, traj)
    if not traced(res.final):
        _warn_non_finite(res)
    return res


def _condition_bytes(model: Model, n: int, dtype, form: Form, steps: int, save: Save) -> tuple[int, int | None]:
    """What sizes the default width of :func:`simulate`'s blocks: one condition's working set and, for one head, one
    step's (:func:`jaxattn.dynamics.default_lanes`)."""
    hidden = 0 if model.layers.w1 is None else model.layers.w1.shape[1]
    cost = working_bytes(n, model.d_model, model.n_heads, dtype, hidden=hidden,
                         saved=len(saved_steps(steps, save.when)) if save.trajectory else 0, key_chunk=form.key_chunk)
    return cost, one_head_bytes(model, n, dtype, form.key_chunk)


def lanes_of(model: Model, n: int, *, dynamics: Dynamics = D1, steps: int = 0, save: Save = Save(),
             batch: Batch = Batch(), dtype="float32", conditions: int | None = None) -> int:
    """The lane width in which :func:`simulate` computes ``conditions`` conditions per device of ``n`` tokens:
    ``batch.size`` when given; else the default for this model (:func:`jaxattn.dynamics.default_lanes`: the
    backend's width for such conditions, capped at the smallest power of two ``>= conditions``; 1 where the
    attention runs over key chunks). ``conditions=None``: the uncapped width, every default before it followed
    the batch (what a sweep store written then resumes at). The sweeps record this width and resume at it.

    Examples:
        >>> import jax, jaxattn as ja
        >>> from jaxattn.dynamics.discrete import lanes_of
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2)
        >>> lanes_of(model, 5, conditions=6), lanes_of(model, 5, conditions=6, batch=ja.Batch(size=32))
        (8, 32)
    """
    dtype = resolve_dtype(dtype)
    bare = model.replace(embeddings=None, final_ln_w=None, final_ln_b=None).astype(dtype)  # as simulate sees it
    form = form_of(bare, dynamics, n, dtype, batch.form)
    if form.key_chunk is not None and batch.size is None:  # as simulate: one condition fills the device
        return 1
    cost, one_head = _condition_bytes(bare, n, dtype, form, steps, save)
    return lanes_for(batch.size, cost, one_head, conditions)


def one_head_bytes(model: Model, n: int, dtype, key_chunk: int | None = None) -> int | None:
    """What widens a one-head map's default block (runner.default_lanes): one step's working set of a condition of
    ``n`` tokens, not its trajectory; ``None`` for several heads. :func:`simulate` and the sweeps' pieces use it."""
    if model.n_heads != 1:
        return None
    hidden = 0 if model.layers.w1 is None else model.layers.w1.shape[1]
    return working_bytes(n, model.d_model, 1, dtype, hidden=hidden, key_chunk=key_chunk)


def _warn_non_finite(res: Simulation) -> None:
    """A run whose states left the finite numbers (an α or β so large that exp or the norm overflows)
    says so: its conditions are flagged in :attr:`Simulation.ok` and a warning counts them."""
    ok = labelled.finite_rows(res.final)  # read in place on a CPU; else B flags come back, not the states
    bad = int(np.sum(~ok))
    if bad:
        warnings.warn(f"{bad} of {ok.shape[0]} conditions reached non-finite states (NaN or inf): the "
                      "dynamics overflowed (too large alpha or beta?); Simulation.ok flags them", NonFiniteWarning,
                      stacklevel=3)
