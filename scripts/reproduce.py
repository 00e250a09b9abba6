#!/usr/bin/env python3
"""Run every reproduction of the four papers and write ``docs/reproductions.md`` from the runs.

    python scripts/reproduce.py                       # the paper-scale runs into runs/reproduce, then the page
    python scripts/reproduce.py --reduced --runs DIR  # tiny scales (minutes), page into DIR
    python scripts/reproduce.py --only consensus      # one run again (then --page-only for the page)
    python scripts/reproduce.py --claims CO4,CL7      # the runs those claims read, then the page
    python scripts/reproduce.py --page-only           # the page again from the runs already there

One registry holds every run (a ``jaxattn`` command at a full and a reduced scale, or one of the extra
computations: :mod:`jaxattn.studies.qk_cloud`, :mod:`jaxattn.studies.blowup`, :mod:`jaxattn.studies.pm_cases`,
:mod:`jaxattn.studies.architectures`); ``scripts/reproduce_claims.py`` holds every claim (the paper's statement
and a function that reads the run's CSV files and returns jaxattn's numbers and the checks that decide the
verdict). The page is generated whole, so it cannot drift from what was run; ``make reproduce`` runs this script.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "scripts"):  # run as a script from a checkout; the claims live beside this file
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from reproduce_claims import CL, CLAIMS, CO, PM, ST, Claim, config, rows  # noqa: E402

from jaxattn.studies import verdicts  # noqa: E402
from jaxattn.studies.verdicts import (  # noqa: E402
    THRESHOLDS,
    VERDICTS,
    Check,
    Result,
    ci,
    compare,
    fmt,
    fraction,
    judge,
    none_of,
)

__all__ = ["CLAIMS", "RUNS", "THRESHOLDS", "VERDICTS", "Check", "Claim", "RecordError", "Result", "build", "ci",
           "compare", "fraction", "judge", "main", "merge_record", "none_of", "read_record", "record_path",
           "render_record", "scale", "write_page"]

#: Version of the page's record (reproductions.json); another is refused
RECORD_FORMAT = 1


# ------------------------------------------------------------------------------------------ the runs
@dataclass(frozen=True)
class Run:
    """One computation: ``argv`` of ``jaxattn`` (``extra`` empty) or the options of an extra computation."""

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


#: the reduced mode of every GPT-2 architecture run: GPT-2's tiny stand-in, 2 prompts of 6 tokens, 2 passes
_GPT2_TINY = ("--name", "gpt2-tiny", "--prompts", "2", "--tokens", "6", "--passes", "2", "--until", "0.5", "--block",
              "1")

RUNS: tuple[Run, ...] = (
    Run("pm_minilm",
        ("analyze", "minilm", "--num-init", "1000", "--n", "10", "--init", "gaussian",
         "--gammas", "1,10,20,50,100,1000,10000",
         "--steer-target", "0", "--no-sensitivity"),
        ("analyze", "minilm", "--num-init", "8", "--n", "4", "--gammas", "10,1000", "--steer-target", "0",
         "--no-sensitivity")),
    Run("pm_shared",
        ("analyze", "random", "--d", "128", "--heads", "4", "--depth", "12", "--shared", "--num-init", "1000",
         "--n", "10", "--prolong", "10", "--gammas", "1", "--steer-target", "0", "--no-sensitivity"),
        ("analyze", "random", "--d", "8", "--heads", "2", "--depth", "2", "--shared", "--num-init", "16", "--n", "4",
         "--prolong", "2", "--gammas", "1", "--no-sensitivity", "--steer-target", "0")),
    Run("pm_cases", ("--num", "200", "--n", "10", "--d", "16", "--depth", "12", "--prolong", "40", "--heads", "2",
                     "--theorem-d", "6", "--steps", "1000"),
        ("--num", "4", "--n", "4", "--d", "6", "--depth", "3", "--prolong", "4", "--heads", "2", "--theorem-d", "4",
         "--steps", "40"), extra="pm_cases"),
    # 16 prompts of 200 tokens: one block of MiniLM's default lane width on a CPU; 1000 passes, the paper's horizon
    # (1000-2000), since repeated passes no longer pad a few prompts to 64 lanes
    Run("consensus",
        ("consensus", "minilm", "--prompts", "16", "--tokens", "200", "--passes", "1000", "--until", "1e-3",
         "--block", "10", "--synthetic-n", "10", "--synthetic-num", "128", "--t1", "40"),
        ("consensus", "minilm", "--prompts", "2", "--tokens", "6", "--passes", "2", "--until", "0.5", "--block", "1",
         "--synthetic-num", "2", "--t1", "3")),
    # Theorem 5.1 at GPT-2's size in a run of its own: its one float64 solve (4 conditions of 200 tokens in d = 768,
    # rtol 1e-9) took 79 minutes on two cores shared with other runs, and held the whole consensus run hostage. The
    # passes and the small theorem settings around it are the least the command runs.
    Run("co_theorem51",
        ("consensus", "minilm", "--prompts", "1", "--tokens", "3", "--passes", "1", "--synthetic-num", "1",
         "--t1", "40", "--gpt2-like-n", "200"),
        ("consensus", "minilm", "--prompts", "1", "--tokens", "3", "--passes", "1", "--synthetic-num", "1",
         "--t1", "3", "--gpt2-like-n", "5", "--gpt2-like-d", "4")),
    # the consensus paper's Theorem 3.1 (its potential, with two controls that break the hypothesis), Theorem 5.2 with
    # time-varying Q, K and Theorem 5.3 (a rotating V): small float64 flows, most of the time compiling them
    Run("co_theorems", ("--sizes", "8x3,16x8", "--betas", "1,2,4", "--models", "4", "--starts", "16", "--t1", "10",
                        "--n", "10", "--d", "3", "--sets", "10", "--horizon", "40", "--omegas",
                        "0,0.01,0.02,0.05,0.1,0.2"),
        ("--sizes", "4x3", "--betas", "2", "--models", "1", "--starts", "4", "--t1", "2", "--saved", "21", "--n",
         "4", "--d", "3", "--sets", "3", "--horizon", "4", "--omegas", "0,0.1"),
        extra="co_theorems"),
    # 8 prompts: the default lane width of a 200-token GPT-2-sized prompt on a CPU, so no lane is padding; 100
    # passes (the consensus run's horizon): 860 s for the four GPT-2 runs on two cores
    Run("co_gpt2", ("--name", "gpt2", "--prompts", "8", "--tokens", "200", "--passes", "100", "--until", "1e-3",
                    "--block", "10"),
        _GPT2_TINY,
        extra="architecture"),
    # GPT-2 medium to XL (XL is the paper's own model): 8 prompts fill medium's default batch width, 4 that of large
    # and XL with the FFN; the passes are what two cores allow (the four XL runs ~110 s a pass); the command for the
    # paper's 1000 passes is among the larger runs
    Run("co_gpt2_medium", ("--name", "gpt2-medium", "--prompts", "8", "--tokens", "200", "--passes", "20", "--until",
                           "1e-3", "--block", "5"),
        _GPT2_TINY,
        extra="architecture"),
    Run("co_gpt2_large", ("--name", "gpt2-large", "--prompts", "4", "--tokens", "200", "--passes", "10", "--until",
                          "1e-3", "--block", "5"),
        _GPT2_TINY,
        extra="architecture"),
    Run("co_gpt2_xl", ("--name", "gpt2-xl", "--prompts", "4", "--tokens", "200", "--passes", "30", "--until", "1e-3",
                       "--block", "5"),
        _GPT2_TINY,
        extra="architecture"),
    Run("co_gptneo", ("--name", "gpt-neo-125M", "--prompts", "8", "--tokens", "200", "--passes", "100", "--until",
                      "1e-3", "--block", "10"),
        ("--name", "gpt-neo-tiny", "--prompts", "2", "--tokens", "6", "--passes", "2", "--until", "0.5", "--block",
         "1"), extra="architecture"),
    Run("clusters",
        ("clusters", "--n", "40", "--n-1d", "40", "--t1", "15", "--num", "64", "--table-n", "10,20,40",
         "--table-d", "2,3", "--table-beta", "1", "--good-d", "1,2,4,8,16,32,64,128", "--good-samples", "60000",
         "--ensembles", "ginibre", "--check-num", "64", "--rate-n", "10,20,40,80"),
        ("clusters", "--n", "6", "--n-1d", "6", "--t1", "3", "--num", "8", "--table-n", "5", "--table-d", "2",
         "--table-beta", "1", "--good-d", "2,128", "--good-samples", "40", "--ensembles", "ginibre", "--check-num",
         "2", "--rate-n", "5,8")),
    # Fig. 7(b) at the paper's n = 256, d = 128, coordinate by coordinate, to the horizon at which its coordinates of
    # eigenvalue λ ≥ 0.86 have had the time to cluster by 3 decades (λ t ≥ 3 ln 10); the smaller eigenvalues need
    # longer, up to t ≈ 3 ln 10 / λ_min+ (the row says how long), but the flow stiffens as e^{tV} sharpens the
    # attention: one condition took 4,093 steps (2 minutes) to t = 8 and more than 25 minutes to t = 15
    Run("clusters_high_dim", ("--n", "256", "--d", "128", "--num", "4", "--t1", "8"),
        ("--n", "8", "--d", "4", "--num", "2", "--t1", "15", "--saves", "5"), extra="clusters_high_dim"),
    # the clusters paper in discrete time (Remarks 1, 4: the Euler iteration at Δt = 1, 0.5, 0.1) and its good
    # triples in R³ (Figs. 13–14: 8 random triples × 32 conditions, n = 40 as the paper's figures); a minute or two
    Run("cl_theorems", ("--dts", "1,0.5,0.1", "--horizon", "30", "--num", "64", "--table-n", "10,20,40", "--table-d",
                        "2,3", "--good-num", "64", "--triples", "8", "--triple-num", "32", "--triple-n", "40",
                        "--triple-horizons", "2"),
        ("--dts", "1,0.5", "--horizon", "20", "--num", "4", "--table-n", "5", "--table-d", "2", "--good-num", "4",
         "--triples", "2", "--triple-num", "2", "--triple-n", "6", "--triple-horizons", "2"), extra="cl_theorems"),
    Run("stability",
        ("stability", "--d", "3", "--tokens", "3,4,5,6,8,12,16", "--models", "40", "--exhaustive-max", "10",
         "--alpha", "0.5", "--beta", "4", "--search", "100", "--perturb-num", "32", "--basin-num", "500",
         "--basin-n", "10", "--steps", "3000", "--t1", "1500", "--multi-head-models", "10", "--heads", "3", "--oja",
         "--basin-models", "12", "--basin-starts", "64", "--beta-sweep-models", "40"),
        ("stability", "--tokens", "3,4", "--exhaustive-max", "3", "--patterns", "4", "--models", "3", "--basin-num",
         "8", "--basin-n", "3", "--steps", "50", "--t1", "20", "--perturb-num", "2", "--search", "5",
         "--multi-head-models", "2", "--oja", "--basin-models", "2", "--basin-starts", "4", "--beta-sweep-models",
         "3", "--beta-sweep", "0.05,16", "--beta-sweep-n", "4")),
    # the power-method paper's Supp. Lemmas 7 and 9 and §2.3's steered spectrum (seconds: small maps, one flow, the
    # last layer's eigenvalues in float64)
    Run("pm_lemmas", ("--models", "12", "--starts", "32", "--betas", "1,4,9", "--steps", "1500", "--lyap-num", "64",
                      "--alphas", "0.2,0.4,1,1.5", "--gammas", "1,10,20,100,1000", "--eigen", "3", "--model",
                      "minilm"),
        ("--models", "2", "--starts", "8", "--betas", "4", "--steps", "300", "--lyap-num", "4", "--lyap-steps", "50",
         "--t1", "5", "--alphas", "0.2,1.5", "--gammas", "10,1000", "--eigen", "2", "--model", "minilm"),
        extra="pm_lemmas"),
    Run("qk_cloud", ("--num", "128", "--n", "20", "--t1", "30"), ("--num", "4", "--n", "5", "--t1", "1"),
        extra="qk_cloud"),
    Run("unnormalised", ("--num", "64", "--n", "20"), ("--num", "4", "--n", "4"), extra="unnormalised"),
)
RUN_BY_NAME = {r.name: r for r in RUNS}


#: The runs of the studies that have no command of their own: the function each calls, as "module:function".
EXTRA_STUDIES = {"qk_cloud": "jaxattn.studies.qk_cloud:study", "unnormalised": "jaxattn.studies.blowup:study",
                 "pm_cases": "jaxattn.studies.pm_cases:study", "pm_lemmas": "jaxattn.studies.pm_lemmas:study",
                 "co_theorems": "jaxattn.studies.co_theorems:study", "cl_theorems": "jaxattn.studies.cl_theorems:study",
                 "clusters_high_dim": "jaxattn.studies.clusters:fig7b"}


def _extra_options(argv: list[str], fn=None) -> dict[str, Any]:
    """``--key value`` pairs as keyword arguments of ``fn``: a number where its parameter is declared a number (an
    ``int`` or a ``float``), the text where it is declared text (``--betas 4``: the comma-separated list "4")."""
    hints = {k: q.annotation for k, q in inspect.signature(fn, eval_str=True).parameters.items()} if fn else {}
    opts = dict(zip(argv[0::2], argv[1::2], strict=True))

    def value(k: str, v: str) -> int | float | str:
        if hints.get(k) is str:
            return v
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return v

    return {key: value(key, v) for key, v in ((k.lstrip("-").replace("-", "_"), v) for k, v in opts.items())}


def _architecture(out: Path, name: str, prompts: int, tokens: int, passes: int, until: float, block: int,
                  seed: int = 0) -> None:
    from jaxattn.studies import consensus
    from jaxattn.studies.architectures import random_architecture

    model = random_architecture(name, seed)
    # transformers' random weights are the model's own: its periodic runs are the paper's random periodic ones
    cfg = consensus.Config(prompts=prompts, tokens=tokens, passes=passes, until=until, block=block, synthetic=False,
                           random_periodic=False, seed=seed)
    consensus.run(out, cfg, model=model, model_name=f"{name} (random weights, seed {seed})")


def run_one(run: Run, runs: Path, reduced: bool) -> float:
    """Run ``run`` into ``runs/<name>`` (replacing an earlier run) and return its wall time in seconds."""
    out = runs / run.name
    start = time.perf_counter()
    if out.exists():  # a fresh run each time (an interrupted one of another scale would be refused)
        shutil.rmtree(out)
    if run.extra:
        from jaxattn.io.results import atomic_write_text

        out.mkdir(parents=True)
        fn = None
        if run.extra in EXTRA_STUDIES:
            module, name = EXTRA_STUDIES[run.extra].split(":")
            fn = getattr(importlib.import_module(module), name)
        opts = _extra_options(run.argv(reduced), fn)
        atomic_write_text(out / "options.json", json.dumps(opts, indent=1) + "\n")  # the scale the page reports
        if run.extra == "unnormalised":
            fn(out, reduced=reduced, **opts)
        elif fn is not None:
            fn(out, **opts)
        else:
            _architecture(out, **opts)
        if not (out / "config.json").exists():  # the device and versions, as the commands' runs record them
            from jaxattn.io.results import provenance, write_json

            write_json(out / "config.json", {"command": run.name, "config": opts, **provenance()})
    else:
        from jaxattn.cli import main

        argv = [*run.argv(reduced), "--out", str(out), "--no-progress"]
        status = main(argv)
        if status:
            raise SystemExit(f"reproduce: `jaxattn {' '.join(argv)}` failed with status {status}")
    return time.perf_counter() - start


def default_runs(reduced: bool) -> str:
    """Where the runs go unless ``--runs`` says otherwise (relative to the repository)."""
    return "runs/reproduce-reduced" if reduced else "runs/reproduce"


def portable(command: str, runs: Path, reduced: bool) -> str:
    """``command`` with the run directory ``runs`` (as given, or absolute) written as the default one."""
    for form in {str(runs.resolve()), str(runs)} - {default_runs(reduced)}:
        command = command.replace(f"{form}/", f"{default_runs(reduced)}/").replace(f"--runs {form} ",
                                                                                   f"--runs {default_runs(reduced)} ")
    return command


def record_timing(runs: Path, run: Run, wall: float, reduced: bool) -> None:
    """Add ``run``'s wall time to ``runs/timings.json``: read, changed and replaced under a lock, so that several
    reproduce processes sharing the directory (``--only`` in parallel) keep each other's entries. The command is
    recorded as a reader of the page would type it, with the default run directory: never this machine's path."""
    from filelock import FileLock

    path = runs / "timings.json"
    with FileLock(str(path) + ".lock"):
        timings = json.loads(path.read_text()) if path.exists() else {}
        timings[run.name] = {"wall_s": round(wall, 1), "reduced": reduced, "commit": _commit(),
                             "command": run.command(reduced, f"{default_runs(reduced)}/{run.name}")}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(timings, indent=1) + "\n")
        tmp.replace(path)


