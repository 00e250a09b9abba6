"""The claims the metastability study checks, judged from its tables with the project's verdicts
(:mod:`jaxattn.studies.verdicts`, as the reproductions page judges the other papers' claims)."""

from __future__ import annotations

import math

from jaxattn.studies.verdicts import THRESHOLDS, Check, compare, fraction, judge, undecided

#: the paper the claims come from, as the claims table cites it
PAPER = "Geshkovski, Koubbi, Polyanskiy & Rigollet (2024), Dynamic metastability in the self-attention model"
#: the largest decrease of 2βE between saved times read as none, by the dynamics' precision: the solver's error
#: (rtol 1e-7) on a quantity of order 1, far above round-off
NO_DECREASE = {"float64": 1e-6, "float32": 1e-4}


def claims(tables: dict, *, dtype: str = "float64") -> list[dict]:
    """The claims this study can check: ``claim``, ``number`` (what was measured), ``checks`` (each comparison
    with its mark: ✓ holds, ✗ fails, ? undecided at this sample size or horizon), ``verdict`` (from the checks
    alone, :func:`jaxattn.studies.verdicts.judge`: reproduced, differs, not observed or inconclusive) and
    ``source``. ``tables``: what :func:`run` returns, or :func:`load_tables` of a finished run. The claims are
    those of Geshkovski, Koubbi, Polyanskiy and Rigollet (2024, "Dynamic metastability in the self-attention
    model") as this project paraphrases them (not the paper's own statements); ``source`` says where each one
    comes from and what would need the paper's own text."""
    pts, fits = tables["points"], tables["fits"]
    rows = []
    ok_pts = [p for p in pts if p["conditions"] > p["solver_failures"]]

    def add(claim: str, source: str, number: str, checks: list[Check]) -> None:
        rows.append({"claim": claim, "number": number, "checks": "; ".join(f"{c.mark} {c.shown}" for c in checks),
                     "verdict": judge(checks), "source": source})

    # 1. the energy only increases (the flow is a gradient ascent of E in a weighted metric)
    worst = max((p["max_energy_decrease"] for p in ok_pts), default=math.nan)
    limit = NO_DECREASE.get(dtype, NO_DECREASE["float32"])  # any narrower precision: float32's
    add("E never decreases along the dynamics", "the study's derivation (dE/dt = sum_i (n^2 e^beta / Z_i) "
        "|P_{x_i} g_i|^2 >= 0 for C2); what the staircase rests on",
        f"largest decrease of 2*beta*E between saved times: {worst:.2e}",
        [compare("largest decrease of 2βE", worst, "<=", limit, f"the solver's error in {dtype}")]
        if math.isfinite(worst) else [undecided("no condition finished")])
    # 2. several clusters for a time growing exponentially with beta: the time to one cluster from the first
    # metastable plateau, and the dwell of the plateaus of k clusters, each against beta
    exp = [f for f in fits if f.get("model") == "exponential" and math.isfinite(f["value"])
           and math.isfinite(f["ci_low"])]
    checks: list[Check] = []
    for f in exp:
        what = f"n={f['n']} d={f['d']} {f['quantity']}"
        checks.append(compare(f"{what}: the rate's 95% lower end", f["ci_low"], ">", 0.0,
                              "the paper: growing with β"))
        # with four betas or more, the exponential must also fit better than a power law
        if len(str(f["betas_used"]).split()) >= 4:
            checks.append(compare(f"{what}: log residuals of the exponential fit", f["rss_exponential"], "<",
                                  f["rss_power"], "the power law's; the paper: exponentially"))
    if not exp:
        checks = [undecided("no (n, d) has three β with a median (of at least ten) within t1: horizon too short "
                            "for these β (raise --t1 or use smaller β)")]
    add("tokens stay near configurations of several clusters for a time growing exponentially with beta",
        f"{PAPER}, as this project paraphrases the claim (the exact statement, its constants and its setting need "
        "its text)",
        "; ".join(f"n={f['n']} d={f['d']} {f['quantity']}: e^({f['value']:.3g} beta), 95% [{f['ci_low']:.3g}, "
                  f"{f['ci_high']:.3g}] (betas {f['betas_used']}; log residuals: exponential "
                  f"{f['rss_exponential']:.2g}, power law {f['rss_power']:.2g})" for f in exp) or "no fit", checks)
    # 3. the staircase: one energy step per merge
    steps = sum(p["steps"] for p in ok_pts)
    merged = sum(p["steps_with_merge"] for p in ok_pts)
    one = sum(p["steps_one_merge"] for p in ok_pts)
    add("the energy climbs a staircase, one step per merge", f"{PAPER}, as this project paraphrases the claim (its "
        "time rescaling needs the paper's text: the study draws tau = ln(1 + t)/beta)",
        f"{merged} of {steps} energy steps after a metastable plateau end with fewer clusters ({one} with exactly "
        "one merge)",
        [fraction("energy steps after a metastable plateau that end with fewer clusters", merged, steps, ">=",
                  THRESHOLDS["almost-all"].value, "almost-all")] if steps else [undecided("no energy step")])
    # 4. saddle to saddle, with the single-cluster end states as a control (local maxima, not saddles)
    n_cls = sum(p["classified"] for p in ok_pts)
    n_sad = sum(p["strict_saddles"] for p in ok_pts)
    n_ctl = sum(p["controls"] for p in ok_pts)
    n_max = sum(p["control_maxima"] for p in ok_pts)
    checks = [fraction("metastable plateaus that are strict saddles", n_sad, n_cls, ">=",
                       THRESHOLDS["almost-all"].value, "almost-all")] if n_cls else [undecided("no metastable plateau")]
    if n_ctl:
        checks.append(fraction("control: single-cluster end states that are local maxima", n_max, n_ctl, ">=",
                               THRESHOLDS["almost-all"].value, "almost-all"))
    add("the dynamics passes from saddle to saddle (each plateau is a strict saddle of E)",
        f"{PAPER}, as this project paraphrases the claim",
        f"{n_sad} of {n_cls} metastable plateaus are strict saddles; control: {n_max} of {n_ctl} single-cluster end "
        "states are local maxima", checks)
    # 5. the number of metastable clusters grows with beta
    cl = [f for f in fits if f["quantity"] == "first_clusters" and math.isfinite(f["value"])]
    add("the number of metastable clusters grows with beta", f"{PAPER}; the law the paper states needs its text (the "
        "study's linearisation on the circle gives k* ~ sqrt(2 beta))",
        "; ".join(f"n={f['n']} d={f['d']}: clusters ~ beta^{f['value']:.3g} [{f['ci_low']:.3g}, {f['ci_high']:.3g}]"
                  for f in cl) or "no fit",
        [compare(f"n={f['n']} d={f['d']}: the exponent's 95% lower end", f["ci_low"], ">", 0.0,
                 "the paper: growing with β") for f in cl]
        or [undecided("fewer than two β with a metastable plateau")])
    # 6. collapse to one cluster in infinite time: not decidable at a finite horizon
    add("the tokens collapse to a single cluster in infinite time", PAPER,
        "fraction in one cluster at t1: " + ", ".join(f"beta={p['beta']:g} d={p['d']}: {p['single_at_t1']:.2f}"
                                                      for p in ok_pts),
        [undecided("a finite horizon cannot show a limit")])
    return rows
