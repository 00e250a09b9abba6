"""Cluster analysis of token configurations and good-triple statistics of value matrices.

The clustering paper (Geshkovski et al., emergence of clusters) studies the unnormalised flow
``ẋ_i = Σ_j P_ij V x_j`` after the rescaling ``z = e^{−tV} x`` and finds that the limit geometry
depends on the spectrum of ``V``. This module measures that geometry:

* **clusters** of a configuration ``X: [n, d]``: single-linkage clusters at a distance tolerance
  (connected components of the graph ``|x_i − x_j| ≤ tol``), their centres and sizes, and a
  tolerance-free count, the cut at the largest ratio between consecutive merge heights of the
  single-linkage hierarchy (tokens that converge exponentially fast to a few points leave merge
  heights that are many decades apart). Pure JAX, one configuration at a time and batched over any
  leading axes, usable inside :func:`jaxattn.solve` as observables (:func:`cluster_observables`).
* **polytope** (``V = I``): the cluster centres that are vertices of their convex hull, and the
  distance of every other token to the hull of those vertices (host, SciPy).
* **hyperplanes** (a simple positive top eigenvalue): the coordinate of each token along the top
  eigenvector ``φ_1`` (``⟨ψ_1, z⟩`` with ``ψ_1`` the left eigenvector, ``⟨ψ_1, φ_1⟩ = 1``; for a
  symmetric ``V`` it is ``⟨φ_1, z⟩``), and the number of its distinct values.
* **Boolean attention** (``d = 1``): the distance of the attention matrix to the nearest 0/1
  matrix and its numerical rank.
* **good triples**: whether the eigenvalue of largest modulus is real, positive and simple, for
  given matrices or for random ensembles, with a Wilson confidence interval. Eigenvalues are
  computed on the host in float64 with LAPACK, whatever JAX's precision.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.metrics import boolean_distance, numerical_rank
from jaxattn.analysis.stats import wilson
from jaxattn.errors import ConfigError

# ----------------------------------------------------------------------------- input checks


def _config(X, name: str = "X", min_ndim: int = 2) -> jax.Array:
    """A finite real array with at least ``min_ndim`` axes, refused with one line otherwise."""
    a = X if isinstance(X, jax.Array) else np.asarray(X)
    if jnp.iscomplexobj(a) or not (jnp.issubdtype(a.dtype, jnp.floating) or jnp.issubdtype(a.dtype, jnp.integer)):
        raise ConfigError(f"{name} must hold real numbers, got dtype {a.dtype}")
    if a.ndim < min_ndim or 0 in a.shape[-min_ndim:]:
        raise ConfigError(f"{name} must have shape [..., n, d] with n, d >= 1, got {tuple(a.shape)}")
    if not isinstance(a, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(a))):
        raise ConfigError(f"{name} has non-finite values (NaN or inf)")
    a = jnp.asarray(a)
    return a if jnp.issubdtype(a.dtype, jnp.floating) else a.astype(jnp.result_type(float))


def _tol(tol) -> float:
    if isinstance(tol, bool) or np.ndim(tol) != 0 or not math.isfinite(float(tol)) or float(tol) < 0:
        raise ConfigError(f"tol must be a finite number >= 0, got {tol!r}")
    return float(tol)


def _batched(fn: Callable, X: jax.Array, core: int, *args):
    """Apply ``fn(item, *args)`` (an item has ``core`` trailing axes) over every leading axis of ``X``,
    compiled once per shape (the analyses run on the host loop of a study, one call per condition)."""
    return _batched_jit(fn, core, X, *args)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _batched_jit(fn, core, X, *args):
    lead = X.shape[: X.ndim - core]
    flat = X.reshape((-1, *X.shape[X.ndim - core:]))
    out = jax.vmap(lambda x: fn(x, *args))(flat)
    return jax.tree_util.tree_map(lambda a: a.reshape(lead + a.shape[1:]), out)


def check_value_matrix(V, d: int | None = None) -> np.ndarray:
    """``V`` as a finite real ``[d, d]`` float64 array (``d`` checked when given), else one clear line."""
    a = np.asarray(V)
    if np.iscomplexobj(a) or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ConfigError(f"V must hold real numbers, got dtype {a.dtype}")
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ConfigError(f"V must be a square [d, d] matrix, got shape {a.shape}")
    if d is not None and a.shape[0] != d:
        raise ConfigError(f"V is {a.shape[0]}x{a.shape[0]} but the tokens have dimension d={d}")
    if not np.all(np.isfinite(a)):
        raise ConfigError("V has non-finite values (NaN or inf)")
    return a.astype(np.float64)


# ----------------------------------------------------------------------------- clusters (JAX)


def _pairwise(X: jax.Array) -> jax.Array:
    """Euclidean distances ``[n, n]`` (exact zeros on the diagonal, no NaN gradient at 0)."""
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


def cluster_labels(X, tol) -> jax.Array:
    """Single-linkage cluster labels at distance ``tol``: ``X: [..., n, d]`` -> ``[..., n]`` int32.

    Tokens ``i`` and ``j`` are in one cluster when a chain of tokens joins them with steps of
    length ``<= tol``. A cluster's label is the smallest token index in it.
    """
    X = _config(X)
    return _batched(_labels_one, X, 2, jnp.asarray(_tol(tol), X.dtype))


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


def clusters(X, tol) -> Clusters:
    """Clusters at distance ``tol`` with their centres and sizes; ``X: [..., n, d]``."""
    X = _config(X)
    return Clusters(*_batched(_clusters_one, X, 2, jnp.asarray(_tol(tol), X.dtype)))


def count_clusters(X, tol) -> jax.Array:
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


def merge_heights(X) -> jax.Array:
    """Single-linkage merge heights, ascending: ``X: [..., n, d]`` -> ``[..., n - 1]``."""
    X = _config(X)
    return _batched(_merge_heights_one, X, 2)


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


def gap_clusters(X) -> GapCount:
    """Tolerance-free number of clusters: cut the single-linkage hierarchy at its largest gap.

    The gaps are ratios between consecutive merge heights (log scale), the last one between the
    highest merge and the size of the configuration ``max_i |x_i|``, so a single tight cluster
    counts as 1. A configuration without clear clusters still gets a count; ``gap`` (in decades)
    says how clear the cut is. ``X: [..., n, d]``.
    """
    X = _config(X)
    return GapCount(*_batched(_gap_one, X, 2))


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
    return _cluster_observe(_tol(tol))


# ----------------------------------------------------------------------------- polytope (host)


def _in_hull_lp(P: np.ndarray, x: np.ndarray) -> float:
    """L1 distance from ``x`` to the convex hull of the rows of ``P`` (a linear programme)."""
    from scipy.optimize import linprog

    m, d = P.shape
    # variables: weights w (m, >= 0, sum 1), slacks s+ and s- (d each, >= 0): P^T w + s+ - s- = x
    c = np.concatenate([np.zeros(m), np.ones(2 * d)])
    A_eq = np.block([[P.T, np.eye(d), -np.eye(d)], [np.ones((1, m)), np.zeros((1, 2 * d))]])
    b_eq = np.concatenate([x, [1.0]])
    res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - the programme is always feasible and bounded
        raise RuntimeError(f"hull membership LP failed: {res.message}")
    return float(res.fun)


def hull_vertices(P, tol: float = 1e-9) -> np.ndarray:
    """Which rows of ``P: [m, d]`` are vertices of their convex hull, ``[m]`` bool.

    A point is a vertex when it lies farther than ``tol`` (L1, relative to the size of the set)
    from the hull of the other points. Duplicated points are not vertices of each other's hull
    only once: cluster first (:func:`clusters`) and pass the centres.
    """
    P = np.asarray(_config(P, "P"), np.float64)
    if P.ndim != 2:
        raise ConfigError(f"P must be [m, d], got shape {P.shape}")
    m, d = P.shape
    if m == 1:
        return np.ones(1, bool)
    scale = max(np.abs(P).max(), 1e-300)
    if m > d + 1 and np.linalg.matrix_rank(P[1:] - P[0], tol=1e-9 * scale) == d:
        from scipy.spatial import ConvexHull  # fast path for a full-dimensional set

        out = np.zeros(m, bool)
        out[ConvexHull(P).vertices] = True
        return out
    return np.asarray([_in_hull_lp(np.delete(P, i, axis=0), P[i]) > tol * scale for i in range(m)])


def hull_distance(vertices, X) -> np.ndarray:
    """L1 distance from each row of ``X: [k, d]`` to the convex hull of ``vertices: [m, d]``, ``[k]``."""
    V = np.asarray(vertices, np.float64)
    return np.asarray([_in_hull_lp(V, x) for x in np.asarray(X, np.float64)])


def _outside(vertices: np.ndarray, X: np.ndarray) -> np.ndarray:
    """How far each row of ``X`` lies outside the hull of ``vertices`` (0 inside): the largest
    signed facet distance when the hull is full-dimensional (Qhull), else the LP's L1 distance."""
    m, d = vertices.shape
    scale = max(np.abs(vertices).max(), 1e-300)
    if m > d and np.linalg.matrix_rank(vertices[1:] - vertices[0], tol=1e-9 * scale) == d:
        from scipy.spatial import ConvexHull

        eq = ConvexHull(vertices).equations  # unit outward normals n and offsets b: n·x + b <= 0 inside
        return np.maximum((X @ eq[:, :-1].T + eq[:, -1]).max(axis=1), 0.0)
    return hull_distance(vertices, X)