def run_all(runs: Path, reduced: bool, only: list[str]) -> None:
    runs.mkdir(parents=True, exist_ok=True)
    for run in RUNS:
        if only and run.name not in only:
            continue
        print(f"reproduce: {run.name} ...", file=sys.stderr, flush=True)
        wall = run_one(run, runs, reduced)
        record_timing(runs, run, wall, reduced)
        print(f"reproduce: {run.name} done in {wall:.0f} s", file=sys.stderr, flush=True)


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
    (CL, "ALBERT's learned value matrix gives a good triple: the top eigenvalue of V = [V_1; …; V_H] is real, "
         "positive and simple, and ⟨Qφ1, Kφ1⟩ > 0 (§4, Fig. 10)",
     "python -c \"import numpy as np, jaxattn as ja; from jaxattn.analysis.clusters import TOP_CLASSES, "
     "classify_top, top_eigen; m = ja.load_any('albert/albert-base-v2'); st = lambda a: "
     "np.concatenate(list(np.asarray(a[0], np.float64))); V, Q, K = st(m.layers.v), st(m.layers.q), "
     "st(m.layers.k); phi = top_eigen(V).right.real; print(TOP_CLASSES[int(classify_top(V))], "
     "float((Q @ phi) @ (K @ phi)))\""),
)

