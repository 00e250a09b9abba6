"""Repeated passes of a real model, as the consensus paper's experiments run them.

One **pass** is every block of the model in order followed, for models that have one (GPT-2,
GPT-Neo), by the final LayerNorm ``ln_f``; the next pass starts from that output. This is what
calling the Hugging Face model pass after pass does (with its position embeddings left out of the
later passes, see :func:`repeated_passes`). Options reproduce the paper's ablations:

* ``dynamics``: :data:`jaxattn.FAITHFUL` (the real blocks), :data:`jaxattn.NO_FFN` (the FFN removed
  as the GPT-Consensus code does it: ``x + Attn(LN1 x)``), or any :class:`jaxattn.Dynamics`;
* ``final_norm``: apply ``ln_f`` between passes (default) or not;
* ``redraw``: *aperiodic* runs, every block's weights redrawn before each pass with the model's own
  initialisation (:func:`redraw_weights`), from ``fold_in(key, pass)`` — the same weights for every
  prompt of a batch;
* masks come with the model (causal for GPT-2, global/local for GPT-Neo); a ``mask`` override makes
  every layer full, causal or local;
* ``dtype``: float16, bfloat16, float32 or float64 (by name, or a NumPy or JAX dtype).

Observables ``Save(observe=...)`` are evaluated on the input (``t = 0``) and after every block
(``t = 1 .. passes·depth``; the last block of a pass is observed after ``ln_f``, as in transformers'
``hidden_states``); ``ctx.attention()`` gives the next block's attention weights at that state.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, PRNGKeyArray

from jaxattn.dynamics._runner import cast_floats, check_weights, resolve_dtype, run, working_bytes
from jaxattn.dynamics.discrete import FAITHFUL, Dynamics, _MapProgram, check_dynamics, saved_steps
from jaxattn.dynamics.observables import consensus_observables
from jaxattn.dynamics.options import Batch, Save, check_batch, check_save, moved
from jaxattn.errors import ConfigError, positive_int
from jaxattn.model.params import MASK_DTYPE, Layers, Model, parse_mask, validate


class Passes(NamedTuple):
    """Result of :func:`repeated_passes`: observables ``[B, T, ...]`` (``T = passes·depth + 1`` saved steps by
    default), the final state and, with ``Save(trajectory=True)``, the states ``[B, T, n, d]``."""

    observables: Any
    final: jax.Array
    trajectory: jax.Array | None = None


def redraw_weights(model: Model, key: PRNGKeyArray, std: float = 0.02) -> Model:
    """The model with every block's weights drawn afresh from its family's initialisation.

    Weight matrices ``N(0, std²)`` (``std`` is transformers' ``initializer_range``, 0.02 for GPT-2 and
    GPT-Neo); GPT-2 also scales its two output projections (``attn.c_proj``, ``mlp.c_proj``) by
    ``1/sqrt(2·n_layer)`` as its ``_init_weights`` does; biases 0; LayerNorm gains 1 and shifts 0.
    Embeddings and the final norm are kept.
    """
    lay = model.layers
    keys = jax.random.split(key, 6)
    scaled = std / np.sqrt(2 * model.depth) if model.family == "gpt2" else std
    normal = lambda k, a, s: None if a is None else (s * jax.random.normal(k, a.shape)).astype(a.dtype)
    zeros = lambda a: None if a is None else jnp.zeros_like(a)
    ones = lambda a: None if a is None else jnp.ones_like(a)
    new = lay.replace(q=normal(keys[0], lay.q, std), k=normal(keys[1], lay.k, std), v=normal(keys[2], lay.v, std),
                      o=normal(keys[3], lay.o, scaled), w1=normal(keys[4], lay.w1, std),
                      w2=normal(keys[5], lay.w2, scaled), bq=zeros(lay.bq), bk=zeros(lay.bk), bv=zeros(lay.bv),
                      bo=zeros(lay.bo), b1=zeros(lay.b1), b2=zeros(lay.b2), ln1_w=ones(lay.ln1_w),
                      ln1_b=zeros(lay.ln1_b), ln2_w=ones(lay.ln2_w), ln2_b=zeros(lay.ln2_b),
                      # a gated MLP's gate (Llama-style families), from its own key so the others are unchanged
                      wg=normal(jax.random.fold_in(key, 6), lay.wg, std), bg=zeros(lay.bg))
    return model.replace(layers=new)


def prompt_bytes(model: Model, n: int, dtype, saved: int = 0) -> int:
    """The working set of one prompt of ``n`` tokens in a pass of ``model`` (``saved`` states kept): what sizes
    the default lane width of :func:`repeated_passes` (long prompts run in narrow blocks, see
    :func:`jaxattn.dynamics.default_lanes`)."""
    hidden = 0 if model.layers.w1 is None else model.layers.w1.shape[1]
    return working_bytes(n, model.d_model, model.n_heads, dtype, hidden=hidden, saved=saved)


def with_mask(model: Model, mask: str) -> Model:
    """Every weight set of ``model`` with the attention mask ``mask`` ('full', 'causal', 'local:W')."""
    causal, window = parse_mask(mask)
    G = model.layers.n_sets
    return model.replace(layers=model.layers.replace(causal=jnp.full((G,), float(causal), MASK_DTYPE),
                                                     window=jnp.full((G,), float(window), MASK_DTYPE)))


@moved
def repeated_passes(model: Model, X0: Float[ArrayLike, "B n d"], passes: int, *, dynamics: Dynamics = FAITHFUL,
                    final_norm: bool = True, redraw: bool = False, key: PRNGKeyArray | None = None,
                    init_std: float = 0.02, mask: str | None = None, save: Save = Save(), batch: Batch = Batch(),
                    dtype=None) -> Passes:
    """Run ``passes`` passes of ``model`` from every configuration of ``X0: [B, n, d]``.

    ``X0`` is the input of the first block (e.g. :func:`jaxattn.dynamics.prompts.embed_prompts`). Calling the
    Hugging Face model pass after pass with ``inputs_embeds`` adds the position embeddings again at
    every pass; this function applies the blocks and ``ln_f`` only (it equals that loop when the
    position embeddings are zero, which is how the tests check it). See the module docstring for the
    options. ``save`` (:class:`jaxattn.Save`) and ``batch`` (:class:`jaxattn.Batch`) mean what they mean in
    :func:`jaxattn.simulate`: the steps are the blocks ``0 .. passes·depth`` (``Save(every=...)``), and
    ``Batch(size=None)`` is the runner's default width for the batch (every pass at that one width; for a fixed
    ``size`` a prompt's numbers do not depend on the batch it is run in, at other widths only to round-off).
    ``dtype``: a name, a NumPy or a JAX dtype (default: that of ``X0``).
    Returns :class:`Passes`.

    Examples:
        >>> import jax, jaxattn as ja
        >>> model = ja.random_model(jax.random.key(0), d=8, heads=2, depth=3, shared=False)
        >>> X0 = ja.init_tokens(jax.random.key(1), 4, 5, 8)
        >>> res = ja.repeated_passes(model, X0, passes=2, dynamics=ja.D1)
        >>> res.observables["diameter"].shape, res.final.shape      # the input, then 2 passes of 3 blocks
        ((4, 7), (4, 5, 8))
        >>> ja.repeated_passes(model, X0, passes=2, dynamics=ja.D1, save=ja.Save(every=3)).observables["diameter"].shape
        (4, 3)
    """
    positive_int("passes", passes)
    if not isinstance(dynamics, Dynamics):
        raise ConfigError(f"dynamics must be a jaxattn.Dynamics (jaxattn.FAITHFUL, jaxattn.NO_FFN, jaxattn.D1, ...), "
                          f"got {dynamics!r}")
    save = check_save(save, "repeated_passes", kind="map")
    batch = check_batch(batch, "repeated_passes")
    if redraw and key is None:
        raise ConfigError("redraw=True (aperiodic passes) needs a PRNG key")
    validate(model)
    X0 = jnp.asarray(X0)
    dt = resolve_dtype(dtype, X0)
    if X0.ndim == 2:
        X0 = X0[None]
    if X0.ndim != 3 or X0.shape[-1] != model.d_model or X0.shape[1] < 1:
        raise ConfigError(f"X0 must be [B, n, {model.d_model}] with n >= 1, got shape {tuple(X0.shape)}")
    check_dynamics(model, dynamics)
    if dynamics.norm == "layernorm" and model.layers.ln1_w is None:
        raise ConfigError("this model has no LayerNorm weights: use an L2 dynamics (e.g. jaxattn.D1)")
    if mask is not None:
        model = with_mask(model, mask)
    observe = save.observe or consensus_observables
    base = check_weights(model.replace(embeddings=None).astype(dt))
    aux = cast_floats(save.aux, dt)
    X = X0.astype(dt)
    depth = model.depth
    # every block is observed, then the saved steps are picked: the records of a redrawn run are joined
    # pass by pass, and the numbers kept are those of the every-step run whatever Save(every=...) is
    program = lambda steps: _MapProgram(dyn=dynamics, steps=steps, every=1, observe=observe,
                                        trajectory=bool(save.trajectory), pass_norm=bool(final_norm),
                                        unroll=batch.unroll)
    params = lambda m, start: (m, jnp.asarray(1.0, dt), jnp.asarray(1.0, dt), None, aux, jnp.int32(start))
    cost = prompt_bytes(base, X.shape[1], dt, saved=passes * depth + 1 if save.trajectory else 0)
    if not redraw:  # every pass in one scan of the map core: observations at 0 .. passes·depth
        rec, X, traj = run(program(passes * depth), X, params(base, 0), batch=batch, condition_bytes=cost)
    else:
        assert key is not None  # refused above: redraw needs a key
        parts = []
        for p in range(passes):  # new weights before each pass; its first record repeats the pass before's last
            m = redraw_weights(base, jax.random.fold_in(key, p), init_std)
            obs, X, tr = run(program(depth), X, params(m, p * depth), batch=batch, condition_bytes=cost)
            parts.append((obs, tr) if p == 0 else jax.tree_util.tree_map(lambda a: a[:, 1:], (obs, tr)))
        rec, traj = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=1), *parts)
    if save.when not in (None, 1):
        keep = saved_steps(passes * depth, save.when)
        rec, traj = jax.tree_util.tree_map(lambda a: a[:, keep], (rec, traj))
    return Passes(rec, X, traj)


__all__ = ["Layers", "Passes", "prompt_bytes", "redraw_weights", "repeated_passes", "with_mask"]
