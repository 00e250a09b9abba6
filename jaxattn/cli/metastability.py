"""``jaxattn metastability``: the dynamic-metastability study (see :mod:`jaxattn.studies.metastability`)."""

from __future__ import annotations

from jaxattn.cli._study import config_of, formatter, run_in_out, study_options
from jaxattn.studies import metastability as study


def register(sub) -> None:
    p = sub.add_parser("metastability", formatter_class=formatter,
                       help="the metastability study: plateaus of the energy, dwell times against beta, saddles",
                       description="Tokens on the sphere with Q = K = V = I gather into a few clusters, stay there "
                                   "for a long time, then merge one by one: the interaction energy E = "
                                   "(1/(2 beta n^2)) sum_ij exp(beta(<x_i, x_j> - 1)) climbs a staircase. The flow "
                                   "C2 (or the map D1) from many random initial conditions for every (n, d, beta), "
                                   "states saved on a logarithmic time grid: cluster counts, energy plateaus and "
                                   "their dwell times (Kaplan-Meier medians, an exponential fit against beta with a "
                                   "bootstrap interval), whether each plateau is a strict saddle of E (the "
                                   "Riemannian Hessian on the product of spheres), the clusters of the first "
                                   "plateau against beta, the claims they check, and a movie. Writes tables (CSV), "
                                   "figures (PNG), movie.gif (and movie.mp4 with an encoder) and report.md.")
    p.set_defaults(func=run, defaults=study_options(p, study.Config, out="runs/metastability"))


def run(args, cfg) -> int:
    config = config_of(study.Config, cfg)
    tables = run_in_out("metastability", cfg, lambda out, say: study.run(out, config, progress=say))
    for r in tables["points"]:
        print(f"n={r['n']:<4} d={r['d']:<3} beta={r['beta']:<6g} plateaus {r['plateaus']:>5}  dwell (median) "
              f"{r['dwell_median']:<10.4g} strict saddles {r['strict_saddles']}/{r['classified']}  "
              f"one cluster at t1 {r['single_at_t1']:.2f}")
    for c in tables["claims"]:
        print(f"{c['verdict']:<12} {c['claim']}")
    print(f"report       {cfg['out']}/report.md")
    return 0
