"""Public analyses that no other test asserted, against NumPy references: single-linkage cluster labels and the
distance to the nearest consensus point."""

import numpy as np

from jaxattn.analysis import clusters as cl
from jaxattn.analysis.observables import consensus, nearest_consensus


def _labels_reference(X: np.ndarray, tol: float) -> np.ndarray:
    """Connected components of ``|x_i - x_j| <= tol`` by depth-first search, each labelled by its smallest index."""
    n = X.shape[0]
    adj = np.linalg.norm(X[:, None] - X[None], axis=-1) <= tol
    lab = np.full(n, -1)
    for i in range(n):
        if lab[i] < 0:
            stack = [i]
            while stack:
                j = stack.pop()
                if lab[j] < 0:
                    lab[j] = i
                    stack += np.flatnonzero(adj[j] & (lab < 0)).tolist()
    return lab


def test_cluster_labels_match_connected_components(rng):
    """Chains (tokens joined only through others), isolated tokens, tokens in any order, batched over two axes."""
    X = np.concatenate([
        np.array([[0.0, 0.0], [0.9, 0.0], [1.8, 0.0], [2.7, 0.0]]),  # a chain: neighbours 0.9 apart, ends 2.7
        np.array([[10.0, 0.0], [10.0, 0.5]]),  # a pair
        np.array([[-5.0, 5.0]]),  # alone
        np.array([[30.0, 30.0]]) + 0.3 * rng.normal(size=(5, 2)),  # a random blob
    ])
    perm = rng.permutation(X.shape[0])  # labels follow token indices, not positions
    batch = np.stack([np.stack([X[perm], X[perm[::-1]]]), np.stack([X, 4.0 * X])])  # [2, 2, n, 2]
    for tol in (0.25, 0.5, 1.0, 3.0):  # 0.5: the pair sits exactly at the tolerance (<= joins it)
        got = np.asarray(cl.cluster_labels(batch, tol))
        assert got.shape == batch.shape[:-1] and got.dtype == np.int32
        want = np.asarray([[_labels_reference(x, tol) for x in row] for row in batch])
        np.testing.assert_array_equal(got, want)
    # the chain is one cluster at 1.0 although its ends are 2.7 apart; at 0.25 every token of it is alone
    assert len(set(np.asarray(cl.cluster_labels(X, 1.0))[:4])) == 1
    assert len(set(np.asarray(cl.cluster_labels(X, 0.25))[:4])) == 4


def _nearest_reference(X: np.ndarray) -> float:
    U = X / np.linalg.norm(X, axis=-1, keepdims=True)
    c = U.mean(axis=0)
    c /= np.linalg.norm(c)
    return float(np.sqrt(np.sum((U - c) ** 2)))


def test_nearest_consensus_matches_its_definition(rng):
    """``sqrt(Σ_i ||u_i − c||²)`` of the normalised tokens ``u_i``, ``c = ū/||ū||``: tokens of very different norms
    (the measure depends on directions only) and at consensus."""
    for _ in range(3):
        X = rng.normal(size=(7, 4)) * rng.uniform(0.1, 20.0, size=(7, 1))
        want = _nearest_reference(X)
        np.testing.assert_allclose(float(nearest_consensus(X)), want, rtol=1e-12)
        np.testing.assert_allclose(float(nearest_consensus(3.0 * X)), want, rtol=1e-12)  # scale-free
        np.testing.assert_allclose(float(consensus(0.0, X)["nearest_consensus"]), want, rtol=1e-12)
    v = rng.normal(size=4)
    assert float(nearest_consensus(np.outer([1.0, 2.0, 5.0], v))) < 1e-7  # one direction: at consensus
