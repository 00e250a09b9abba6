#!/usr/bin/env python3
"""Run every reproduction of the four papers and write ``docs/reproductions.md`` from the runs.

    python scripts/reproduce.py                       # the paper-scale runs into runs/reproduce, then the page
    python scripts/reproduce.py --reduced --runs DIR  # tiny scales (seconds to minutes), page into DIR
    python scripts/reproduce.py --page-only           # the page again from the runs already there

One registry holds every run (a ``jaxattn`` command at a full and a reduced scale, or one of the two
extra computations of ``jaxattn.studies.qk_cloud`` / ``jaxattn.studies.blowup``) and every claim
(the paper's statement and a function that reads the run's CSV files and returns jaxattn's number,
the scale it was run at and the verdict). The page is generated whole, so it cannot drift from what
was run; ``make reproduce`` runs this script.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------------------------------ the runs
@dataclass(frozen=True)
class Run:
    """One computation: ``argv`` of ``jaxattn`` (``extra`` empty) or the name of an extra computation."""

    name: str
    full: tuple[str, ...]
    reduced: tuple[str, ...]
    extra: str = ""

    def argv(self, reduced: bool) -> list[str]:
        return list(self.reduced if reduced else self.full)

    def command(self, reduced: bool, out: str) -> str:
        if self.extra:
            flag = " --reduced" if reduced else ""
            return f"python scripts/reproduce.py --runs {Path(out).parent} --only {self.name}{flag}"
        return " ".join(["jaxattn", *self.argv(reduced), "--out", out])


RUNS: tuple[Run, ...] = (
    Run("pm_minilm",
        ("analyze", "minilm", "--num-init", "1000", "--n", "10", "--init", "gaussian"),
        ("analyze", "minilm", "--num-init", "8", "--n", "4", "--gammas", "1000", "--steer-target", "0",
         "--no-sensitivity")),
    Run("pm_shared",
        ("analyze", "random", "--d", "128", "--heads", "4", "--depth", "12", "--shared", "--num-init", "1000",
         "--n", "10", "--prolong", "10", "--gammas", "1", "--steer-target", "0", "--no-sensitivity"),
        ("analyze", "random", "--d", "8", "--heads", "2", "--depth", "2", "--shared", "--num-init", "16", "--n", "4",
         "--prolong", "2", "--gammas", "1", "--no-sensitivity", "--steer-target", "0")),
    Run("consensus",
        ("consensus", "minilm", "--prompts", "100", "--tokens", "200", "--passes", "10", "--synthetic-n", "10",
         "--synthetic-num", "128", "--t1", "40"),
        ("consensus", "minilm", "--prompts", "2", "--tokens", "6", "--passes", "1", "--synthetic-num", "2",
         "--t1", "3")),
    Run("clusters",
        ("clusters", "--n", "40", "--n-1d", "40", "--t1", "15", "--num", "64", "--table-n", "10,20,40",
         "--table-d", "2,3", "--table-beta", "1", "--good-d", "1,2,4,8,16,32,64,128", "--good-samples", "20000",
         "--ensembles", "ginibre"),
        ("clusters", "--n", "6", "--n-1d", "6", "--t1", "3", "--num", "8", "--table-n", "5", "--table-d", "2",
         "--table-beta", "1", "--good-d", "2,128", "--good-samples", "40", "--ensembles", "ginibre")),
    Run("stability",
        ("stability", "--d", "3", "--tokens", "3,4,5,6,8", "--models", "50", "--exhaustive-max", "10",
         "--alpha", "0.5", "--beta", "4", "--search", "100", "--perturb-num", "32", "--basin-num", "500",
         "--basin-n", "10", "--steps", "3000", "--t1", "1500"),
        ("stability", "--tokens", "3", "--models", "3", "--basin-num", "8", "--basin-n", "3", "--steps", "50",
         "--t1", "20", "--perturb-num", "2", "--search", "5")),
    Run("qk_cloud", ("--num", "128", "--n", "20", "--t1", "10"), ("--num", "4", "--n", "5", "--t1", "1"),
        extra="qk_cloud"),
    Run("unnormalised", ("--num", "64", "--n", "20"), ("--num", "4", "--n", "4"), extra="unnormalised"),
)
RUN_BY_NAME = {r.name: r for r in RUNS}


def _extra_options(argv: list[str]) -> dict[str, int | float]:
    opts = dict(zip(argv[0::2], argv[1::2], strict=True))
    return {k.lstrip("-").replace("-", "_"): (float(v) if "." in v else int(v)) for k, v in opts.items()}


def run_one(run: Run, runs: Path, reduced: bool) -> float:
    """Run ``run`` into ``runs/<name>`` (replacing an earlier run) and return its wall time in seconds."""
    out = runs / run.name
    start = time.perf_counter()
    if out.exists():  # a fresh run each time (an interrupted one of another scale would be refused)
        shutil.rmtree(out)
    if run.extra:
        out.mkdir(parents=True)
        opts = _extra_options(run.argv(reduced))
        if run.extra == "qk_cloud":
            from jaxattn.studies import qk_cloud

            qk_cloud.study(out, **opts)
        else:
            from jaxattn.studies import blowup

            blowup.study(out, reduced=reduced, **opts)
    else:
        from jaxattn.cli import main

        argv = [*run.argv(reduced), "--out", str(out), "--no-progress"]
        status = main(argv)
        if status:
            raise SystemExit(f"reproduce: `jaxattn {' '.join(argv)}` failed with status {status}")
    return time.perf_counter() - start


def run_all(runs: Path, reduced: bool, only: list[str]) -> None:
    runs.mkdir(parents=True, exist_ok=True)
    timings_path = runs / "timings.json"
    for run in RUNS:
        if only and run.name not in only:
            continue
        print(f"reproduce: {run.name} ...", file=sys.stderr, flush=True)
        wall = run_one(run, runs, reduced)
        # read again just before writing: another reproduce process may share the directory
        timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
        timings[run.name] = {"wall_s": round(wall, 1), "reduced": reduced,
                             "command": run.command(reduced, str(runs / run.name))}
        timings_path.write_text(json.dumps(timings, indent=1) + "\n")
        print(f"reproduce: {run.name} done in {wall:.0f} s", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ reading runs
def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(x: str | float) -> float:
    return float(x)


def fmt(x: float, digits: int = 3) -> str:
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


def config(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    return json.loads(path.read_text()) if path.exists() else {}


@dataclass
class Result:
    """jaxattn's number for one claim, its verdict and why, and the run files it was read from."""

    value: str
    verdict: str  # 'reproduced' or 'differs'
    why: str
    sources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    where: str  # figure, theorem or page of the paper
    statement: str
    run: str
    measure: Callable[[Path], Result]
    figure: str = ""  # a PNG of the run shown next to the row


