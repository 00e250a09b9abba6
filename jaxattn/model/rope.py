"""Rotary position embeddings (RoPE) as transformers computes them, in float64.

A :class:`Rope` is static model data (hashable, stored in a converted file's metadata): the rotated
dimensions of each head, the base ``theta`` and a scaling variant. Its inverse frequencies and the
``cos``/``sin`` tables are computed on the host in float64 NumPy for a given number of tokens ``n``
(a static shape), so they enter a compiled program as constants.

Query and key ``x: [..., n, d_h]`` of token ``i`` become ``x ⊙ cos_i + rotate_half(x) ⊙ sin_i`` on
their first ``dim`` coordinates (the "NeoX" half-split layout Llama, Mistral, Qwen2, Gemma, GPT-NeoX
and Phi all use); the remaining ``d_h - dim`` coordinates pass unchanged (partial rotary).

Scaling variants (``kind``), as ``transformers.modeling_rope_utils``:

* ``'default'``: ``inv_freq_k = theta^(-2k/dim)``;
* ``'linear'``: ``inv_freq / factor`` (position interpolation);
* ``'dynamic'``: NTK-aware, ``theta`` grows with ``n`` once ``n`` exceeds ``max_positions``;
* ``'llama3'``: low frequencies divided by ``factor``, a smooth ramp between ``low_freq_factor`` and
  ``high_freq_factor`` wavelengths of ``original_max_positions``;
* ``'yarn'``: a ramp between interpolated and extrapolated frequencies, ``cos, sin`` scaled by the
  attention factor.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from jaxattn.config import flag, static
from jaxattn.errors import ConfigError, is_integer, real

KINDS = ("default", "linear", "dynamic", "llama3", "yarn")


class Rope(eqx.Module):
    """Rotary embedding of one model (static, hashable). See the module docstring."""

    dim: int = static()  # rotated coordinates per head (even, <= d_h)
    theta: float = static(10000.0)
    kind: str = static("default")
    factor: float = static(1.0)
    max_positions: int = static(0)  # 'dynamic': the length beyond which theta grows (config.max_position_embeddings)
    original_max_positions: int = static(0)  # 'llama3', 'yarn'
    low_freq_factor: float = static(1.0)  # 'llama3'
    high_freq_factor: float = static(4.0)  # 'llama3'
    beta_fast: float = static(32.0)  # 'yarn'
    beta_slow: float = static(1.0)  # 'yarn'
    attention_factor: float = static(1.0)  # 'yarn': cos and sin are multiplied by it
    truncate: bool = flag(True)  # 'yarn'

    def __check_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"unsupported RoPE scaling type {self.kind!r}; supported: {', '.join(KINDS)}")
        if not is_integer(self.dim, 2) or self.dim % 2:
            raise ConfigError(f"RoPE needs an even number of rotated dimensions >= 2, got {self.dim!r}")
        real("RoPE theta", self.theta, positive=True)
        if self.kind != "default":
            real(f"the factor of RoPE scaling {self.kind!r}", self.factor, positive=True)
        if self.kind == "dynamic" and self.max_positions < 1:
            raise ConfigError("RoPE scaling 'dynamic' needs max_positions (max_position_embeddings)")
        if self.kind in ("llama3", "yarn") and self.original_max_positions < 1:
            raise ConfigError(f"RoPE scaling {self.kind!r} needs original_max_position_embeddings")
        if self.kind == "llama3" and self.high_freq_factor == self.low_freq_factor:
            raise ConfigError("RoPE scaling 'llama3' needs high_freq_factor != low_freq_factor")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Rope:
        known = {f.name for f in dataclasses.fields(Rope)}
        extra = sorted(set(d) - known)
        if extra:
            raise ConfigError(f"unknown RoPE parameter(s) {', '.join(extra)}")
        return Rope(**d)


def _base_inv_freq(theta: float, dim: int) -> np.ndarray:
    return 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))


def inv_freq(rope: Rope, n: int) -> Float[np.ndarray, " k"]:
    """Inverse frequencies ``[dim / 2]`` (float64) for a sequence of ``n`` tokens."""
    dim, theta = rope.dim, rope.theta
    if rope.kind == "default":
        return _base_inv_freq(theta, dim)
    if rope.kind == "linear":
        return _base_inv_freq(theta, dim) / rope.factor
    if rope.kind == "dynamic":
        seq = max(n, rope.max_positions)
        base = theta * ((rope.factor * seq / rope.max_positions) - (rope.factor - 1)) ** (dim / (dim - 2))
        return _base_inv_freq(base, dim)
    if rope.kind == "llama3":
        f = _base_inv_freq(theta, dim)
        old = rope.original_max_positions
        low_wl, high_wl = old / rope.low_freq_factor, old / rope.high_freq_factor
        wl = 2 * math.pi / f
        out = np.where(wl > low_wl, f / rope.factor, f)
        smooth = (old / wl - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        smoothed = (1 - smooth) * out / rope.factor + smooth * out
        medium = ~(wl < high_wl) * ~(wl > low_wl)
        return np.where(medium, smoothed, out)
    # yarn
    def correction_dim(rot):
        return (dim * math.log(rope.original_max_positions / (rot * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no singular ramp
    pos = theta ** (np.arange(0, dim, 2).astype(np.float64) / dim)
    extra, inter = 1.0 / pos, 1.0 / (rope.factor * pos)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    keep = 1 - ramp
    return inter * (1 - keep) + extra * keep


def cos_sin(rope: Rope, n: int) -> tuple[Float[np.ndarray, "n dim"], Float[np.ndarray, "n dim"]]:
    """``cos, sin: [n, dim]`` (float64) for tokens at positions ``0 .. n-1``."""
    freqs = np.arange(n, dtype=np.float64)[:, None] * inv_freq(rope, n)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb) * rope.attention_factor, np.sin(emb) * rope.attention_factor


def rotate(x: Float[Array, "*B n d_h"], cos: Float[Array | np.ndarray, "n dim"],
           sin: Float[Array | np.ndarray, "n dim"]) -> Float[Array, "*B n d_h"]:
    """RoPE of ``x: [..., n, d_h]`` with tables ``[n, dim]`` (first ``dim`` coordinates rotated)."""
    import jax.numpy as jnp

    dim = cos.shape[-1]
    lead = (1,) * (x.ndim - 2)  # explicit broadcast: rank promotion is "raise" in the tests
    c = jnp.asarray(cos, x.dtype).reshape(lead + cos.shape)
    s = jnp.asarray(sin, x.dtype).reshape(lead + sin.shape)
    xr, xp = x[..., :dim], x[..., dim:]
    x1, x2 = xr[..., : dim // 2], xr[..., dim // 2:]
    out = xr * c + jnp.concatenate([-x2, x1], axis=-1) * s
    return jnp.concatenate([out, xp], axis=-1) if xp.shape[-1] else out


def from_hf_config(config: dict, head_dim: int, *, partial: float | None = None) -> Rope:
    """The :class:`Rope` of a Hugging Face config: ``rope_parameters`` (transformers >= 5) or
    ``rope_theta`` + ``rope_scaling`` (older configs). ``partial``: the rotary fraction when the
    family keeps it outside ``rope_parameters`` (GPT-NeoX's ``rotary_pct``)."""
    params = dict(config.get("rope_parameters") or {})
    legacy = config.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(legacy, dict):
        raise ConfigError("config.json: rope_parameters / rope_scaling must be objects")
    if any(isinstance(v, dict) for v in params.values()):
        raise ConfigError("config.json: per-layer-type rope_parameters are not supported")
    merged = {**legacy, **params}
    kind = merged.get("rope_type", merged.get("type", "default"))
    theta = merged.get("rope_theta", config.get("rope_theta", config.get("rotary_emb_base", 10000.0)))
    frac = merged.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0) if partial is None else partial)
    dim = int(head_dim * frac)
    if kind not in KINDS:
        raise ConfigError(f"unsupported RoPE scaling type {kind!r}; supported: {', '.join(KINDS)}")
    kw: dict[str, Any] = {}
    if kind != "default":
        if merged.get("factor") is None and kind != "yarn":
            raise ConfigError(f"config.json: RoPE scaling {kind!r} lacks its factor")
        kw["factor"] = float(merged["factor"]) if merged.get("factor") is not None else None
    if kind == "dynamic":
        kw["max_positions"] = int(config.get("max_position_embeddings") or 0)
    if kind in ("llama3", "yarn"):
        kw["original_max_positions"] = int(merged.get("original_max_position_embeddings")
                                           or (config.get("max_position_embeddings") if kind == "llama3" else 0) or 0)
    if kind == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            if merged.get(key) is None:
                raise ConfigError(f"config.json: RoPE scaling 'llama3' lacks {key}")
            kw[key] = float(merged[key])
    if kind == "yarn":
        if kw["original_max_positions"] < 1:
            raise ConfigError("config.json: RoPE scaling 'yarn' lacks original_max_position_embeddings")
        if kw["factor"] is None:
            kw["factor"] = config["max_position_embeddings"] / kw["original_max_positions"]

        def mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        af = merged.get("attention_factor")
        if af is None:
            ms, msa = merged.get("mscale"), merged.get("mscale_all_dim")
            af = float(mscale(kw["factor"], ms) / mscale(kw["factor"], msa)) if ms and msa else mscale(kw["factor"])
        kw["attention_factor"] = float(af)
        kw["beta_fast"] = float(merged.get("beta_fast") or 32)
        kw["beta_slow"] = float(merged.get("beta_slow") or 1)
        # transformers reads truncate from the top-level rope_parameters
        kw["truncate"] = bool((config.get("rope_parameters") or legacy).get("truncate", True))
    return Rope(dim=dim, theta=float(theta), kind=kind, **kw)