#: Larger runs than two CPU cores allow: the same computations at the papers' scale (a GPU for the largest).
LARGER = (
    (CO, "the consensus runs at the paper's horizon: 100 prompts of 200 tokens, 1000 passes (the paper's code runs "
         "1000–2000)",
     "jaxattn consensus minilm --prompts 100 --tokens 200 --passes 1000 --until 1e-3 --synthetic-num 128 --t1 40 "
     "--gpt2-like-n 200 --out runs/consensus-100"),
    (CO, "the paper's architectures with random weights, GPT-2 small to XL and GPT-Neo 125M to 2.7B (Figs. 9–10)",
     "for m in gpt2 gpt2-medium gpt2-large gpt2-xl gpt-neo-125M gpt-neo-1.3B gpt-neo-2.7B; do jaxattn architectures "
     "$m --prompts 100 --tokens 200 --passes 1000 --until 1e-3 --out runs/random-$m; done"),
    (CL, "Fig. 7(b) over many initial conditions, and the theorem checks at 256 conditions",
     "jaxattn clusters --n 40 --t1 15 --check-num 256 --high-dim-n 256 --high-dim-d 128 --out runs/clusters-large"),
    (ST, "the counts at more models and larger n (sampled sign patterns)",
     "jaxattn stability --tokens 3,4,5,6,8,12,16,24,32 --models 200 --basin-models 100 --basin-starts 256 --oja "
     "--multi-head-models 100 --out runs/stability-large"),
)