def verdict(ok: bool) -> str:
    return "reproduced" if ok else "differs"


# ---- power method (Li & Altafini)
def pm_layers(d: Path) -> Result:
    main = [r for r in rows(d / "layers.csv") if r["run"] == "main"]
    holds = sum(r["holds"] == "True" for r in main)
    dr1 = sum(num(r["drho1"]) for r in main) / len(main)
    drb = sum(num(r["drhobar"]) for r in main) / len(main)
    p1 = [num(r["P1"]) for r in main]
    ok = holds == len(main)
    return Result(f"analogy holds in {holds}/{len(main)} layers; mean Δρ1 {fmt(dr1)} vs Δρ̄ {fmt(drb)}; "
                  f"P1 {fmt(min(p1))}–{fmt(max(p1))}", verdict(ok),
                  "every layer has Δρ1 > 0, P1 > 1/2 and Δρ1 > Δρ̄" if ok else
                  "some layers do not tilt towards v1 more than towards an average eigendirection",
                  ["layers.csv"])


def pm_ffn(d: Path) -> Result:
    rs = rows(d / "layers.csv")
    main = [r for r in rs if r["run"] == "main"]
    ffn = [r for r in rs if r["run"] == "ffn_layernorm"]
    if not ffn:
        return Result("no FFN in this model", "differs", "the model has no FFN to test", ["layers.csv"])
    m = sum(num(r["drho1"]) for r in main) / len(main)
    f = sum(num(r["drho1"]) for r in ffn) / len(ffn)
    p = sum(num(r["P1"]) for r in ffn) / len(ffn)
    ok = f < m / 2
    return Result(f"mean Δρ1 {fmt(f)} with FFN + LayerNorm vs {fmt(m)} under D1; mean P1 {fmt(p)}", verdict(ok),
                  "the FFN and affine LayerNorm mask the tilt" if ok else "the tilt survives the FFN in this model",
                  ["layers.csv"])


def pm_steer(d: Path) -> Result:
    st = [r for r in rows(d / "steering.csv") if r["dynamics"] == "D1"]
    found = [r for r in st if r["found_by"].startswith("bisection")]
    best = found[-1] if found else max(st, key=lambda r: num(r["align_mean"]))
    a = num(best["align_mean"])
    ok = a >= 0.99
    return Result(f"mean alignment {fmt(a, 5)} at γ = {fmt(best['gamma'])} (gap {fmt(best['gap_after'])}); "
                  f"tokens above 0.99: {fmt(best['frac_above_0.99'])}", verdict(ok),
                  "a rank-1 change of the last layer aligns the tokens with u" if ok else
                  "the alignment target was not reached on the γ grid", ["steering.csv"])


