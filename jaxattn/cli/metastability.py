"""``jaxattn metastability``: the dynamic-metastability study (see :mod:`jaxattn.studies.metastability`)."""

from __future__ import annotations

import math

from jaxattn.cli._study import study_command
from jaxattn.studies import metastability as study

#: The line of one (n, d, beta); ``dwell`` is :func:`_dwell` of the row's ``dwell_median``.
POINT = ("n={n:<4} d={d:<3} beta={beta:<6g} plateaus {plateaus:>5}  dwell (median) {dwell:<10} "
         "strict saddles {strict_saddles}/{classified}  one cluster at t1 {single_at_t1:.2f}")


def _dwell(median: float) -> str:
    """The Kaplan-Meier median dwell as the line says it: NaN when no metastable plateau was seen (no dwell to
    measure), inf when the estimated survival stays above one half (too many plateaus last to t1, censored)."""
    if math.isnan(median):
        return "none (no metastable plateau)"
    return "longer than observed (censored at t1)" if math.isinf(median) else f"{median:.4g}"


def point_line(row: dict) -> str:
    """The summary line of one (n, d, beta) row of the points table."""
    return POINT.format(**row, dwell=_dwell(row["dwell_median"]))


#: The lines printed: one per (n, d, beta), then one per claim.
SUMMARY = (("points", point_line), ("claims", "{verdict:<12} {claim}"))
HELP = "the metastability study: plateaus of the energy, dwell times against beta, saddles"
#: The command's description (argparse folds its line breaks into spaces).
DESCRIPTION = """Tokens on the sphere with Q = K = V = I gather into a few clusters, stay there
for a long time, then merge one by one: the interaction energy E =
(1/(2 beta n^2)) sum_ij exp(beta(<x_i, x_j> - 1)) climbs a staircase. The flow
C2 (or the map D1) from many random initial conditions for every (n, d, beta),
states saved on a logarithmic time grid: cluster counts, energy plateaus and
their dwell times (Kaplan-Meier medians, an exponential fit against beta with a
bootstrap interval), whether each plateau is a strict saddle of E (the
Riemannian Hessian on the product of spheres), the clusters of the first
plateau against beta, the claims they check, and a movie. Writes tables (CSV),
figures (PNG), movie.gif (and movie.mp4 with an encoder) and report.md."""


def register(sub) -> None:
    study_command(sub, "metastability", study, summary=SUMMARY, help=HELP, description=DESCRIPTION)

