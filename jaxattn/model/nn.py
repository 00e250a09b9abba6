"""Normalisations and activations, exactly as the Hugging Face configs name them."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxattn.errors import ConfigError
from jaxattn.model.params import Layers  # no cycle: params does not import this module
from jaxattn.model.precision import full_precision, rounded


def l2(y: Float[Array | np.ndarray, "*B d"]) -> Float[Array, "*B d"]:
    """``N(y) = y / ||y||`` over the last axis."""
    return y / jnp.linalg.norm(y, axis=-1, keepdims=True)


def ellipsoid(y: Float[Array, "*B d"], S: Float[Array, "d d"]) -> Float[Array, "*B d"]:
    """``N_S(y) = y / sqrt(yᵀ S y)`` over the last axis (S symmetric positive definite)."""
    return y / jnp.sqrt(jnp.einsum("...d,de,...e->...", y, S, y))[..., None]


def layer_norm(y: Float[Array, "*B d"], w: Float[Array | np.ndarray, " d"] | None,
               b: Float[Array | np.ndarray, " d"] | None, eps: float) -> Float[Array, "*B d"]:
    """Affine LayerNorm over the last axis, biased variance, as ``torch.nn.LayerNorm``."""
    mu = y.mean(-1, keepdims=True)
    var = ((y - mu) ** 2).mean(-1, keepdims=True)
    out = (y - mu) / jnp.sqrt(var + eps)
    lead = (1,) * (y.ndim - 1)  # explicit broadcast: tests run with rank promotion "raise"
    if w is not None:
        out = out * w.reshape(lead + w.shape)
    if b is not None:
        out = out + b.reshape(lead + b.shape)
    return out


def rms_norm(y: Float[Array | np.ndarray, "*B d"], w: Float[Array | np.ndarray, " d"] | None,
             eps: float) -> Float[Array, "*B d"]:
    """RMSNorm over the last axis, as Llama's: ``w ⊙ y / sqrt(mean(y²) + eps)``.

    Up to ``eps`` this is ``w ⊙ sqrt(d) · y / ||y||``: the L2 normalisation onto the sphere of
    radius ``sqrt(d)`` followed by a diagonal gain (no centring, unlike LayerNorm).
    """
    y = jnp.asarray(y)
    var = (y * y).mean(-1, keepdims=True)
    out = y * jax.lax.rsqrt(var + eps)
    if w is not None:
        out = out * w.reshape((1,) * (y.ndim - 1) + w.shape)
    return out


def affine_norm(y: Float[Array, "*B d"], w: Float[Array | np.ndarray, " d"] | None,
                b: Float[Array | np.ndarray, " d"] | None, eps: float,
                kind: str = "layernorm") -> Float[Array, "*B d"]:
    """The model's own norm: LayerNorm (``kind='layernorm'``) or RMSNorm (``'rmsnorm'``, ``b`` unused)."""
    return rms_norm(y, w, eps) if kind == "rmsnorm" else layer_norm(y, w, b, eps)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_ACT = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),  # erf form (transformers' GELUActivation)
    "gelu_new": _gelu_tanh,  # NewGELUActivation
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": lambda x: 0.5 * x * (1.0 + jnp.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
    "linear": lambda x: x,
}


def activation(name: str):
    """The activation function a HF config calls ``name``."""
    try:
        return _ACT[name]
    except KeyError:
        raise ConfigError(f"unsupported activation {name!r}; supported: {', '.join(sorted(_ACT))}") from None


@full_precision
def ffn(y: Float[Array, "*B d"], lw: Layers, act: str, *, biases: bool = True) -> Float[Array, "*B d"]:
    """The feed-forward sublayer ``W2 act(W1 y + b1) + b2`` of one weight set, ``[..., d] -> [..., d]``;
    with a gate (Llama's SwiGLU, Gemma's GeGLU) ``W2 (act(Wg y + bg) ⊙ (W1 y + b1)) + b2``.

    ``biases=False`` drops ``b1, b2, bg`` (the attention-only simplifications keep the FFN's matrices only).
    """
    assert lw.w1 is not None and lw.w2 is not None  # callers refuse ffn=True on models without FFN weights
    lead = (1,) * (y.ndim - 1)  # explicit broadcast: rank promotion is "raise" in the tests
    y, w1, w2 = rounded(y, jnp.asarray(lw.w1), jnp.asarray(lw.w2))  # bfloat16 operands under Batch(precision='bf16')
    h = y @ w1.T
    if biases and lw.b1 is not None:
        h = h + lw.b1.reshape(lead + lw.b1.shape)
    if lw.wg is not None:
        g = y @ rounded(jnp.asarray(lw.wg))[0].T
        if biases and lw.bg is not None:
            g = g + lw.bg.reshape(lead + lw.bg.shape)
        h = activation(act)(g) * h
    else:
        h = activation(act)(h)
    out = rounded(h)[0] @ w2.T
    if biases and lw.b2 is not None:
        out = out + lw.b2.reshape(lead + lw.b2.shape)
    return out