def _listed(v) -> str:
    """A list option as the command line writes it (runs before lists were lists recorded that text)."""
    return ",".join(map(str, v)) if isinstance(v, list) else str(v)


def scale(run: str, d: Path) -> str:
    """The scale a run was made at, read from its own ``config.json``, options or summary table."""
    whole = config(d)
    c = whole.get("config", {})
    if run in ("pm_minilm", "pm_shared"):
        dims = whole.get("model_dims", {})
        shared = "shared, " if dims.get("shared") else ""
        model = (f"{whole.get('model')} (d {dims.get('d')}, {dims.get('heads')} heads, {shared}depth "
                 f"{dims.get('depth')})")
        return f"{model}; {c.get('num_init')} {c.get('init')} conditions × {c.get('n')} tokens; {c.get('dtype')}"
    if run == "pm_cases":
        o = _options(d)
        return (f"{o.get('num')} Gaussian conditions × {o.get('n')} tokens; Case 3: d {o.get('d')}, depth "
                f"{o.get('depth')} prolonged {o.get('prolong')}×; Theorem 1: d {o.get('theorem_d')}, {o.get('heads')} "
                f"heads, {o.get('steps')} steps; float64")
    if run == "clusters_high_dim":
        o = _options(d)
        return (f"Fig. 7(b): {o.get('num')} conditions of {o.get('n')} Gaussian tokens, d {o.get('d')}, random Q, K "
                f"and symmetric V, t ≤ {o.get('t1')}; float64")
    if run == "pm_lemmas":
        o = _options(d)
        return (f"Lemma 9: {o.get('models')} single-head models (d 3, n 6), β ∈ {{{o.get('betas')}}}, "
                f"{o.get('starts')} starts each; Lemmas 1/7: {o.get('lyap_num')} starts, α ∈ {{{o.get('alphas')}}} "
                f"and the flow; §2.3: {o.get('model')}'s last layer, γ ∈ {{{o.get('gammas')}}}; float64")
    if run == "cl_theorems":
        o = _options(d)
        return (f"discrete time: Δt ∈ {{{o.get('dts')}}} to k Δt = {o.get('horizon')}, V = I: {o.get('num')} Gaussian "
                f"conditions per (n, d), n ∈ {{{o.get('table_n')}}}, d ∈ {{{o.get('table_d')}}}; good triple (d 2): "
                f"{o.get('good_num')} conditions of {o.get('triple_n')} tokens per Δt; R³: {o.get('triples')} good "
                f"triples × {o.get('triple_num')} conditions of {o.get('triple_n')} tokens, the flow to "
                f"{o.get('triple_horizons')}× the horizon of clear clusters; float64")
    if run == "co_theorem51":
        return (f"{c.get('gpt2_like_n')} tokens × 4 conditions, d {c.get('gpt2_like_d')}, two causal heads, V = I, "
                f"t ≤ {c.get('t1')}, float64")
    if run == "co_theorems":
        o = _options(d)
        return (f"Theorem 3.1: {o.get('models')} models × {o.get('starts')} starts per n×d ∈ {{{o.get('sizes')}}}, "
                f"β ∈ {{{o.get('betas')}}}, softmax and unnormalised, t ≤ {o.get('t1')}; Theorems 5.2–5.3: "
                f"{o.get('models')} models × {o.get('starts')} starts of {o.get('n')} tokens, d {o.get('d')}, "
                f"t ≤ {o.get('horizon')}, ω ∈ {{{o.get('omegas')}}}; float64")
    if run == "consensus" or run.startswith(("co_gpt2", "co_gptneo")):
        passes = max((int(r["passes"]) for r in rows(d / "summary.csv")), default=0)
        text = (f"{whole.get('model')}; {c.get('prompts')} prompts × {c.get('tokens')} tokens, up to {c.get('passes')} "
                f"passes (stopping once every finite prompt is below {c.get('until')}; longest run {passes}), "
                f"{c.get('dtype')}")
        if c.get("synthetic"):
            sd = int(c.get("synthetic_d", 0))  # two heads need an even d: that setting runs at the next one
            dims = f"d {sd}" + (f" (two heads: d {sd + 1})" if sd % 2 else "")
            text += (f"; theorems: {c.get('synthetic_num')} × {c.get('synthetic_n')} tokens, {dims}, "
                     f"t ≤ {c.get('t1')}, float64")
        return text
    if run == "clusters":
        return (f"{c.get('n')} tokens (pictures), {c.get('num')} conditions per (n, d, β) row, "
                f"n ∈ {{{_listed(c.get('table_n'))}}}, t ≤ {c.get('t1')}; {c.get('good_samples')} matrices per d; "
                f"theorem checks {c.get('check_num')} conditions each (Fig. 7(a) to at least the horizon its spectrum "
                "sets); float64")
    if run == "stability":
        return (f"d {c.get('d')}, n ∈ {{{_listed(c.get('tokens'))}}}, {c.get('models')} models per n "
                f"(exhaustive up to n = {c.get('exhaustive_max')}); {c.get('perturb_num')} perturbations per size; "
                f"{c.get('basin_num')} basin starts of {c.get('basin_n')} tokens; {c.get('basin_models')} other models "
                f"× {c.get('basin_starts')} starts; {c.get('multi_head_models')} multi-head models per n"
                + (f" and {min(c.get('basin_models') or 0, c.get('models') or 0)} Oja models per n" if c.get("oja")
                   else "") + f", each × {c.get('basin_starts')} random starts"
                + (f"; β sweep {{{_listed(c.get('beta_sweep'))}}}, {c.get('beta_sweep_models')} models at n = "
                   f"{c.get('beta_sweep_n')}" if c.get("beta_sweep_models") else "") + "; float64")
    if run == "qk_cloud":
        s = rows(d / "qk_summary.csv")[0]
        return f"{s['draws']} draws × {s['n']} tokens, d {s['d']}, t ≤ {fmt(s['t1'])}; float64"
    if run == "unnormalised":
        s = rows(d / "paper_setting.csv")[0]
        return f"{s['draws']} draws × {s['n']} tokens, d 2, t ≤ {fmt(s['t1'])}; float64"
    return "?"


