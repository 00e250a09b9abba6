"""``jaxattn stability``: equilibria, their stability and where the dynamics ends (see
:mod:`jaxattn.studies.stability`)."""

from __future__ import annotations

from jaxattn.cli._study import add_output_options, config_of, formatter, run_in_out
from jaxattn.studies import stability as study
from jaxattn.studies.skeleton import config_defaults

DEFAULTS = config_defaults(study.Config, out="runs/stability", progress=True, overwrite=False)


def register(sub) -> None:
    d = DEFAULTS
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
    p.add_argument("--seed", type=int, help=f"random seed [{d['seed']}]")
    p.add_argument("--d", type=int, help=f"token dimension of the counts [{d['d']}]")
    p.add_argument("--tokens", help=f"numbers of tokens n of the counts, comma-separated [{d['tokens']}]")
    p.add_argument("--models", type=int, help=f"random models per n [{d['models']}]")
    p.add_argument("--exhaustive-max", type=int,
                   help=f"every sign pattern up to this n, random ones above [{d['exhaustive_max']}]")
    p.add_argument("--patterns", type=int,
                   help=f"random sign patterns per model above --exhaustive-max [{d['patterns']}]")
    p.add_argument("--alpha", type=float, help=f"step of the map [{d['alpha']}]")
    p.add_argument("--beta", type=float, help=f"inverse temperature of the attention [{d['beta']}]")
    p.add_argument("--time", help=f"'discrete' (the map), 'continuous' (the flow) or 'both' [{d['time']}]")
    p.add_argument("--basin-num", type=int, help=f"initial conditions of the basin table [{d['basin_num']}]")
    p.add_argument("--basin-n", type=int, help=f"tokens of the example model and its basins [{d['basin_n']}]")
    p.add_argument("--steps", type=int, help=f"map steps run to the end [{d['steps']}]")
    p.add_argument("--t1", type=float, help=f"flow time run to the end [{d['t1']}]")
    p.add_argument("--perturb-num", type=int, help=f"random perturbations per size [{d['perturb_num']}]")
    p.add_argument("--search", type=int, help=f"models searched for a stable bipartite equilibrium [{d['search']}]")
    add_output_options(p, d)
    p.set_defaults(func=run, defaults=DEFAULTS)


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
