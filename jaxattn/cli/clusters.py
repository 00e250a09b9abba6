"""``jaxattn clusters``: the clustering study (see :mod:`jaxattn.studies.clusters`)."""

from __future__ import annotations

from jaxattn.cli._study import config_of, formatter, run_in_out, study_options
from jaxattn.studies import clusters as study


def register(sub) -> None:
    p = sub.add_parser("clusters", formatter_class=formatter,
                       help="the clustering study: polytopes, hyperplanes, Boolean attention, good triples",
                       description="Where do tokens go without normalisation? The flow x_i' = sum_j P_ij V x_j "
                                   "(single head, Q = K = I, score scale 1) solved for the rescaled tokens "
                                   "z = exp(-tV) x: V = I in 2-D and 3-D (vertices of a convex polytope), a good "
                                   "triple (parallel hyperplanes along the top eigenvector), V with a complex or a "
                                   "negative top eigenvalue, d = 1 (the attention matrix becomes Boolean), a table "
                                   "of cluster counts over many initial conditions against n, d and beta, and the "
                                   "fraction of good triples among random matrices against d. Writes tables (CSV), "
                                   "figures (PNG) and report.md.")
    p.set_defaults(func=run, defaults=study_options(p, study.Config, out="runs/clusters"))


def run(args, cfg) -> int:
    config = config_of(study.Config, cfg)
    tables = run_in_out("clusters", cfg, lambda out, say: study.run(out, config, progress=say))
    for r in tables["pictures"]:
        print(f"{r['setting']:<12} top eigenvalue {r['top_eigenvalue']:<12} clusters {r['clusters']:>3} "
              f"(tolerance-free {r['gap_clusters']})")
    for r in tables["counts"]:
        # the report's columns: clusters within --tol, then the tolerance-free count (as the lines above)
        print(f"n={r['n']:<4} d={r['d']:<3} beta={r['beta']:<5g} clusters {r['clusters_mean']:.3f} "
              f"(tolerance-free {r['gap_clusters_mean']:.3f}, initial hull vertices {r['hull_vertices_mean']:.3f})")
    print(f"report       {cfg['out']}/report.md")
    return 0