def _options(d: Path) -> dict:
    path = d / "options.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _cell(text: str) -> str:
    """``text`` in one table cell: pipes escaped, and a bracket right after another (``[0.1, 0.2] [tag]``) escaped,
    which Markdown would read as a reference link (``mkdocs build --strict`` then fails on the missing target)."""
    return re.sub(r"\]( ?)\[", r"]\1\\[", text.replace("|", "\\|").replace("\n", " "))


IMG = "img/reproductions"


def _copy_figure(src: Path, dest: Path, max_width: int = 900) -> None:
    """A small PNG for the docs: at most ``max_width`` pixels wide."""
    import io

    from PIL import Image

    from jaxattn.io.results import atomic_write_bytes  # an interrupted copy leaves the old figure, never half of one

    with Image.open(src) as im:
        if im.width > max_width:
            im = im.resize((max_width, round(im.height * max_width / im.width)))
        # a 128-colour palette: plots need no more, and the repository stays small
        buf = io.BytesIO()
        im.convert("RGB").quantize(colors=128).save(buf, format="PNG", optimize=True)
    atomic_write_bytes(dest, buf.getvalue())


def _present(d: Path) -> bool:
    return (d / "config.json").exists() or any(d.glob("*.csv"))


#: The studies whose figures are drawn from a finished run's tables (``claim_figures(run, dest)``), so that a run made
#: before one of its figures existed shows it too: the run's own file first, these only where it has none.
DRAWN_FROM_TABLES = {"pm_lemmas": "jaxattn.studies.pm_lemmas", "co_theorems": "jaxattn.studies.co_theorems",
                     "cl_theorems": "jaxattn.studies.cl_theorems", "stability": "jaxattn.studies.stability"}


def figure_of(run: str, d: Path, name: str, scratch: Path) -> Path | None:
    """The figure ``name`` of the run ``run`` in ``d``: the run's own file, or, for a study that draws its figures
    from its tables, drawn from them into ``scratch`` (never into the run); ``None`` when there is neither."""
    if (d / name).exists():
        return d / name
    module = DRAWN_FROM_TABLES.get(run)
    if module is None:
        return None
    drawn = scratch / run
    if not drawn.exists():  # every figure of the run at once, once
        drawn.mkdir(parents=True)
        try:
            importlib.import_module(module).claim_figures(d, drawn)
        except Exception as e:  # a figure that cannot be drawn costs the row its figure, not the page
            print(f"reproduce: warning: {run}'s figures could not be drawn from its tables ({type(e).__name__}: "
                  f"{e}); its rows show none", file=sys.stderr)
    return drawn / name if (drawn / name).exists() else None


def build(runs: Path, img_dir: Path | None = None) -> tuple[list[dict], dict]:
    """Every claim's cells (with the run files they were read from) and the run metadata."""
    with tempfile.TemporaryDirectory() as scratch:
        return _build(runs, img_dir, Path(scratch))


