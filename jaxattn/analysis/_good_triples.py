"""Good triples among random matrices: whether the eigenvalue of largest modulus is real, positive and
simple, for given matrices or for random ensembles, with a Wilson confidence interval. Matrices are drawn
with JAX; eigenvalues are computed on the host in float64 with LAPACK, whatever JAX's precision."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from jaxattn.analysis.stats import wilson
from jaxattn.errors import ConfigError, positive_int

#: Classes of :func:`classify_top` (index = code).
TOP_CLASSES = ("good", "complex", "negative", "repeated")

#: Random ensembles of :func:`good_triple_fraction`.
ENSEMBLES = ("ginibre", "symmetric", "positive", "uniform")


def classify_top(V: Float[ArrayLike, "*B d d"], rtol: float = 1e-9) -> Int[np.ndarray, "*B"]:
    """Class of the top-modulus eigenvalue of every ``V: [..., d, d]`` (float64, LAPACK), ``[...]`` int:

    0 ``good`` (real, positive, simple in modulus: ``λ_1 > |λ_2|``), 1 ``complex`` (a conjugate pair
    has the largest modulus), 2 ``negative`` (real negative, simple), 3 ``repeated`` (two or more
    real eigenvalues share the largest modulus, e.g. ``λ_1 = λ_2`` or ``±λ``). Moduli within
    ``rtol`` (relative) count as equal.
    """
    V = np.asarray(V)
    if V.ndim < 2 or V.shape[-1] != V.shape[-2] or V.shape[-1] == 0:
        raise ConfigError(f"V must be [..., d, d], got shape {V.shape}")
    if np.iscomplexobj(V) or not np.all(np.isfinite(V)):
        raise ConfigError("V must be real and finite")
    lam = np.linalg.eigvals(V.astype(np.float64))
    mod = np.abs(lam)
    top = mod.max(axis=-1, keepdims=True)
    tied = mod >= top * (1 - rtol)
    cplx = np.abs(lam.imag) > rtol * np.maximum(top, 1e-300)
    i = np.argmax(mod, axis=-1)[..., None]
    real_top = np.take_along_axis(lam.real, i, axis=-1)[..., 0]
    code = np.where(real_top > 0, 0, 2)
    code = np.where(tied.sum(-1) > 1, 3, code)
    code = np.where(np.any(tied & cplx, axis=-1), 1, code)
    return code.astype(np.int64)


class Estimate(NamedTuple):
    """A fraction estimated from ``samples`` Bernoulli draws with a Wilson score interval."""

    d: int
    samples: int
    # samples in the class
    count: int  # type: ignore[assignment]  # NamedTuple field shadows tuple.count; the name is public API
    fraction: float
    lo: float
    hi: float
    classes: dict  # counts of every class of TOP_CLASSES


def random_matrices(key: PRNGKeyArray, d: int, count: int, ensemble: str = "ginibre",
                    dtype=None) -> Float[Array, "count d d"]:
    """``count`` random ``[d, d]`` matrices of an ensemble (on the default device), ``[count, d, d]``:
    ``'ginibre'`` entries N(0, 1/d); ``'symmetric'`` (G + Gᵀ)/√2 of a Ginibre G (the orthogonal
    ensemble); ``'positive'`` the absolute values of a Ginibre matrix (Perron–Frobenius: always
    good); ``'uniform'`` entries uniform in [−1, 1]."""
    if ensemble not in ENSEMBLES:
        raise ConfigError(f"ensemble must be one of {', '.join(ENSEMBLES)}, got {ensemble!r}")
    dtype = jax.dtypes.canonicalize_dtype(jnp.float64 if dtype is None else dtype)
    if ensemble == "uniform":
        return jax.random.uniform(key, (count, d, d), dtype, -1.0, 1.0)
    g = jax.random.normal(key, (count, d, d), dtype) / np.sqrt(d)
    if ensemble == "symmetric":
        return (g + jnp.swapaxes(g, -1, -2)) / np.sqrt(2.0)
    if ensemble == "positive":
        return jnp.abs(g)
    return g


def good_triple_fraction(key: PRNGKeyArray, d: int, samples: int, *, ensemble: str = "ginibre",
                         confidence: float = 0.95, chunk: int = 4096) -> Estimate:
    """Fraction of random ``d × d`` matrices whose top-modulus eigenvalue is real, positive and simple
    (the spectral half of a good triple; with ``Q = K = I`` it is the whole condition).

    Matrices are drawn with JAX in chunks of ``min(chunk, samples)`` (chunk ``c`` from
    ``fold_in(key, c)``), eigenvalues in float64 on the host.
    """
    for name, v in (("d", d), ("samples", samples), ("chunk", chunk)):
        positive_int(name, v)
    counts = np.zeros(len(TOP_CLASSES), np.int64)
    width = min(chunk, samples)
    for c, start in enumerate(range(0, samples, width)):
        # every chunk is drawn at the same width (one compiled sampler), the last one cut short
        V = np.asarray(random_matrices(jax.random.fold_in(key, c), d, width, ensemble), np.float64)
        counts += np.bincount(classify_top(V[: samples - start]), minlength=len(TOP_CLASSES))
    lo, hi = wilson(int(counts[0]), samples, confidence)
    return Estimate(int(d), int(samples), int(counts[0]), float(counts[0] / samples), lo, hi,
                    {name: int(k) for name, k in zip(TOP_CLASSES, counts, strict=True)})