class Polytope(NamedTuple):
    """The polytope picture of one configuration (see :func:`polytope`)."""

    clusters: int  # clusters at the tolerance
    vertices: int  # cluster centres that are vertices of the convex hull of the centres
    vertex_tokens: int  # tokens in those clusters
    inside: bool  # every other token lies in the hull of the vertices (within tol)
    max_outside: float  # how far the farthest non-vertex token lies outside that hull (0 inside)


def polytope(X, tol: float) -> Polytope:
    """Clusters of ``X: [n, d]`` at ``tol``, how many of their centres are vertices of the convex hull
    of the centres, and whether the remaining tokens lie inside the hull of those vertices."""
    tol = _tol(tol)
    X = _config(X)
    if X.ndim != 2:
        raise ConfigError(f"polytope takes one configuration [n, d], got shape {tuple(X.shape)}")
    c = clusters(X, tol)
    lab, sizes = np.asarray(c.labels), np.asarray(c.sizes)
    roots = np.flatnonzero(sizes > 0)
    centres = np.asarray(c.centres, np.float64)[roots]
    is_vertex = hull_vertices(centres, tol=tol / max(np.abs(centres).max(), 1e-300))
    vroots = set(roots[is_vertex].tolist())
    rest = np.asarray(X, np.float64)[[i for i in range(X.shape[0]) if lab[i] not in vroots]]
    dist = _outside(centres[is_vertex], rest) if len(rest) else np.zeros(0)
    far = float(dist.max()) if dist.size else 0.0
    return Polytope(int(c.count), int(is_vertex.sum()), int(sizes[roots[is_vertex]].sum()),
                    bool(far <= tol * X.shape[1]), far)


