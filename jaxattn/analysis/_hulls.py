"""The polytope picture of a configuration (``V = I`` in the clustering paper): which cluster centres are
vertices of their convex hull, and how far the other tokens lie from the hull of those vertices
(host, NumPy and SciPy: Qhull where the set is full-dimensional, a linear programme otherwise)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jaxtyping import ArrayLike, Bool, Float

from jaxattn.analysis._inputs import real_array, tolerance
from jaxattn.analysis._linkage import clusters
from jaxattn.errors import ConfigError


def _in_hull_lp(P: np.ndarray, x: np.ndarray) -> float:
    """L1 distance from ``x`` to the convex hull of the rows of ``P`` (a linear programme)."""
    from scipy.optimize import linprog  # SciPy loads when a hull is first needed, not with ``import jaxattn``

    m, d = P.shape
    # variables: weights w (m, >= 0, sum 1), slacks s+ and s- (d each, >= 0): P^T w + s+ - s- = x
    c = np.concatenate([np.zeros(m), np.ones(2 * d)])
    A_eq = np.block([[P.T, np.eye(d), -np.eye(d)], [np.ones((1, m)), np.zeros((1, 2 * d))]])
    b_eq = np.concatenate([x, [1.0]])
    res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - the programme is always feasible and bounded
        raise RuntimeError(f"hull membership LP failed: {res.message}")
    return float(res.fun)


def hull_vertices(P: Float[ArrayLike, "m d"], tol: float = 1e-9) -> Bool[np.ndarray, " m"]:
    """Which rows of ``P: [m, d]`` are vertices of their convex hull, ``[m]`` bool.

    A point is a vertex when it lies farther than ``tol`` (L1, relative to the size of the set)
    from the hull of the other points. Duplicated points are not vertices of each other's hull
    only once: cluster first (:func:`jaxattn.analysis._linkage.clusters`) and pass the centres.
    """
    P = np.asarray(real_array(P, "P"), np.float64)
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


def hull_distance(vertices: Float[ArrayLike, "m d"], X: Float[ArrayLike, "k d"]) -> Float[np.ndarray, " k"]:
    """L1 distance from each row of ``X: [k, d]`` to the convex hull of ``vertices: [m, d]``, ``[k]``."""
    V = np.asarray(vertices, np.float64)
    return np.asarray([_in_hull_lp(V, x) for x in np.asarray(X, np.float64)])


def outside_distance(vertices: Float[np.ndarray, "m d"], X: Float[np.ndarray, "k d"]) -> Float[np.ndarray, " k"]:
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


def polytope(X: Float[ArrayLike, "n d"], tol: float) -> Polytope:
    """Clusters of ``X: [n, d]`` at ``tol``, how many of their centres are vertices of the convex hull
    of the centres, and whether the remaining tokens lie inside the hull of those vertices."""
    tol = tolerance(tol)
    X = real_array(X)
    if X.ndim != 2:
        raise ConfigError(f"polytope takes one configuration [n, d], got shape {tuple(X.shape)}")
    c = clusters(X, tol)
    lab, sizes = np.asarray(c.labels), np.asarray(c.sizes)
    roots = np.flatnonzero(sizes > 0)
    centres = np.asarray(c.centres, np.float64)[roots]
    is_vertex = hull_vertices(centres, tol=tol / max(np.abs(centres).max(), 1e-300))
    vroots = set(roots[is_vertex].tolist())
    rest = np.asarray(X, np.float64)[[i for i in range(X.shape[0]) if lab[i] not in vroots]]
    dist = outside_distance(centres[is_vertex], rest) if len(rest) else np.zeros(0)
    far = float(dist.max()) if dist.size else 0.0
    return Polytope(int(c.count), int(is_vertex.sum()), int(sizes[roots[is_vertex]].sum()),
                    bool(far <= tol * X.shape[1]), far)

