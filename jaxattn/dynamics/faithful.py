"""Faithful forward passes (D6): real prompts in, every hidden state out.

``hidden_states`` follows transformers' convention so the two can be compared entry by entry:
entry 0 is the input of the first block (after ALBERT's ``embedding_hidden_mapping_in``),
entry k the output of block k, and for models with a final norm (GPT-2, GPT-Neo) the last
entry is after ``ln_f``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxattn.dynamics._runner import check_scalar, resolve_dtype
from jaxattn.dynamics.discrete import FAITHFUL, Dynamics, _evolve, check_dynamics, check_steps
from jaxattn.errors import ConfigError
from jaxattn.model import nn
from jaxattn.model.params import Model
from jaxattn.model.precision import full_precision


@full_precision
def embed(model: Model, ids: Int[ArrayLike, " n"] | Sequence[int],
          token_type_ids: Int[ArrayLike, " n"] | Sequence[int] | None = None) -> Float[Array, "n d"]:
    """Token ids ``[n]`` -> hidden states ``[n, d]`` (token + position (+ type) embeddings,
    the embedding LayerNorm where the family has one, ALBERT's projection to d). Models with rotary
    positions (Llama, GPT-NeoX...) add no position embedding here: RoPE acts inside attention, by token
    index ``0..n-1``; Gemma's token embeddings are multiplied by ``sqrt(d)`` (``embed_scale``)."""
    e = model.embeddings
    if e is None:
        raise ConfigError("this model has no embeddings (synthetic models take tokens, not ids)")
    if isinstance(ids, jax.core.Tracer):  # inside vmap/jit: checked by the caller
        n = ids.shape[0]
    else:
        host = np.asarray(ids)
        if host.ndim != 1 or host.size == 0:
            raise ConfigError(f"ids must be a non-empty 1-D sequence of token ids, got shape {tuple(host.shape)}")
        if not np.issubdtype(host.dtype, np.integer):
            raise ConfigError(f"token ids must be integers, got dtype {host.dtype}")
        vocab = e.word.shape[0]
        if host.min() < 0 or host.max() >= vocab:
            raise ConfigError(f"token ids must be in [0, {vocab}), got values in [{host.min()}, {host.max()}]")
        n = host.shape[0]
    ids = jnp.asarray(ids)
    if e.position is not None and n > e.position.shape[0]:
        raise ConfigError(f"{n} tokens exceed the model's {e.position.shape[0]} positions")
    x = jnp.asarray(e.word)[ids]
    if model.embed_scale != 1.0:  # Gemma multiplies by sqrt(d) in the activations' dtype
        x = x * jnp.asarray(model.embed_scale, x.dtype)
    if e.position is not None:
        x = x + jnp.asarray(e.position)[:n]
    if e.token_type is not None:
        tt = jnp.zeros_like(ids) if token_type_ids is None else jnp.asarray(token_type_ids)
        x = x + jnp.asarray(e.token_type)[tt]
    if e.ln_w is not None:
        x = nn.layer_norm(x, e.ln_w, e.ln_b, model.ln_eps)
    if e.proj_w is not None:
        x = x @ jnp.asarray(e.proj_w).T + jnp.asarray(e.proj_b)[None, :]
    return x


def _attention(t, X, ctx):  # the observable of forward(): the attention weights of the step from X
    return ctx.attention()


@functools.partial(jax.jit, static_argnames=("dyn", "steps", "final_norm"))
def _forward(X, model, alpha, beta, *, dyn, steps, final_norm):
    # the map core with every state kept and the attention weights as the observable; the last record
    # (the attention of a step not taken) is dropped
    As, last, states = _evolve(X, model, alpha, beta, None, None, 0, dyn=dyn, steps=steps, every=1,
                               observe=_attention, trajectory=True, pass_norm=False)
    if final_norm and model.final_ln_w is not None:
        states = states.at[-1].set(nn.affine_norm(last, model.final_ln_w, model.final_ln_b, model.ln_eps,
                                                  model.norm_kind))
    return states, As[:steps]


@full_precision
def forward(model: Model, X: Float[ArrayLike, "n d"], *, dynamics: Dynamics = FAITHFUL, steps: int | None = None,
            alpha=1.0, beta=1.0, final_norm: bool = True, dtype=None):
    """All hidden states of one configuration.

    Runs :func:`jaxattn.simulate_one` (the map core) keeping every state. Composes with ``jax.jit``,
    ``jax.vmap`` and ``jax.grad`` (with respect to ``X``, the weights, ``alpha`` and ``beta``).

    Args:
        X: ``[n, d]`` block input (e.g. from :func:`embed`).
        steps: blocks to run (default: the model's depth).
        final_norm: apply the model's final LayerNorm to the last entry (transformers' convention).

    Returns:
        ``(states [steps + 1, n, d], attention probabilities [steps, H, n, n])``.
    """
    if not isinstance(dynamics, Dynamics):
        raise ConfigError(f"dynamics must be a jaxattn.Dynamics (FAITHFUL, NO_FFN, D1, ...), got {dynamics!r}")
    X = jnp.asarray(X)
    if X.ndim != 2 or X.shape[-1] != model.d_model:
        raise ConfigError(f"X must be [n, {model.d_model}], got shape {tuple(X.shape)}")
    steps = model.depth if steps is None else check_steps(steps)
    check_dynamics(model, dynamics)
    dtype = X.dtype if dtype is None else resolve_dtype(dtype, X)
    m = model.replace(embeddings=None).astype(dtype)  # the blocks need no embedding table
    alpha, beta = check_scalar("alpha", alpha, positive=True), check_scalar("beta", beta)  # α: a step size
    return _forward(X.astype(dtype), m, jnp.asarray(alpha, dtype), jnp.asarray(beta, dtype), dyn=dynamics,
                    steps=int(steps), final_norm=final_norm)


def hidden_states(model: Model, ids: Int[ArrayLike, " n"] | Sequence[int],
                  token_type_ids: Int[ArrayLike, " n"] | Sequence[int] | None = None,
                  dtype=None):
    """transformers-style ``(hidden_states, attentions)`` for token ids ``[n]``."""
    m = model if dtype is None else model.astype(dtype)
    return forward(m, embed(m, ids, token_type_ids), dtype=dtype)
