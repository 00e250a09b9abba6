"""Issue 21: ``make gpu-check`` in its reduced CPU form (so that the script cannot rot between GPU runs), and
the options every dynamics command shares."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jaxattn as ja

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _gpu_check(out, *args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)  # one CPU device, as on a user's machine (conftest gives this process eight)
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_make_gpu_check_reduced_form_writes_every_figure(tmp_path):
    """``make gpu-check`` with a given interpreter (as on a GPU image: no .venv, nothing installed)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {**os.environ}
    env.pop("XLA_FLAGS", None)
    cmd = ["make", "-s", "gpu-check", f"GPU_CHECK_PY={sys.executable}", f"GPU_CHECK_OUT={tmp_path / 'gc'}"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr  # and no .venv was made: the given interpreter ran it
    s = json.loads((tmp_path / "gc" / "summary.json").read_text())
    assert s["form"] == "reduced" and not s["gpu_seen"] and s["stages_in"] == "one process"
    from scripts.gpu_check import STAGES

    assert list(s["stages"]) == list(STAGES)
    assert {n: r["status"] for n, r in s["stages"].items()} == dict.fromkeys(STAGES, "ok")
    r = {n: rec["result"] for n, rec in s["stages"].items()}
    env = r["environment"]
    assert env["backend"] == "cpu" and {"jax", "jaxlib", "numpy"} <= set(env["versions"])
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
    (row,) = r["bench_kernel"]["rows"]
    assert r["bench_kernel"]["interpret"] and row["max_abs_diff"] < 1e-4 and "speedup" in row
    assert r["bench_consensus"]["max_abs_diff_first_token_measure"] < 1e-3
    g = r["bench_gradients"]
    assert [row["steps"] for row in g["rows"]] == [2, 8] and g["one_block"]["grad_over_forward_cpu"] > 0
    assert all(row["grads_agree_rel"] < 1e-4 and row["grad_bytes"] > 0 for row in g["rows"]), g
    assert r["suite"]["passed"] == 1 and r["suite"]["failures"] == 0 and r["suite"]["returncode"] == 0
    assert s["verdict"]["fused_kernel"].startswith("no GPU: nothing proven")
    md = (tmp_path / "gc" / "summary.md").read_text()
    for heading in ("## Device", "## Stages", "## Fused kernel against the plain path",
                    "## Matrix-product precision against float64", "## benchmarks/run.py", "## benchmarks/kernel.py",
                    "## Test suite"):
        assert heading in md


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
# ------------------------------------------------------------------ the same options everywhere


SIM = ["simulate", "--num-init", "4", "--n", "3", "--d", "4", "--heads", "1", "--depth", "2", "--no-progress"]


def test_simulate_takes_records_and_uses_the_matmul_precision(tmp_path, monkeypatch, capsys):
    import jaxattn.sweeps.chunked as chunked
    from jaxattn.cli import main

    seen = []
    real = chunked.simulate
    monkeypatch.setattr(chunked, "simulate", lambda *a, **k: seen.append(_precision(k)) or real(*a, **k))
    out = tmp_path / "tf32"
    assert main([*SIM, "--matmul-precision", "tf32", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["matmul_precision"] == "tf32"
    assert seen and set(seen) == {"tf32"}
    assert "matmul=tf32" in capsys.readouterr().out
    seen.clear()
    assert main([*SIM, "--out", str(tmp_path / "default")]) == 0
    assert json.loads((tmp_path / "default" / "config.json").read_text())["config"]["matmul_precision"] == "highest"
    assert set(seen) == {"highest"}


def test_simulate_refuses_a_bad_matmul_precision_in_one_line(tmp_path, capsys):
    from jaxattn.cli import main

    with pytest.raises(SystemExit) as e:
        main([*SIM, "--matmul-precision", "fp8", "--out", str(tmp_path / "a")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--matmul-precision" in err and "fp8" in err
    (tmp_path / "c.toml").write_text('matmul_precision = "fp8"\n')
    assert main([*SIM, "--config", str(tmp_path / "c.toml"), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err == "jaxattn: error: config value matmul_precision: must be one of highest, tf32, bf16, got 'fp8'\n"
    assert not (tmp_path / "b").exists()


def _precision(kwargs) -> str:
    """The matrix-product precision a driver (or the runner) was called with: its ``Batch``'s."""
    return kwargs.get("batch", ja.Batch()).precision


def _spy(monkeypatch, module, name, seen):
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: seen.append(_precision(k)) or real(*a, **k))


def test_analyze_takes_records_and_uses_the_matmul_precision(tmp_path, monkeypatch, capsys):
    import jaxattn.analysis.steering as steering
    import jaxattn.dynamics.discrete as discrete
    import jaxattn.sweeps.chunked as chunked
    from jaxattn.cli import main

    seen: list = []
    _spy(monkeypatch, chunked, "simulate", seen)  # the chunked runs
    _spy(monkeypatch, discrete, "simulate", seen)
    _spy(monkeypatch, steering, "simulate", seen)  # steering's own name for it
    out = tmp_path / "a"
    args = ["analyze", "random", "--d", "4", "--heads", "1", "--depth", "2", "--num-init", "8", "--n", "3",
            "--prolong", "1", "--gammas", "10", "--steer-target", "0", "--no-figures", "--no-progress"]
    assert main([*args, "--matmul-precision", "bf16", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["matmul_precision"] == "bf16"
    assert len(seen) >= 3 and set(seen) == {"bf16"}
    (tmp_path / "c.json").write_text('{"matmul_precision": "fp8"}')
    assert main([*args, "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error: config value matmul_precision: must be one of highest, tf32, bf16") and \
        err.count("\n") == 1
    assert not (tmp_path / "b").exists()


def test_consensus_takes_records_and_uses_the_matmul_precision(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    import jaxattn as ja
    import jaxattn.dynamics.passes as passes
    from jaxattn.cli import main

    from . import hf_models

    hf_models.build("gpt2", tmp_path / "gpt2")
    src = ja.convert(str(tmp_path / "gpt2"), str(tmp_path / "gpt2.safetensors"))
    seen: list = []
    _spy(monkeypatch, passes, "run", seen)
    out = tmp_path / "c"
    args = ["consensus", str(src), "--passes", "1", "--prompts", "2", "--tokens", "4", "--no-synthetic",
            "--no-figures", "--no-progress"]
    assert main([*args, "--matmul-precision", "tf32", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["matmul_precision"] == "tf32"
    assert seen and set(seen) == {"tf32"}
    with pytest.raises(SystemExit) as e:
        main([*args, "--matmul-precision", "fp8", "--out", str(tmp_path / "b")])
    assert e.value.code == 2 and "--matmul-precision" in capsys.readouterr().err


class _Item:
    def __init__(self, *marks):
        self.marks = [m.mark for m in marks]

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m.name == name), None)

    def add_marker(self, m):
        self.marks.append(m.mark)


def test_tests_that_need_the_cpu_skip_with_a_reason_elsewhere():
    from .conftest import cpu_only_skips

    marked, plain = _Item(pytest.mark.requires_cpu("eight CPU devices")), _Item()
    cpu_only_skips([marked, plain], "cpu")
    assert marked.get_closest_marker("skip") is None
    cpu_only_skips([marked, plain], "gpu")
    skip = marked.get_closest_marker("skip")
    assert skip is not None and skip.kwargs["reason"] == "needs the CPU backend (eight CPU devices); this is gpu"
    assert plain.get_closest_marker("skip") is None
