"""The claims of the four papers and how each is judged from the runs (used by ``scripts/reproduce.py``).

Every claim's ``measure(run_dir)`` reads the run's CSV files and returns a :class:`~jaxattn.studies.verdicts.Result`:
what jaxattn measured and a list of checks — comparisons of measured numbers with the paper's statement, each of
which can fail — judged by the verdicts every study's claims use (:mod:`jaxattn.studies.verdicts`: the checks, the
verdict from them, the named thresholds the page lists). The text that explains a verdict is assembled from the
checks and from diagnoses computed on the runs (rates, plateaus), never written by hand.
"""

from __future__ import annotations

import csv
import inspect
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jaxattn.analysis.stats import wilson
from jaxattn.studies.cluster_checks import high_dim_summary
from jaxattn.studies.verdicts import (
    OPS,
    SHOW,
    Check,
    Result,
    T,
    assumed,
    below,
    by_construction,
    ci,
    compare,
    exists,
    fmt,
    fraction,
    none_of,
    settled,
    undecided,
)


# ------------------------------------------------------------------------------------------ reading
def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(x: str | float) -> float:
    return float(x)


def truth(x: str | bool) -> bool:
    return x is True or str(x) == "True"


def config(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    return json.loads(path.read_text()) if path.exists() else {}


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    where: str  # figure, theorem or page of the paper
    statement: str
    run: str
    measure: Callable[[Path], Result]
    figure: str = ""  # a PNG of the run shown next to the row


# ------------------------------------------------------------------------------------------ statistics
def spearman(x, y) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    rx = _ranks(np.asarray(x, float))
    ry = _ranks(np.asarray(y, float))
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="mergesort")
    r = np.empty(len(a))
    r[order] = np.arange(len(a), dtype=float)
    for v in np.unique(a):  # ties share their mean rank
        r[a == v] = r[a == v].mean()
    return r


def increasing_p(x, y, draws: int = 20000) -> float:
    """One-sided p-value of an increasing monotone relation of ``y`` with ``x``: the share of permutations of ``y``
    whose Spearman correlation is at least the observed one (every permutation up to 8 points, else ``draws``
    random ones from a fixed seed)."""
    y = np.asarray(y, float)
    obs = spearman(x, y)
    if len(y) <= 8:
        perms = (np.asarray(p) for p in itertools.permutations(y))
        stats = [spearman(x, p) for p in perms]
    else:
        rng = np.random.default_rng(0)
        stats = [spearman(x, rng.permutation(y)) for _ in range(draws)]
    return float(np.mean(np.asarray(stats) >= obs - 1e-12))


def no_growth(label: str, steps, values) -> Check:
    """"Does not grow with the layer index": fails on a significant increasing trend."""
    r, p = spearman(steps, values), increasing_p(steps, values)
    return Check(f"{label}: Spearman {fmt(r)} with the layer, one-sided p = {fmt(p)} ≥ {fmt(T('significance'))} "
                 "[significance]", p >= T("significance"))


def grows_with(label: str, x, y) -> Check:
    """"y grows with x": holds on a significant increasing trend, fails on a non-positive correlation, undecided
    between."""
    r, p = spearman(x, y), increasing_p(x, y)
    ok = True if p < T("significance") else (False if r <= 0 else None)
    return Check(f"{label}: Spearman {fmt(r)}, one-sided p = {fmt(p)} < {fmt(T('significance'))} [significance]", ok)


#: the consensus paper's horizon in passes (its code runs 1000-2000): the plateau rate is 5% per quarter of it
PAPER_PASSES = 1000


