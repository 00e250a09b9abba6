"""Softmax attention of a few tokens in one kernel, its scores never leaving the chip (Pallas, Triton).

XLA's GPU program for many small configurations (``n`` = 16 to 128 tokens, heads of 16 to 128) moves most of its
bytes for layout: each projection is transposed to ``[B, H, n, d_h]`` for the batched scores, the scores
``[B·H, n, n]`` are written by their product, read and written by the softmax and read by the weighted sum, and the
heads are transposed back before the output (docs/gpu.md, "W1's program, read"). :func:`softmax_attention` is
that work as one Triton kernel per configuration: it reads the queries, keys and values as the projections write them
(``[n, H·d_h]``, tokens major), keeps each head's ``n × n`` scores in registers, and writes the heads where the output
product reads them. Under ``vmap`` Pallas gives each configuration of the batch its own program.

It is used only where a program is compiled for an NVIDIA GPU (:func:`jax.lax.platform_dependent`); elsewhere the
same kernel runs in Pallas' interpreter, which is how a CPU checks it (tests, under
:func:`jaxattn.model.backend.arranged_as`). Its derivatives are those of the plain arithmetic it replaces
(:func:`reference`): ``grad``, ``jvp`` and ``jacfwd`` see exactly the XLA program they would without it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

#: Tokens and head widths the kernel takes: powers of two (Triton's blocks) from 16 (its smallest product) to 128
#: (one head's scores in a program's registers).
SIZES = (16, 32, 64, 128)
#: The kernel's name in the compiled program (:class:`jaxattn.aot.Program` counts its arithmetic from it).
NAME = "jaxattn_attention_h"


def applies(n: int, heads: int, head_width: int, dtype, precision) -> bool:
    """Whether :func:`softmax_attention` takes ``n`` tokens of ``heads`` heads ``head_width`` wide, in ``dtype``
    under XLA's matmul ``precision`` setting (full float32 or TF32; bfloat16 rounding and float64 stay with XLA)."""
    return (n in SIZES and head_width in SIZES and heads >= 1 and jnp.dtype(dtype) == jnp.float32
            and _tf32(precision) is not None)


def _tf32(precision) -> bool | None:
    """TF32 products under XLA's ``precision`` setting: ``False`` for full float32, ``None`` where the kernel does not
    apply (bfloat16 rounding, :func:`jaxattn.model.precision.rounded`)."""
    if precision in (None, "highest", "float32", jax.lax.Precision.HIGHEST):
        return False
    if precision in ("tensorfloat32", "high", "default", "fastest", jax.lax.Precision.DEFAULT,
                     jax.lax.Precision.HIGH):
        return True
    return None


def cost(n: int, heads: int, head_width: int) -> tuple[int, int]:
    """FLOPs and exponentials of one configuration's call: the scores and the weighted sum (``4 n² H d_h``), the
    softmax's shift, exponential, sum and division."""
    return 4 * n * n * heads * head_width + 4 * n * n * heads + n * heads * head_width, n * n * heads


def reference(q: Float[Array, "n hd"], k: Float[Array, "n hd"], v: Float[Array, "n hd"],
              bias: Float[Array, "n n"] | None, heads: int, tf32: bool = False) -> Float[Array, "n hd"]:
    """What the kernel computes, in plain JAX: per head ``h``, ``softmax(q_h k_hᵀ + bias) v_h`` with ``q_h`` the
    columns ``h d_h … (h + 1) d_h`` of ``q`` (already scaled), ``bias`` 0 on the allowed pairs and ``-inf``
    elsewhere."""
    n = q.shape[0]
    precision = jax.lax.Precision.DEFAULT if tf32 else jax.lax.Precision.HIGHEST
    qh, kh, vh = (a.reshape(n, heads, -1) for a in (q, k, v))
    s = jnp.einsum("ihk,jhk->hij", qh, kh, precision=precision)
    if bias is not None:
        s = s + bias[None]
    e = jnp.exp(s - jax.lax.stop_gradient(s.max(-1, keepdims=True)))
    out = jnp.einsum("hij,jhk->ihk", e, vh, precision=precision) / e.sum(-1).T[:, :, None]
    return out.reshape(q.shape)


