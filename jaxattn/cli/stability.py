"""``jaxattn stability``: equilibria, their stability and where the dynamics ends (see
:mod:`jaxattn.studies.stability`)."""

from __future__ import annotations

from jaxattn.cli._study import config_of, formatter, run_in_out, study_options
from jaxattn.studies import stability as study


def register(sub) -> None:
    p = sub.add_parser("stability", formatter_class=formatter,
                       help="equilibria and their stability: counts of stable equilibria, a small-basin bipartite "
                            "equilibrium, sphere trajectories, basins of attraction",
                       description="Where can the token dynamics end, and which ends are stable? (1) For random "
                                   "single-head models with a symmetric value matrix, every consensus and bipartite "
                                   "consensus at every eigenvector is linearised (jax.jacfwd, tangent space of the "
                                   "product of spheres) and classified, next to the closed-form single-head "
                                   "conditions; map (D2) and flow (C2). (2) A stable bipartite equilibrium is "
                                   "perturbed by growing amounts: small perturbations return, larger ones escape. "
                                   "(3) Trajectories on the sphere for d = 3, one head and three heads. (4) Basin "
                                   "fractions over random initial conditions with 95% intervals. Writes tables (CSV), "
                                   "figures (PNG) and report.md.")
    p.set_defaults(func=run, defaults=study_options(p, study.Config, out="runs/stability"))


def run(args, cfg) -> int:
    config = config_of(study.Config, cfg)  # the study runs in float64 itself (a scoped jax.enable_x64)
    tables = run_in_out("stability", cfg, lambda out, say: study.run(out, config, progress=say))
    for r in tables["counts_summary"]:
        print(f"{r['time']:<10} n = {r['n']:<3} mean stable equilibria {r['mean_stable']:.2f}  "
              f"multistable models {r['multistable']:.2f}  analytic = numerical {r['agreement']}")
    for r in tables["basins"]:
        print(f"{r['time']:<10} {r['end']:<22} {r['fraction']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]")
    print(f"report     {cfg['out']}/report.md")
    return 0