def _build(runs: Path, img_dir: Path | None, scratch: Path) -> tuple[list[dict], dict]:
    recorded = json.loads((runs / "timings.json").read_text()) if (runs / "timings.json").exists() else {}
    # the registry's order, however run; a command recorded with this machine's run directory (by an older
    # reproduce.py) shown with the default one
    timings = {r.name: {**recorded[r.name], "command": portable(recorded[r.name]["command"], runs,
                                                                bool(recorded[r.name].get("reduced")))}
               for r in RUNS if r.name in recorded}
    cells = []
    # a run without a recorded wall time has not finished (or was not made by this script): its files may be partial
    finished = [r.name for r in RUNS if r.name in recorded and _present(runs / r.name)]
    missing = sorted({c.run for c in CLAIMS} - set(finished))
    for c in CLAIMS:
        d = runs / c.run
        if c.run in missing:
            continue
        res = c.measure(d)
        fig = ""
        src = figure_of(c.run, d, c.figure, scratch) if c.figure else None
        if src is not None:
            fig = f"{IMG}/{c.run}_{c.figure}"
            if img_dir is not None:
                img_dir.mkdir(parents=True, exist_ok=True)
                _copy_figure(src, img_dir / f"{c.run}_{c.figure}")
        cmd = timings[c.run]["command"]
        cells.append({"id": c.id, "paper": c.paper, "where": c.where, "statement": c.statement,
                      "jaxattn": res.value, "scale": scale(c.run, d), "command": cmd, "verdict": res.verdict,
                      "why": res.why, "checks": [[ch.mark, ch.shown] for ch in res.checks], "note": res.note,
                      "figure": fig, "run": c.run, "sources": [str(d / s) for s in res.sources],
                      # drawn now from the run's tables by this checkout's code, not a file the run made
                      "figure_drawn": src is not None and src.is_relative_to(scratch)})
    return cells, {"timings": timings, "missing": missing, "finished": finished}


def _counts(cells: list[dict]) -> list[str]:
    """The verdicts per paper, the first table of the page."""
    out = ["| paper | claims | " + " | ".join(VERDICTS) + " |", "|---|---|" + "---|" * len(VERDICTS)]
    for paper, title in PAPERS.items():
        cs = [c for c in cells if c["paper"] == paper]
        if cs:
            label = title.split(',')[0].split('*')[0].strip() or title  # the authors, or the title if it has none
            label += "" if label.endswith(f"({paper})") else f" ({paper})"
            out.append(f"| {label} | {len(cs)} | "
                       + " | ".join(str(sum(c["verdict"] == v for c in cs)) for v in VERDICTS) + " |")
    out.append(f"| all | {len(cells)} | " + " | ".join(str(sum(c["verdict"] == v for c in cells)) for v in VERDICTS)
               + " |")
    return out


