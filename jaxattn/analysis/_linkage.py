"""Clusters of token configurations, pure JAX: single-linkage clusters at a distance tolerance
(connected components of the graph ``|x_i − x_j| ≤ tol``) with their centres and sizes, the merge
heights of the single-linkage hierarchy, and a tolerance-free count cut at the largest ratio between
consecutive merge heights (tokens that converge exponentially fast to a few points leave merge
heights that are many decades apart). One configuration ``X: [n, d]`` at a time and batched over any
leading axes; :func:`cluster_observables` measures them inside :func:`jaxattn.solve`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxattn.analysis._inputs import batched, real_array, tolerance


def _pairwise(X: jax.Array) -> jax.Array:
    """Euclidean distances ``[n, n]`` (exact zeros on the diagonal, no NaN gradient at 0).

    From differences, not the Gram form of :func:`jaxattn.dynamics.observables.pairwise_distances`:
    a distance compared with a tolerance must not carry the Gram form's cancellation error."""
    diff = X[:, None, :] - X[None, :, :]
    sq = jnp.sum(diff * diff, axis=-1)
    return jnp.sqrt(jnp.where(sq > 0, sq, 0.0))


def _labels_one(X: jax.Array, tol) -> jax.Array:
    """Component label of every token (the smallest index in its component), ``[n]`` int32."""
    n = X.shape[0]
    adj = _pairwise(X) <= tol
    init = jnp.arange(n, dtype=jnp.int32)

    def step(lab):  # every token takes the smallest label among its neighbours (itself included)
        return jnp.min(jnp.where(adj, lab[None, :], n), axis=1).astype(jnp.int32)

    def cond(c):
        lab, prev = c
        return jnp.any(lab != prev)

    # propagation stops when no label changes: at most the diameter of the graph (<= n) rounds
    lab, _ = jax.lax.while_loop(cond, lambda c: (step(c[0]), c[0]), (step(init), init))
    return lab


def cluster_labels(X: Float[ArrayLike, "*B n d"], tol) -> Int[Array, "*B n"]:
    """Single-linkage cluster labels at distance ``tol``: ``X: [..., n, d]`` -> ``[..., n]`` int32.

    Tokens ``i`` and ``j`` are in one cluster when a chain of tokens joins them with steps of
    length ``<= tol``. A cluster's label is the smallest token index in it.
    """
    X = real_array(X)
    return batched(_labels_one, X, 2, jnp.asarray(tolerance(tol), X.dtype))


class Clusters(NamedTuple):
    """Clusters of configurations ``[..., n, d]`` at a tolerance (see :func:`clusters`).

    Arrays are indexed by label (the smallest token index of a cluster); rows that are no
    cluster's label have size 0 and centre 0.
    """

    # [...] int32 number of clusters
    count: jax.Array  # type: ignore[assignment]  # NamedTuple field shadows tuple.count; the name is public API
    labels: jax.Array  # [..., n] int32 label of every token
    sizes: jax.Array  # [..., n] int32 tokens in the cluster of each label
    centres: jax.Array  # [..., n, d] mean of the cluster's tokens


def _clusters_one(X: jax.Array, tol) -> tuple:
    n = X.shape[0]
    lab = _labels_one(X, tol)
    sizes = jax.ops.segment_sum(jnp.ones((n,), jnp.int32), lab, num_segments=n)
    sums = jax.ops.segment_sum(X, lab, num_segments=n)
    centres = sums / jnp.maximum(sizes, 1).astype(X.dtype)[:, None]
    return jnp.sum(sizes > 0).astype(jnp.int32), lab, sizes, centres


def clusters(X: Float[ArrayLike, "*B n d"], tol) -> Clusters:
    """Clusters at distance ``tol`` with their centres and sizes; ``X: [..., n, d]``."""
    X = real_array(X)
    return Clusters(*batched(_clusters_one, X, 2, jnp.asarray(tolerance(tol), X.dtype)))


def count_clusters(X: Float[ArrayLike, "*B n d"], tol) -> Int[Array, "*B"]:
    """Number of single-linkage clusters at distance ``tol``: ``[..., n, d]`` -> ``[...]`` int32."""
    return clusters(X, tol).count