# ----------------------------------------------------------------------------- hyperplanes


class TopEigen(NamedTuple):
    """The eigenvalue of largest modulus of a real matrix and its eigenvectors (float64, host)."""

    value: complex
    right: np.ndarray  # [d] unit right eigenvector φ_1 (real when the eigenvalue is real)
    left: np.ndarray  # [d] left eigenvector ψ_1 with <ψ_1, φ_1> = 1


def top_eigen(V) -> TopEigen:
    """Top-modulus eigenpair of ``V: [d, d]``; ``φ_1`` is real with its largest entry positive when
    the eigenvalue is real."""
    V = check_value_matrix(V)
    lam, R = np.linalg.eig(V)
    i = int(np.argmax(np.abs(lam) + 1e-12 * np.abs(lam).max() * (lam.imag >= 0)))
    phi = R[:, i]
    if abs(lam[i].imag) <= 1e-12 * max(abs(lam[i]), 1e-300):
        phi = phi.real
        phi = phi * np.sign(phi[np.argmax(np.abs(phi))])
    phi = phi / np.linalg.norm(phi)
    lamL, L = np.linalg.eig(V.T)
    j = int(np.argmin(np.abs(lamL - lam[i])))
    psi = L[:, j]
    psi = psi / (psi @ phi)
    if np.isrealobj(phi):
        psi = psi.real
    return TopEigen(complex(lam[i]), phi, psi)


def coordinate(X, V) -> jax.Array:
    """Coordinate of every token along the top eigenvector ``φ_1`` of ``V``: ``⟨ψ_1, x_i⟩``.

    ``X: [..., n, d]`` -> ``[..., n]``. Needs a real top eigenvalue (else :class:`ConfigError`).
    """
    X = _config(X)
    V = check_value_matrix(V, X.shape[-1])
    top = top_eigen(V)
    if abs(top.value.imag) > 1e-12 * abs(top.value):
        raise ConfigError(f"the top eigenvalue of V is complex ({top.value:.4g}): there is no real φ_1")
    return jnp.einsum("...nd,d->...n", X, jnp.asarray(top.left, X.dtype))


class Hyperplanes(NamedTuple):
    # [...] distinct values of the coordinate at the tolerance
    count: jax.Array  # type: ignore[assignment]  # NamedTuple field shadows tuple.count; the name is public API
    gap_count: jax.Array  # [...] tolerance-free count
    values: jax.Array  # [..., n] the coordinates


def hyperplanes(X, V, tol) -> Hyperplanes:
    """How many parallel hyperplanes ``{⟨ψ_1, x⟩ = c}`` hold the tokens ``X: [..., n, d]``."""
    tol = _tol(tol)
    c = coordinate(X, V)
    pts = c[..., None]
    return Hyperplanes(count_clusters(pts, tol), gap_clusters(pts).count, c)