def pm_gap(d: Path) -> Result:
    sp = rows(d / "spectrum.csv")
    rel = sorted(num(r["gap"]) / abs(complex(num(r["lambda1_re"]), num(r["lambda1_im"]))) for r in sp)
    med = rel[len(rel) // 2]
    cases = ",".join(sorted({r["case"] for r in sp}))
    ok = med < 0.25
    return Result(f"median gap/|λ1| {fmt(med)} over {len(sp)} layers (range {fmt(rel[0])}–{fmt(rel[-1])}); "
                  f"cases {cases}", verdict(ok),
                  "the gaps are small, so each layer tilts only a little" if ok else "the gaps are not small here",
                  ["spectrum.csv"])


def pm_shared(d: Path) -> Result:
    pro = [r for r in rows(d / "layers.csv") if r["run"] == "prolonged"]
    last = pro[-1]
    case = rows(d / "spectrum.csv")[0]["case"]
    rho = num(last["rho2"]) if case in ("2", "3") else num(last["rho1"])
    diam = num(last["diameter"])
    ok = rho > 0.9 and diam < 1e-2
    what = "ρ(2-D)" if case in ("2", "3") else "ρ1"
    return Result(f"case {case}; after {len(pro)} steps {what} = {fmt(rho)}, mean diameter {fmt(diam)}", verdict(ok),
                  "the prolonged shared-weight run converges to consensus on the predicted eigenspace" if ok else
                  "the prolonged run did not align within its horizon (raise --prolong)",
                  ["layers.csv", "spectrum.csv"])


# ---- consensus
def _synthetic(d: Path, setting: str) -> list[dict[str, str]]:
    return [r for r in rows(d / "synthetic.csv") if r["setting"] == setting]


def co_hemisphere(d: Path) -> Result:
    rs = _synthetic(d, "hemisphere")
    end = num(rs[-1]["first_token_mean"])
    h = [num(r["hemisphere_min"]) for r in rs]
    drop = max([a - b for a, b in itertools.pairwise(h)] + [0.0])
    ok = end < 1e-6 and drop <= 1e-9
    return Result(f"first-token measure {fmt(rs[0]['first_token_mean'])} → {fmt(end)} at t = {fmt(rs[-1]['t'])}; "
                  f"largest decrease of min_i <x_i, w>: {fmt(drop)}", verdict(ok),
                  "consensus, Lyapunov function non-decreasing" if ok else
                  "not at consensus by the final time (raise --t1)", ["synthetic.csv"])


def co_causal(d: Path) -> Result:
    rs = _synthetic(d, "causal_two_heads")
    end = num(rs[-1]["first_token_mean"])
    import re

    moved = re.search(r"first token moved by at most ([0-9.e+-]+)", (d / "report.md").read_text())
    mv = float(moved.group(1)) if moved else float("nan")
    ok = end < 1e-6 and mv == 0.0
    return Result(f"first-token measure {fmt(rs[0]['first_token_mean'])} → {fmt(end)} at t = {fmt(rs[-1]['t'])}; "
                  f"first token moved by {fmt(mv)}", verdict(ok),
                  "the first token stays, the others converge to it" if ok else
                  "not at consensus by the final time (raise --t1)", ["synthetic.csv", "report.md"])


def co_symmetric(d: Path) -> Result:
    import re

    m = re.search(r"\|<x_i, v_1>\| at the end: median ([0-9.e+-]+)", (d / "report.md").read_text())
    med = float(m.group(1)) if m else float("nan")
    ok = med > 0.999
    return Result(f"median |<x_i, v1>| at t = {fmt(_synthetic(d, 'causal_symmetric_V')[-1]['t'])}: {fmt(med, 6)}",
                  verdict(ok), "tokens at ±v1" if ok else "not at ±v1 by the final time (raise --t1)",
                  ["report.md", "synthetic.csv"])


def _passes(run: str, paper: str) -> Callable[[Path], Result]:
    def measure(d: Path) -> Result:
        s = {r["run"]: r for r in rows(d / "summary.csv")}[run]
        layers = sum(1 for r in rows(d / "passes.csv") if r["run"] == run) - 1
        a, b = num(s["first_token_start"]), num(s["first_token_end"])
        rate = math.log(b / a) / max(layers, 1) if a > 0 and b > 0 else float("-inf")
        ok = b < 0.1 * a
        return Result(f"{fmt(a)} → {fmt(b)} (± {fmt(s['first_token_end_std'])}) after {layers} layers; "
                      f"rate {fmt(rate)} per layer", verdict(ok),
                      "the first-token measure collapses" if ok else
                      f"MiniLM (post-norm encoder, 6 layers) does not collapse in this run, unlike the paper's {paper}",
                      ["summary.csv", "passes.csv"])

    return measure


# ---- clusters
def cl_polytope(d: Path) -> Result:
    rs = [r for r in rows(d / "counts.csv") if r["beta"] in ("1", "1.0")] or rows(d / "counts.csv")
    at = min(num(r["at_vertices_fraction"]) for r in rs)
    inside = min(num(r["inside_fraction"]) for r in rs)
    le = min(num(r["le_hull_fraction"]) for r in rs)
    conds = sum(int(r["conditions"]) for r in rs)
    ok = inside >= 0.95 and le >= 0.95
    return Result(f"{conds} conditions ({len(rs)} (n, d) rows, β = 1); fraction of conditions, smallest over the rows: "
                  f"other tokens inside the polytope {fmt(inside)}, clusters ≤ initial hull vertices {fmt(le)}, "
                  f"clusters at polytope vertices {fmt(at)}", verdict(ok),
                  "tokens gather at the vertices of a convex polytope, the rest inside it" if ok else
                  "some conditions end with tokens outside the polytope of the clusters at this horizon",
                  ["counts.csv"])


def cl_hyperplanes(d: Path) -> Result:
    good = {r["setting"]: r for r in rows(d / "pictures.csv")}["good"]
    h = int(good["hyperplanes"])
    ok = 0 < h <= 3
    return Result(f"{h} values of the coordinate along φ1 at t = {fmt(good['t_end'])} (n = {good['n']})", verdict(ok),
                  "at most three parallel hyperplanes" if ok else "more than three hyperplanes at this horizon",
                  ["pictures.csv"])


def cl_boolean(d: Path) -> Result:
    last = rows(d / "boolean.csv")[-1]
    dist, rank = num(last["distance_median"]), int(last["rank_max"])
    ok = dist < 1e-3 and rank <= 2
    return Result(f"at t = {fmt(last['t'])}: distance to Boolean median {fmt(dist)} (max {fmt(last['distance_max'])}); "
                  f"rank {last['rank_min']}–{rank} ({last['conditions']} conditions)", verdict(ok),
                  "P(t) becomes a Boolean matrix of rank ≤ 2" if ok else
                  "not yet Boolean / low rank at this horizon", ["boolean.csv"])


def cl_fourteen(d: Path) -> Result:
    g = [r for r in rows(d / "good_triples.csv") if r["ensemble"] == "ginibre"]
    top = max(g, key=lambda r: int(r["d"]))
    p = num(top["fraction"])
    ok = int(top["d"]) == 128 and abs(p - 0.14) <= 0.02
    return Result(f"d = {top['d']}: {ci(p, top['ci_low'], top['ci_high'])} of {top['samples']} matrices", verdict(ok),
                  "about 14%" if ok else (f"{fmt(p)} at d = {top['d']}" if int(top['d']) != 128 else
                                          f"{fmt(p)} is not about 0.14"), ["good_triples.csv"])


def cl_decreasing(d: Path) -> Result:
    g = sorted((r for r in rows(d / "good_triples.csv") if r["ensemble"] == "ginibre" and int(r["d"]) >= 2),
               key=lambda r: int(r["d"]))
    fr = [num(r["fraction"]) for r in g]
    ok = all(b <= a for a, b in itertools.pairwise(fr))
    return Result(", ".join(f"d {r['d']}: {fmt(r['fraction'])}" for r in g), verdict(ok),
                  "decreasing in d, slowly" if ok else "not monotone at this sample size", ["good_triples.csv"])


def cl_negative(d: Path) -> Result:
    p = {r["setting"]: r for r in rows(d / "pictures.csv")}
    neg, ide = num(p["negative"]["max_norm"]), num(p["identity_2d"]["max_norm"])
    ok = neg > 5 * ide
    return Result(f"largest |z| at t = {fmt(p['negative']['t_end'])}: {fmt(neg)} (V = I: {fmt(ide)})", verdict(ok),
                  "tokens spread along φ1 instead of clustering" if ok else "no divergence at this horizon",
                  ["pictures.csv"])


def cl_qk(d: Path) -> Result:
    s = rows(d / "qk_summary.csv")[0]
    ok = num(s["fraction"]) >= 0.9
    return Result(f"rank P(t1) ≤ 2 in {ci(s['fraction'], s['ci_low'], s['ci_high'])} of {s['draws']} draws "
                  f"(largest rank {s['rank_max']}; distance to Boolean median {fmt(s['boolean_distance_median'])})",
                  verdict(ok), "the attention matrix has rank ≤ 2 once clusters form" if ok else
                  "P(t1) still has higher rank in many draws at this horizon", ["qk_summary.csv", "qk_cloud.csv"])


def cl_paper_setting(d: Path) -> Result:
    s = rows(d / "paper_setting.csv")[0]
    ok = num(s["inside_fraction"]) >= 0.9
    return Result(f"{s['draws']} draws of {s['n']} tokens: {fmt(s['vertices_mean'])} polytope vertices, "
                  f"{fmt(s['gap_clusters_mean'])} clusters by the largest gap "
                  f"({fmt(s['clusters_mean'])} at distance 1e-3), "
                  f"rest inside in {fmt(s['inside_fraction'])}; "
                  f"the unnormalised kernel from the same tokens blows up before t = {fmt(s['t1'])} in "
                  f"{fmt(s['unnormalised_blown_before_t1'])}",
                  verdict(ok), "the paper's code (softmax) setting is reproduced; with the unnormalised kernel it "
                  "would not exist past the blow-up time" if ok else "tokens outside the polytope at t = 5",
                  ["paper_setting.csv"])


# ---- stability
def st_consensus(d: Path) -> Result:
    rs = rows(d / "counts.csv")
    mx = max(int(r["stable_consensus"]) for r in rs)
    withc = sum(int(r["stable_consensus"]) > 0 for r in rs)
    ok = mx <= 1
    return Result(f"at most {mx} stable consensus (±v1) per model; {withc}/{len(rs)} (model, n, time) cases have one",
                  verdict(ok), "only the consensus at the principal eigenvector is stable" if ok else
                  "more than one stable consensus in a model", ["counts.csv"])


def st_multistable(d: Path) -> Result:
    s = rows(d / "counts_summary.csv")
    parts, anyms = [], False
    for r in s:
        if r["n"] == max(s, key=lambda x: int(x["n"]))["n"]:
            # multistable, with_stable_bipartite: fractions of the models
            parts.append(f"{r['time']} n = {r['n']}: {fmt(r['multistable'])} of {r['models']} models multistable, "
                         f"{fmt(r['with_stable_bipartite'])} with a stable bipartite consensus, "
                         f"mean {fmt(r['mean_stable'])} stable equilibria (max {r['max_stable']})")
        anyms |= num(r["multistable"]) > 0
    return Result("; ".join(parts), verdict(anyms),
                  "stable consensus and bipartite consensus coexist" if anyms else
                  "no multistable model at these sizes", ["counts_summary.csv"])


def st_agree(d: Path) -> Result:
    s = rows(d / "counts_summary.csv")
    a = sum(int(r["agreement"].split("/")[0]) for r in s)
    b = sum(int(r["agreement"].split("/")[1]) for r in s)
    return Result(f"{a}/{b} equilibria", verdict(a == b),
                  "the closed-form conditions and the Jacobian agree on every equilibrium" if a == b else
                  "some equilibria disagree", ["counts_summary.csv"])


def st_perturb(d: Path) -> Result:
    rs = rows(d / "perturbation.csv")
    back = [num(r["eps"]) for r in rs if num(r["returned_fraction"]) >= 0.99]
    gone = [r for r in rs if num(r["returned_fraction"]) < 0.5]
    ok = bool(back) and bool(gone)
    g = gone[0] if gone else {}
    esc = (f"below half return from ε = {fmt(g['eps'])} ({ci(g['returned_fraction'], g['ci_low'], g['ci_high'])})"
           if gone else "all sizes return")
    upto = fmt(max(back)) if back else "–"
    return Result(f"all return up to ε = {upto}; {esc}; {rs[0]['total']} perturbations per size",
                  verdict(ok), "a small basin: small perturbations are reabsorbed, larger ones escape" if ok else
                  "the perturbation sizes did not bracket the basin", ["perturbation.csv"])


def st_trajectories(d: Path) -> Result:
    last: dict[str, dict[str, str]] = {}
    for r in rows(d / "trajectories.csv"):
        last[r["model"]] = r
    ok = all(r["end"].startswith("consensus") and num(r["rho_mean"]) > 0.99 for r in last.values())
    return Result("; ".join(f"{m}: {r['end']}, mean |<x_i, v1>| {fmt(r['rho_mean'], 4)}" for m, r in last.items()),
                  verdict(ok), "one and three heads converge to consensus along v1" if ok else
                  "a trajectory ends elsewhere", ["trajectories.csv"])


def st_basins(d: Path) -> Result:
    parts, ok, slow = [], True, False
    for t in ("discrete", "continuous"):
        rs = [r for r in rows(d / "basins.csv") if r["time"] == t]
        if not rs:
            continue
        total = sum(int(r["count"]) for r in rs)
        nc = next((r for r in rs if r["end"] == "not converged"), None)
        conv = [r for r in rs if r["end"] != "not converged"]
        nconv = sum(int(r["count"]) for r in conv)
        v1 = sum(int(r["count"]) for r in conv if r["end"] == "consensus v1")
        ends = ", ".join(f"{r['end']} {ci(r['fraction'], r['ci_low'], r['ci_high'])}" for r in rs)
        parts.append(f"{t} ({total} starts): {ends}; of the converged, {v1}/{nconv} at consensus v1")
        slow |= nc is not None and num(nc["fraction"]) > 0.5
        ok &= nconv > 0 and v1 / nconv > 0.5
    cfg = config(d).get("config", {})
    why = ("most converged starts end at the principal consensus" if ok and not slow else
           f"most starts have not converged after {cfg.get('steps')} steps / t = {cfg.get('t1')} (slow, metastable "
           f"dynamics at n = {cfg.get('basin_n')}, β = {cfg.get('beta')}); every converged one is an eigenvector "
           "end, so the basins need longer runs, not a different model" if slow else
           "the principal consensus is not the main end here")
    return Result("; ".join(parts), verdict(ok and not slow), why, ["basins.csv", "config.json"])


PM = "power method"
CO = "consensus"
CL = "clusters"
ST = "multistability"

CLAIMS: tuple[Claim, ...] = (
    Claim("PM1", PM, "§3.2, Fig. 2(b), Figs. 6–7", "Passing through a layer, tokens tilt towards the principal "
          "eigenvector v1 of F = Σ O_h V_h: Δρ1 > 0, P1 > 1/2 and more than the average eigendirection",
          "pm_minilm", pm_layers, "metrics.png"),
    Claim("PM2", PM, "Fig. 6", "The spectral gap of the layer matrices is small in most layers", "pm_minilm", pm_gap,
          "eigenvalues.png"),
    Claim("PM3", PM, "Figs. 10–11", "With the FFN and the original affine LayerNorm the power-method tilt is masked",
          "pm_minilm", pm_ffn),
    Claim("PM4", PM, "§2.3, §3.3, Figs. 2, 9", "A rank-1 change of the last layer's output matrix steers the tokens "
          "to a chosen direction u: perfect alignment", "pm_minilm", pm_steer, "steered_metrics.png"),
    Claim("PM5", PM, "§3.1, Fig. 5", "Shared weights (ALBERT-like): the tokens reach consensus on v1, or rotate in "
          "the 2-D subspace of a complex pair, when the model is prolonged", "pm_shared", pm_shared),
    Claim("CO1", CO, "Thm. (hemisphere), §6.1", "Tokens in an open hemisphere reach consensus under time-varying "
          "weights; min_i <x_i, w> never decreases", "consensus", co_hemisphere, "synthetic.png"),
    Claim("CO2", CO, "Thm. (causal), §6.1", "Causal attention, two heads: the first token never moves, the others "
          "converge to it", "consensus", co_causal),
    Claim("CO3", CO, "Thm. (symmetric V), §6.1", "Causal attention, symmetric V: tokens converge to ±v1",
          "consensus", co_symmetric),
    Claim("CO4", CO, "§6.2, Fig. 7", "Without the FFN, periodic (trained) weights: the first-token measure decays "
          "to 0 pass after pass", "consensus", _passes("no_ffn_periodic", "GPT-2 XL / GPT-Neo 2.7B"), "passes.png"),
    Claim("CO5", CO, "§6.2, Fig. 8", "With the FFN the measure still decays to 0 (FFN changes the rate only)",
          "consensus", _passes("ffn_periodic", "GPT-2 XL / GPT-Neo 2.7B")),
    Claim("CO6", CO, "§6.2, Figs. 9–10", "Redrawn random weights, with the FFN: consensus still occurs",
          "consensus", _passes("ffn_redrawn", "random GPT-2 / GPT-Neo")),
    Claim("CO7", CO, "§6.2, Figs. 9–10", "Redrawn random weights, without the FFN: consensus still occurs",
          "consensus", _passes("no_ffn_redrawn", "random GPT-2 / GPT-Neo")),
    Claim("CL1", CL, "Thm. 3.1, Figs. 1, 5", "V = I: the rescaled tokens converge to the vertices of a convex "
          "polytope", "clusters", cl_polytope, "polytope.png"),
    Claim("CL2", CL, "Thm. 4.1, Fig. 6", "Good triple (top eigenvalue real, positive, simple): at most three "
          "parallel hyperplanes", "clusters", cl_hyperplanes, "hyperplanes.png"),
    Claim("CL3", CL, "Thm. 2.1, Fig. 3", "d = 1: the self-attention matrix converges to a Boolean matrix of low "
          "rank", "clusters", cl_boolean, "boolean.png"),
    Claim("CL4", CL, "§4, p. 7", "About 14% of real Ginibre matrices at d = 128 give a good triple", "clusters",
          cl_fourteen, "counts.png"),
    Claim("CL5", CL, "§4, p. 7", "The good-triple fraction vanishes as d → ∞, very slowly", "clusters",
          cl_decreasing),
    Claim("CL6", CL, "Figs. 7(a), 8", "A negative top eigenvalue repels the tokens along φ1: they diverge",
          "clusters", cl_negative, "other_spectra.png"),
    Claim("CL7", CL, "Fig. 4", "V > 0, Q > 0 random, K = I, d = 2: clusters show as a self-attention matrix of rank "
          "≤ 2 (the Q/K point clouds)", "qk_cloud", cl_qk, "qk_cloud.png"),
    Claim("CL8", CL, "the paper's code (polytope picture)", "Its own setting (softmax, V = I, 20 tokens uniform in "
          "[−5, 5]², horizon 5): tokens at the vertices of a polytope", "unnormalised", cl_paper_setting,
          "blowup.png"),
    Claim("ST1", ST, "Lemmas (consensus), Supp. D of the power-method paper", "Only the consensus at the principal "
          "eigenvector can be stable", "stability", st_consensus),
    Claim("ST2", ST, "Fig. 3(a)–(b)", "Multistability is common: stable bipartite consensus coexists with stable "
          "consensus", "stability", st_multistable, "counts.png"),
    Claim("ST3", ST, "Theorem (single head)", "The closed-form single-head conditions decide stability (checked "
          "against the Jacobian)", "stability", st_agree),
    Claim("ST4", ST, "Fig. 13(b) of the power-method paper", "A stable bipartite equilibrium has a very small basin: "
          "small perturbations return, slightly larger ones escape", "stability", st_perturb,
          "bipartite_perturbation.png"),
    Claim("ST5", ST, "Fig. 1; Fig. 13(a) of the power-method paper", "d = 3, n = 10: one head and several heads "
          "converge to consensus aligned with v1", "stability", st_trajectories, "sphere_trajectories.png"),
    Claim("ST6", ST, "Abstract, §5", "Stable ends align with eigenvectors of V, often but not exclusively the "
          "principal one", "stability", st_basins, "basins.png"),
)

PAPERS = {
    PM: "Li & Altafini, *Analogies between Transformer Layers and Power Method*",
    CO: "*The asymptotic behavior of attention in transformers* (consensus)",
    CL: "Geshkovski, Letrouit, Polyanskiy & Rigollet, *The emergence of clusters in self-attention dynamics*",
    ST: "Altafini, *Multistability of self-attention dynamics in transformers* "
        "(with Supp. D of the power-method paper)",
}

#: Claims about checkpoints that cannot be had offline: the command that reproduces them where they can.
OFFLINE = (
    (PM, "ALBERT base/large: real λ1 with v1, v2 nearly collinear; xlarge/xxlarge: complex pair, tokens in "
         "span(Re v1, Im v1) once prolonged (Fig. 5, Table 1)",
     "scripts/power_method_paper.sh albert/albert-base-v2 albert/albert-large-v2 albert/albert-xlarge-v2 "
     "albert/albert-xxlarge-v2"),
    (PM, "BERT, GPT-2, GPT-Neo: the tilt layer by layer (Figs. 2(b), 6–8) and steering (Figs. 2, 9)",
     "scripts/power_method_paper.sh google-bert/bert-base-uncased openai-community/gpt2-medium "
     "EleutherAI/gpt-neo-2.7B"),
    (CO, "GPT-2 XL and GPT-Neo 2.7B collapse to consensus with and without the FFN, trained and random weights "
         "(Figs. 7–10)", "jaxattn convert openai-community/gpt2-xl --out gpt2-xl.safetensors && "
     "scripts/consensus_paper.sh gpt2-xl.safetensors"),
)


def _listed(v) -> str:
    """A list option as the command line writes it (runs before lists were lists recorded that text)."""
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def scale(run: str, d: Path) -> str:
    """The scale a run was made at, read from its own ``config.json`` or summary table."""
    whole = config(d)
    c = whole.get("config", {})
    if run.startswith("pm_"):
        dims = whole.get("model_dims", {})
        shared = "shared, " if dims.get("shared") else ""
        model = (f"{whole.get('model')} (d {dims.get('d')}, {dims.get('heads')} heads, {shared}depth "
                 f"{dims.get('depth')})")
        return f"{model}; {c.get('num_init')} {c.get('init')} conditions × {c.get('n')} tokens; {c.get('dtype')}"
    if run == "consensus":
        return (f"{whole.get('model')}; {c.get('prompts')} prompts × {c.get('tokens')} tokens, "
                f"{c.get('passes')} passes, "
                f"{c.get('dtype')}; theorems: {c.get('synthetic_num')} × {c.get('synthetic_n')} tokens, "
                f"d {c.get('synthetic_d')}, t ≤ {c.get('t1')}, float64")
    if run == "clusters":
        return (f"{c.get('n')} tokens (pictures), {c.get('num')} conditions per (n, d, β) row, "
                f"n ∈ {{{_listed(c.get('table_n'))}}}, "
                f"t ≤ {c.get('t1')}; {c.get('good_samples')} matrices per d; float64")
    if run == "stability":
        return (f"d {c.get('d')}, n ∈ {{{_listed(c.get('tokens'))}}}, {c.get('models')} models per n; "
                f"{c.get('perturb_num')} perturbations per size; {c.get('basin_num')} basin starts of "
                f"{c.get('basin_n')} tokens; float64")
    if run == "qk_cloud":
        s = rows(d / "qk_summary.csv")[0]
        return f"{s['draws']} draws × {s['n']} tokens, d {s['d']}, t ≤ {fmt(s['t1'])}; float64"
    if run == "unnormalised":
        s = rows(d / "paper_setting.csv")[0]
        return f"{s['draws']} draws × {s['n']} tokens, d 2, t ≤ {fmt(s['t1'])}; float64"
    return "?"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


IMG = "img/reproductions"


def _copy_figure(src: Path, dest: Path, max_width: int = 900) -> None:
    """A small PNG for the docs: at most ``max_width`` pixels wide."""
    from PIL import Image

    with Image.open(src) as im:
        if im.width > max_width:
            im = im.resize((max_width, round(im.height * max_width / im.width)))
        # a 128-colour palette: plots need no more, and the repository stays small
        im.convert("RGB").quantize(colors=128).save(dest, optimize=True)


def build(runs: Path, img_dir: Path | None = None) -> tuple[list[dict], dict]:
    """Every claim's cells (with the run files they were read from) and the run metadata."""
    timings = json.loads((runs / "timings.json").read_text()) if (runs / "timings.json").exists() else {}
    cells = []
    missing = sorted({c.run for c in CLAIMS if not (runs / c.run / "config.json").exists()
                      and not any((runs / c.run).glob("*.csv"))})
    for c in CLAIMS:
        d = runs / c.run
        if c.run in missing:
            continue
        res = c.measure(d)
        fig = ""
        if c.figure and (d / c.figure).exists():
            fig = f"{IMG}/{c.run}_{c.figure}"
            if img_dir is not None:
                img_dir.mkdir(parents=True, exist_ok=True)
                _copy_figure(d / c.figure, img_dir / f"{c.run}_{c.figure}")
        cmd = timings.get(c.run, {}).get("command") or RUN_BY_NAME[c.run].command(False, str(d))
        cells.append({"id": c.id, "paper": c.paper, "where": c.where, "statement": c.statement,
                      "jaxattn": res.value, "scale": scale(c.run, d), "command": cmd, "verdict": res.verdict,
                      "why": res.why, "figure": fig, "run": c.run,
                      "sources": [str(d / s) for s in res.sources]})
    meta = {"timings": timings, "missing": missing}
    for r in RUNS:
        cfg = config(runs / r.name)
        if cfg:
            meta.setdefault("device", cfg.get("device", {}))
            meta.setdefault("versions", cfg.get("versions", {}))
    return cells, meta


def render(cells: list[dict], meta: dict, runs: Path) -> str:
    dev = meta.get("device", {})
    ver = meta.get("versions", {})
    reduced = any(t.get("reduced") for t in meta["timings"].values())
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# The papers, reproduced",
        "",
        f"*Generated by `make reproduce{' REDUCED=1' if reduced else ''}` on {date}; device "
        f"{dev.get('backend', '?')} ({dev.get('host', dev.get('machine', '?'))}); jax {ver.get('jax', '?')}, "
        f"jaxattn {ver.get('jaxattn', '?')}. Every number below is read from the runs' CSV files by "
        "`scripts/reproduce.py`; do not edit this page by hand.*",
        "",
        "Each row is one checkable claim of a paper: what the paper says, what jaxattn measured, the scale of the run "
        "(conditions, tokens, dimensions, samples, precision), the command that produced it and the verdict. "
        "Intervals are 95% Wilson intervals. *Differs* rows say why.",
        "",
    ]
    if reduced:
        out += ["**Reduced mode**: tiny scales for the test suite; the verdicts mean nothing at this size.", ""]
    if meta["missing"]:
        out += [f"**Not run yet** (their claims are left out): {', '.join(meta['missing'])}.", ""]
    for paper, title in PAPERS.items():
        rows_ = [c for c in cells if c["paper"] == paper]
        if not rows_:
            continue
        ok = sum(c["verdict"] == "reproduced" for c in rows_)
        out += [f"## {title}", "", f"{ok} of {len(rows_)} claims reproduced.", "",
                "| id | where | the paper says | jaxattn | scale | command | verdict | figure |",
                "|---|---|---|---|---|---|---|---|"]
        for c in rows_:
            fig = f"[{Path(c['figure']).name}]({c['figure']})" if c["figure"] else "–"
            out.append("| " + " | ".join(_cell(x) for x in (
                c["id"], c["where"], c["statement"], c["jaxattn"], c["scale"], f"`{c['command']}`",
                f"**{c['verdict']}**: {c['why']}", fig)) + " |")
        figs = [c for c in rows_ if c["figure"]]
        if figs:
            out.append("")
            for c in figs:
                out += [f"**{c['id']}** ({Path(c['figure']).name}):", "", f"![{c['id']}]({c['figure']})", ""]
        out.append("")
    out += _unnormalised_section(runs)
    out += ["## Claims about checkpoints that cannot be had offline", "",
            "These models' weights are not on this machine; each command reproduces the claim where they are "
            "(a network or local checkpoint folders).", "",
            "| paper | claim | command |", "|---|---|---|"]
    out += [f"| {PAPERS[p].split(',')[0]} | {_cell(claim)} | `{_cell(cmd)}` |" for p, claim, cmd in OFFLINE]
    out += ["", "## The runs", "", "| run | wall time (s) | command |", "|---|---|---|"]
    out += [f"| {name} | {t['wall_s']} | `{_cell(t['command'])}` |" for name, t in meta["timings"].items()]
    out += ["", "Wall times on 2 shared CPU cores under `nice` (other jobs running), not benchmarks.", ""]
    return "\n".join(out)


