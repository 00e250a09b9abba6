"""``jaxattn clusters``: the clustering study (see :mod:`jaxattn.studies.clusters`)."""

from __future__ import annotations

from jaxattn.cli._study import study_command
from jaxattn.studies import clusters as study

#: The lines printed: one per picture, then one per (n, d, beta) of the counts table (clusters within --tol, then
#: the tolerance-free count, as the report's columns).
SUMMARY = (("pictures", "{setting:<12} top eigenvalue {top_eigenvalue:<12} clusters {clusters:>3} "
                        "(tolerance-free {gap_clusters})"),
           ("counts", "n={n:<4} d={d:<3} beta={beta:<5g} clusters {clusters_mean:.3f} (tolerance-free "
                      "{gap_clusters_mean:.3f}, initial hull vertices {hull_vertices_mean:.3f})"))
HELP = "the clustering study: polytopes, hyperplanes, Boolean attention, good triples"
#: The command's description (argparse folds its line breaks into spaces).
DESCRIPTION = """Where do tokens go without normalisation? The flow x_i' = sum_j P_ij V x_j
(single head, Q = K = I, score scale 1) solved for the rescaled tokens
z = exp(-tV) x: V = I in 2-D and 3-D (vertices of a convex polytope), a good
triple (parallel hyperplanes along the top eigenvector), V with a complex or a
negative top eigenvalue, d = 1 (the attention matrix becomes Boolean), a table
of cluster counts over many initial conditions against n, d and beta, and the
fraction of good triples among random matrices against d. Writes tables (CSV),
figures (PNG) and report.md."""


def register(sub) -> None:
    study_command(sub, "clusters", study, summary=SUMMARY, help=HELP, description=DESCRIPTION)