def render_record(record: dict) -> str:
    """The page, from the record alone (every number in it was read from a run's files when the run was measured)."""
    entries = record["runs"]
    cells = [c for e in entries.values() for c in e["cells"]]
    missing = sorted({c.run for c in CLAIMS} - set(entries))
    timings = {name: e["timing"] for name, e in entries.items() if e.get("timing")}
    reduced = any(t.get("reduced") for t in timings.values())
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    devices = sorted({f"{e['device'].get('backend', '?')} ({e['device'].get('host', e['device'].get('machine', '?'))})"
                      for e in entries.values() if e.get("device")})
    jaxes = sorted({e["versions"].get("jax", "?") for e in entries.values() if e.get("versions")})
    digest = _claims_digest()
    stale = [name for name, e in entries.items() if e.get("claims") != digest]
    out = [
        "# The papers, reproduced",
        "",
        f"*Generated by `make reproduce{' REDUCED=1' if reduced else ''}` on {date} from runs on "
        f"{', '.join(devices) or '?'}; jax {', '.join(jaxes) or '?'}. Every number below was read from the runs' CSV "
        "files by `scripts/reproduce.py` when the run was measured (the table of runs at the end says when, and with "
        "which commit); do not edit this page by hand.*",
        "",
    ]
    if reduced:
        out += ["**Reduced mode**: tiny scales for the test suite; the verdicts mean nothing at this size.", ""]
    out += [_provenance_line(entries), ""]
    out += [*_counts(cells),
        "",
        "Each row is one checkable claim of a paper: what the paper says, what jaxattn measured, the scale of the run "
        "(conditions, tokens, dimensions, samples, precision), the command that produced it and the verdict with "
        "the checks that decide it. A check compares a measured number with the paper's statement and can fail: "
        "✓ holds, ✗ fails, ? undecided; ◦ marks a check that holds by the run's own construction (a token the "
        "model cannot move, a factor the rescaling itself supplies, an option of the run): it is shown with its "
        "reason and is not part of the verdict. **reproduced**: every check holds; **differs**: a check fails; **not "
        "observed**: what fails is that something the paper reports was never seen; **inconclusive**: a 95% "
        "interval straddles its threshold, or a run is still converging at its horizon (the check gives the rate). "
        "Fractions are judged with their 95% Wilson interval; a statement about every case fails on one "
        "counterexample (its rate's 95% upper bound is given). The tag in brackets after a check says where its "
        "threshold comes from: the paper, or a line of the table below. A figure is the run's own file or, for a "
        "study that draws its figures from its tables and a run made before the figure existed, drawn from that "
        "run's tables by the study's code.",
        "",
    ]
    if missing:
        out += [f"**Not run yet** (their claims are left out): {', '.join(missing)}.", ""]
    if stale:
        out += [f"**Measured by other claims code** than this checkout's (`scripts/reproduce_claims.py` or the "
                f"verdicts, `jaxattn/studies/verdicts.py`, changed since): {', '.join(stale)}; run them again for "
                "verdicts of the current code.", ""]
    out += ["## Thresholds", "", "| tag | value | for | where it comes from |", "|---|---|---|---|"]
    out += [f"| {k} | {fmt(t.value)} | {_cell(t.meaning)} | {_cell(t.source)} |" for k, t in THRESHOLDS.items()]
    out.append("")
    for paper, title in PAPERS.items():
        rows_ = [c for c in cells if c["paper"] == paper]
        if not rows_:
            continue
        tally = ", ".join(f"{sum(c['verdict'] == v for c in rows_)} {v}" for v in VERDICTS
                          if any(c["verdict"] == v for c in rows_))
        out += [f"## {title}", "", f"{len(rows_)} claims: {tally}.", "",
                "| id | where | the paper says | jaxattn | scale | command | verdict | figure |",
                "|---|---|---|---|---|---|---|---|"]
        for c in rows_:
            fig = f"[{Path(c['figure']).name}]({c['figure']})" if c["figure"] else "–"
            if c.get("figure_drawn"):
                fig += " (drawn from the run's tables when measured)"
            out.append("| " + " | ".join(_cell(x) for x in (
                c["id"], c["where"], c["statement"], c["jaxattn"], c["scale"], f"`{c['command']}`",
                f"**{c['verdict']}**: {c['why']}", fig)) + " |")
        figs = [c for c in rows_ if c["figure"]]
        if figs:
            out.append("")
            for c in figs:
                out += [f"**{c['id']}** ({Path(c['figure']).name}):", "", f"![{c['id']}]({c['figure']})", ""]
        out.append("")
    out += entries.get("unnormalised", {}).get("section", [])
    out += ["## Claims about checkpoints that cannot be had offline", "",
            "These models' weights are not on this machine; each command reproduces the claim where they are "
            "(a network or local checkpoint folders).", "",
            "| paper | claim | command |", "|---|---|---|"]
    out += [f"| {PAPERS[p].split(',')[0]} | {_cell(claim)} | `{_cell(cmd)}` |" for p, claim, cmd in OFFLINE]
    out += ["", "## Larger runs", "",
            "The runs above are sized for two shared CPU cores; these commands run the same computations at the "
            "papers' scale (hours on a CPU; GPT-2 XL at the paper's 1000 passes and GPT-Neo 1.3B and 2.7B want a "
            "GPU, see `docs/gpu.md`).",
            "", "| paper | what | command |", "|---|---|---|"]
    out += [f"| {PAPERS[p].split(',')[0]} | {_cell(what)} | `{_cell(cmd)}` |" for p, what, cmd in LARGER]
    out += ["", "## The runs", "",
            "| run | run by commit | measured | by commit | claims code | device | wall time (s) | command |",
            "|---|---|---|---|---|---|---|---|"]
    for name, e in entries.items():
        t = e.get("timing") or {}
        dev = e.get("device") or {}
        code = e.get("claims", "?") + ("" if name not in stale else " (not this checkout's)")
        cmd = t.get("command") or RUN_BY_NAME[name].command(reduced, f"{default_runs(reduced)}/{name}")
        # the code that computed the run's numbers ("?": a run recorded before the commit was) and the code that
        # read verdicts from them can differ: a run is measured again whenever the page is rewritten from it
        out.append(f"| {name} | {t.get('commit', '?')} | {e['measured']} | {e['commit']} | {code} | "
                   f"{dev.get('backend', '?')} | {t.get('wall_s', '?')} | `{_cell(cmd)}` |")
    walls = [float(w) for e in entries.values() if isinstance(w := (e.get("timing") or {}).get("wall_s"), int | float)]
    total = f" (together {sum(walls) / 3600:.1f} h for the {len(walls)} runs timed)" if walls else ""
    out += ["", "Wall times as each run recorded them, on the device of its row, often beside other jobs (tests, "
            f"other runs): not benchmarks. A full reproduction on 2 CPU cores takes hours{total}, so the page can "
            "be completed run by run: "
            "`--only RUN` followed by `--page-only` measures the runs present and keeps the others' cells from "
            "`docs/reproductions.json`.", ""]
    return "\n".join(out)


