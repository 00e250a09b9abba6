"""``jaxattn clusters``: the clustering study (see :mod:`jaxattn.studies.clusters`)."""

from __future__ import annotations

from jaxattn.cli._study import add_output_options, config_of, formatter, run_in_out
from jaxattn.studies import clusters as study
from jaxattn.studies.skeleton import config_defaults

DEFAULTS = config_defaults(study.Config, out="runs/clusters", progress=True, overwrite=False)


def register(sub) -> None:
    d = DEFAULTS
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
    p.add_argument("--n", type=int, help=f"tokens of the pictures (the paper: 40) [{d['n']}]")
    p.add_argument("--n-1d", type=int, help=f"tokens of the one-dimensional run (the paper: 40) [{d['n_1d']}]")
    p.add_argument("--t1", type=float, help=f"final time of every flow [{d['t1']}]")
    p.add_argument("--beta", type=float, help=f"inverse temperature of the pictures and the 1-D run [{d['beta']}]")
    p.add_argument("--tol", type=float, help=f"distance under which tokens share a cluster [{d['tol']}]")
    p.add_argument("--num", type=int, help=f"initial conditions per row of the count table [{d['num']}]")
    p.add_argument("--table-n", help=f"comma-separated token counts of the count table [{d['table_n']}]")
    p.add_argument("--table-d", help=f"comma-separated dimensions of the count table [{d['table_d']}]")
    p.add_argument("--table-beta", help=f"comma-separated inverse temperatures of the count table [{d['table_beta']}]")
    p.add_argument("--good-d", help=f"comma-separated dimensions of the good-triple estimate [{d['good_d']}]")
    p.add_argument("--good-samples", type=int, help=f"random matrices per dimension and ensemble [{d['good_samples']}]")
    p.add_argument("--ensembles", help="comma-separated random ensembles among ginibre (entries N(0, 1/d)), symmetric, "
                                       f"positive, uniform [{d['ensembles']}]")
    p.add_argument("--seed", type=int, help=f"random seed [{d['seed']}]")
    add_output_options(p, d)
    p.set_defaults(func=run, defaults=DEFAULTS)


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
