"""Claims judged from measured numbers: the one vocabulary of verdicts for the studies' claims and the reproductions
page.

A claim is decided by a list of :class:`Check` — comparisons of measured numbers with the statement, each of which
can fail. The verdict follows from the checks alone (:func:`judge`): *reproduced* when every check holds, *differs*
when one fails, *not observed* when what fails is that something the paper reports was never seen, *inconclusive*
when a confidence interval straddles a threshold or a run is still converging at its horizon. Fractions are judged
with their 95% Wilson interval; a universal statement ("always", "every") fails on one counterexample. Thresholds
that no number of a paper fixes are named in :data:`THRESHOLDS` with where they come from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from jaxattn.analysis.stats import wilson
from jaxattn.studies.cluster_checks import HULL_RTOL


# ------------------------------------------------------------------------------------------ numbers as shown
def fmt(x: float | str, digits: int = 3) -> str:
    """A number as the page shows it (3 significant digits; scientific below 1e-3)."""
    if isinstance(x, str):
        x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def ci(p: float | str, lo: float | str, hi: float | str) -> str:
    return f"{fmt(p)} [{fmt(lo)}, {fmt(hi)}]"


# ------------------------------------------------------------------------------------------ thresholds
@dataclass(frozen=True)
class Threshold:
    value: float
    meaning: str
    source: str


#: Every number a verdict is compared with that is not a number of the paper itself, with where it comes from.
THRESHOLDS: dict[str, Threshold] = {
    "almost-all": Threshold(0.9, "“almost all” / “nearly any” / “for almost all initial sequences”",
                            "jaxattn's reading: at least 90% (the papers give no number)"),
    "almost-all-layers": Threshold(0.8, "“for almost all layers” (a handful of layers: no interval)",
                                   "jaxattn's reading: at least 80% of the layers (the paper gives no number)"),
    "most": Threshold(0.5, "“most”, “in most layers”, “preserved”", "more than half (a majority)"),
    "often": Threshold(0.1, "“often”, “common”", "jaxattn's reading: in at least one case in ten"),
    "small-gap": Threshold(0.25, "a “small” spectral gap, (Re λ1 − Re λ2)/|λ1|",
                           "jaxattn's reading: λ2 within 25% of λ1; the paper's steering needs a gap of an order "
                           "of magnitude, so 0.25 is far from it"),
    "random-level": Threshold(2.0, "a “low” correlation ρ1: the layers' mean ρ1 within this many standard deviations "
                              "of the alignment a direction the dynamics does not favour gets (tokens uniform on the "
                              "sphere of R^d)", "jaxattn's reading: at the level of no alignment, which in d in the "
                              "hundreds is a few hundredths (a fixed threshold such as 0.5 holds for any model that "
                              "does not align its tokens)"),
    "perfect": Threshold(0.99, "“perfect” / “near-perfect” alignment of a token, and a converged ρ",
                         "jaxattn's reading: |<x, u>|/||x|| above 0.99 (about 8°)"),
    "consensus": Threshold(1e-3, "a prompt at consensus: first-token measure 1 − mean_j cos(x_1, x_j)",
                           "jaxattn's tolerance: a mean angle of about 2.6° to the first token"),
    "zero": Threshold(1e-6, "a measure at its limit 0 in the float64 theorem settings",
                      "the solver's tolerances (rtol 1e-9): far below any transient, far above round-off"),
    "plateau": Threshold(0.05, "a plateau: the mean measure falls by less than this fraction per 250 passes (a "
                         "quarter of the consensus paper's 1000 passes), judged by its rate over the last quarter of "
                         "the run (at least 2 passes); for the theorem settings' saved times, over their last quarter",
                         "jaxattn's reading (the papers give no number): a run not at consensus falling more slowly "
                         "is judged stalled (differs); one falling faster is undecided at its horizon. A rate, not a "
                         "fall over the run's own last quarter, so that a short run's decay is not read as a stall: "
                         "a run of a few passes is judged stalled only if its mean barely moves"),
    "very-small-basin": Threshold(0.05, "a “very small” basin of attraction: the share of random starts that end "
                                  "there", "jaxattn's reading: at most 5% (the paper gives no number)"),
    "clear-clusters": Threshold(3.0, "clusters: the tolerance-free cut's gap, in decades",
                                "jaxattn's reading: clusters 1000 times tighter than their spacing"),
    "significance": Threshold(0.05, "a trend across layers: one-sided permutation test of Spearman's rank "
                              "correlation", "the conventional 5% level"),
    "about-14": Threshold(0.005, "“about 14%”: the band 14% ± 0.5%",
                          "the paper rounds to a whole percent"),
    "slowly": Threshold(0.5, "“vanishes very slowly”: |d log p / d log d|",
                        "slower than the share of real eigenvalues of a real Ginibre matrix (~ d^(−1/2))"),
    "machine": Threshold(1e-9, "no change where the paper says none (a token that never moves, a Lyapunov function "
                         "that never decreases, a hull that never grows), relative to the configuration's size",
                         "float64 round-off of the solver's states (the theorem settings solve at rtol 1e-9, the "
                         f"hull check at rtol {HULL_RTOL:g}: the solver's own error well below the threshold)"),
    "rate-level": Threshold(0.1, "the speed of consensus compared between runs: the layer at which a prompt's "
                            "first-token measure falls to this fraction of its start",
                            "jaxattn's measure, not a verdict threshold: for a geometric decay any fixed level ranks "
                            "the runs alike"),
    "order-of-magnitude": Threshold(10.0, "a spectral gap “of at least an order of magnitude”: the steered layer's "
                                    "gap Re λ1 − Re λ2 (Re λ3 past a complex pair) over the unsteered layer's |λ1|",
                                    "the paper (§2.3) ties near-perfect alignment to such a gap; PM4 is read at the "
                                    "smallest gain of the grid whose steered gap reaches it"),
    "cluster-rate": Threshold(0.25, "clusters still forming: the tolerance-free gap (decades) of the conditions not "
                              "yet at clear clusters grows at least this share of the rate λ/ln 10 that the "
                              "smallest positive eigenvalue λ of V gives it", "jaxattn's reading (the paper gives no "
                              "number): slower is a plateau (differs); faster is undecided at the horizon, with the "
                              "time that rate needs"),
    "half-n": Threshold(0.5, "“significantly smaller than n”: a polytope K with at most n/2 vertices",
                        "jaxattn's reading (the paper gives no number); the clusters study counts such conditions at "
                        "this value (counts.csv's at_most_half_n_vertices)"),
    "closed-form": Threshold(1e-8, "agreement with a closed form: a Jacobian's spectral radius, a steered spectrum "
                             "(relative to the largest |eigenvalue|)",
                             "float64 Jacobians by jax.jacfwd and float64 eigenvalues (LAPACK)"),
    "about": Threshold(0.1, "“about” / “approximately” for a quantity the paper approximates: a relative error",
                       "jaxattn's reading (the paper gives no number): at a gap of an order of magnitude "
                       "[order-of-magnitude] the neglected part is about a tenth of the leading term"),
}


def T(name: str) -> float:
    return THRESHOLDS[name].value


# ------------------------------------------------------------------------------------------ checks
@dataclass(frozen=True)
class Check:
    """One comparison of a measured number with the paper's statement; ``ok`` None: undecided at this sample size
    or horizon. ``failing``: the verdict when it fails. ``construction``: the check holds by the run's own
    construction (a token the model cannot move, a factor the rescaling itself supplies, an option of the run):
    shown, marked ◦, and left out of the verdict, which only checks able to fail on real data decide."""

    text: str
    ok: bool | None
    failing: str = "differs"
    construction: bool = False

    @property
    def mark(self) -> str:
        return "◦" if self.construction else {True: "✓", False: "✗", None: "?"}[self.ok]

    @property
    def shown(self) -> str:
        if not self.construction:
            return self.text
        held = "" if self.ok else "; here it did not hold"
        return f"{self.text} (by construction: not part of the verdict{held})"


def by_construction(check: Check, why: str) -> Check:
    """``check`` shown with the reason it cannot fail on real data (``why``) and left out of the verdict."""
    return Check(f"{check.text}; {why}", check.ok, check.failing, construction=True)


OPS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}
SHOW = {">=": "≥", "<=": "≤", ">": ">", "<": "<"}


def compare(label: str, value: float, op: str, threshold: float, tag: str) -> Check:
    """``value op threshold``: a number without a sampling interval (a mean over thousands of tokens, a closed
    form, one run). ``tag`` says where the threshold comes from (a :data:`THRESHOLDS` key or 'paper ...')."""
    ok = bool(OPS[op](value, threshold)) if math.isfinite(value) or math.isinf(value) else False
    return Check(f"{label} = {fmt(value)} {SHOW[op]} {fmt(threshold)} [{tag}]", ok)


def fraction(label: str, count: int, total: int, op: str, threshold: float, tag: str) -> Check:
    """A fraction ``count/total`` against ``threshold`` with its 95% Wilson interval: holds when the whole interval
    is on the right side, fails when the whole interval is on the wrong side, undecided otherwise."""
    if total < 1:
        return Check(f"{label}: nothing to count [{tag}]", False)
    lo, hi = wilson(int(count), int(total))
    p = count / total
    if op in (">", ">="):
        ok = True if OPS[op](lo, threshold) else (False if not OPS[op](hi, threshold) else None)
        best = wilson(int(total), int(total))[0]  # the most favourable count's interval end
    else:
        ok = True if OPS[op](hi, threshold) else (False if not OPS[op](lo, threshold) else None)
        best = wilson(0, int(total))[1]
    # a sample so small that no count could confirm the statement: say so rather than show a bare "?"
    short = "" if OPS[op](best, threshold) else f"; too few to confirm: at best {fmt(best)}"
    return Check(f"{label} {count}/{total} = {ci(p, lo, hi)} {SHOW[op]} {fmt(threshold)} [{tag}]{short}", ok)


def below(label: str, value: float, se: float, threshold: float, tag: str) -> Check:
    """``value < threshold`` for an estimate with standard error ``se``, judged on its 95% normal interval: holds
    when the whole interval is below, fails when it is all at or above, undecided when it straddles."""
    lo, hi = value - 1.96 * se, value + 1.96 * se
    ok = True if hi < threshold else (False if lo >= threshold else None)
    return Check(f"{label} = {fmt(value)} [{fmt(lo)}, {fmt(hi)}] < {fmt(threshold)} [{tag}]", ok)


def none_of(label: str, count: int, total: int, tag: str = "the paper: always") -> Check:
    """A universal statement: no counterexample among ``total`` (the 95% upper bound of their rate is shown)."""
    if total < 1:
        return Check(f"{label}: nothing to count [{tag}]", False)
    hi = wilson(int(count), int(total))[1]
    return Check(f"{label}: {count} of {total} (rate ≤ {fmt(hi)} at 95%) [{tag}]", count == 0)


def exists(label: str, count: int, total: int, tag: str) -> Check:
    """Something the paper reports must be seen at least once; if never, the verdict is *not observed*."""
    return Check(f"{label}: {count} of {total} [{tag}]", count > 0, failing="not observed")


def undecided(text: str) -> Check:
    return Check(text, None)


def settled(label: str, count: int, total: int, remedy: str) -> Check:
    """Almost all of ``total`` runs settled (converged) by the horizon. Runs still moving there are neither examples
    nor counterexamples, so too few settled is undecided — "run longer" (``remedy`` says how) — never a failure."""
    check = fraction(label, count, total, ">=", THRESHOLDS["almost-all"].value, "almost-all")
    return undecided(f"{check.text}: too few converged, run longer ({remedy})") if check.ok is False else check


def assumed(row: dict[str, str], alpha: float) -> bool:
    """Assumption 1 of the multistability results (λ1 > 0) and, for the map, the step bound α < 2/(|λ_d| − λ1), for
    a row of the stability study's counts at the map's step ``alpha``: the cases its checks count and its figures
    show."""
    return float(row["lambda_1"]) > 0 and (row["time"] != "discrete" or alpha < float(row["alpha_bound"]))


VERDICTS = ("reproduced", "differs", "not observed", "inconclusive")


def judge(checks: list[Check]) -> str:
    """The verdict of a claim from its checks (those holding by construction left out)."""
    checks = [c for c in checks if not c.construction]
    fails = [c for c in checks if c.ok is False]
    if fails:
        return "not observed" if all(c.failing == "not observed" for c in fails) else "differs"
    if any(c.ok is None for c in checks) or not checks:
        return "inconclusive"
    return "reproduced"


@dataclass
class Result:
    """jaxattn's numbers for one claim, the checks that decide it, a diagnosis computed from the run (or ''), and
    the run files they were read from."""

    value: str
    checks: list[Check]
    sources: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def verdict(self) -> str:
        return judge(self.checks)

    @property
    def why(self) -> str:
        text = "; ".join(f"{c.mark} {c.shown}" for c in self.checks)
        return f"{text}. {self.note}" if self.note else text
