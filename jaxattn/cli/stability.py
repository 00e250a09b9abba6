"""``jaxattn stability``: equilibria, their stability and where the dynamics ends (see
:mod:`jaxattn.studies.stability`)."""

from __future__ import annotations

from jaxattn.cli._study import study_command
from jaxattn.studies import stability as study

#: The lines printed: the counts of stable equilibria per (time, n), then the basin fractions.
SUMMARY = (("counts_summary", "{time:<10} n = {n:<3} mean stable equilibria {mean_stable:.2f}  multistable models "
                              "{multistable:.2f}  analytic = numerical {agreement}"),
           ("basins", "{time:<10} {end:<22} {fraction:.3f} [{ci_low:.3f}, {ci_high:.3f}]"))
HELP = ("equilibria and their stability: counts of stable equilibria, a small-basin bipartite "
        "equilibrium, sphere trajectories, basins of attraction")
#: The command's description (argparse folds its line breaks into spaces).
DESCRIPTION = """Where can the token dynamics end, and which ends are stable? (1) For random
single-head models with a symmetric value matrix, every consensus and bipartite
consensus at every eigenvector is linearised (jax.jacfwd, tangent space of the
product of spheres) and classified, next to the closed-form single-head
conditions; map (D2) and flow (C2). (2) A stable bipartite equilibrium is
perturbed by growing amounts: small perturbations return, larger ones escape.
(3) Trajectories on the sphere for d = 3, one head and three heads. (4) Basin
fractions over random initial conditions with 95% intervals. Writes tables (CSV),
figures (PNG) and report.md."""


def register(sub) -> None:
    study_command(sub, "stability", study, summary=SUMMARY, help=HELP, description=DESCRIPTION)

