"""What a new user runs into: every mistake is one clear line (exit 2 on the command line), never a
traceback; Ctrl-C exits 130; replayed configurations run; reports agree with what was printed."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import pytest

import jaxattn as ja
from jaxattn.cli import main
from jaxattn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
GRID = "num_init = 4\n[init]\nn = 3\n[model]\nd = 4\nheads = 1\ndepth = 1\n"


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error:") and err.count("\n") == 1, err
    return err


# ------------------------------------------------------------------ tracebacks that become one line
@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_binary_config_file_is_one_line(tmp_path, capsys, suffix):
    f = tmp_path / f"c{suffix}"
    f.write_bytes(b"\x9c\xff\x00\x80binary")
    assert main(["simulate", "--config", str(f), "--out", str(tmp_path / "o")]) == 2
    assert "not a text file" in _err(capsys)
    assert main(["sweep", str(f), "--out", str(tmp_path / "g")]) == 2
    assert "not a text file" in _err(capsys)
    assert not (tmp_path / "o").exists() and not (tmp_path / "g").exists()


def test_config_that_is_a_directory_says_so(tmp_path, capsys):
    assert main(["simulate", "--config", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "is a directory" in _err(capsys)


def test_bad_process_environment_and_coordinator(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "g.toml"
    cfg.write_text(GRID)
    monkeypatch.setenv("JAXATTN_NUM_PROCESSES", "abc")
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert "$JAXATTN_NUM_PROCESSES must be an integer, got 'abc'" in _err(capsys)
    monkeypatch.delenv("JAXATTN_NUM_PROCESSES")
    for extra in (["--num-processes", "2", "--process-id", "0"], []):
        assert main(["sweep", str(cfg), "--out", str(tmp_path / "b"), "--quiet", "--coordinator", "bogus",
                     *extra]) == 2
        assert "host:port" in _err(capsys)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_spectrum_of_a_name_says_how_to_load_it():
    with pytest.raises(ConfigError, match=r"ja.load_any\('minilm'\)"):
        ja.spectrum("minilm")
    with pytest.raises(ConfigError, match="takes a Model or layer matrices"):
        ja.spectrum({"a": 1})


def test_run_study_called_like_another_study(tmp_path):
    with pytest.raises(ConfigError, match=r"jaxattn.studies.clusters.run_study\(out_dir"):
        ja.run_study(tmp_path / "x", "clusters")
    with pytest.raises(ConfigError, match="takes a Model first"):
        ja.run_study(str(tmp_path / "x"), tmp_path / "y")
    m = ja.random_model(jax.random.key(0), 4, 1, 1)
    with pytest.raises(ConfigError, match="must be a StudyConfig"):
        ja.run_study(m, tmp_path / "x", {"num_init": 4})
    assert not (tmp_path / "x").exists()


def test_exhaustive_stability_too_large_is_refused_with_its_size(tmp_path, capsys):
    assert main(["stability", "--tokens", "30", "--exhaustive-max", "30", "--out", str(tmp_path / "s")]) == 2
    err = _err(capsys)
    assert "536,870,912 sign patterns" in err and "GiB" in err
    assert main(["stability", "--basin-n", "25", "--exhaustive-max", "30", "--out", str(tmp_path / "s")]) == 2
    assert "basin_n = 25" in _err(capsys)
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------ Ctrl-C
def test_ctrl_c_exits_130_not_a_segfault(tmp_path):
    """SIGINT while the clusters study is solving: the interrupted line, exit 130 (was 139, a segfault while
    the interpreter was finalised under XLA's running threads), nothing left behind."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / "c"
    p = subprocess.Popen([sys.executable, "-m", "jaxattn.cli", "clusters", "--out", str(out), "--no-figures",
                          "--progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=tmp_path)
    assert p.stderr is not None
    first = p.stderr.readline()  # the first stage has started: a solve is running
    assert first.startswith("[clusters]"), first
    import time

    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 130, err
    assert "jaxattn: interrupted" in err
    assert not out.exists()