# ----------------------------------------------------------------------------- Boolean attention


class BooleanAttention(NamedTuple):
    distance: jax.Array  # [...] max_ij |A_ij − B_ij| for the nearest 0/1 matrix B
    rank: jax.Array  # [...] int32 singular values above rtol × the largest


def boolean_attention(A, rtol: float = 1e-6) -> BooleanAttention:
    """Distance of ``A: [..., n, n]`` to the nearest Boolean matrix (entrywise rounding, max norm)
    and its numerical rank (singular values ``> rtol · σ_max``)."""
    A = _config(A, "A")
    if A.shape[-1] != A.shape[-2]:
        raise ConfigError(f"an attention matrix is square [n, n], got shape {tuple(A.shape)}")
    return BooleanAttention(boolean_distance(A), numerical_rank(A, _tol(rtol)).astype(jnp.int32))


def boolean_observables(d: int, rtol: float = 1e-6) -> Callable:
    """An ``observe(t, X, ctx)`` for :func:`jaxattn.solve` of a one-dimensional model: the attention
    matrix of the first head, its distance to the nearest Boolean matrix and its numerical rank.
    The theorem behind it is one-dimensional, so ``d`` must be 1."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d != 1:
        raise ConfigError(f"the Boolean attention analysis is for d = 1 tokens, got d = {d}")
    return _boolean_observe(_tol(rtol))


@functools.lru_cache(maxsize=16)
def _boolean_observe(rtol: float) -> Callable:
    def observe(t, X, ctx):
        A = ctx.attention()[0]
        b = boolean_attention(A, rtol)
        return {"attention": A, "boolean_distance": b.distance, "rank": b.rank.astype(A.dtype)}

    return observe


# ----------------------------------------------------------------------------- good triples

#: Classes of :func:`classify_top` (index = code).
TOP_CLASSES = ("good", "complex", "negative", "repeated")

#: Random ensembles of :func:`good_triple_fraction`.
ENSEMBLES = ("ginibre", "symmetric", "positive", "uniform")


def classify_top(V, rtol: float = 1e-9) -> np.ndarray:
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


def random_matrices(key, d: int, count: int, ensemble: str = "ginibre", dtype=None) -> jax.Array:
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


def good_triple_fraction(key, d: int, samples: int, *, ensemble: str = "ginibre", confidence: float = 0.95,
                         chunk: int = 4096) -> Estimate:
    """Fraction of random ``d × d`` matrices whose top-modulus eigenvalue is real, positive and simple
    (the spectral half of a good triple; with ``Q = K = I`` it is the whole condition).

    Matrices are drawn with JAX in chunks of ``min(chunk, samples)`` (chunk ``c`` from
    ``fold_in(key, c)``), eigenvalues in float64 on the host.
    """
    for name, v in (("d", d), ("samples", samples), ("chunk", chunk)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    counts = np.zeros(len(TOP_CLASSES), np.int64)
    width = min(chunk, samples)
    for c, start in enumerate(range(0, samples, width)):
        # every chunk is drawn at the same width (one compiled sampler), the last one cut short
        V = np.asarray(random_matrices(jax.random.fold_in(key, c), d, width, ensemble), np.float64)
        counts += np.bincount(classify_top(V[: samples - start]), minlength=len(TOP_CLASSES))
    lo, hi = wilson(int(counts[0]), samples, confidence)
    return Estimate(int(d), int(samples), int(counts[0]), float(counts[0] / samples), lo, hi,
                    {name: int(k) for name, k in zip(TOP_CLASSES, counts, strict=True)})


# ----------------------------------------------------------------------------- the paper's model


def paper_model(V, Q=None, K=None):
    """The clustering paper's single-head model: value ``V``, query ``Q`` and key ``K`` (default
    the identity), all ``[d, d]``, output ``O = I`` and score scale 1 (scores ``β <Q x_i, K x_j>``,
    as in the paper and its code, not BERT's ``1/√d_h``). A shared-weight :class:`jaxattn.Model`
    for :func:`jaxattn.solve` with :data:`jaxattn.C3` or :data:`jaxattn.C3_RESCALED`."""
    from jaxattn.model.params import from_heads

    V = check_value_matrix(V)
    d = V.shape[0]
    eye = np.eye(d)
    Q = eye if Q is None else check_value_matrix(Q, d)
    K = eye if K is None else check_value_matrix(K, d)
    return from_heads(Q[None, None], K[None, None], V[None, None], eye[None, None], scale=1.0)