def decay(label: str, means: list[float], finals: list[float], layers_per_step: int = 1, unit: str = "layer",
          tolerance: str = "consensus", per: int | None = None) -> Check:
    """A measure that should decay to 0 (``means``: its mean at every pass boundary or saved time; ``finals``: every
    prompt's last value). Holds when every prompt ends below the consensus tolerance; otherwise the last quarter
    of the run (at least two points) decides between a plateau (fails) and a decay still under way at the
    horizon (undecided), with the mean's rate and how far the largest prompt would be from the tolerance at that
    rate (the mean itself can be below it while a prompt is not). A plateau is a mean falling by less than
    ``T("plateau")`` per ``per`` points at its rate over that quarter (``None``: over the quarter itself)."""
    tol = T(tolerance)
    above = sum(f >= tol or not math.isfinite(f) for f in finals)
    blown = sum(not math.isfinite(f) for f in finals)
    m = np.asarray(means, float)
    base = (f"{label}: {len(finals) - above}/{len(finals)} below {fmt(tol)} [{tolerance}]"
            + (f" ({blown} not finite)" if blown else ""))
    if above == 0:
        return Check(base, True)
    if len(m) < 3:
        return Check(f"{base}; mean {fmt(m[-1])}; too few points to tell a plateau from a decay", None)
    k = max(2, len(m) // 4)
    a, b = m[-k - 1], m[-1]
    if not (a > 0 and b > 0):
        return Check(f"{base}; mean {fmt(b)}", False)
    drop = 1 - b / a
    rate = math.log(b / a) / (k * layers_per_step)
    behind = [f for f in finals if math.isfinite(f) and f >= tol]  # the finite prompts still above the tolerance
    worst = max(behind) if behind else math.inf
    need = math.log(tol / worst) / rate if rate < 0 and behind else math.inf
    at = (f"the largest prompt ({fmt(worst)}) at the tolerance about {fmt(need)} {unit}s further at that rate"
          if math.isfinite(need) else "")
    # the largest fall per window of k points that still counts as a plateau: T("plateau") per `per` points
    stall = T("plateau") if per is None else 1 - (1 - T("plateau")) ** (k / per)
    if drop < stall:
        at = f"; {at}" if at else ""
        moved = f"fell by {fmt(100 * drop)}%" if drop >= 0 else f"rose by {fmt(-100 * drop)}%"
        return Check(f"{base}; plateau: the mean {moved} over the last {k * layers_per_step} "
                     f"{unit}s (mean {fmt(b)}; a plateau: a fall under {fmt(100 * stall)}% over these {unit}s){at} "
                     "[plateau]", False)
    return Check(f"{base}; still decaying at the horizon: rate {fmt(rate)} per {unit} over the last "
                 f"{k * layers_per_step} {unit}s (a fall of {fmt(100 * drop)}%, a plateau under {fmt(100 * stall)}%)"
                 + (f", {at}" if at else ""), None)


def share(label: str, count: int, total: int, op: str, threshold: float, tag: str) -> Check:
    """A share of a handful of items (layers, settings) against a threshold: no sampling interval."""
    ok = bool(total) and bool(OPS[op](count / total, threshold))
    return Check(f"{label} in {count}/{total} {SHOW[op]} {fmt(threshold)} [{tag}]", ok)


def lower_bound(p: float, total: int) -> float:
    """The 95% Wilson lower bound of a fraction ``p`` of ``total`` tokens."""
    return wilson(round(p * total), total)[0]


# ------------------------------------------------------------------------------------------ power method
def _main_layers(d: Path) -> list[dict[str, str]]:
    return [r for r in rows(d / "layers.csv") if r["run"] == "main"]


def _tokens(d: Path, cap: int | None = None) -> int:
    c = config(d).get("config", {})
    m = int(c.get("num_init", 0))
    return (min(m, cap) if cap else m) * int(c.get("n", 0))


def pm_tilt(d: Path) -> Result:
    main, dirs = _main_layers(d), rows(d / "directions.csv")
    tokens, L = _tokens(d), len(main)
    pos = sum(num(r["drho1"]) > 0 for r in main)
    half = sum(lower_bound(num(r["P1"]), tokens) > 0.5 for r in main)
    beats = sum(num(r["drho1"]) > num(r["drhobar"]) for r in main)
    pbar = sum(lower_bound(num(r["P1"]), int(r["tokens"])) > num(r["Pbar"]) for r in dirs)
    a = T("almost-all-layers")
    checks = [share("Δρ1 > 0", pos, L, ">=", a, "almost-all-layers"),
              share("P1 > 1/2 (95% lower bound)", half, L, ">=", a, "almost-all-layers"),
              share("Δρ1 > Δρ̄", beats, L, ">=", a, "almost-all-layers"),
              share("P1 > P̄ (95% lower bound of P1)", pbar, len(dirs), ">=", a, "almost-all-layers")]
    per = ", ".join(f"{fmt(r['P1'])}/{fmt(r['Pbar'])}" for r in dirs)
    return Result(f"P1/P̄ per layer ({dirs[0]['directions']} eigendirections, {dirs[0]['tokens']} tokens): {per}; "
                  f"Δρ1/Δρ̄ per layer: {', '.join(fmt(r['drho1']) + '/' + fmt(r['drhobar']) for r in main)}",
                  checks, ["layers.csv", "directions.csv", "config.json"])


def pm_gap(d: Path) -> Result:
    sp = rows(d / "spectrum.csv")
    rel = [num(r["gap"]) / abs(complex(num(r["lambda1_re"]), num(r["lambda1_im"]))) for r in sp]
    small = sum(x < T("small-gap") for x in rel)
    cases = ",".join(sorted({r["case"] for r in sp}))
    return Result(f"gap/|λ1| per layer: {', '.join(fmt(x) for x in rel)} (cases {cases})",
                  [share(f"gap/|λ1| < {fmt(T('small-gap'))} [small-gap]", small, len(rel), ">", T("most"), "most")],
                  ["spectrum.csv"])


def pm_ffn(d: Path) -> Result:
    rs = rows(d / "layers.csv")
    main = [r for r in rs if r["run"] == "main"]
    ffn = [r for r in rs if r["run"] == "ffn_layernorm"]
    if not ffn:
        return Result("no FFN in this model", [Check("the model has an FFN to test", False)], ["layers.csv"])
    mean = lambda rr, k: float(np.mean([num(r[k]) for r in rr]))
    N = max(_tokens(d), 1)

    def se(rr, k):  # standard error of the mean over layers of the per-layer token means: the layers see the same
        # tokens, so their errors are not independent; the mean of the per-layer errors bounds it at any correlation
        var = ([num(r[k]) * (1 - num(r[k])) / N for r in rr] if k == "P1"  # a per-layer fraction of the tokens
               else [num(r[f"{k}_std"]) ** 2 / N for r in rr])
        return float(np.mean(np.sqrt(var)))

    checks = [below(f"mean {name} with FFN + LayerNorm − under D1 (95% interval over {N} tokens per layer)",
                    mean(ffn, k) - mean(main, k), math.hypot(se(ffn, k), se(main, k)), 0.0, "paper §5: degraded")
              for k, name in (("rho1", "ρ1"), ("drho1", "Δρ1"), ("P1", "P1"))]
    return Result("; ".join(f"mean {name} {fmt(mean(ffn, k))} with FFN + LayerNorm vs {fmt(mean(main, k))} under D1"
                            for k, name in (("rho1", "ρ1"), ("drho1", "Δρ1"), ("P1", "P1"))), checks, ["layers.csv"])


def pm_steer(d: Path) -> Result:
    ho = rows(d / "steering_heldout.csv")
    last = _main_layers(d)[-1]  # the layer the steering changes, unsteered
    lam1 = abs(complex(num(last["lambda1_re"]), num(last["lambda1_im"])))
    grid = sorted((r for r in ho if num(r["gamma"]) > 0), key=lambda r: num(r["gamma"]))
    need = T("order-of-magnitude") * lam1
    # the paper's setting: a steered gap of an order of magnitude over |λ1|, not the top of the grid
    at = next((r for r in grid if num(r["gap_after"]) >= need), None)
    if at is None:
        top = grid[-1]
        checks = [Check(f"the steered gap reaches {fmt(T('order-of-magnitude'))} |λ1| = {fmt(need)} on the γ grid: "
                        f"largest {fmt(top['gap_after'])} at γ = {fmt(top['gamma'])} [order-of-magnitude]", None)]
    else:
        g = fmt(at["gamma"])
        checks = [compare(f"mean alignment at γ = {g}", num(at["align_mean"]), ">=", T("perfect"), "perfect"),
                  fraction(f"tokens above {fmt(T('perfect'))} at γ = {g}", int(at["above_0.99"]), int(at["tokens"]),
                           ">=", T("almost-all"), "almost-all"),
                  # "always": the worst tokens too, not only most of them (the 1% quantile: 99 tokens in 100)
                  compare(f"1% quantile of the alignment at γ = {g}", num(at["align_q01"]), ">=", T("perfect"),
                          "perfect; the paper: “always”")]
    always = next((r for r in grid if num(r["align_q01"]) >= T("perfect")), None)
    reach = (f"the 1% quantile reaches {fmt(T('perfect'))} (the paper's “always”) from γ = {fmt(always['gamma'])}, a "
             f"steered gap of {fmt(num(always['gap_after']) / lam1)} |λ1|" if always else
             f"the 1% quantile stays below {fmt(T('perfect'))} up to γ = {fmt(grid[-1]['gamma'])}")
    below = [r for r in grid if at is not None and num(r["gamma"]) < num(at["gamma"])]
    bracket = (f" (the gain before it on the grid, γ = {fmt(below[-1]['gamma'])}, has a gap of "
               f"{fmt(below[-1]['gap_after'])}; the alignment rises with γ, so reading at the grid's gain past the "
               "threshold can only favour the paper)" if below else "")
    read = (f"Read at γ = {fmt(at['gamma'])}, the smallest gain of the grid whose steered gap {fmt(at['gap_after'])} "
            f"is at least {fmt(T('order-of-magnitude'))} |λ1| = {fmt(need)} [order-of-magnitude]{bracket}" if at
            else "")
    note = (f"{read}{'; ' if read else ''}{reach}. The 1% quantile by γ: "
            f"{', '.join(fmt(r['gamma']) + ': ' + fmt(r['align_q01']) for r in grid)}")
    return Result(f"held-out ({grid[0]['conditions']} conditions, {grid[0]['tokens']} tokens), unsteered |λ1| "
                  f"{fmt(lam1)}: " + "; ".join(f"γ = {fmt(r['gamma'])} (gap {fmt(r['gap_after'])}): mean "
                                               f"{fmt(r['align_mean'], 4)}, 1% quantile {fmt(r['align_q01'])}, above "
                                               f"0.99 {fmt(r['frac_above_0.99'])}" for r in ho),
                  checks, ["steering_heldout.csv", "layers.csv"], note)


def pm_shared(d: Path) -> Result:
    rs = rows(d / "layers.csv")
    pro = [r for r in rs if r["run"] == "prolonged"]
    main = [r for r in rs if r["run"] == "main"]
    case = rows(d / "spectrum.csv")[0]["case"]
    key, what = ("rho2", "ρ(2-D)") if case in ("2", "3") else ("rho1", "ρ1")
    end, depth = pro[-1], main[-1]
    checks = [compare(f"{what} after {len(pro)} steps", num(end[key]), ">=", T("perfect"), "perfect"),
              compare(f"mean diameter after {len(pro)} steps", num(end["diameter"]), "<=", T("consensus"),
                      "consensus"),
              compare(f"{what} prolonged − at the depth ({len(main)})", num(end[key]) - num(depth[key]), ">", 0.0,
                      "paper Fig. 6(c): improves when prolonged")]
    return Result(f"case {case}; {what} {fmt(depth[key])} at the depth {len(main)}, {fmt(end[key])} after {len(pro)} "
                  f"steps; mean diameter {fmt(end['diameter'])}", checks, ["layers.csv", "spectrum.csv"])


def random_direction_level(dim: int) -> tuple[float, float]:
    """Mean and standard deviation of ``|<x, u>| / ||x||`` for a fixed unit ``u`` and ``x`` uniform on the sphere of
    ``R^dim``: the alignment a direction the dynamics does not favour gets (mean ``Γ(d/2) / (√π Γ((d+1)/2))``, second
    moment ``1/d``)."""
    mean = math.exp(math.lgamma(dim / 2) - math.lgamma((dim + 1) / 2)) / math.sqrt(math.pi)
    return mean, math.sqrt(max(1.0 / dim - mean * mean, 0.0))


def pm_low(d: Path) -> Result:
    main = _main_layers(d)
    r1 = [num(r["rho1"]) for r in main]
    dim = int(config(d).get("model_dims", {}).get("d", 0))
    if dim:
        mean, sd = random_direction_level(dim)
        level = mean + T("random-level") * sd
        # "low" against what a direction the dynamics does not favour gets: a fixed 0.5 holds in d = 384 for any
        # model that does not align its tokens (a random direction gives a few hundredths there)
        low = compare(f"largest mean ρ1 over the layers against a random direction's {fmt(mean)} + "
                      f"{fmt(T('random-level'))} × {fmt(sd)} (d = {dim})", max(r1), "<", level, "random-level")
        ref = f"; a random direction: {fmt(mean)} ± {fmt(sd)}"
    else:
        low, ref = undecided("the model's dimension is not recorded: no random-direction level [random-level]"), ""
    checks = [low, no_growth("ρ1", range(len(r1)), r1)]
    return Result(f"mean ρ1 per layer: {', '.join(fmt(x) for x in r1)} (ρ̄: "
                  f"{', '.join(fmt(r['rhobar']) for r in main)}{ref})", checks, ["layers.csv", "config.json"])


def pm_phi(d: Path) -> Result:
    main = _main_layers(d)
    phi = [num(r["rho_phi"]) for r in main]
    excess = [p - num(r["rhobar"]) for p, r in zip(phi, main, strict=True)]  # the paper compares with ρ̄
    return Result(f"mean |<x, u1(Φ(k))>| per layer: {', '.join(fmt(x) for x in phi)}; minus ρ̄: "
                  f"{', '.join(fmt(x) for x in excess)}",
                  [no_growth("correlation with Φ's eigenvector minus ρ̄", range(len(excess)), excess)], ["layers.csv"])


def pm_gap_tilt(d: Path) -> Result:
    main = _main_layers(d)
    gap, tilt = [num(r["gap"]) for r in main], [num(r["drho1"]) for r in main]
    return Result("(gap, Δρ1) per layer: " + ", ".join(f"({fmt(g)}, {fmt(t)})" for g, t in zip(gap, tilt, strict=True)),
                  [grows_with("Δρ1 against the spectral gap", gap, tilt)], ["layers.csv"])


def pm_precompensate(d: Path) -> Result:
    st = rows(d / "steering.csv")
    pre = [r for r in st if r["dynamics"] == "FFN+LN, precompensated"]
    raw = [r for r in st if r["dynamics"] == "FFN+LN, steer u"]
    plus = {r["gamma"]: r for r in st if r["dynamics"] == "FFN+LN, precompensated +u' only"}
    if not pre:
        return Result("no FFN in this model", [Check("the model has an FFN to precompensate", False)],
                      ["steering.csv"])
    p, r = max(pre, key=lambda x: num(x["gamma"])), max(raw, key=lambda x: num(x["gamma"]))
    g = fmt(p["gamma"])
    tokens = _tokens(d, 1000)
    # both signs precompensated (a token is sent to +u' or −u', and FFN(−u') ≠ −FFN(u')); decided on the worst
    # tokens too, as PM4: a mean hides a bimodal end
    checks = [fraction(f"tokens above {fmt(T('perfect'))} along u, precompensated, γ = {g}",
                       round(num(p["frac_above_0.99"]) * tokens), tokens, ">=", T("almost-all"), "almost-all"),
              compare(f"1% quantile of the alignment, precompensated, γ = {g}", num(p["align_q01"]), ">=",
                      T("perfect"), "perfect; the paper: steering works"),
              compare("mean alignment precompensated − not", num(p["align_mean"]) - num(r["align_mean"]), ">", 0.0,
                      "paper §5: precompensation steers")]

    def sides(a):
        return (f"+u side {fmt(a['frac_plus'])} of the tokens, mean {fmt(a['align_mean_plus'], 4)}, 1% quantile "
                f"{fmt(a['align_q01_plus'])}; −u side mean {fmt(a['align_mean_minus'], 4)}, 1% quantile "
                f"{fmt(a['align_q01_minus'])}")

    q = plus.get(p["gamma"])
    note = (f"At γ = {g}, by the side of u the tokens end on: precompensated at both signs: {sides(p)}; at +u' only: "
            f"{sides(q)}; not precompensated: {sides(r)}" if q else "")
    return Result("; ".join(f"γ = {fmt(a['gamma'])}: precompensated {fmt(a['align_mean'], 4)} (1% quantile "
                            f"{fmt(a['align_q01'])}, above 0.99: {fmt(a['frac_above_0.99'])}), not "
                            f"{fmt(b['align_mean'], 4)}" for a, b in zip(pre, raw, strict=True)),
                  checks, ["steering.csv", "config.json"], note)


def _steps_to_stay(rs: list[dict[str, str]], key: str, level: float) -> float:
    """The first step after which ``key`` stays at or above ``level`` (inf if it never does)."""
    vals = [num(r[key]) for r in rs]
    below = [i for i, v in enumerate(vals) if v < level]
    if not below:
        return float(rs[0]["step"])
    return float(rs[below[-1] + 1]["step"]) if below[-1] + 1 < len(rs) else math.inf


def pm_case3(d: Path) -> Result:
    rs = rows(d / "case3.csv")
    near = [r for r in rs if r["model"] == "near_degenerate"]
    ctl = [r for r in rs if r["model"] == "control"]
    depth = int(near[0]["depth"])
    at = next(r for r in near if int(r["step"]) == depth)
    s_near, s_ctl = (_steps_to_stay(x, "rho1", T("perfect")) for x in (near, ctl))
    checks = [compare(f"ρ(span(v1, v2)) at the depth {depth}", num(at["rho2"]), ">=", T("perfect"), "perfect"),
              compare(f"ρ1 at the depth {depth}", num(at["rho1"]), "<", T("perfect"), "perfect"),
              compare("steps until ρ1 stays ≥ 0.99, near-degenerate − control", s_near - s_ctl, ">", 0.0,
                      "paper §2.1.3: slow"),
              compare(f"steps until ρ1 stays ≥ 0.99 (near-degenerate, of {near[-1]['step']})", s_near, "<", math.inf,
                      "paper: converges when prolonged")]
    return Result(f"λ1 {fmt(near[0]['lambda1'])}, λ2 {fmt(near[0]['lambda2'])}, |<v1, v2>| {fmt(near[0]['v1_v2'])}: "
                  f"at the depth ρ1 {fmt(at['rho1'])}, ρ(2-D) {fmt(at['rho2'])}; ρ1 stays ≥ 0.99 from step "
                  f"{fmt(s_near)} (control, λ2 {fmt(ctl[0]['lambda2'])} and v2 ⊥ v1: step {fmt(s_ctl)})",
                  checks, ["case3.csv"])


def pm_theorem1(d: Path) -> Result:
    lin, ends = rows(d / "theorem1.csv"), rows(d / "theorem1_ends.csv")
    stable = [r for r in lin if r["status"] == "stable"]
    err = max(abs(num(r["radius"]) - num(r["radius_closed_form"])) for r in lin)
    ks = [int(r["k"]) for r in stable]
    checks = [Check(f"stable consensus points ±v_k: k ∈ {{{', '.join(map(str, ks))}}} = {{1}} [paper Theorem 1: the "
                    "principal one only]", ks == [1]),
              compare("largest |Jacobian radius − closed form (Lemma 3)|", err, "<", T("closed-form"), "closed-form")]
    for name in dict.fromkeys(r["model"] for r in ends):
        rr = [r for r in ends if r["model"] == name]
        v1 = sum(int(r["count"]) for r in rr if r["end"] == "consensus v1")
        checks.append(fraction(f"{name}: starts ending at consensus ±v1", v1, int(rr[0]["starts"]), ">=",
                               T("almost-all"), "almost-all"))
    return Result(f"{lin[0]['heads']} heads, d {lin[0]['d']}, n {lin[0]['n']}: intrinsic spectral radius at ±v_k "
                  + ", ".join(f"k={r['k']}: {fmt(r['radius'], 4)} ({r['status']})" for r in lin) + "; ends: "
                  + "; ".join(f"{r['model']} {r['end']} {ci(r['fraction'], r['ci_low'], r['ci_high'])}" for r in ends),
                  checks, ["theorem1.csv", "theorem1_ends.csv"])


# ------------------------------------------------------------------------------------------ power method: lemmas
def pm_attn_rank(d: Path) -> Result:
    from jaxattn.studies.pm_lemmas import LEMMA9_KINDS, SETTLED, expected_rank

    rs = rows(d / "lemma9.csv")
    checks, parts = [], []
    # the lemma's classes; end states still moving are not equilibria, and a polygonal one is none of its classes
    left = _hist(r["kind"] for r in rs if r["kind"] not in LEMMA9_KINDS)
    rs = [r for r in rs if r["kind"] in LEMMA9_KINDS]
    for source, label in (("end state", "end states of random starts"),
                          ("equilibrium ±v_k", "consensus and bipartite equilibria at ±v_k")):
        mine = [r for r in rs if r["source"] == source]
        off = sum(int(r["rank"]) != expected_rank(r["kind"], int(r["clusters"])) for r in mine)
        checks.append(none_of(f"{label} whose attention rank is not 1 (consensus), 2 (bipartite) or m (m clusters)",
                              off, len(mine), "the paper: Lemma 9"))
        kinds = _hist((r["kind"], int(r["clusters"]), int(r["rank"])) for r in mine)
        parts.append(f"{label}: " + ", ".join(f"{k} ({m} cluster{'s' if m > 1 else ''}) rank {a}: {c}"
                                              for (k, m, a), c in sorted(kinds.items())))
    ends = [r for r in rs if r["source"] == "end state"]
    checks.append(exists("end states at a bipartite consensus (the rank-2 case met by the dynamics)",
                         sum(r["kind"] == "bipartite" for r in ends), len(ends), "the paper: Supp. D.3"))
    if left:
        parts.append("left out: " + ", ".join(f"{c} end states {k}" for k, c in sorted(left.items()))
                     + f" (settled: a step residual of at most {fmt(SETTLED)}; the lemma is about equilibria)")
    return Result("; ".join(parts), checks, ["lemma9.csv"])


def pm_lyapunov(d: Path) -> Result:
    rs = rows(d / "lyapunov.csv")
    checks, parts = [], []
    for system in dict.fromkeys(r["system"] for r in rs):
        mine = [r for r in rs if r["system"] == system]
        r0 = mine[0]
        lam1, lamd = num(r0["lambda_1"]), num(r0["lambda_d"])
        psd, bound = num(r0["alpha_psd"]), num(r0["alpha_bound"])
        flow = [r for r in mine if r["run"] == "flow"]
        small = [r for r in mine if r["run"] != "flow" and num(r["alpha"]) <= psd + 1e-12]
        large = [r for r in mine if r["run"] != "flow" and num(r["alpha"]) > bound]
        # the map's bound is jaxattn's reading (the paper's formula was lost): I + αV positive semi-definite
        for label, group, tag in (("along the flow", flow, "the paper: Lemma 1"),
                                  (f"along the map, α ≤ 1/|λd| = {fmt(psd)} (I + αV positive semi-definite)", small,
                                   "the paper: Lemma 7, for a bounded α")):
            if not group:
                checks.append(undecided(f"{system}: no run {label} [{tag}]"))
                continue
            n = sum(int(r["conditions"]) for r in group)
            if any(not truth(r["solver_ok"]) for r in group):
                checks.append(Check(f"{system}: a solve {label} failed [{tag}]", False))
                continue
            # a rise above round-off: T("machine") times W's range, counted by the study (rise_tol)
            checks.append(none_of(f"{system}: conditions where W rises by more than {fmt(T('machine'))} × (λ1 − λd) "
                                  f"[machine] {label}", sum(int(r["rises"]) for r in group), n, tag))
        if large:
            hit = sum(int(r["rises"]) for r in large)
            n = sum(int(r["conditions"]) for r in large)
            checks.append(Check(f"{system}: beyond the step bound 2/(|λd| − λ1) = {fmt(bound)}, conditions where W "
                                f"rises: {hit} of {n} [the paper: Lemma 7 bounds α, and past this bound (the principal "
                                "consensus's stability limit) the map leaves v1]",
                                hit > 0))
        parts.append(f"{system} (λ1 {fmt(lam1)}, λd {fmt(lamd)}): " + "; ".join(
            f"{r['run']}: largest rise {fmt(r['largest_rise'])} ({r['rises']}/{r['conditions']} conditions rise), W "
            f"{fmt(r['W_start_mean'])} → {fmt(r['W_end_mean'])}" for r in mine))
    return Result("; ".join(parts), checks, ["lyapunov.csv"])


def pm_steered_spectrum(d: Path) -> Result:
    rs = rows(d / "steered_spectrum.csv")
    grid = sorted((r for r in rs if r["test"] == "random u"), key=lambda r: num(r["gamma"]))
    exact = [r for r in rs if r["test"] == "eigenvector"]
    lam1 = num(grid[0]["lambda1_before"])
    need = T("order-of-magnitude") * lam1
    at = next((r for r in grid if num(r["gap_after"]) >= need), None)  # the paper's gap, as PM4
    if at is None:
        checks = [undecided(f"the steered gap reaches {fmt(T('order-of-magnitude'))} |λ1| = {fmt(need)} on the γ grid:"
                            f" largest {fmt(grid[-1]['gap_after'])} [order-of-magnitude]")]
    else:
        g = fmt(at["gamma"])
        checks = [compare(f"|<v1', u>| at γ = {g}", num(at["align_u"]), ">=", T("perfect"), "perfect"),
                  compare(f"|λ1' − β wᵀu| / β wᵀu at γ = {g}", num(at["rel_error"]), "<=", T("about"), "about")]
    worst = max((num(r["spectrum_distance"]) for r in exact), default=math.nan)
    checks.append(compare(f"u, w right and left eigenvectors of λ_j ({len({r['j'] for r in exact})} real eigenvalues × "
                          f"{len({r['gamma'] for r in exact})} gains): largest distance of the steered spectrum to F's "
                          "with λ_j + β, over the largest |λ|", worst, "<", T("closed-form"), "closed-form")
                  if exact else undecided("no real eigenvalue to steer exactly [closed-form]"))
    note = (f"Read at γ = {fmt(at['gamma'])}, the smallest gain of the grid whose steered gap {fmt(at['gap_after'])} "
            f"is at least {fmt(T('order-of-magnitude'))} |λ1| = {fmt(need)} [order-of-magnitude]" if at else "")
    return Result(f"unsteered |λ1| {fmt(lam1)}, random unit u = w: " + "; ".join(
        f"γ = {fmt(r['gamma'])}: λ1' {fmt(r['lambda1_after_re'], 5)} vs β {fmt(r['beta'], 5)} (relative error "
        f"{fmt(r['rel_error'])}), |<v1', u>| {fmt(r['align_u'], 6)}, gap {fmt(r['gap_after'])}" for r in grid)
        + f"; eigenvectors of λ_j, j ∈ {{{', '.join(dict.fromkeys(r['j'] for r in exact))}}}: largest relative "
        f"distance {fmt(worst)}", checks, ["steered_spectrum.csv"], note)


# ------------------------------------------------------------------------------------------ consensus
def _end(d: Path, setting: str) -> list[dict[str, str]]:
    return [r for r in rows(d / "synthetic_end.csv") if r["setting"] == setting]


def _synthetic(d: Path, setting: str) -> list[dict[str, str]]:
    return [r for r in rows(d / "synthetic.csv") if r["setting"] == setting]


def co_hemisphere(d: Path) -> Result:
    rs, end = _synthetic(d, "hemisphere"), _end(d, "hemisphere")
    h = [num(r["hemisphere_min"]) for r in rs]
    drop = max([a - b for a, b in itertools.pairwise(h)] + [0.0])
    t1 = fmt(rs[-1]["t"])
    checks = [none_of(f"conditions not at consensus at t = {t1} (first-token measure ≥ {fmt(T('zero'))} [zero])",
                      sum(num(r["first_token_end"]) >= T("zero") for r in end), len(end), "the paper: Theorem 4.1"),
              compare("largest decrease of min_i <x_i, w> between saved times", drop, "<=", T("machine"), "machine")]
    return Result(f"mean first-token measure {fmt(rs[0]['first_token_mean'])} → {fmt(rs[-1]['first_token_mean'])} at "
                  f"t = {t1} ({len(end)} conditions); min_i <x_i, w> {fmt(h[0])} → {fmt(h[-1])}", checks,
                  ["synthetic.csv", "synthetic_end.csv"])


#: why the first token of a causal model with V = I cannot move: it attends to itself alone
FIRST_TOKEN = ("under causal attention the first token attends to itself alone, and with V = I its update is along "
               "itself, which the sphere's normalisation removes")


def co_causal(d: Path) -> Result:
    end = _end(d, "causal_two_heads")
    t1 = fmt(_synthetic(d, "causal_two_heads")[-1]["t"])
    moved = max(num(r["first_token_moved"]) for r in end)
    checks = [by_construction(none_of(f"conditions whose first token moved by more than {fmt(T('machine'))} [machine]",
                                      sum(num(r["first_token_moved"]) > T("machine") for r in end), len(end),
                                      "the paper: Theorem 5.1"), FIRST_TOKEN),
              none_of(f"conditions not at consensus at t = {t1} (≥ {fmt(T('zero'))} [zero])",
                      sum(num(r["first_token_end"]) >= T("zero") for r in end), len(end), "the paper: Theorem 5.1")]
    return Result(f"{len(end)} conditions: first token moved by at most {fmt(moved)}; largest first-token measure at "
                  f"t = {t1}: {fmt(max(num(r['first_token_end']) for r in end))}", checks, ["synthetic_end.csv"])


def co_symmetric(d: Path) -> Result:
    hemi, rand = _end(d, "causal_symmetric_V_hemisphere"), _end(d, "causal_symmetric_V")
    t1 = fmt(_synthetic(d, "causal_symmetric_V")[-1]["t"])
    split = sum(not truth(r["same_sign"]) for r in hemi)
    off = sum(num(r["min_abs_v1"]) < 1 - T("zero") for r in hemi)
    checks = [none_of("starts in v1's hemisphere ending split between +v1 and −v1", split, len(hemi),
                      "the paper: Theorem 5.2, one consensus"),
              none_of(f"starts in v1's hemisphere with a token off ±v1 at t = {t1} (|<x, v1>| < 1 − "
                      f"{fmt(T('zero'))} [zero])", off, len(hemi), "the paper: Theorem 5.2")]
    same = sum(truth(r["same_sign"]) for r in rand)
    return Result(f"starts in the hemisphere: {len(hemi) - split}/{len(hemi)} on one side, smallest |<x_i, v1>| "
                  f"{fmt(min(num(r['min_abs_v1']) for r in hemi), 6)}; uniformly random starts (beyond the theorem): "
                  f"{same}/{len(rand)} on one side", checks, ["synthetic_end.csv"])


def _pass_series(d: Path, run: str) -> tuple[list[float], list[float], int]:
    """Mean first-token measure over the prompts at every pass boundary, every prompt's last value, the depth."""
    rs = [r for r in rows(d / "prompts.csv") if r["run"] == run]
    passes = sorted({int(r["pass"]) for r in rs})
    means = [float(np.nanmean([num(r["first_token"]) for r in rs if int(r["pass"]) == p])) for p in passes]
    finals = [num(r["first_token"]) for r in rs if int(r["pass"]) == passes[-1]]
    depth = int(rs[1]["layer"]) if len(passes) > 1 else 1
    return means, finals, depth


def _decays(d: Path, runs: list[tuple[str, str]]) -> Result:
    checks, parts = [], []
    for run, label in runs:
        means, finals, depth = _pass_series(d, run)
        checks.append(decay(label, means, finals, depth, per=PAPER_PASSES // 4))  # means: one per pass
        parts.append(f"{label}: {fmt(means[0])} → {fmt(means[-1])} after {(len(means) - 1) * depth} layers "
                     f"({len(finals)} prompts, largest {fmt(float(np.nanmax(finals)))})")
    return Result("; ".join(parts), checks, ["prompts.csv"])


def _passes(*runs: tuple[str, str]) -> Callable[[Path], Result]:
    return lambda d: _decays(d, list(runs))


#: the four runs of a paper architecture with random weights (transformers' initialisation): its own weights every
#: pass are the paper's random periodic ones
_RANDOM_PASSES = _passes(("ffn_periodic", "FFN, random periodic"), ("no_ffn_periodic", "no FFN, random periodic"),
                         ("ffn_redrawn", "FFN, random aperiodic"), ("no_ffn_redrawn", "no FFN, random aperiodic"))


def _ten_percent(d: Path, run: str) -> dict[int, float]:
    """Every prompt's first layer at which its first-token measure is at most ``T("rate-level")`` (10%) of its
    start (inf: never)."""
    rs = [r for r in rows(d / "prompts.csv") if r["run"] == run]
    out: dict[int, float] = {}
    for p in sorted({int(r["prompt"]) for r in rs}):
        mine = sorted((r for r in rs if int(r["prompt"]) == p), key=lambda r: int(r["layer"]))
        start = num(mine[0]["first_token"])
        out[p] = next((float(r["layer"]) for r in mine if num(r["first_token"]) <= T("rate-level") * start),
                      math.inf)
    return out


def co_rates(d: Path) -> Result:
    pairs = [("no_ffn_redrawn", "ffn_redrawn", "random aperiodic: without the FFN faster than with it",
              "paper §6.2, Figs. 9–10"),
             ("no_ffn_random_periodic", "ffn_random_periodic", "random periodic: without the FFN faster than with it",
              "paper §6.2, Figs. 9–10"),
             ("no_ffn_periodic", "no_ffn_redrawn", "without the FFN: trained faster than random aperiodic",
              "paper §6.2: faster with pretrained"),
             ("ffn_periodic", "ffn_redrawn", "with the FFN: trained faster than random aperiodic",
              "paper §6.2: faster with pretrained"),
             ("no_ffn_periodic", "no_ffn_random_periodic", "without the FFN: trained faster than random periodic",
              "paper §6.2: faster with pretrained")]
    have = {r["run"] for r in rows(d / "summary.csv")}
    checks, parts = [], []
    for fast, slow, label, tag in pairs:
        if fast not in have or slow not in have:
            continue
        a, b = _ten_percent(d, fast), _ten_percent(d, slow)
        wins = sum(a[p] < b[p] for p in a)
        checks.append(fraction(f"{label}: prompts reaching 10% of their start in fewer layers", wins, len(a), ">",
                               T("most"), f"most; {tag}"))
        med = lambda x: float(np.median(list(x.values())))
        parts.append(f"layers to 10% (median) {fast} {fmt(med(a))}, {slow} {fmt(med(b))}")
    return Result("; ".join(parts), checks, ["prompts.csv", "summary.csv"])


def co_gpt2_like(d: Path) -> Result:
    rs, end = _synthetic(d, "causal_gpt2_like"), _end(d, "causal_gpt2_like")
    moved = sum(num(r["first_token_moved"]) > T("machine") for r in end)
    checks = [by_construction(none_of(f"conditions whose first token moved by more than {fmt(T('machine'))} "
                                      "[machine]", moved, len(end), "the paper: Theorem 5.1"), FIRST_TOKEN),
              decay("first-token measure", [num(r["first_token_mean"]) for r in rs],
                    [num(r["first_token_end"]) for r in end], unit="saved time", tolerance="consensus")]
    c = config(d).get("config", {})
    n, dim = c.get("gpt2_like_n"), c.get("gpt2_like_d")
    return Result(f"{len(end)} conditions of {n} tokens in d = {dim}, two heads, a new weight set every unit of time: "
                  f"mean first-token measure {fmt(rs[0]['first_token_mean'])} → {fmt(rs[-1]['first_token_mean'])} at "
                  f"t = {fmt(rs[-1]['t'])}", checks, ["synthetic.csv", "synthetic_end.csv"])


# ------------------------------------------------------------------------------------------ consensus: theorems
def _count(rs: list[dict[str, str]], key: str) -> int:
    return sum(int(r[key]) for r in rs)


def co_potential(d: Path) -> Result:
    from jaxattn.studies.co_theorems import SETTINGS

    rs = rows(d / "potential.csv")
    theorem = [r for r in rs if r["setting"] == "theorem"]
    checks, parts = [], []
    # the paper's attention is the softmax; the unnormalised kernel (a gradient flow in the constant metric) is
    # jaxattn's extension of Lemma 3.2: its numbers are shown, not judged
    for kernel in ("softmax", "unnormalised"):
        mine = [r for r in theorem if r["attention"] == kernel]
        if kernel == "softmax":
            tag = "the paper: Theorem 3.1, a gradient flow in the metric weighted by the row normalisers"
            if not mine or any(not truth(r["solver_ok"]) for r in mine):
                checks.append(Check(f"softmax: a solve failed or none ran [{tag}]", False))
                continue
            # a fall above round-off: T("machine") of E itself between two saved times, counted by the study
            checks.append(none_of(f"softmax: conditions where E falls by more than {fmt(T('machine'))} [machine] of "
                                  "itself between saved times", _count(mine, "decreases"),
                                  _count(mine, "conditions"), tag))
        if mine:
            parts.append(f"{kernel}{' (jaxattn’s extension, not judged)' if kernel != 'softmax' else ''}: "
                         f"{_count(mine, 'conditions')} conditions, E fell in {_count(mine, 'decreases')}, largest "
                         f"relative fall {fmt(max(num(r['largest_fall']) for r in mine))}, E(t1)/E(0) − 1 mean "
                         f"{fmt(float(np.mean([num(r['rise_mean']) for r in mine])))} (smallest "
                         f"{fmt(min(num(r['rise_min']) for r in mine))})")
    hit = {s: [r for r in rs if r["setting"] == s] for s in SETTINGS[1:]}
    shown = "; ".join(f"{s.removeprefix('control: ')}: {_count(c, 'decreases')} of {_count(c, 'conditions')} "
                      f"(largest fall {fmt(max((num(r['largest_fall']) for r in c), default=math.nan))})"
                      for s, c in hit.items())
    # a control without a fall says nothing against the paper: the check's power is then not shown (undecided)
    power = all(_count(c, "decreases") > 0 for c in hit.values())
    checks.append(Check(f"controls with the hypothesis broken, conditions where E falls — {shown} [the paper: "
                        "Theorem 3.1 needs QᵀK symmetric and the tokens on its ellipsoid, without which E is no "
                        "potential of the flow: a fall there shows that the check above can fail]"
                        + ("" if power else "; a control without a fall leaves that unshown: run longer (or more "
                                            "starts)"), True if power else None))
    r0 = theorem[0] if theorem else {}
    sizes = ", ".join(dict.fromkeys(f"n {r['n']} d {r['d']}" for r in theorem))
    betas = ", ".join(dict.fromkeys(fmt(r["beta"]) for r in theorem))
    return Result(f"V = I, QᵀK symmetric positive definite, tokens on its ellipsoid ({sizes}; β ∈ {{{betas}}}; "
                  f"{r0.get('saved')} saved times to t = {r0.get('t1')}): " + "; ".join(parts), checks,
                  ["potential.csv"])


def co_varying_qk(d: Path) -> Result:
    end, series = rows(d / "theorem52.csv"), rows(d / "theorem52_series.csv")
    checks, parts = [], []
    for kind, label in (("piecewise", "Q, K piecewise constant, the next of a cycle of random sets every unit of time"),
                        ("smooth", "smooth Q(t) = Q0 D_q(t), K(t) = K0 D_k(t)")):
        e = [r for r in end if r["weights"] == kind]
        s = [r for r in series if r["weights"] == kind]
        away = sum(r["pole"] != "+v1" or not truth(r["solver_ok"]) for r in e)
        checks.append(none_of(f"{label}: starts in v1's hemisphere ending off the side of +v1 (at −v1, split, or a "
                              "failed solve)", away, len(e), "the paper: Theorem 5.2, the consensus at v1"))
        checks.append(decay(f"{label}: max_i (1 − <x_i, v1>)", [num(r["off_mean"]) for r in s],
                            [num(r["off_end"]) for r in e], unit="saved time", tolerance="zero"))
        parts.append(f"{label}: {len(e)} conditions, max_i (1 − <x_i, v1>) mean {fmt(s[0]['off_mean'])} → "
                     f"{fmt(s[-1]['off_mean'])} at t = {fmt(s[-1]['t'])} (largest {fmt(s[-1]['off_max'])}); "
                     f"{len(e) - away}/{len(e)} at +v1")
    e0 = end[0] if end else {}
    return Result(f"causal, one head, V constant with λ1 − λ2 = {fmt(e0.get('gap', math.nan))}, {e0.get('n')} tokens "
                  f"in d = {e0.get('d')} (CO3 holds Q, K constant): " + "; ".join(parts), checks,
                  ["theorem52.csv", "theorem52_series.csv"])


def co_varying_v(d: Path) -> Result:
    rs, series = rows(d / "theorem53.csv"), rows(d / "theorem53_series.csv")
    omegas = sorted({num(r["omega"]) for r in rs})
    at = {w: [r for r in rs if num(r["omega"]) == w] for w in omegas}
    mean = [float(np.mean([num(r["radius"]) for r in at[w]])) for w in omegas]
    still = at.get(0.0, [])
    lost = [r for r in rs if r["pole"] != "+v1" or not truth(r["solver_ok"])]
    # V constant: the radius decays to 0 (Theorem 5.2); a run too short for it is undecided, a plateau differs
    checks = [decay("ω = 0 (V constant): the radius max_i (1 − |<x_i, v1>|)",
                    [num(r["radius_mean"]) for r in series if num(r["omega"]) == 0.0],
                    [num(r["radius_end"]) for r in still], unit="saved time", tolerance="zero")
              if still else undecided("no run at ω = 0 [the paper: Theorem 5.3 with v1 constant]"),
              grows_with("mean radius over the last quarter against the speed ω of v1(t)", omegas, mean),
              none_of("starts in v1(0)'s hemisphere following −v1(t) or split over the last quarter (or a failed "
                      "solve)", len(lost), len(rs), "the paper: Theorem 5.3, the basin the open hemisphere of v1(0)")]
    gap = num(rs[0]["gap"])
    # the radius against a lone token's steady lag θ* in the rotating frame (sin 2θ* = 2ω/gap): jaxattn's closed form
    lag = [abs(num(r["radius"]) - num(r["first_lag_predicted"])) for r in rs
           if r["pole"] == "+v1" and math.isfinite(num(r["first_lag_predicted"]))]
    value = (f"V(t) = R(t) V0 R(t)ᵀ rotating v1 at speed ω, λ1 − λ2 = {fmt(gap)}, {rs[0]['n']} tokens in d = "
             f"{rs[0]['d']}, {len(still) or len(at[omegas[0]])} conditions per ω: mean radius "
             + ", ".join(f"ω = {fmt(w)}: {fmt(m)}" for w, m in zip(omegas, mean, strict=True))
             + "; following −v1(t) or split: " + ", ".join(f"ω = {fmt(w)}: {sum(r in lost for r in at[w])}"
                                                              for w in omegas))
    behind = sum(truth(r["first_behind"]) and num(r["first_start"]) < num(r["basin_edge"]) for r in lost)
    note = (f"The radius is a lone token's steady lag behind v1(t), 1 − cos θ* with sin 2θ* = 2ω/(λ1 − λ2), to within "
            f"{fmt(max(lag, default=math.nan))}: the tokens reach a consensus that trails the moving eigenvector. "
            + (f"Of the {len(lost)} starts lost to −v1(t), {behind} had their first token begin behind v1(t)'s motion "
               "and nearer the equator than the lag equation's unstable angle (<x_1(0), v1(0)> < sin θ*): for ω > 0 "
               "the basin is the hemisphere less a band along its equator whose width grows with ω/(λ1 − λ2)"
               if lost else ""))
    return Result(value, checks, ["theorem53.csv", "theorem53_series.csv"], note)


def pm_preserved(d: Path) -> Result:
    rs = [r for r in rows(d / "prompts.csv") if r["run"] == "ffn_periodic"]
    before = {int(r["prompt"]): num(r["cos_consensus"]) for r in rs if int(r["pass"]) == 0}
    after = {int(r["prompt"]): num(r["cos_consensus"]) for r in rs if int(r["pass"]) == 1}
    closer = sum(after[p] < before[p] for p in before)
    # one pass moving the tokens closer is not consensus preserved: decided, as CO5, over the repeated passes
    means, finals, depth = _pass_series(d, "ffn_periodic")
    return Result(f"all-pairs cosine measure 1 − mean cos(x_i, x_j), embedded prompts through the model with its FFN "
                  f"and affine LayerNorm: {fmt(np.mean(list(before.values())))} → "
                  f"{fmt(np.mean(list(after.values())))} in one forward pass (the paper's setting; {closer}/"
                  f"{len(before)} prompts end it closer to consensus); first-token measure over "
                  f"{len(means) - 1} passes: {fmt(means[0])} → {fmt(means[-1])}",
                  [decay("FFN and affine LayerNorm, trained weights, repeated passes (as CO5)", means, finals, depth,
                         per=PAPER_PASSES // 4)], ["prompts.csv"])


# ------------------------------------------------------------------------------------------ clusters
def cl_polytope(d: Path) -> Result:
    rs = [r for r in rows(d / "counts.csv") if num(r["beta"]) == 1.0] or rows(d / "counts.csv")
    allv = sum(int(r["all_at_vertices"]) for r in rs)
    ok = sum(int(r["conditions_ok"]) for r in rs)
    t1 = fmt(config(d).get("config", {}).get("t1", float("nan")))
    checks = [fraction(f"conditions with every token at a vertex at t = {t1} (tolerance "
                       f"{fmt(config(d).get('config', {}).get('tol', float('nan')))})", allv, ok, ">=",
                       T("almost-all"), "almost-all")]
    return Result("per (n, d): " + "; ".join(
        f"n {r['n']}, d {r['d']}: every token at a vertex in {r['all_at_vertices']}/{r['conditions_ok']}, tokens at "
        f"vertices {fmt(r['at_vertices_fraction'])}, {fmt(r['polytope_vertices_mean'])} vertices "
        f"({fmt(r['hull_vertices_mean'])} of the initial hull)" for r in rs), checks, ["counts.csv", "config.json"])


def cl_hyperplanes(d: Path) -> Result:
    rs = [r for r in rows(d / "hyperplanes.csv") if truth(r["solver_ok"])]
    counts = [int(r["hyperplanes"]) for r in rs]
    checks = [none_of("conditions with more than three hyperplanes", sum(c > 3 for c in counts), len(rs),
                      "the paper: Theorem 4.1")]
    hist = ", ".join(f"{k}: {counts.count(k)}" for k in sorted(set(counts)))
    return Result(f"hyperplanes per condition (count: conditions) {hist}; tolerance-free: "
                  f"{', '.join(f'{k}: {v}' for k, v in sorted(_hist(int(r['gap_hyperplanes']) for r in rs).items()))}",
                  checks, ["hyperplanes.csv"])


def cl_two_hyperplanes(d: Path) -> Result:
    rs = [r for r in rows(d / "hyperplanes.csv") if truth(r["solver_ok"])]
    two = sum(int(r["hyperplanes"]) <= 2 for r in rs)
    hist = _hist(int(r["hyperplanes"]) for r in rs)
    return Result(f"hyperplanes per condition of the good triple (count: conditions) "
                  f"{', '.join(f'{k}: {v}' for k, v in sorted(hist.items()))}",
                  [fraction("conditions whose tokens sit on at most two hyperplanes", two, len(rs), ">", T("most"),
                            "most; the paper: typically only two")], ["hyperplanes.csv"])


def cl_few_vertices(d: Path) -> Result:
    every = [r for r in rows(d / "counts.csv") if int(r["conditions_ok"]) > 0]
    rs = [r for r in every if num(r["beta"]) == 1.0] or every  # Theorem 3.1's setting, as CL1
    if not rs or "at_most_half_n_vertices" not in rs[0]:
        return Result("counts.csv of this run does not record the vertices per condition",
                      [undecided("conditions with at most n/2 vertices: not recorded by this run [half-n]")],
                      ["counts.csv"])
    few = sum(int(r["at_most_half_n_vertices"]) for r in rs)
    total = sum(int(r["conditions_ok"]) for r in rs)
    return Result("vertices of K (mean) per (n, d): " + "; ".join(
        f"n {r['n']}, d {r['d']}: {fmt(r['polytope_vertices_mean'])} ({r['at_most_half_n_vertices']}/"
        f"{r['conditions_ok']} conditions with at most n/2)" for r in rs),
        [fraction("conditions whose polytope K has at most n/2 vertices [half-n]", few, total, ">=", T("often"),
                  "often")], ["counts.csv"])


def _hist(xs) -> dict:
    out: dict = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def cl_boolean(d: Path) -> Result:
    last = rows(d / "boolean.csv")[-1]
    checks = [compare(f"largest distance to a Boolean matrix at t = {fmt(last['t'])}", num(last["distance_max"]), "<",
                      T("zero"), "zero"),
              compare("largest rank of P(t)", int(last["rank_max"]), "<=", 2, "paper Theorem 2.1: rank 1 or 2")]
    return Result(f"at t = {fmt(last['t'])}: distance to Boolean median {fmt(last['distance_median'])}, max "
                  f"{fmt(last['distance_max'])}; rank {last['rank_min']}–{last['rank_max']} ({last['conditions']} "
                  "conditions)", checks, ["boolean.csv"])


def cl_fourteen(d: Path) -> Result:
    g = [r for r in rows(d / "good_triples.csv") if r["ensemble"] == "ginibre"]
    top = next((r for r in g if int(r["d"]) == 128), None)  # the paper's 14% is stated at d = 128
    if top is None:
        return Result(f"no d = 128 among the run's dimensions ({', '.join(r['d'] for r in g)})",
                      [undecided("the good-triple fraction at d = 128: not in this run (--good-d) [about-14]")],
                      ["good_triples.csv"])
    lo, hi = num(top["ci_low"]), num(top["ci_high"])
    band = (0.14 - T("about-14"), 0.14 + T("about-14"))
    # inside the band: about 14%; outside it: not; overlapping an edge: the run cannot tell
    inside = True if band[0] <= lo and hi <= band[1] else (False if hi < band[0] or lo > band[1] else None)
    checks = [Check(f"d = {top['d']}: the 95% interval [{fmt(lo)}, {fmt(hi)}] lies in the band [{fmt(band[0])}, "
                    f"{fmt(band[1])}] [about-14]", inside)]
    return Result(f"d = {top['d']}: {ci(top['fraction'], lo, hi)} of {top['samples']} matrices", checks,
                  ["good_triples.csv"])


def cl_decreasing(d: Path) -> Result:
    g = sorted((r for r in rows(d / "good_triples.csv") if r["ensemble"] == "ginibre" and int(r["d"]) >= 2),
               key=lambda r: int(r["d"]))
    rises = sum(num(b["ci_low"]) > num(a["ci_high"]) for a, b in itertools.pairwise(g))
    first, last = g[0], g[-1]
    slope = (math.log(num(last["fraction"]) / num(first["fraction"])) / math.log(int(last["d"]) / int(first["d"]))
             if num(last["fraction"]) > 0 and num(first["fraction"]) > 0 else -math.inf)
    checks = [none_of("consecutive dimensions with a significant rise (disjoint intervals)", rises, len(g) - 1,
                      "the paper: vanishes as d grows"),
              Check(f"d = {last['d']} below d = {first['d']}: {fmt(last['ci_high'])} < {fmt(first['ci_low'])} "
                    "(upper and lower 95% bounds) [the paper: vanishes]", num(last["ci_high"]) < num(first["ci_low"])),
              compare("|log-log slope| between the smallest and largest d", abs(slope), "<", T("slowly"), "slowly")]
    return Result(", ".join(f"d {r['d']}: {fmt(r['fraction'])}" for r in g) + f"; log-log slope {fmt(slope)}", checks,
                  ["good_triples.csv"])


def _mixed(d: Path, setting: str) -> list[dict[str, str]]:
    return [r for r in rows(d / "mixed.csv") if r["setting"] == setting and truth(r["solver_ok"])]


#: why the rescaled tokens' divergence along a negative eigendirection is no evidence: the equation's form gives it
RESCALED = ("along a negative eigenvalue λ of V the rescaled flow z = e^{−tV} x reads ż_i = |λ| (z_i − Σ_j P_ij z_j): "
            "every token is pushed away from its attention-weighted average, so the extreme tokens never move inward "
            "and the tokens spread whatever the attention does (it stops only where P is the identity)")


def clusters_forming(label: str, ends: list[float], mids: list[float], dt: float, lam: float,
                     t1: float) -> Check:
    """Clusters whose tolerance-free gap (decades, ``ends`` at ``t1``, ``mids`` at ``t1 − dt``, one per condition)
    should reach ``T("clear-clusters")``, with the three outcomes :func:`decay` gives the consensus passes: reached
    (a fraction judged as :func:`fraction`, or one condition against the level); still forming (undecided, with the
    time by which enough conditions would reach the level, each at its own rate); a plateau (differs): so many
    conditions below the level have stalled that the fraction cannot be reached. A condition has stalled when its
    gap grows more slowly than ``T("cluster-rate")`` of the rate ``lam / ln 10`` that the smallest positive
    eigenvalue ``lam`` of V gives it (not growing at all, when ``lam`` is not recorded)."""
    need = T("clear-clusters")
    total = len(ends)
    if total == 1:
        first = compare(label, ends[0], ">=", need, "clear-clusters")
        share = 1.0
    else:
        first = fraction(f"{label} (gap ≥ {fmt(need)} decades [clear-clusters])", sum(g >= need for g in ends),
                         total, ">=", T("almost-all"), "almost-all")
        share = T("almost-all")
    if first.ok is not False or not (dt > 0 and all(math.isfinite(m) for m in mids)):
        return first  # reached (or undecided by its interval); or no earlier gap recorded: no rate to judge
    spectral = lam / math.log(10) if math.isfinite(lam) and lam > 0 else math.nan
    cut = T("cluster-rate") * spectral if math.isfinite(spectral) else 0.0
    clear = sum(e >= need for e in ends)
    rates = [(e, (e - m) / dt) for e, m in zip(ends, mids, strict=True) if e < need]
    stalled = sum(r <= cut for _, r in rates)
    times = sorted(t1 + (need - e) / r for e, r in rates if r > cut)
    pace = (f"of the {len(rates)} below, {stalled} stalled (gap growing at most {fmt(cut)} decades per unit time"
            + (f", {fmt(T('cluster-rate'))} of the rate λ/ln 10 = {fmt(spectral)} with λ = {fmt(lam)}"
               if math.isfinite(spectral) else "") + ") [cluster-rate]")
    wanted = math.ceil(share * total - 1e-9) - clear  # the conditions that still have to reach the level
    if len(times) < wanted:
        return Check(f"{first.text}; plateau: {pace}, too many for the level to be reached", False)
    return Check(f"{first.text}; still forming at t = {fmt(t1)}: {pace}; each at its own rate, enough reach "
                 f"{fmt(need)} decades about t = {fmt(times[wanted - 1])}", None)


def cl_mixed(d: Path) -> Result:
    checks, parts = [], []
    for setting, name in (("fig8", "Fig. 8"), ("fig7a", "Fig. 7(a)")):
        rs = _mixed(d, setting)
        if not rs:
            checks.append(Check(f"{name}: no condition solved [the paper: Figs. 7(a), 8]", False))
            continue
        grows = sum(num(r["negative_rate"]) > 0 and num(r["negative_spread_end"]) > num(r["negative_spread_0"])
                    for r in rs)
        t1 = num(rs[0].get("t1") or config(d).get("config", {}).get("t1", "nan"))
        lam = num(rs[0].get("lambda_min_positive") or "nan")
        mids = [num(r.get("gap_decades_mid") or "nan") for r in rs]  # runs made before it was recorded: no rate
        checks += [clusters_forming(f"{name}: conditions whose positive-eigenspace component forms clear clusters",
                                    [num(r["gap_decades"]) for r in rs], mids, t1 / 2, lam, t1),
                   by_construction(fraction(f"{name}: conditions whose spread along the negative eigendirection "
                                            "grows", grows, len(rs), ">=", T("almost-all"), "almost-all"), RESCALED)]
        med = lambda k, rs=rs: fmt(np.median([num(r[k]) for r in rs]))
        parts.append(f"{name} ({len(rs)} conditions, t = {fmt(t1)}): positive component in {med('gap_clusters')} "
                     "clusters (median; "
                     f"gap {med('gap_decades')} decades); spread along the negative eigendirection "
                     f"{med('negative_spread_0')} → {med('negative_spread_end')}, growth rate {med('negative_rate')} "
                     "(median)")
    return Result("; ".join(parts), checks, ["mixed.csv"])


def cl_theorem51(d: Path) -> Result:
    rs = _mixed(d, "fig8")
    inside = sum(int(r["inside"]) > 0 for r in rs)
    return Result(f"V = diag(1, 1, −1/2), {len(rs)} conditions: tokens whose (x1, x2) is at a vertex "
                  f"{fmt(np.mean([int(r['at_vertices']) for r in rs]))}, on ∂K or at 0 "
                  f"{fmt(np.mean([int(r['on_boundary_or_origin']) for r in rs]))} (mean per condition)",
                  [none_of("conditions with a token whose (x1, x2) lies strictly inside K, away from 0", inside,
                           len(rs), "the paper: Theorem 5.1")], ["mixed.csv"])


def cl_high_dim(d: Path) -> Result:
    rs = rows(d / "high_dim.csv")
    if not rs or "coordinate" not in rs[0]:
        return Result("no coordinate-by-coordinate Fig. 7(b) run (high_dim.csv)",
                      [undecided("the coordinates along positive eigenvalues: not measured by this run [the paper: "
                                 "Conjecture 4.2, at most three]")], ["high_dim.csv"])
    h = high_dim_summary(rs)
    t = fmt(h["t"])
    if h["pairs"]:
        checks = [clusters_forming("(condition, coordinate) pairs with λ t ≥ 3 ln 10 whose tokens form clear clusters "
                                   "along the coordinate", h["ends"], h["mids"], h["dt"], h["lambda_min_judged"],
                                   h["t"]),
                  none_of("of those clear, coordinates with more than three clusters", h["more_than_three"],
                          h["clear"], "the paper: Conjecture 4.2, at most three") if h["clear"] else
                  undecided(f"no coordinate's clusters clear by t = {t}: their number not yet judged (run longer) "
                            "[the paper: Conjecture 4.2, at most three]"),
                  none_of("conditions whose tokens, projected on the span of those coordinates, form more than three "
                          "clear clusters", h["joint_more_than_three"], h["joint_clear"],
                          "the paper: Conjecture 4.2, at most three parallel subspaces") if h["joint_clear"] else
                  undecided(f"the projection on the span of those coordinates: no clear clusters by t = {t} (run "
                            "longer) [the paper: Conjecture 4.2, at most three parallel subspaces]")]
    else:
        checks = [undecided(f"no coordinate has had the time to cluster by t = {t} (run longer) [clear-clusters]")]
    if h["failed"]:
        checks.append(undecided(f"{h['failed']} of {h['conditions']} conditions' solves failed (left out): run with a "
                                "larger step budget"))
    checks.append(by_construction(compare("spread along the negative eigenspace, end / start (median over "
                                          "conditions)", h["negative_growth"], ">", 1.0,
                                          "the paper: Fig. 7(b), diverge"), RESCALED))
    joint = ", ".join(fmt(g) for g in h["joint_gaps"])
    return Result(f"{h['conditions']} conditions (one random Q, K, V), n {h['n']}, d {h['d']}, t = {t}: {h['judged']} "
                  f"of the {h['positive_dims']} coordinates along positive eigenvalues have had the time to cluster by "
                  f"3 decades (λ ≥ {fmt(h['lambda_needed'])}; the smallest positive λ needs t = "
                  f"{fmt(h['longest_horizon'])}); of their {h['pairs']} (condition, coordinate) pairs {h['clear']} "
                  f"form clear clusters ({h['more_than_three']} of them more than three), and their variance over the "
                  f"tokens is {fmt(h['variance_ratio'])} of its start (median); projected on those coordinates' span "
                  f"the clusters' gap is {joint or '–'} decades per condition; the spread along the negative "
                  f"eigenspace grew {fmt(h['negative_growth'])}× (median)",
                  checks, ["high_dim.csv"])


def cl_collapse(d: Path) -> Result:
    rs = [r for r in rows(d / "collapse.csv") if truth(r["solver_ok"])]
    up = sum(not (num(r["max_norm_end"]) < num(r["max_norm_mid"]) < num(r["max_norm_0"])) for r in rs)
    exps = [num(r["exponent"]) for r in rs]
    checks = [none_of("conditions whose largest token norm does not shrink at every saved time", up, len(rs),
                      "the paper: Theorem C.5, collapse to 0"),
              compare("largest decay exponent over the second half (r ∝ t^p)", max(exps), "<", 0.0,
                      "the paper: → 0")]
    return Result(f"{len(rs)} conditions of {rs[0]['n']} tokens, d {rs[0]['d']}: largest norm "
                  f"{fmt(np.median([num(r['max_norm_0']) for r in rs]))} → "
                  f"{fmt(np.median([num(r['max_norm_end']) for r in rs]))} at t = {fmt(rs[0]['t1'])} (median), "
                  f"decaying like t^{fmt(np.median(exps))} (median exponent)", checks, ["collapse.csv"])


def cl_hull(d: Path) -> Result:
    rs = [r for r in rows(d / "hull.csv") if truth(r["solver_ok"])]
    out = sum(num(r["max_outside_relative"]) > T("machine") for r in rs)
    grew = sum(int(r["volume_increases"]) > 0 for r in rs)
    checks = [none_of(f"conditions with a token outside the previous hull by more than {fmt(T('machine'))} [machine]",
                      out, len(rs), "the paper: Proposition C.2"),
              none_of("conditions whose hull volume grew between saved times", grew, len(rs),
                      "the paper: Proposition C.2")]
    return Result(f"{len(rs)} conditions (d = 2 and 3): largest relative excursion "
                  f"{fmt(max(num(r['max_outside_relative']) for r in rs))}; volume "
                  f"{fmt(np.median([num(r['volume_0']) for r in rs]))} → "
                  f"{fmt(np.median([num(r['volume_end']) for r in rs]))} (median)", checks, ["hull.csv"])


def cl_rate(d: Path) -> Result:
    rs = [r for r in rows(d / "rate.csv") if int(r["points"]) >= 4]
    ns = sorted({int(r["n"]) for r in rs})
    worse = sum(num(r["r2"]) <= num(r["r2_single_exponential"]) for r in rs)
    slopes = {n: np.asarray([num(r["slope"]) for r in rs if int(r["n"]) == n]) for n in ns}
    med = {n: float(np.median(s)) for n, s in slopes.items()}
    iqr = float(np.median([np.subtract(*np.percentile(s, [75, 25])) for s in slopes.values()]))
    spread = max(med.values()) - min(med.values())
    total = len(rows(d / "rate.csv"))
    checks = [none_of("fitted conditions where log(−log dist) is no better a line than log dist", worse, len(rs),
                      "the paper: Theorem 2.1, doubly exponential"),
              compare(f"range of the median slopes over n (vs the median interquartile range {fmt(iqr)} within an n)",
                      spread, "<=", iqr, "the paper: Fig. 11, n has no effect"),
              fraction("conditions with a fit (≥ 4 points inside the window)", len(rs), total, ">=", T("almost-all"),
                       "almost-all")]
    return Result("median slope of log(−log dist(P(t), Boolean)) per n: "
                  + ", ".join(f"n = {n}: {fmt(m)}" for n, m in med.items())
                  + f"; median R² {fmt(np.median([num(r['r2']) for r in rs]))} (single exponential "
                    f"{fmt(np.median([num(r['r2_single_exponential']) for r in rs]))})", checks, ["rate.csv"])


def cl_qk(d: Path) -> Result:
    rs = [r for r in rows(d / "qk_cloud.csv") if truth(r["solver_ok"])]
    s = rows(d / "qk_summary.csv")[0]
    conv = [r for r in rs if num(r["boolean_distance_end"]) < T("zero")]
    low = sum(int(r["rank_end"]) <= 2 for r in conv)
    counter = len(conv) - low
    # a draw still moving at t1 is neither a rank ≤ 2 cluster nor a counterexample: the rank is judged among the
    # converged draws, and too few of those says "run longer" (undecided), not "differs"
    converged = settled(f"draws at a Boolean P(t1) (distance < {fmt(T('zero'))} [zero])", len(conv), len(rs),
                        "a larger t1")
    rank = (fraction("converged draws of rank ≤ 2", low, len(conv), ">=", T("almost-all"), "almost-all") if conv
            else undecided(f"no draw at a Boolean P(t1) (distance < {fmt(T('zero'))} [zero]): no final rank to judge"))
    checks = [rank, converged]
    return Result(f"{len(rs)} draws at t = {fmt(s['t1'])}: rank ≤ 2 and converged {low}; converged with rank > 2 "
                  f"(counterexamples) {counter}; not converged {len(rs) - len(conv)} (largest rank {s['rank_max']})",
                  checks, ["qk_cloud.csv", "qk_summary.csv"])


def _paper_setting_tol(s: dict[str, str]) -> float:
    """The vertex tolerance of the paper-setting run: recorded in its row, or (a run recorded before it was) the
    default of the function that made it."""
    if s.get("tol"):
        return num(s["tol"])
    from jaxattn.analysis.blowup import paper_setting

    return float(inspect.signature(paper_setting).parameters["tol"].default)


def cl_paper_setting(d: Path) -> Result:
    s = rows(d / "paper_setting.csv")[0]
    tol = _paper_setting_tol(s)
    checks = [fraction(f"draws with every token at a vertex at t = {fmt(s['t1'])} (tolerance {fmt(tol)})",
                       int(s["all_at_vertices"]), int(s["conditions_ok"]), ">=", T("almost-all"), "almost-all")]
    note = (f"At t = {fmt(s['t1'])} the tolerance-free cut finds {fmt(s['gap_clusters_mean'])} clusters per draw, "
            f"and grouping the tokens within distance {fmt(tol)} finds {fmt(s['clusters_mean'])} groups (of "
            f"{s['n']} tokens, means over the draws)")
    return Result(f"{s['draws']} draws of {s['n']} tokens: tokens at vertices {fmt(s['at_vertices_fraction'])}, "
                  f"every token at a vertex in {s['all_at_vertices']}/{s['conditions_ok']}, {fmt(s['vertices_mean'])} "
                  f"polytope vertices; the unnormalised kernel from the same tokens blows up before t = {fmt(s['t1'])} "
                  f"in {fmt(s['unnormalised_blown_before_t1'])}", checks, ["paper_setting.csv"], note)


#: why the discrete hull never grows is no evidence: the rescaled step's form gives it
HULL_STEP = ("with V = I the rescaled Euler step is z_i ← (z_i + Δt Σ_j P_ij z_j) / (1 + Δt), whose weights "
             "1/(1 + Δt) and Δt P_ij/(1 + Δt) are positive and sum to 1: every new token is a convex combination of "
             "the old ones whatever the attention, so the hull cannot grow (the check measures the round-off of "
             "jaxattn's map and of its rescaling)")


def _still_moving(r: dict[str, str]) -> bool:
    """A condition whose tokens may still move farther than the run's tolerance (or whose tokens overflowed)."""
    return not truth(r["finite"]) or not num(r["remaining"]) <= num(r["tol"])


def cl_discrete(d: Path) -> Result:
    rs = rows(d / "discrete.csv")
    ident = [r for r in rs if r["setting"] == "V = I"]
    good = [r for r in rs if r["setting"] == "good triple"]
    tol = num(rs[0]["tol"])
    done = [r for r in ident if not _still_moving(r)]
    checks = [settled(f"V = I: conditions settled (every token within {fmt(tol)} of where it ends)", len(done),
                      len(ident), "more steps: a longer horizon")]
    parts = []
    for dt in sorted({num(r["dt"]) for r in ident}, reverse=True):
        mine = [r for r in done if num(r["dt"]) == dt]
        allv = sum(truth(r["all_at_vertices"]) for r in mine)
        label = (f"Δt = {fmt(dt)}: settled conditions with every rescaled token at a vertex of the polytope or at 0 "
                 f"(tolerance {fmt(tol)})")
        checks.append(fraction(label, allv, len(mine), ">=", T("almost-all"), "almost-all") if mine else
                      undecided(f"{label}: none settled [almost-all]"))
        steps = next(r["steps"] for r in ident if num(r["dt"]) == dt)
        parts.append(f"Δt = {fmt(dt)} ({steps} steps): every token at a vertex or 0 in {allv}/{len(mine)} settled "
                     f"conditions ({len(mine)} of {sum(num(r['dt']) == dt for r in ident)} settled), "
                     f"{fmt(np.mean([int(r['vertices']) for r in mine]) if mine else math.nan)} vertices (mean)")
    worst = max(num(r["hull_excursion"]) for r in ident)
    out = sum(not num(r["hull_excursion"]) <= T("machine") for r in ident)
    checks.append(by_construction(none_of(f"V = I: conditions where a step's tokens reach beyond the previous step's "
                                          f"hull by more than {fmt(T('machine'))} [machine] of its size (support "
                                          "function in 256 directions)", out, len(ident),
                                          "the paper: Remark 4, Proposition C.2"), HULL_STEP))
    gdone = [r for r in good if not _still_moving(r)]
    checks.append(settled("good triple: conditions whose φ1-coordinates are settled", len(gdone), len(good),
                          "more steps: a longer horizon"))
    label = "good triple: settled conditions with more than three hyperplanes"
    checks.append(none_of(label, sum(int(r["hyperplanes"]) > 3 for r in gdone), len(gdone),
                          "the paper: Theorem 4.1, Remark 4") if gdone else undecided(f"{label}: none settled "
                                                                                      "[the paper: Theorem 4.1]"))
    hist = _hist(int(r["hyperplanes"]) for r in gdone)
    g0 = good[0] if good else {"n": "?", "d": "?"}
    return Result(f"the transformer's Euler iteration (D4), rescaled z = R^(−k) x, {len(ident)} conditions of V = I "
                  f"(Q = K = I): " + "; ".join(parts) + f"; largest excursion outside the previous hull "
                  f"{fmt(worst)}; good triple (eigenvalues 1.35, −0.07; n {g0['n']}, d {g0['d']}), Δt ∈ "
                  f"{{{', '.join(dict.fromkeys(fmt(num(r['dt'])) for r in good))}}}: hyperplanes per settled "
                  f"condition {', '.join(f'{k}: {v}' for k, v in sorted(hist.items()))} ({len(gdone)} of {len(good)} "
                  "settled)", checks, ["discrete.csv"])


def cl_triples_3d(d: Path) -> Result:
    every = rows(d / "good_triples_3d.csv")
    rs = [r for r in every if truth(r["solver_ok"])]
    if not rs:
        return Result(f"no condition solved ({len(every)} tried)",
                      [undecided("every solve failed: run with a larger step budget [the paper: Theorem 4.1, "
                                 "Figs. 13–14]")], ["good_triples_3d.csv"])
    t1 = num(every[0]["t1"])
    lam = min(num(r["lambda_1"]) for r in every)
    need = T("clear-clusters")
    # the φ1-coordinate's gap grows at λ1/ln 10 decades per unit time once the attention is Boolean (ċ_i = λ1 (c_j −
    # c_i) toward its leader): λ1 sets the rate that tells clusters still forming from a plateau
    checks = [clusters_forming("conditions whose φ1-coordinates form clear clusters",
                               [num(r["gap_decades"]) for r in rs], [num(r["gap_decades_mid"]) for r in rs], t1 / 2,
                               lam, t1)]
    clear = [r for r in rs if num(r["gap_decades"]) >= need]
    counts = [int(r["gap_hyperplanes"]) for r in clear]
    for label, check in (
            ("conditions with clear clusters on more than three hyperplanes",
             lambda lab: none_of(lab, sum(c > 3 for c in counts), len(clear), "the paper: Theorem 4.1, Figs. 13–14")),
            ("conditions with clear clusters on at most two hyperplanes",
             lambda lab: fraction(lab, sum(c <= 2 for c in counts), len(clear), ">", T("most"),
                                  "most; the paper: typically only two"))):
        checks.append(check(label) if clear else undecided(f"{label}: none has clear clusters yet [clear-clusters]"))
    triples = dict.fromkeys(r["triple"] for r in every)
    lam2 = [num(r["lambda_2"]) for r in every]
    lam3 = [num(r["lambda_3"]) for r in every]
    hist = _hist(counts)
    gaps = [num(r["gap_decades"]) for r in rs]
    return Result(f"{len(triples)} random good triples in d = {every[0]['d']} (Q = K = I, symmetric V scaled to "
                  f"λ1 = 1, λ2 ∈ [{fmt(min(lam2))}, {fmt(max(lam2))}], λ3 ∈ [{fmt(min(lam3))}, {fmt(max(lam3))}]), "
                  f"{len(every)} conditions of {every[0]['n']} tokens, t = {fmt(t1)} ({len(every) - len(rs)} solves "
                  f"failed): gap of the φ1-coordinates {fmt(np.median(gaps) if gaps else math.nan)} decades (median; "
                  f"least {fmt(min(gaps) if gaps else math.nan)}); hyperplanes per condition with clear clusters "
                  f"{', '.join(f'{k}: {v}' for k, v in sorted(hist.items())) or 'none'}", checks,
                  ["good_triples_3d.csv"],
                  f"The rate that tells clusters still forming from a plateau is that of the coordinate along φ1, "
                  f"λ1 = {fmt(lam)}: the horizon t = {fmt(t1)} is {fmt(t1 * lam / (need * math.log(10)))} times the "
                  f"time a gap of {fmt(need)} decades [clear-clusters] needs at that rate")


# ------------------------------------------------------------------------------------------ multistability
def _assumed(r: dict[str, str], cfg: dict) -> bool:
    """Assumption 1 of the multistability results (λ1 > 0) and, for the map, the step bound α < 2/(|λ_d| − λ_1):
    the rule its figures share (:func:`jaxattn.studies.verdicts.assumed`), at the run's step α."""
    return assumed(r, float(cfg.get("alpha", 1.0)))


def st_consensus(d: Path) -> Result:
    cfg = config(d).get("config", {})
    rs = rows(d / "counts.csv")
    ok = [r for r in rs if _assumed(r, cfg)]
    bad = [r for r in ok if int(r["stable_consensus"]) != 1 or int(r["stable_consensus_v1"]) != 1]
    others = [r for r in rs if not _assumed(r, cfg)]
    checks = [none_of("(model, n, time) cases under the assumptions without exactly one stable consensus, at ±v1",
                      len(bad), len(ok), "the paper: the principal consensus is always stable, the others never")]
    hist = _hist(int(r["stable_consensus"]) for r in others)
    return Result(f"{len(ok)} cases with λ1 > 0 and α below the step bound: stable consensus points per case "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(_hist(int(r['stable_consensus']) for r in ok).items()))
                  + f"; {len(others)} cases outside the assumptions: "
                  + (", ".join(f"{k}: {v}" for k, v in sorted(hist.items())) or "none"), checks, ["counts.csv"])


def st_multistable(d: Path) -> Result:
    s = rows(d / "counts_summary.csv")
    ex = [r for r in s if r["mode"] == "exhaustive"] or s
    top = max(int(r["n"]) for r in ex)
    checks, parts = [], []
    for r in (r for r in ex if int(r["n"]) == top):
        m = int(r["models"])
        checks += [fraction(f"{r['time']} n = {r['n']}: multistable models", round(num(r["multistable"]) * m), m,
                            ">=", T("often"), "often"),
                   fraction(f"{r['time']} n = {r['n']}: models with a stable bipartite consensus beside the stable "
                            "consensus", round(num(r["with_stable_bipartite"]) * m), m, ">=", T("often"), "often")]
        parts.append(f"{r['time']} n = {r['n']}: mean {fmt(r['mean_stable'])} stable equilibria "
                     f"(max {r['max_stable']})")
    return Result("; ".join(parts), checks, ["counts_summary.csv"])


def st_agree(d: Path) -> Result:
    rs = [r for r in rows(d / "counts.csv") if int(r["agree"]) >= 0]
    a, b = sum(int(r["agree"]) for r in rs), sum(int(r["candidates"]) for r in rs)
    return Result(f"{a}/{b} equilibria", [none_of("equilibria where the closed form and the Jacobian disagree",
                                                  b - a, b, "the paper: the single-head conditions decide")],
                  ["counts.csv"])


def st_perturb(d: Path) -> Result:
    rs = rows(d / "perturbation.csv")
    label = rs[0]["label"]
    basin = [r for r in rows(d / "basins.csv") if r["time"] == "discrete"]
    total = sum(int(r["count"]) for r in basin)
    hit = sum(int(r["count"]) for r in basin if r["end"] == label)
    all_back = [r for r in rs if int(r["returned"]) == int(r["total"])]
    half = next((r for r in rs if num(r["returned_fraction"]) < 0.5), None)
    # The smallest and largest sizes of the fixed ε grid (1e-3 to 1) return and escape whatever the basin is, so
    # they are reported, not checked: the basin's size is judged by the share of random starts that reach it.
    checks = [fraction(f"random starts of the same model ending at {label}", hit, total, "<=", T("very-small-basin"),
                       "very-small-basin")]
    radius = (f"every perturbation returns up to ε = {fmt(all_back[-1]['eps'])} ({fmt(all_back[-1]['angle_deg'])}° per "
              "token)" if all_back else "no size where every perturbation returns")
    esc = (f"fewer than half return from ε = {fmt(half['eps'])} ({fmt(half['angle_deg'])}°)" if half else
           "at least half return at every size")
    return Result(f"{label}: {radius}; {esc}; {rs[0]['total']} perturbations per size; share of random starts ending "
                  f"there {hit}/{total}", checks, ["perturbation.csv", "basins.csv"])


def st_trajectories(d: Path) -> Result:
    last: dict[str, dict[str, str]] = {}
    for r in rows(d / "trajectories.csv"):
        last[r["model"]] = r
    checks = []
    for m, r in last.items():
        checks += [Check(f"{m}: ends at {r['end']} [the paper: consensus on v1]", r["end"] in ("consensus +v1",
                                                                                               "consensus -v1")),
                   compare(f"{m}: mean |<x_i, v1>| at the end", num(r["rho_mean"]), ">=", T("perfect"), "perfect")]
    return Result("; ".join(f"{m}: {r['end']}, mean |<x_i, v1>| {fmt(r['rho_mean'], 4)}" for m, r in last.items()),
                  checks, ["trajectories.csv"])


def st_eigenvectors(d: Path) -> Result:
    rs = rows(d / "counts.csv")
    v1 = sum(int(r["stable_consensus_v1"]) + int(r["stable_bipartite_v1"]) for r in rs)
    other = sum(int(r["stable_consensus_other"]) + int(r["stable_bipartite_other"]) for r in rs)
    mb = rows(d / "model_basins.csv") if (d / "model_basins.csv").exists() else []
    starts = sum(int(r["starts"]) for r in {r["model"]: r for r in mb}.values())
    reached = sum(int(r["count"]) for r in mb if int(r["eigenvector"]) > 1)
    checks = [fraction("stable consensus and bipartite equilibria aligned with v1", v1, v1 + other, ">", T("most"),
                       "most; the paper: often the principal one"),
              exists("stable equilibria aligned with another eigenvector", other, v1 + other,
                     "the paper: not exclusively the principal one"),
              exists("random starts (other models) ending at another eigenvector", reached, starts,
                     "the paper: not exclusively the principal one")]
    return Result(f"stable equilibria at v1: {v1}, at v2 or v3: {other} (every model, n and time of the counts); "
                  f"random starts of {len({r['model'] for r in mb})} other models ending at v2 or v3: "
                  f"{reached}/{starts}",
                  checks, ["counts.csv", "model_basins.csv"],
                  # the counts enumerate candidates at eigenvectors only: that the stable ones align with eigenvectors
                  # follows from the enumeration, so it is not a check of the row
                  "That the stable equilibria align with eigenvectors is not tested here: the counted candidates are "
                  "built at eigenvectors of V (by construction); which eigenvector they sit at is.")


def st_classes(d: Path) -> Result:
    mb = rows(d / "model_basins.csv")
    ex = rows(d / "basins.csv")
    starts = sum(int(r["starts"]) for r in {r["model"]: r for r in mb}.values()) + sum(int(r["count"]) for r in ex)
    clus = (sum(int(r["count"]) for r in mb if r["kind"] == "clustering")
            + sum(int(r["count"]) for r in ex if r["end"].startswith("clustering")))
    poly = (sum(int(r["count"]) for r in mb if r["kind"] == "polygonal")
            + sum(int(r["count"]) for r in ex if r["end"] == "polygonal"))
    nc = (sum(int(r["count"]) for r in mb if r["kind"] == "not converged")
          + sum(int(r["count"]) for r in ex if r["end"] == "not converged"))
    checks = [exists("random starts ending at a clustering equilibrium (class 3)", clus, starts,
                     "the paper: stable equilibria from the first three classes"),
              none_of("random starts ending at a polygonal equilibrium (class 4)", poly, starts,
                      "the paper: polygonal equilibria are unstable")]
    return Result(f"{starts} random starts (the example model, map and flow, and {len({r['model'] for r in mb})} other "
                  f"models): clustering {clus}, polygonal {poly}, not converged {nc}", checks,
                  ["model_basins.csv", "basins.csv"])


def st_multi_head(d: Path) -> Result:
    rs = rows(d / "multi_head_counts.csv")
    path = d / "multi_head_basins.csv"
    mb = rows(path) if path.exists() else []
    cons = sum(int(r["stable_consensus_v1"]) == 1 and int(r["stable_consensus"]) == 1 for r in rs)
    notfixed = sum(int(r["not_fixed"]) for r in rs)
    jac_bip = sum(int(r["stable_bipartite"]) for r in rs)
    # the paper's sentence comes from simulations: where random starts of multi-head models end (a bipartite
    # candidate is rarely even a fixed point of a multi-head map, so the Jacobian counts cannot decide it)
    starts = sum(int(r["starts"]) for r in {(r["n"], r["model"]): r for r in mb}.values())
    ended = sum(int(r["count"]) for r in mb if r["kind"] != "not converged")
    bip = sum(int(r["count"]) for r in mb if r["kind"] == "bipartite")
    if mb:
        # starts still moving at the horizon are neither bipartite ends nor evidence against them: too few ended
        # says "run longer" (undecided), as CL7's unconverged draws
        converged = settled("random starts ending at an equilibrium (converged)", ended, starts, "more --steps")
        ends = [none_of("random starts of multi-head models ending at a bipartite consensus", bip, ended,
                        "the paper: none observed in multi-head models"), converged]
    else:
        ends = [undecided("no random starts of multi-head models in this run (multi_head_basins.csv): nothing "
                          "observed to compare with the paper [the paper: none observed in multi-head models]")]
    checks = [*ends, fraction("(model, n, time) cases with exactly one stable consensus, at v1", cons, len(rs), ">=",
                              T("almost-all"), "almost-all; the paper: Theorem 1")]
    hist = _hist(r["kind"] for r in mb for _ in range(int(r["count"])))
    ns = sorted({int(r["n"]) for r in mb})
    return Result(f"{len({r['model'] for r in rs})} models of {rs[0]['heads']} heads per n"
                  + (f"; {starts} random starts (n = {', '.join(map(str, ns))}) end at "
                     + ", ".join(f"{k}: {v}" for k, v in sorted(hist.items())) if mb else "")
                  + f"; Jacobian counts: {jac_bip} stable bipartite fixed points ({notfixed} bipartite candidates at "
                    "eigenvectors of F are not fixed points of the map)", checks,
                  ["multi_head_counts.csv", *(["multi_head_basins.csv"] if mb else [])])


def st_sampled(d: Path) -> Result:
    s = [r for r in rows(d / "counts_summary.csv") if r["mode"] == "sampled"]
    checks = [fraction(f"{r['time']} n = {r['n']}: multistable models ({r['patterns']} sampled sign patterns)",
                       round(num(r["multistable"]) * int(r["models"])), int(r["models"]), ">=", T("often"), "often")
              for r in s]
    return Result("; ".join(f"{r['time']} n = {r['n']}: mean {fmt(r['mean_stable'])} stable (max {r['max_stable']}), "
                            f"share of sampled candidates stable {fmt(r['mean_fraction_stable'])}" for r in s),
                  checks or [Check("a sampled row (n above --exhaustive-max)", False)], ["counts_summary.csv"])


def st_oja(d: Path) -> Result:
    cfg = config(d).get("config", {})
    rs = rows(d / "oja_counts.csv")
    ok = [r for r in rs if _assumed(r, cfg)]
    bad = sum(int(r["stable"]) != 1 or int(r["stable_consensus_v1"]) != 1 for r in ok)
    agree = [r for r in rs if int(r["agree"]) >= 0]
    checks = [none_of("(model, n, time) cases under the assumptions whose stable equilibria are not exactly the "
                      "principal consensus", bad, len(ok), "the paper: Theorem 2"),
              none_of("equilibria where the closed form and the Jacobian disagree",
                      sum(int(r["candidates"]) - int(r["agree"]) for r in agree),
                      sum(int(r["candidates"]) for r in agree), "the paper: Lemmas 3–6")]
    return Result(f"uniform attention, {len({r['model'] for r in rs})} models per n: stable equilibria per case "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(_hist(int(r['stable']) for r in rs).items())),
                  checks, ["oja_counts.csv", "config.json"])


def st_oja_starts(d: Path) -> Result:
    path = d / "oja_basins.csv"
    mb = rows(path) if path.exists() else []
    if not mb:
        return Result("no random starts of the Oja system in this run (oja_basins.csv)",
                      [undecided("random starts of the Oja system: none run [the paper: Theorem 2]")],
                      ["config.json"])
    # Theorem 2 assumes λ1 > 0 (and, for the map, the step bound): the models of the Oja counts outside it are left
    # out, read from oja_counts.csv (the same models, the same keys)
    cfg = config(d).get("config", {})
    counted = {(r["n"], r["model"]): r for r in rows(d / "oja_counts.csv") if r["time"] == "discrete"}
    outside = {k for k, r in counted.items() if not _assumed(r, cfg)}
    mb = [r for r in mb if (r["n"], r["model"]) not in outside]
    starts = sum(int(r["starts"]) for r in {(r["n"], r["model"]): r for r in mb}.values())
    ended = sum(int(r["count"]) for r in mb if r["kind"] != "not converged")
    at_v1 = sum(int(r["count"]) for r in mb if r["kind"] == "consensus" and int(r["eigenvector"]) == 1)
    converged = settled("random starts ending at an equilibrium (converged)", ended, starts, "more --steps")
    checks = [fraction("converged random starts ending at the consensus ±v1", at_v1, ended, ">=", T("almost-all"),
                       "almost-all; the paper: Theorem 2, almost all starts"), converged]
    hist = _hist(r["end"] for r in mb for _ in range(int(r["count"])))
    ns = sorted({int(r["n"]) for r in mb})
    left = f" ({len(outside)} (n, model) cases outside Theorem 2's assumptions left out)" if outside else ""
    return Result(f"{len({r['model'] for r in mb})} models per n (n = {', '.join(map(str, ns))}), {starts} random "
                  "starts of the map under uniform attention end at " + ", ".join(
                      f"{k}: {v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1])) + left, checks,
                  ["oja_basins.csv", "oja_counts.csv", "config.json"])


#: the stable classes of the counts: (column, name)
_CLASSES = (("stable_consensus_other", "consensus at another eigenvector"), ("stable_bipartite_v1", "bipartite at v1"),
            ("stable_bipartite_other", "bipartite at another eigenvector"))


#: the largest β read as near the Oja limit (uniform attention): exp(±β) within 10% over unit tokens
SMALL_BETA = 0.1


def st_bifurcations(d: Path) -> Result:
    path = d / "beta_sweep.csv"
    rs = rows(path) if path.exists() else []
    if not rs:
        return Result("no β sweep in this run (beta_sweep.csv)",
                      [undecided("the stable equilibria against β: not counted by this run [the paper: bifurcations "
                                 "with the attention weighting]")], ["config.json"])
    cfg = config(d).get("config", {})
    every = len({r["model"] for r in rs})
    rs = [r for r in rs if _assumed(r, cfg)]  # the Oja limit's Theorem 2 assumes λ1 > 0 and the step bound
    left = every - len({r["model"] for r in rs})
    betas = sorted({num(r["beta"]) for r in rs})
    at = {b: [r for r in rs if num(r["beta"]) == b] for b in betas}
    lo, hi = at[betas[0]], at[betas[-1]]
    # near the Oja limit (uniform attention, β → 0) Theorem 2 leaves the principal consensus the only stable one
    only = sum(int(r["stable"]) == 1 and int(r["stable_consensus_v1"]) == 1 for r in lo)
    beyond = sum(int(r["stable"]) > int(r["stable_consensus_v1"]) for r in hi)
    mean = [float(np.mean([int(r["stable"]) for r in at[b]])) for b in betas]
    limit = (fraction(f"models whose only stable equilibrium is the consensus at v1, β = {fmt(betas[0])}", only,
                      len(lo), ">=", T("almost-all"), "almost-all; the paper: the Oja flow's Theorem 2 as β → 0")
             if betas[0] <= SMALL_BETA else
             undecided(f"the sweep's smallest β = {fmt(betas[0])} is not near the Oja limit (β ≤ {fmt(SMALL_BETA)}) "
                       "[the paper: the Oja flow's Theorem 2 as β → 0]"))
    checks = [limit,
              exists(f"models with a stable equilibrium other than the consensus at v1, β = {fmt(betas[-1])}", beyond,
                     len(hi), "the paper: bifurcations beyond the Oja flow"),
              grows_with("mean number of stable equilibria against β", betas, mean)]
    first = []
    for col, name in _CLASSES:
        b = next((b for b in betas if any(int(r[col]) > 0 for r in at[b])), None)
        first.append(f"{name} from β = {fmt(b)}" if b is not None else f"{name}: never")
    return Result(f"{len(lo)} models, n = {rs[0]['n']}"
                  + (f" ({left} outside the assumptions λ1 > 0 and the step bound left out)" if left else "")
                  + ": mean stable equilibria per β "
                  + ", ".join(f"{fmt(b)}: {fmt(m)}" for b, m in zip(betas, mean, strict=True))
                  + "; stable classes appear: " + ", ".join(first), checks, ["beta_sweep.csv"])


def st_negative_bipartite(d: Path) -> Result:
    cfg = config(d).get("config", {})
    rs = [r for r in rows(d / "counts.csv") if r["time"] == "discrete" and _assumed(r, cfg)]
    if not rs or "stable_bipartite_negative_w_nonneg" not in rs[0]:
        return Result("the counts of this run do not split the bipartite equilibria at negative eigenvalues by w",
                      [undecided("bipartite equilibria at a negative eigenvalue: not counted by this run "
                                 "[the paper: always unstable]")], ["counts.csv"])
    total, stable = (sum(int(r[c]) for r in rs) for c in ("bipartite_negative", "stable_bipartite_negative"))
    total_w, stable_w = (sum(int(r[c]) for r in rs)
                         for c in ("bipartite_negative_w_nonneg", "stable_bipartite_negative_w_nonneg"))
    label = "bipartite equilibria at an eigenvector of a negative eigenvalue that are stable"
    checks = [none_of(label, stable, total, "the paper: unstable for all admissible α") if total else
              undecided(f"{label}: none among the candidates (more models or larger n) [the paper: unstable for all "
                        "admissible α]")]
    # the remark's argument needs 1 + αλc > 1 impossible at λ < 0, i.e. the group's net weight c > 0: where w ≥ 0
    # the larger group has c > 0 (a subset of the count above, so a note, not a second check)
    note = f"Where w = β vᵀQᵀKv ≥ 0 (a token weighs its own group at least as much): {stable_w} of {total_w} stable"
    if stable and not stable_w:
        note += (f"; every stable one ({stable}) has w < 0: a token weighs the antipodal group more than its own, so "
                 "its group's net weight c is negative and 1 + αλc > 1 even at λ < 0, which the remark's argument "
                 "(c > 0) does not allow for")
    cases = len({(r["n"], r["model"]) for r in rs})
    return Result(f"{cases} (n, model) cases of one head under Assumption 1 (λ1 > 0, α = {fmt(cfg.get('alpha', 1.0))} "
                  f"within the step bound), the map: {stable} of {total} bipartite equilibria at a negative eigenvalue "
                  f"are stable; with w ≥ 0: {stable_w} of {total_w}", checks, ["counts.csv"], note + ".")


# ------------------------------------------------------------------------------------------ the claims
PM = "power method"
CO = "consensus"
CL = "clusters"
ST = "multistability"

CLAIMS: tuple[Claim, ...] = (
    Claim("PM1", PM, "§3.2, Fig. 2(b), Figs. 6–7", "Passing through a layer, tokens tilt towards the principal "
          "eigenvector v1 of F = Σ O_h V_h: Δρ1 > 0, P1 > 1/2, Δρ1 > Δρ̄ and P1 > P̄ (P̄ the mean of the per-direction "
          "probabilities P_k over all eigendirections) for almost all layers", "pm_minilm", pm_tilt, "metrics.png"),
    Claim("PM2", PM, "§3.2, Fig. 6", "The spectral gap of the layer matrices is small in the vast majority of layers",
          "pm_minilm", pm_gap, "eigenvalues.png"),
    Claim("PM3", PM, "§5, Figs. 10–11", "With the FFN and the original affine LayerNorm, ρ1, Δρ1 and P1 are all "
          "degraded", "pm_minilm", pm_ffn),
    Claim("PM4", PM, "§2.3, §3.3, Figs. 2, 9", "A rank-1 change of the last layer's output matrix steers the tokens "
          "to a chosen direction u: perfect alignment is always achieved", "pm_minilm", pm_steer,
          "steering.png"),
    Claim("PM5", PM, "§3.1, Figs. 5–6", "Shared weights (ALBERT-like): the tokens reach consensus on v1, or in the "
          "2-D subspace of a complex pair, and prolonging the model improves the alignment", "pm_shared", pm_shared),
    Claim("PM6", PM, "§3.2, Fig. 2(b) top", "The correlation ρ1 of layer-varying models stays low and does not grow "
          "with the layer index", "pm_minilm", pm_low, "metrics.png"),
    Claim("PM7", PM, "§3.2, Supp. Fig. 8", "The correlation with the principal eigenvector of the cumulative product "
          "Φ(k) = F(k)⋯F(1) shows no trend over k when compared with ρ̄", "pm_minilm", pm_phi, "layers.png"),
    Claim("PM8", PM, "§4", "Layers with a larger spectral gap tilt the tokens more", "pm_minilm", pm_gap_tilt,
          "layers.png"),
    Claim("PM9", PM, "§5", "With the embedding layer, the FFN and the affine LayerNorm, consensus among the tokens is "
          "preserved", "consensus", pm_preserved),
    Claim("PM10", PM, "§5", "With the FFN, steering works once the direction is precompensated through the last FFN "
          "(u' with FFN(u') ∝ u)", "pm_minilm", pm_precompensate),
    Claim("PM11", PM, "§2.1.3 (Case 3), ALBERT-base/large", "When λ1 ≈ λ2 and v1, v2 are nearly collinear, the tokens "
          "sit in span(v1, v2) and converge to v1 only slowly", "pm_cases", pm_case3),
    Claim("PM12", PM, "Theorem 1, Supp. D.4.1, §2.1.1", "Symmetric F, full attention, shared weights: the consensus at "
          "±v1 is locally asymptotically stable, every other consensus unstable; numerically the tokens converge to "
          "it from nearly any start, also with causal attention and a non-symmetric F", "pm_cases", pm_theorem1),
    Claim("PM13", PM, "Supp. Lemma 9", "The attention matrix has rank 1 at a consensus, 2 at a bipartite consensus "
          "and m at an m-clustering equilibrium", "pm_lemmas", pm_attn_rank, "lemma9.png"),
    Claim("PM14", PM, "Supp. Lemma 7; Lemma 1 of the multistability paper", "W(x) = ½(λ1 − R(x)), R(x) = xᵀVx/xᵀx "
          "(V symmetric, λ1 simple and positive), never increases along the Oja flow ẋ = P_x V x, nor along its map "
          "x ← N(x + αVx) for a bounded step α; for n agents under uniform attention the same with the mean token "
          "(W̄ = ½(λ1 − x̄ᵀVx̄), jaxattn's reading of Lemma 7, whose formula the text lost)", "pm_lemmas",
          pm_lyapunov, "lyapunov.png"),
    Claim("PM15", PM, "§2.3", "With F' = F + β u wᵀ the principal eigenvalue is about β wᵀu and its eigenvector about "
          "u once the gap is large; when u, w are right and left eigenvectors of an eigenvalue λ_j (wᵀu = 1) the rest "
          "of the spectrum is unchanged and λ_j becomes λ_j + β", "pm_lemmas", pm_steered_spectrum,
          "steered_spectrum.png"),
    Claim("CO1", CO, "Theorem 4.1, §6.1.1", "Tokens in an open hemisphere reach consensus under time-varying "
          "weights; min_i <x_i, w> never decreases", "consensus", co_hemisphere, "synthetic.png"),
    Claim("CO2", CO, "Theorem 5.1, §6.1.2", "Causal attention, V = I, two heads: the first token never moves, the "
          "others converge to it", "consensus", co_causal),
    Claim("CO3", CO, "Theorem 5.2, §6.1.3", "Causal attention, symmetric V with a simple top eigenvalue, tokens "
          "starting in a hemisphere of v1: one consensus at +v1 or at −v1", "consensus", co_symmetric),
    Claim("CO4", CO, "§6.2, Fig. 7", "Without the FFN, trained (periodic) weights: the first-token measure decays to 0 "
          "pass after pass", "consensus", _passes(("no_ffn_periodic", "no FFN, trained")), "passes.png"),
    Claim("CO5", CO, "§6.2, Fig. 8", "With the FFN the measure still decays to 0", "consensus",
          _passes(("ffn_periodic", "FFN, trained"))),
    Claim("CO6", CO, "§6.2, Figs. 9–10", "Random weights redrawn before every pass (aperiodic), with the FFN: "
          "consensus still occurs", "consensus", _passes(("ffn_redrawn", "FFN, random aperiodic"))),
    Claim("CO7", CO, "§6.2, Figs. 9–10", "Random aperiodic weights without the FFN: consensus still occurs",
          "consensus", _passes(("no_ffn_redrawn", "no FFN, random aperiodic"))),
    Claim("CO8", CO, "§6.2", "Random periodic weights (drawn once, reused every pass), with and without the FFN: "
          "consensus still occurs", "consensus", _passes(("ffn_random_periodic", "FFN, random periodic"),
                                                         ("no_ffn_random_periodic", "no FFN, random periodic"))),
    *(Claim(cid, CO, f"§6.2, as Figs. 9–10 (GPT-2 {size})", f"The paper's experiment on GPT-2 {size}{note} with random "
            "weights, periodic and aperiodic, with and without the FFN: consensus", run, _RANDOM_PASSES, "passes.png")
      for cid, size, note, run in (("CO9", "small", "", "co_gpt2"), ("CO13", "medium", "", "co_gpt2_medium"),
                                   ("CO14", "large", "", "co_gpt2_large"),
                                   ("CO15", "XL", " (the paper's own model)", "co_gpt2_xl"))),
    Claim("CO10", CO, "§6.2, as Figs. 9–10 (GPT-Neo 125M)", "The paper's experiment on GPT-Neo 125M with random "
          "weights, periodic and aperiodic, with and without the FFN: consensus", "co_gptneo", _RANDOM_PASSES,
          "passes.png"),
    Claim("CO11", CO, "§6.2", "Rates: with random weights the FFN slows the convergence; trained weights converge "
          "faster than random ones", "consensus", co_rates),
    Claim("CO12", CO, "Theorem 5.1, §6.1.2, Fig. 4", "Theorem 5.1 at GPT-2's size: causal attention, V = I, two heads, "
          "time-varying weights, n and d like GPT-2's; the first token stays and the others converge to it",
          "co_theorem51", co_gpt2_like, "synthetic.png"),
    Claim("CO16", CO, "Theorem 3.1, Lemma 3.2", "One head, V = I, QᵀK symmetric positive definite, tokens on its "
          "ellipsoid: the flow is the gradient of E(X) = (1/(2β)) Σ_ij exp(β <Q x_i, K x_j>) in a metric weighted by "
          "the softmax's row normalisers, so E never decreases",
          "co_theorems", co_potential, "potential.png"),
    Claim("CO17", CO, "Theorem 5.2 (Q, K only bounded)", "Causal attention, one head, a constant symmetric V with a "
          "simple top eigenvalue, time-varying Q(t), K(t): tokens starting in the hemisphere of v1 reach the "
          "consensus at v1", "co_theorems", co_varying_qk, "theorem52.png"),
    Claim("CO18", CO, "Theorem 5.3 and the remark after it", "A time-varying symmetric V(t): tokens starting in the "
          "hemisphere of v1(0) converge to a ball around the moving consensus v1(t) whose radius grows with the speed "
          "of v1(t) and vanishes when V is constant; the hemisphere is the basin", "co_theorems", co_varying_v,
          "theorem53.png"),
    Claim("CL1", CL, "Theorem 3.1, Figs. 1, 5", "V = I: for almost all initial sequences the rescaled tokens converge "
          "to the vertices of a convex polytope", "clusters", cl_polytope, "polytope.png"),
    Claim("CL2", CL, "Theorem 4.1, Fig. 6", "Good triple (top eigenvalue real, positive, simple): the tokens converge "
          "to at most three parallel hyperplanes", "clusters", cl_hyperplanes, "hyperplanes.png"),
    Claim("CL3", CL, "Theorem 2.1, Fig. 3", "d = 1: the self-attention matrix converges to a Boolean matrix of rank "
          "1 or 2", "clusters", cl_boolean, "boolean.png"),
    Claim("CL4", CL, "§4, p. 7", "About 14% of real Ginibre matrices at d = 128 give a good triple", "clusters",
          cl_fourteen, "counts.png"),
    Claim("CL5", CL, "§4, p. 7", "The good-triple fraction vanishes as d → ∞, very slowly", "clusters",
          cl_decreasing),
    Claim("CL6", CL, "Figs. 7(a), 8", "Positive and negative eigenvalues together: the tokens cluster along the "
          "positive eigendirections while they diverge along the negative one", "clusters", cl_mixed, "mixed.png"),
    Claim("CL7", CL, "Fig. 4", "V > 0, Q > 0 random, K = I, d = 2: clusters show as a self-attention matrix of rank "
          "≤ 2 (the Q/K point clouds)", "qk_cloud", cl_qk, "qk_cloud.png"),
    Claim("CL8", CL, "the paper's code (polytope picture)", "Its own setting (softmax, V = I, 20 tokens uniform in "
          "[−5, 5]², horizon 5): tokens at the vertices of a polytope", "unnormalised", cl_paper_setting,
          "blowup.png"),
    Claim("CL9", CL, "Theorem C.5, §1.1", "V = −I (Q = K = I): all tokens collapse to the origin", "clusters",
          cl_collapse),
    Claim("CL10", CL, "Theorem 5.1, Fig. 8", "V = diag(1, 1, −1/2): the components in the top eigenspace converge to "
          "the boundary of a polytope K or to 0, H = (∂K ∪ {0}) × G", "clusters", cl_theorem51),
    Claim("CL11", CL, "Conjecture 4.2, Fig. 7(b)", "n = 256, d = 128, random Q, K, symmetric V: along the positive "
          "eigenvalues the tokens cluster (at most three values; coordinate by coordinate, Fig. 7(b)), along "
          "the negative ones they diverge", "clusters_high_dim", cl_high_dim, "high_dim.png"),
    Claim("CL12", CL, "Proposition C.2", "V = I: the convex hull of the rescaled tokens shrinks over time", "clusters",
          cl_hull),
    Claim("CL13", CL, "Theorem 2.1, Fig. 11", "d = 1: the convergence of P(t) is doubly exponential, and n has no "
          "effect on it", "clusters", cl_rate, "rate.png"),
    Claim("CL14", CL, "§4, after Theorem 4.1", "With a good triple the tokens typically cluster toward only two "
          "hyperplanes (Theorem 4.1 allows three)", "clusters", cl_two_hyperplanes, "hyperplanes.png"),
    Claim("CL15", CL, "§3, after Theorem 3.1", "V = I: the number of vertices of the limiting polytope K is often "
          "significantly smaller than n", "clusters", cl_few_vertices, "counts.png"),
    Claim("CL16", CL, "Remarks 1 and 4, Proposition C.2, Theorems 3.1 and 4.1", "The results carry over to the "
          "discrete-time transformer, the Euler iteration x_i ← x_i + Δt Σ_j P_ij V x_j (Δt = 1 in practice, and "
          "smaller): with V = I the rescaled tokens z^[k] = (1 + Δt)^(−k) x^[k] stay in the hull of the step before "
          "and converge to the vertices of a convex polytope; with a good triple to at most three parallel "
          "hyperplanes", "cl_theorems", cl_discrete, "discrete.png"),
    Claim("CL17", CL, "Theorem 4.1, Figs. 13–14", "Good triples in R³: the coordinates ⟨z_i, φ1⟩ converge to at most "
          "three values (parallel hyperplanes), typically two", "cl_theorems", cl_triples_3d,
          "good_triples_3d.png"),
    Claim("ST1", ST, "Theorem 3 (Supp. D of the power-method paper); Lemmas of the multistability paper",
          "Under its assumptions (λ1(V) > 0; for the map, α below the step bound) the consensus at the principal "
          "eigenvector is always stable and every other consensus unstable", "stability", st_consensus),
    Claim("ST2", ST, "Abstract, Fig. 3(a)–(b)", "Multistability is common: stable bipartite consensus coexists with "
          "stable consensus", "stability", st_multistable, "counts.png"),
    Claim("ST3", ST, "Theorem 3 (single head)", "The closed-form single-head conditions decide stability (checked "
          "against the Jacobian)", "stability", st_agree),
    Claim("ST4", ST, "Fig. 13(b) of the power-method paper", "A stable bipartite equilibrium has a very small basin: "
          "small perturbations return, slightly larger ones escape", "stability", st_perturb,
          "bipartite_perturbation.png"),
    Claim("ST5", ST, "Fig. 1; Fig. 13(a) of the power-method paper", "d = 3, n = 10: one head and several heads "
          "converge to consensus aligned with v1", "stability", st_trajectories, "sphere_trajectories.png"),
    Claim("ST6", ST, "Abstract, §5", "Stable consensus and bipartite equilibria align with eigenvectors of V, often "
          "but not exclusively the principal one", "stability", st_eigenvectors, "basins.png"),
    Claim("ST7", ST, "Abstract, Lemma 8, Theorem 3", "Stable equilibria of the first three classes (consensus, "
          "bipartite, clustering) coexist; polygonal equilibria are unstable", "stability", st_classes),
    Claim("ST8", ST, "§2.1.1, Supp. D.4.1 of the power-method paper", "Multi-head models: no stable bipartite "
          "consensus is observed", "stability", st_multi_head),
    Claim("ST9", ST, "Fig. 3(b)", "Beyond exhaustive enumeration (random sign patterns, larger n) stable bipartite "
          "equilibria are still found: multistability persists", "stability", st_sampled),
    Claim("ST10", ST, "Theorem 2 (multi-agent Oja system)", "Uniform attention: the principal consensus is the only "
          "stable equilibrium among the consensus and bipartite equilibria (every other one is unstable; the "
          "theorem's polygonal equilibria are not enumerated here)", "stability", st_oja),
    Claim("ST11", ST, "Theorem 2 (multi-agent Oja system)", "Uniform attention: the trajectories converge to the "
          "principal consensus ±v1 from almost all initial conditions (random starts, not only the Jacobians)",
          "stability", st_oja_starts, "oja_starts.png"),
    Claim("ST12", ST, "Abstract, §5", "Attention weighting brings bifurcations beyond the Oja flow: near β → 0 only "
          "the principal consensus is stable, and as β grows other equilibria become stable", "stability",
          st_bifurcations, "beta_sweep.png"),
    Claim("ST13", ST, "Supp. Remark 10 of the power-method paper", "One head, under Theorem 3's assumptions: a "
          "bipartite consensus at an eigenvector of a negative eigenvalue of V is unstable for every admissible step α",
          "stability", st_negative_bipartite, "negative_bipartite.png"),
)
