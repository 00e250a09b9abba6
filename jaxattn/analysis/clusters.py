"""Cluster analysis of token configurations and good-triple statistics of value matrices: one import for
the analyses of the clustering study, each kept in its own module.

The clustering paper (Geshkovski et al., emergence of clusters) studies the unnormalised flow
``ẋ_i = Σ_j P_ij V x_j`` after the rescaling ``z = e^{−tV} x`` and finds that the limit geometry
depends on the spectrum of ``V``. This module measures that geometry:

* **clusters** (:mod:`jaxattn.analysis._linkage`) of a configuration ``X: [n, d]``: single-linkage
  clusters at a distance tolerance (connected components of the graph ``|x_i − x_j| ≤ tol``), their
  centres and sizes, and a tolerance-free count, the cut at the largest ratio between consecutive
  merge heights of the single-linkage hierarchy. Pure JAX, batched over any leading axes, usable
  inside :func:`jaxattn.solve` as observables (:func:`cluster_observables`).
* **polytope** (:mod:`jaxattn.analysis._hulls`, ``V = I``): the cluster centres that are vertices of
  their convex hull, and the distance of every other token to the hull of those vertices (host, SciPy).
* **hyperplanes** (:mod:`jaxattn.analysis._hyperplanes`, a simple positive top eigenvalue): the
  coordinate of each token along the top eigenvector ``φ_1`` and the number of its distinct values.
* **Boolean attention** (:mod:`jaxattn.analysis._boolean`, ``d = 1``): the distance of the attention
  matrix to the nearest 0/1 matrix and its numerical rank.
* **good triples** (:mod:`jaxattn.analysis._good_triples`): whether the eigenvalue of largest modulus
  is real, positive and simple, for given matrices or for random ensembles, with a Wilson confidence
  interval. Eigenvalues are computed on the host in float64 with LAPACK, whatever JAX's precision.

The paper's model itself (``V``, ``Q``, ``K`` given, ``O = I``, score scale 1) is
:func:`jaxattn.model.paper.paper_model`, re-exported here.
"""

from jaxattn.analysis._boolean import BooleanAttention, boolean_attention, boolean_observables
from jaxattn.analysis._good_triples import (
    ENSEMBLES,
    TOP_CLASSES,
    Estimate,
    classify_top,
    good_triple_fraction,
    random_matrices,
)
from jaxattn.analysis._hulls import Polytope, hull_distance, hull_vertices, outside_distance, polytope
from jaxattn.analysis._hyperplanes import Hyperplanes, TopEigen, coordinate, hyperplanes, top_eigen
from jaxattn.analysis._linkage import (
    Clusters,
    GapCount,
    cluster_labels,
    cluster_observables,
    clusters,
    count_clusters,
    gap_clusters,
    merge_heights,
)
from jaxattn.analysis.stats import wilson
from jaxattn.model.paper import check_value_matrix, paper_model

__all__ = [
    "ENSEMBLES",
    "TOP_CLASSES",
    "BooleanAttention",
    "Clusters",
    "Estimate",
    "GapCount",
    "Hyperplanes",
    "Polytope",
    "TopEigen",
    "boolean_attention",
    "boolean_observables",
    "check_value_matrix",
    "classify_top",
    "cluster_labels",
    "cluster_observables",
    "clusters",
    "coordinate",
    "count_clusters",
    "gap_clusters",
    "good_triple_fraction",
    "hull_distance",
    "hull_vertices",
    "hyperplanes",
    "merge_heights",
    "outside_distance",
    "paper_model",
    "polytope",
    "random_matrices",
    "top_eigen",
    "wilson",
]