def _kernel(*refs, masked: bool, tf32: bool) -> None:
    # one head of one configuration: q, k, v blocks [n, d_h] (the head's columns), the mask's bias [n, n]
    q, k, v = (r[...] for r in refs[:3])
    precision = jax.lax.Precision.DEFAULT if tf32 else jax.lax.Precision.HIGHEST  # TF32 or IEEE products in Triton
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), precision=precision, preferred_element_type=jnp.float32)
    if masked:
        s = s + refs[3][...]
    e = jnp.exp(s - jnp.max(s, axis=1, keepdims=True))  # overflow stays NaN: inf - inf
    o = jax.lax.dot_general(e, v, (((1,), (0,)), ((), ())), precision=precision, preferred_element_type=jnp.float32)
    refs[-1][...] = o / jnp.sum(e, axis=1, keepdims=True)


def warps(n: int) -> int:
    """Warps of one program: a 32 × 32 head's scores fill one warp's registers (32 a thread), 128 × 128 four's."""
    return max(1, n * n // 4096)


def _call(q, k, v, bias, *, heads: int, tf32: bool, interpret: bool):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    n, hd = q.shape
    width = hd // heads
    head = pl.BlockSpec((n, width), lambda h: (0, h))  # head h's columns, read in place
    specs = [head] * 3 + ([] if bias is None else [pl.BlockSpec((n, n), lambda h: (0, 0))])
    operands = (q, k, v) if bias is None else (q, k, v, bias)
    # a program per head (and, under vmap, per configuration): small programs, all of a batch's heads in flight
    return pl.pallas_call(functools.partial(_kernel, masked=bias is not None, tf32=tf32),
                          out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(heads,), in_specs=specs,
                          out_specs=head, interpret=interpret, name=f"{NAME}{heads}",
                          compiler_params=pltriton.CompilerParams(num_warps=warps(n), num_stages=1))(*operands)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def _attention(q, k, v, bias, heads: int, tf32: bool):
    # Triton where the program is compiled for an NVIDIA GPU; Pallas' interpreter elsewhere (a CPU checking it)
    return jax.lax.platform_dependent(
        q, k, v, bias,
        cuda=lambda *a: _call(*a, heads=heads, tf32=tf32, interpret=False),
        default=lambda *a: _call(*a, heads=heads, tf32=tf32, interpret=True))


@_attention.defjvp
def _attention_jvp(heads, tf32, primals, tangents):
    return jax.jvp(lambda q, k, v, b: reference(q, k, v, b, heads, tf32), primals, tangents)


def softmax_attention(q: Float[Array, "n hd"], k: Float[Array, "n hd"], v: Float[Array, "n hd"], heads: int, *,
                      bias: Float[Array, "n n"] | None = None, precision=None) -> Float[Array, "n hd"]:
    """Per head, ``softmax(q_h k_hᵀ + bias) v_h`` for one configuration (``vmap`` for a batch), in one kernel.

    ``q, k, v: [n, H·d_h]`` hold the heads side by side (the queries already scaled); ``bias`` (``[n, n]``, 0 on
    the allowed pairs, ``-inf`` elsewhere) applies a mask. ``precision``: XLA's matmul precision setting in force
    (full float32 unless TF32 is asked for). Only where :func:`applies`; equal to :func:`reference` to round-off.
    """
    n, hd = q.shape
    if hd % heads or not applies(n, heads, hd // heads, q.dtype, precision):
        raise ValueError(f"softmax_attention does not take n={n}, {heads} heads of {hd / heads:g} in {q.dtype} "
                         f"(n and the head width in {SIZES}, float32)")
    if bias is None:  # custom_jvp needs an array in every differentiable slot
        return _unmasked(q, k, v, heads, bool(_tf32(precision)))
    return _attention(q, k, v, bias, heads, bool(_tf32(precision)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _unmasked(q, k, v, heads: int, tf32: bool):
    return jax.lax.platform_dependent(
        q, k, v,
        cuda=lambda q, k, v: _call(q, k, v, None, heads=heads, tf32=tf32, interpret=False),
        default=lambda q, k, v: _call(q, k, v, None, heads=heads, tf32=tf32, interpret=True))


@_unmasked.defjvp
def _unmasked_jvp(heads, tf32, primals, tangents):
    return jax.jvp(lambda q, k, v: reference(q, k, v, None, heads, tf32), primals, tangents)