def _merge_heights_one(X: jax.Array) -> jax.Array:
    """Sorted merge heights of the single-linkage hierarchy (the edges of a minimum spanning tree,
    Prim's algorithm), ``[n - 1]``."""
    n = X.shape[0]
    D = _pairwise(X)
    inf = jnp.asarray(jnp.inf, X.dtype)

    def body(k, c):
        in_tree, best, heights = c
        cand = jnp.where(in_tree, inf, best)
        j = jnp.argmin(cand)
        heights = heights.at[k].set(cand[j])
        return in_tree.at[j].set(True), jnp.minimum(best, D[j]), heights

    init = (jnp.zeros((n,), bool).at[0].set(True), D[0], jnp.zeros((max(n - 1, 0),), X.dtype))
    _, _, heights = jax.lax.fori_loop(0, n - 1, body, init)
    return jnp.sort(heights)


def merge_heights(X: Float[ArrayLike, "*B n d"]) -> Float[Array, "*B n-1"]:
    """Single-linkage merge heights, ascending: ``X: [..., n, d]`` -> ``[..., n - 1]``."""
    X = real_array(X)
    return batched(_merge_heights_one, X, 2)


class GapCount(NamedTuple):
    """Tolerance-free cluster count (see :func:`gap_clusters`)."""

    # [...] int32 number of clusters (1 .. n-1; n when n == 1)
    count: jax.Array  # type: ignore[assignment]  # NamedTuple field shadows tuple.count; the name is public API
    threshold: jax.Array  # [...] the cut: geometric mean of the two heights around the largest gap
    gap: jax.Array  # [...] decades (log10 ratio) of the largest gap: how clear the cut is


def _gap_one(X: jax.Array) -> tuple:
    n = X.shape[0]
    if n == 1:
        z = jnp.zeros((), X.dtype)
        return jnp.int32(1), z, z
    h = _merge_heights_one(X)
    # the top level is the size of the configuration: when every merge height is far below it the
    # tokens form one cluster; exact duplicates (height 0) sit 16 decades below it
    top = jnp.maximum(jnp.max(jnp.linalg.norm(X, axis=-1)), h[-1])
    top = jnp.maximum(top, jnp.finfo(X.dtype).tiny)
    levels = jnp.maximum(jnp.concatenate([h, top[None]]), top * 1e-16)
    logs = jnp.log10(levels)
    gaps = logs[1:] - logs[:-1]  # gap k lies between merge k+1 and level k+2
    k = jnp.argmax(gaps)
    count = (n - 1 - k).astype(jnp.int32)  # merges below the cut: k + 1
    thr = 10.0 ** (0.5 * (logs[k] + logs[k + 1]))
    return count, thr, gaps[k]


def gap_clusters(X: Float[ArrayLike, "*B n d"]) -> GapCount:
    """Tolerance-free number of clusters: cut the single-linkage hierarchy at its largest gap.

    The gaps are ratios between consecutive merge heights (log scale), the last one between the
    highest merge and the size of the configuration ``max_i |x_i|``, so a single tight cluster
    counts as 1. A configuration without clear clusters still gets a count; ``gap`` (in decades)
    says how clear the cut is. ``X: [..., n, d]``.
    """
    X = real_array(X)
    return GapCount(*batched(_gap_one, X, 2))


@functools.lru_cache(maxsize=64)
def _cluster_observe(tol: float) -> Callable:
    def observe(t, X, ctx):
        g = _gap_one(X)
        # counts as floats: diffrax pre-fills saved outputs with inf, which an integer cannot hold
        return {"clusters": _clusters_one(X, tol)[0].astype(X.dtype), "gap_clusters": g[0].astype(X.dtype),
                "gap_decades": g[2], "diameter": jnp.max(_pairwise(X))}

    return observe


def cluster_observables(tol: float) -> Callable:
    """An ``observe(t, X, ctx)`` for :func:`jaxattn.solve`: cluster count at ``tol``, the
    tolerance-free count and its gap (decades), and the diameter of the configuration (counts are
    returned as floats). The same ``tol`` gives the same function, so repeated solves share one
    compiled program."""
    return _cluster_observe(tolerance(tol))
