"""Initial conditions for real models: random prompts and text, embedded with the model's own embeddings.

Prompt ``i`` of a batch is drawn from ``fold_in(key, i)`` (token ids uniform over the vocabulary), so
prompts do not depend on the batch size. :func:`embed_prompts` maps ids ``[B, n]`` to block inputs
``[B, n, d]`` exactly as the model does (word + position (+ token type) embeddings, the embedding
LayerNorm where the family has one, ALBERT's projection); see :func:`jaxattn.dynamics.faithful.embed`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.dynamics.faithful import embed
from jaxattn.errors import ConfigError, positive_int
from jaxattn.model.params import Embeddings, Model
from jaxattn.model.sampling import init_tokens


def _embeddings(model: Model) -> Embeddings:
    if model.embeddings is None:
        raise ConfigError("this model has no embeddings: prompts need a converted model (synthetic models take "
                          "random tokens)")
    return model.embeddings


def _vocab(model: Model) -> int:
    return int(_embeddings(model).word.shape[0])


def _too_long(model: Model, n: int) -> str | None:
    """Why ``n`` tokens do not fit the model's position table (``None``: they do; rotary models have none)."""
    pos = _embeddings(model).position
    if pos is not None and n > pos.shape[0]:
        return f"prompts of {n} tokens exceed the model's {pos.shape[0]} positions"
    return None


def random_prompts(key, model: Model, num: int, n: int, start: int = 0) -> np.ndarray:
    """``[num, n]`` token ids uniform over ``model``'s vocabulary; prompt i from ``fold_in(key, start + i)``."""
    vocab = _vocab(model)
    positive_int("num", num), positive_int("n", n)
    why = _too_long(model, n)
    if why:
        raise ConfigError(why)
    draw = jax.vmap(lambda i: jax.random.randint(jax.random.fold_in(key, i), (n,), 0, vocab, dtype=jnp.int32))
    return np.asarray(draw(jnp.arange(start, start + num)))


def check_ids(model: Model, ids) -> np.ndarray:
    """``ids`` as an int array ``[B, n]``, refused if empty, out of the vocabulary or too long."""
    vocab = _vocab(model)
    try:
        ids = np.asarray(ids)
    except ValueError:
        raise ConfigError("prompts of different lengths cannot form one batch: run them separately") from None
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[1] == 0 or ids.shape[0] == 0:
        raise ConfigError(f"prompts must be a non-empty [B, n] array of token ids, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ConfigError(f"token ids must be integers, got dtype {ids.dtype}")
    if ids.min() < 0 or ids.max() >= vocab:
        raise ConfigError(f"token ids must be in [0, {vocab}), got values in [{ids.min()}, {ids.max()}]")
    why = _too_long(model, ids.shape[1])
    if why:
        raise ConfigError(why)
    return ids


def embed_prompts(model: Model, ids, token_type_ids=None, dtype=None) -> jax.Array:
    """Block inputs ``[B, n, d]`` for token ids ``[B, n]`` (or ``[n]``)."""
    ids = check_ids(model, ids)
    m = model if dtype is None else model.astype(dtype)
    if token_type_ids is None:
        return jax.vmap(lambda i: embed(m, i))(jnp.asarray(ids))
    tt = np.broadcast_to(np.asarray(token_type_ids), ids.shape)
    return jax.vmap(lambda i, t: embed(m, i, t))(jnp.asarray(ids), jnp.asarray(tt))


def text_prompts(tokenizer_path, texts: Sequence[str]) -> list[np.ndarray]:
    """Token ids of each text with the tokenizer saved in a local folder (transformers' AutoTokenizer)."""
    from pathlib import Path

    if not Path(tokenizer_path).is_dir():
        raise ConfigError(f"tokenizer folder {tokenizer_path} does not exist")
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tokenizer_path), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ConfigError(f"no tokenizer could be loaded from {tokenizer_path}: {str(e).splitlines()[0]}") from None
    out = [np.asarray(tok(t)["input_ids"], np.int64) for t in texts]
    if any(len(o) == 0 for o in out):
        raise ConfigError("a text gave no tokens")
    return out


def hemisphere_tokens(key, batch: int, n: int, d: int, pole: np.ndarray | None = None, margin: float = 0.1,
                      dtype=jnp.float32) -> jax.Array:
    """Random unit tokens in the open hemisphere ``<x, pole> > margin`` (pole: e_1 by default)."""
    X = init_tokens(key, batch, n, d, dtype=dtype)
    w = jnp.zeros(d, dtype).at[0].set(1.0) if pole is None else jnp.asarray(pole / np.linalg.norm(pole), dtype)
    c = X @ w
    X = X * jnp.where(c < 0, -1.0, 1.0)[..., None] + margin * w[None, None]  # into the cap, then strictly inside
    return X / jnp.linalg.norm(X, axis=-1, keepdims=True)