def _provenance_line(entries: dict) -> str:
    """Whether the page's runs were all made by one commit of the code, from a clean checkout, or which commits made
    them (a run recorded before commits were has none; ``+``: a working tree that differed from the commit)."""
    made = [(e.get("timing") or {}).get("commit", "?") for e in entries.values()]
    if not made:
        return "**No run has been made yet.**"
    commits = sorted({c for c in made if c != "?"})
    unknown = made.count("?")
    if len(commits) == 1 and not unknown and not commits[0].endswith("+"):
        return (f"**Every run on this page was made at one commit**, `{commits[0]}` ({len(made)} "
                f"run{'s' if len(made) > 1 else ''}, from a clean checkout).")
    named = ", ".join(f"`{c[:-1]}` with local changes" if c.endswith("+") else f"`{c}`" for c in commits)
    parts = [f"{len(commits)} commit{'s' if len(commits) != 1 else ''} ({named})"] if commits else []
    if unknown:
        parts.append(f"{unknown} run{'s' if unknown > 1 else ''} recording no commit")
    return (f"**The runs on this page were not all made at one clean commit**: {' and '.join(parts)}; the table of "
            "runs at the end says which commit made each run. `make reproduce` from one clean checkout makes them "
            "all at one.")


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
           "linear function of t. A draw whose solve failed is counted in the last column, never as a blow-up. "
           "Well-posed horizons: t < t*, with t* as tabulated. The paper's own code normalises the rows (softmax); "
           "its setting is row CL8.", ""]
    table = rows(d / "blowup.csv")
    horizons = sorted({fmt(r["t_max"]) for r in table})
    out += ["| V, initial tokens | draws × n | blown up by t = " + ", ".join(horizons) + " | median t* | "
            "before t = 1 | before t = 5 | comparison bound applies / holds | largest change of t* between the two | "
            "solver failures |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
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


def record_path(page: Path) -> Path:
    """The page's record (``reproductions.json`` beside ``reproductions.md``): every run's cells as last measured."""
    return page.with_suffix(".json")


def _claims_digest() -> str:
    """sha256 of the claims' code (the claims and the verdicts they are judged by): a carried run measured by other
    code is marked on the page."""
    code = (ROOT / "scripts" / "reproduce_claims.py").read_bytes() + Path(verdicts.__file__).read_bytes()
    return hashlib.sha256(code).hexdigest()[:12]


def _commit() -> str:
    """The checkout's commit (with ``+`` where the working tree differs from it), or ``?`` outside git. The page's
    own outputs do not count: its figures are copied before the runs are measured, so every page read ``+``."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":!docs/reproductions.md", ":!docs/reproductions.json", f":!docs/{IMG}"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+" if dirty else "")


def merge_record(record: dict, cells: list[dict], meta: dict, runs: Path) -> dict:
    """``record`` with the entries of the runs present in ``runs`` replaced by what was just measured from them.

    A full reproduction takes hours on two cores, so the page is completed run by run: the
    runs not present keep their cells (and figures, already beside the page) from the last time they were
    measured, each with its date, the commit that measured it and the digest of the claims' code."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = {"format": RECORD_FORMAT, "runs": dict(record.get("runs", {}))}
    digest, commit = _claims_digest(), _commit()
    for name in meta["finished"]:
        cfg = config(runs / name)
        out["runs"][name] = {
            "measured": now, "commit": commit, "claims": digest, "timing": meta["timings"][name],
            "device": cfg.get("device", {}), "versions": cfg.get("versions", {}),
            # without "sources": they are this machine's paths of the run files, which the page never shows
            "cells": [{k: v for k, v in c.items() if k != "sources"} for c in cells if c["run"] == name],
            "section": _unnormalised_section(runs) if name == "unnormalised" else []}
    out["runs"] = {r.name: out["runs"][r.name] for r in RUNS if r.name in out["runs"]}  # the registry's order
    return out


class RecordError(ValueError):
    """The page's record cannot be read (cut short, not JSON, another format)."""


def read_record(path: Path) -> dict:
    """The record at ``path`` (empty if there is none); a record of another format is refused, not guessed at."""
    if not path.exists():
        return {"format": RECORD_FORMAT, "runs": {}}
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordError(f"{path} is not a record (not JSON: {e}); restore it from git or move it away") from None
    version = record.get("format") if isinstance(record, dict) else None
    if version != RECORD_FORMAT:
        raise RecordError(f"{path} is a record of format {version!r}, this script writes {RECORD_FORMAT}; move it "
                          "away to start a new one")
    return record


def write_page(runs: Path, page: Path) -> list[dict]:
    """Measure the runs present in ``runs``, merge them into the page's record and write the page from the record.
    Returns the cells measured now (``runs/cells.json``)."""
    docs_page = page.resolve() == (ROOT / "docs/reproductions.md").resolve()
    img_dir = (ROOT / "docs" / IMG) if docs_page else page.parent / IMG
    from jaxattn.io.results import atomic_write_text  # an interrupted write leaves the old file, never half of one

    old = read_record(record_path(page))  # first: a record that cannot be read stops before any figure is copied
    cells, meta = build(runs, img_dir)
    record = merge_record(old, cells, meta, runs)
    atomic_write_text(record_path(page), json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    atomic_write_text(page, render_record(record))
    # a figure no claim shows any more (a claim's figure renamed, a run that stopped making it) goes with the page
    shown = {Path(c["figure"]).name for e in record["runs"].values() for c in e["cells"] if c.get("figure")}
    for old_figure in img_dir.glob("*.png") if img_dir.is_dir() else ():
        if old_figure.name not in shown:
            old_figure.unlink()
    atomic_write_text(runs / "cells.json", json.dumps(cells, indent=1, ensure_ascii=False) + "\n")
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reduced", action="store_true", help="tiny scales (the test's mode)")
    parser.add_argument("--runs", default=None, help="run directory [runs/reproduce or runs/reproduce-reduced]")
    parser.add_argument("--page", default=None,
                        help="page to write [docs/reproductions.md; RUNS/reproductions.md with --reduced]")
    parser.add_argument("--only", default="", help="comma-separated runs to (re)do: " + ",".join(RUN_BY_NAME))
    parser.add_argument("--claims", default="", help="comma-separated claims (e.g. CO4,CL7): (re)do the runs they "
                                                     "read, then write the page")
    parser.add_argument("--page-only", action="store_true", help="write the page from the runs already there")
    args = parser.parse_args(argv)
    runs = Path(args.runs or default_runs(args.reduced))
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(RUN_BY_NAME))
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; known: {', '.join(RUN_BY_NAME)}")
    claims = [s for s in args.claims.split(",") if s]
    by_id = {c.id: c for c in CLAIMS}
    unknown = sorted(set(claims) - set(by_id))
    if unknown:
        parser.error(f"unknown claim(s) {', '.join(unknown)}; known: {', '.join(by_id)}")
    if claims and only:
        parser.error("--claims and --only choose the runs two ways: give one of them")
    if args.page_only and not runs.is_dir():
        parser.error(f"--page-only reads the runs in {runs}, which does not exist: run them first")
    default_page = runs / "reproductions.md" if args.reduced else ROOT / "docs/reproductions.md"
    page = Path(args.page) if args.page else default_page
    if not only or args.page_only:  # a page will be written: its record readable before hours of runs
        try:
            read_record(record_path(page))
        except RecordError as e:
            parser.error(str(e))
    if not args.page_only:
        run_all(runs, args.reduced, only or list(dict.fromkeys(by_id[c].run for c in claims)))
    if only and not args.page_only:
        return 0
    write_page(runs, page)
    print(f"reproduce: page {page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
