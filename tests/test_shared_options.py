"""Issue 21: the options every dynamics command shares (the matrix-product precision), and the CPU-only tests'
skips elsewhere. (Moved from tests/test_gpu_check.py, whose tests the gpu-check's suite-stage test runs again.)"""

import json

import pytest

import jaxattn as ja

SIM = ["simulate", "--num-init", "4", "--n", "3", "--d", "4", "--heads", "1", "--depth", "2", "--no-progress"]


@pytest.mark.e2e
def test_simulate_takes_records_and_uses_the_matmul_precision(tmp_path, monkeypatch, capsys):
    import jaxattn.sweeps._point as point_mod  # a sweep's chunks are its point's runs
    from jaxattn.cli import main

    seen = []
    real = point_mod.simulate
    monkeypatch.setattr(point_mod, "simulate", lambda *a, **k: seen.append(_precision(k)) or real(*a, **k))
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
    assert err == ("jaxattn: error: config value matmul_precision: must be one of highest, tf32, bf16, got 'fp8' "
                   f"(in {tmp_path / 'c.toml'})\n")
    assert not (tmp_path / "b").exists()


def _precision(kwargs) -> str:
    """The matrix-product precision a driver (or the runner) was called with: its ``Batch``'s."""
    return kwargs.get("batch", ja.Batch()).precision


def _spy(monkeypatch, module, name, seen):
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: seen.append(_precision(k)) or real(*a, **k))


@pytest.mark.e2e
def test_analyze_takes_records_and_uses_the_matmul_precision(tmp_path, monkeypatch, capsys):
    import jaxattn.analysis.directions as directions
    import jaxattn.analysis.gradients as gradients
    import jaxattn.analysis.steering as steering
    import jaxattn.dynamics.discrete as discrete
    import jaxattn.sweeps._point as point_mod
    from jaxattn.cli import main

    seen: list = []
    _spy(monkeypatch, point_mod, "simulate", seen)  # the chunked runs: their point's
    _spy(monkeypatch, discrete, "simulate", seen)
    # the analysis modules' own names for it: steering, every eigendirection's increment, and the layer sensitivity
    # (which once ran at the default precision whatever the study asked for)
    by_module: dict = {}
    for mod in (steering, directions, gradients):
        by_module[mod.__name__] = []
        _spy(monkeypatch, mod, "simulate", by_module[mod.__name__])
    out = tmp_path / "a"
    args = ["analyze", "random", "--d", "4", "--heads", "1", "--depth", "2", "--num-init", "8", "--n", "3",
            "--prolong", "1", "--gammas", "10", "--steer-target", "0", "--no-figures", "--no-progress"]
    assert main([*args, "--matmul-precision", "bf16", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["matmul_precision"] == "bf16"
    assert len(seen) >= 1 and set(seen) == {"bf16"}
    assert all(v and set(v) == {"bf16"} for v in by_module.values()), by_module
    (tmp_path / "c.json").write_text('{"matmul_precision": "fp8"}')
    assert main([*args, "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error: config value matmul_precision: must be one of highest, tf32, bf16") and \
        err.count("\n") == 1
    assert not (tmp_path / "b").exists()


@pytest.mark.e2e
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