def _dash(x: str) -> str:
    """Not applicable (nan in the CSV) as a dash."""
    return "–" if math.isnan(float(x)) else fmt(x)


def _unnormalised_section(runs: Path) -> list[str]:
    from jaxattn.analysis import blowup

    d = runs / "unnormalised"
    if not (d / "blowup.csv").exists():
        return []
    out = ["## The unnormalised kernel: the model blows up, not the solver", "",
           "`jaxattn.analysis.blowup`: the flow ẋ_i = (1/n) Σ_j exp(β⟨x_i, x_j⟩) V x_j (Q = K = I, d = 2) solved "
           "with adaptive Tsit5 until the largest score reaches a cap. The time is measured twice (rtol, cap = "
           f"{blowup.CHECKS[0]} and {blowup.CHECKS[1]}): the last column is their largest difference, so the "
           "blow-up time is a "
           "property of the equation. For V = I every token obeys u' ≥ (2/n)(u e^{βu} − (n−1)/(eβ)) (u = |x_i|²), "
           "a finite-time blow-up once u e^{βu} > (n−1)/(eβ) (the bound column: the fraction of draws where a token "
           "starts above that constant, and of those, where the measured time is within the bound); the rescaled "
           "tokens z = e^{−tV}x blow up at the same time. For V = −I the same estimate bounds the growth by a "
           "linear function of t: no blow-up (the explicit solver fails on a few stiff draws, counted as failures, "
           "not blow-ups). Well-posed horizons: t < t*, with t* as tabulated; no initial distribution avoids the "
           "blow-up for V = I, small tokens only delay it. The paper's "
           "own code normalises the rows (softmax), so its setting (row CL8) is well-posed.", "",
           "| V, initial tokens | draws × n | blown up by t = " + "20" + " | median t* | before t = 1 | before t = 5 | "
           "comparison bound applies / holds | largest change of t* between the two | solver failures |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows(d / "blowup.csv"):
        out.append(f"| {r['setting']} | {r['draws']} × {r['n']} | {ci(r['fraction'], r['ci_low'], r['ci_high'])} | "
                   f"{fmt(r['t_median'])} | {fmt(r['before_1'])} | {fmt(r['before_5'])} | "
                   f"{fmt(r['bound_applies'])} / {_dash(r['bound_holds'])} | {_dash(r['solver_abs_diff'])} | "
                   f"{r['solver_failures']} |")
    out += ["", f"One token (n = 1) against the closed form (E1(βu0) − E1({blowup.CHECKS[1][1]:g}))/2:", "",
            "| u0 = abs(x0)² | measured | closed form | relative error | blow-up time E1(βu0)/2 |",
            "|---|---|---|---|---|"]
    for r in rows(d / "single_token.csv"):
        out.append(f"| {fmt(r['u0'])} | {fmt(r['measured'], 6)} | {fmt(r['closed_form'], 6)} | {fmt(r['rel_error'])} | "
                   f"{fmt(r['blowup_time'], 6)} |")
    out.append("")
    return out


def write_page(runs: Path, page: Path) -> list[dict]:
    docs_page = page.resolve() == (ROOT / "docs/reproductions.md").resolve()
    img_dir = (ROOT / "docs" / IMG) if docs_page else page.parent / IMG
    cells, meta = build(runs, img_dir)
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(cells, meta, runs))
    (runs / "cells.json").write_text(json.dumps(cells, indent=1, ensure_ascii=False) + "\n")
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reduced", action="store_true", help="tiny scales (the test's mode)")
    parser.add_argument("--runs", default=None, help="run directory [runs/reproduce or runs/reproduce-reduced]")
    parser.add_argument("--page", default=None,
                        help="page to write [docs/reproductions.md; RUNS/reproductions.md with --reduced]")
    parser.add_argument("--only", default="", help="comma-separated runs to (re)do: " + ",".join(RUN_BY_NAME))
    parser.add_argument("--page-only", action="store_true", help="write the page from the runs already there")
    args = parser.parse_args(argv)
    runs = Path(args.runs or ("runs/reproduce-reduced" if args.reduced else "runs/reproduce"))
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(RUN_BY_NAME))
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; known: {', '.join(RUN_BY_NAME)}")
    if not args.page_only:
        run_all(runs, args.reduced, only)
    if only and not args.page_only:
        return 0
    default_page = runs / "reproductions.md" if args.reduced else ROOT / "docs/reproductions.md"
    page = Path(args.page) if args.page else default_page
    write_page(runs, page)
    print(f"reproduce: page {page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
