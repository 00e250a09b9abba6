"""What a new user runs into: every mistake is one clear line (exit 2 on the command line), never a
traceback; Ctrl-C exits 130; replayed configurations run; reports agree with what was printed."""

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.cli import main
from jaxattn.errors import ConfigError

from . import hf_models
from .subprocess_env import one_device_env

ROOT = Path(__file__).resolve().parents[1]
GRID = "num_init = 4\n[init]\nn = 3\n[model]\nd = 4\nheads = 1\ndepth = 1\n"


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    hf_models.build("gpt2", folder)
    return ja.convert(str(folder), str(folder / "gpt2.safetensors"))


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
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "a"), "--no-progress"]) == 2
    assert "$JAXATTN_NUM_PROCESSES must be an integer, got 'abc'" in _err(capsys)
    monkeypatch.delenv("JAXATTN_NUM_PROCESSES")
    for extra in (["--num-processes", "2", "--process-id", "0"], []):
        assert main(["sweep", str(cfg), "--out", str(tmp_path / "b"), "--no-progress", "--coordinator", "bogus",
                     *extra]) == 2
        assert "host:port" in _err(capsys)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_spectrum_of_a_name_says_how_to_load_it():
    with pytest.raises(ConfigError, match=r"ja.load_any\('minilm'\)"):
        ja.spectrum("minilm")
    with pytest.raises(ConfigError, match="takes a Model or layer matrices"):
        ja.spectrum({"a": 1})


@pytest.mark.e2e
@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
def test_power_method_study_called_wrongly(tmp_path):
    from jaxattn.studies import power_method

    with pytest.raises(ConfigError, match=r"runs on a model: run\(out_dir, config, model=...\)"):
        power_method.run(tmp_path / "x", ja.PowerMethodConfig())
    m = ja.random_model(jax.random.key(0), 4, 1, 1)
    with pytest.raises(ConfigError, match=r"must be a jaxattn.studies.power_method.Config \(PowerMethodConfig"):
        power_method.run(tmp_path / "x", {"num_init": 4}, model=m)
    with pytest.raises(ConfigError, match=r"must be a jaxattn\.studies\.power_method\.Config"):
        power_method.run(tmp_path / "x", ja.ClustersConfig(), model=m)
    assert not (tmp_path / "x").exists()


def test_exhaustive_stability_too_large_is_refused_with_its_size(tmp_path, capsys):
    assert main(["stability", "--tokens", "30", "--exhaustive-max", "30", "--out", str(tmp_path / "s")]) == 2
    err = _err(capsys)
    assert "536,870,912 sign patterns" in err and "GiB" in err
    assert main(["stability", "--basin-n", "25", "--exhaustive-max", "30", "--out", str(tmp_path / "s")]) == 2
    assert "--basin-n 25" in _err(capsys)
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------ Ctrl-C
@pytest.mark.e2e
def test_ctrl_c_exits_130_not_a_segfault(tmp_path):
    """SIGINT while the clusters study is solving: the interrupted line, exit 130 (was 139, a segfault while
    the interpreter was finalised under XLA's running threads), nothing left behind."""
    env = one_device_env()
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


_GC_INTERRUPT = """
import contextlib, gc, os, signal, sys, time
from jaxattn.cli._interrupt import interrupts
fired = []
def kill_in_callback(phase, info):  # Ctrl-C arrives while a collector callback runs (as JAX's XLA one does)
    if phase == "start" and not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10000):  # the handler runs between these bytecodes, inside the callback
            pass
try:
    with interrupts() if sys.argv[1] == "cli" else contextlib.nullcontext():
        gc.callbacks.insert(1, kill_in_callback)
        gc.collect()
        time.sleep(2)  # long enough for a re-sent interrupt (50 ms) to land
    print("lost")
except KeyboardInterrupt:
    print("raised")
"""


@pytest.mark.e2e
@pytest.mark.parametrize("handler,want", [("python", "lost"), ("cli", "raised")])
def test_ctrl_c_during_a_garbage_collection_is_not_lost(handler, want):
    """Python drops a KeyboardInterrupt raised in a gc callback ("Exception ignored"), and JAX runs one at every
    collection: the Ctrl-C of test_ctrl_c_exits_130_not_a_segfault was lost under load and the study ran on.
    Python's own handler loses it (the first case shows the failure is real); the command line's re-sends it."""
    env = one_device_env()
    p = subprocess.run([sys.executable, "-c", _GC_INTERRUPT, handler], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.stdout.strip() == want, p.stdout + p.stderr


# ------------------------------------------------------------------ replaying a run's config.json
TINY_ANALYZE = ["--num-init", "4", "--n", "3", "--chunk", "4", "--no-shared", "--steer-target", "0", "--no-progress"]


def _config(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())


@pytest.mark.e2e
def test_analyze_config_json_replays(tmp_path):
    """Lists (gammas) were refused ("gammas must be str"), and the random model's dimensions were lost: the
    replayed options are the run's own and name the same weights."""
    from jaxattn.cli import build_parser, resolve
    from jaxattn.cli._shared import load_model_arg
    from jaxattn.io.results import weights_sha256

    a = tmp_path / "a"
    assert main(["analyze", "random", "--d", "8", "--heads", "2", "--depth", "2", "--mask", "causal", "--gammas", "0,2",
                 *TINY_ANALYZE, "--no-figures", "--out", str(a)]) == 0
    args = build_parser().parse_args(["analyze", "--config", str(a / "config.json"), "--out", str(tmp_path / "b")])
    cfg = resolve(args, args.defaults)
    assert {k: cfg[k] for k in ("model", "d", "heads", "depth", "shared", "mask", "gammas", "num_init")} == dict(
        model="random", d=8, heads=2, depth=2, shared=False, mask="causal", gammas=[0.0, 2.0], num_init=4)
    assert weights_sha256(load_model_arg(cfg["model"], cfg)) == _config(a)["weights_sha256"]


@pytest.mark.e2e
def test_simulate_config_json_of_a_converted_model_replays(tmp_path, gpt2_file):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["simulate", "--model", str(gpt2_file), "--num-init", "4", "--n", "3", "--no-progress",
                 "--out", str(a)]) == 0
    assert main(["simulate", "--config", str(a / "config.json"), "--out", str(b)]) == 0
    assert _config(b)["config"]["weights_sha256"] == _config(a)["config"]["weights_sha256"]


def test_lists_in_a_config_file_are_accepted(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text('tokens = [3, 4]\nmodels = 1\ntime = "discrete"\n')
    from jaxattn.cli import build_parser, resolve

    args = build_parser().parse_args(["stability", "--config", str(cfg)])
    assert resolve(args, args.defaults)["tokens"] == [3, 4]
    cfg.write_text("tokens = [3, true]\n")
    assert main(["stability", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "config value tokens[1]: expected int, got True" in _err(capsys)


# ------------------------------------------------------------------ errors in the user's words
def test_solve_errors_name_the_flags(tmp_path, capsys):
    for argv, flag in ((["--t1", "-1"], "--t1: must be > 0"), (["--rescaled"], "--rescaled needs --space 'flat'"),
                       (["--d", "10", "--heads", "3"], "--d 10 is not"), (["--num-init", "0"], "--num-init:")):
        assert main(["solve", *argv, "--out", str(tmp_path / "s")]) == 2
        err = _err(capsys)
        assert flag in err and "dynamics." not in err and "model." not in err, err
    assert not (tmp_path / "s").exists()


def test_consensus_refuses_a_negative_seed(tmp_path, capsys):
    assert main(["consensus", "--seed", "-1", "--out", str(tmp_path / "c")]) == 2
    assert "--seed: must be in [0, 2^63), got -1" in _err(capsys)
    from jaxattn.studies.power_method import PowerMethodConfig

    with pytest.raises(ConfigError, match=r"seed: must be in \[0, 2\^63\)"):  # analyze: before the spectra, not after
        PowerMethodConfig(seed=-1).check()


def test_convert_errors_name_the_users_paths(tmp_path, capsys, gpt2_file):
    folder = str(Path(gpt2_file).parent)
    assert main(["convert", folder, "--out", str(tmp_path)]) == 2
    err = _err(capsys)
    assert f"--out {tmp_path} is a directory" in err and ".tmp" not in err
    (tmp_path / "f").write_text("")
    assert main(["convert", folder, "--out", str(tmp_path / "f" / "m.safetensors")]) == 2
    assert "is a file, not a directory" in _err(capsys)


# ------------------------------------------------------------------ reports agree with themselves
def test_clusters_summary_line_reports_the_reports_clusters(tmp_path, monkeypatch, capsys):
    """The count lines printed "clusters" for the tolerance-free mean; the report's "clusters (mean)" column is the
    count within --tol."""
    import jaxattn.studies.clusters as study

    row = {"n": 10, "d": 2, "beta": 1.0, "clusters_mean": 2.5, "gap_clusters_mean": 3.25, "hull_vertices_mean": 5.0}
    monkeypatch.setattr(study, "run", lambda out, cfg, progress=None: {"pictures": [], "counts": [row]})
    assert main(["clusters", "--out", str(tmp_path / "c"), "--no-progress"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "clusters 2.500 (tolerance-free 3.250" in line, line


def _table_widths(report: str) -> list[tuple[str, int, int]]:
    """``(row, cells, header cells)`` for every row of every Markdown table (an escaped ``\\|`` is no border)."""
    out, header = [], 0
    for line in report.splitlines():
        if not line.startswith("|"):
            header = 0
            continue
        cells = len(re.split(r"(?<!\\)\|", line)) - 2
        header = header or cells
        out.append((line, cells, header))
    return out


@pytest.mark.e2e
def test_stability_report_tables_keep_their_columns(tmp_path):
    out = tmp_path / "s"
    assert main(["stability", "--tokens", "3", "--models", "1", "--basin-num", "4", "--basin-n", "3", "--steps", "10",
                 "--perturb-num", "2", "--search", "2", "--time", "discrete", "--no-figures", "--no-progress",
                 "--out", str(out)]) == 0
    rows = _table_widths((out / "report.md").read_text())
    assert len(rows) > 8
    bad = [r for r, n, h in rows if n != h]
    assert not bad, bad


def test_figures_number_the_steps_as_the_tables(tmp_path, monkeypatch):
    """The per-layer figures put layer k at 1..L while layers.csv and the report say step 0..L-1."""
    import matplotlib.axes

    seen = []
    real = matplotlib.axes.Axes.set

    def spy(self, **kw):
        if "xlabel" in kw:
            seen.append((kw["xlabel"], [np.asarray(ln.get_xdata()).tolist() for ln in self.get_lines()]))
        return real(self, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "set", spy)
    out = tmp_path / "a"
    argv = ["analyze", "random", "--d", "8", "--heads", "2", "--depth", "3", *TINY_ANALYZE, "--out", str(out)]
    assert main(argv) == 0
    steps = [int(line.split(",")[1]) for line in (out / "layers.csv").read_text().splitlines()[1:]]
    assert steps == [0, 1, 2]
    per_layer = [(label, xs) for label, xs in seen if any(len(x) == len(steps) for x in xs)]
    assert len(per_layer) >= 4
    for label, xs in per_layer:
        assert label.startswith("step") and all(x == steps for x in xs if len(x) == len(steps)), (label, xs)


# ------------------------------------------------------------------ the new-user matrix (issue 30), its quick refusals
SIM3 = ["--num-init", "4", "--n", "3", "--d", "4", "--heads", "1", "--depth", "2", "--no-progress"]
SOLVE3 = ["--num-init", "4", "--n", "3", "--d", "4", "--heads", "1", "--depth", "1", "--t1", "0.2", "--no-progress"]
MATRIX = [
    (["simulate", *SIM3, "--mask", "local:0"], "positive window"),
    (["simulate", *SIM3, "--scale", "0"], "--scale: must be > 0"),
    (["simulate", *SIM3, "--attention", "uniform", "--scale", "1"], "--scale does nothing with --attention uniform"),
    (["simulate", *SIM3, "--attention", "uniform", "--rope", "on"], "--rope does nothing with --attention uniform"),
    (["simulate", *SIM3, "--dtype", "float64", "--matmul-precision", "tf32"], "--matmul-precision does nothing"),
    (["simulate", *SIM3, "--rope", "model"], "--rope model: this model has no RoPE"),
    (["simulate", *SIM3, "--steps", "-1"], "--steps: must be >= 0"),
    (["analyze", "random", "--d", "4", "--heads", "1", "--gammas", "-1"], "--gammas[0]: must be >= 0"),
    (["analyze", "random", "--d", "4", "--heads", "1", "--steer-target", "1"], "--steer-target: must be in [0, 1)"),
    (["analyze", "random", "--d", "4", "--heads", "1", "--prolong", "0"], "--prolong: must be > 0"),
    (["solve", *SOLVE3, "--t1", "0"], "--t1: must be > 0"),
    (["solve", *SOLVE3, "--solver", "euler"], "has no error estimate: give a fixed step size --dt"),
    (["solve", *SOLVE3, "--saves", "1"], "--saves: must be >= 2"),
    (["solve", *SOLVE3, "--dt", "0.1", "--rtol", "1e-3"], "does nothing with a fixed step size"),
    (["solve", *SOLVE3, "--layer-time", "2"], "--layer-time does nothing with --shared true"),
    (["solve", *SOLVE3, "--max-steps", "0"], "--max-steps: must be > 0"),
    (["consensus", "--passes", "0"], "--passes: must be > 0"),
    (["consensus", "--synthetic-d", "1"], "--synthetic-d: must be >= 2"),
    (["consensus", "--dtype", "float64", "--matmul-precision", "bf16"], "--matmul-precision bf16 does nothing with "
                                                                        "--dtype float64"),
    (["clusters", "--table-d", "1"], "needs a hull"),
    (["clusters", "--n", "1"], "clusters need several tokens"),
    (["clusters", "--tol", "0"], "--tol: must be > 0"),
    (["stability", "--tokens", "1"], "must be between 2 and 64"),
    (["stability", "--basin-n", "1"], "a bipartite split needs two tokens"),
    (["spectrum", "minilm", "--alpha", "2"], "--alpha only applies to --order step"),
    (["spectrum", "minilm", "--order", "step", "--alpha", "nan"], "--alpha must be a finite number"),
    # the round of 2026-11-27: options that changed nothing were run and recorded; a missing model was told as --d
    (["clusters", "--high-dim-n", "64"], "--high-dim-n does nothing with --check-num 0"),
    (["clusters", "--rate-n", "5,8"], "--rate-n does nothing with --check-num 0"),
    (["clusters", "--check-num", "2", "--high-dim-d", "4"], "--high-dim-d does nothing with --high-dim-n 0"),
    (["stability", "--heads", "2"], "--heads does nothing with --multi-head-models 0"),
    (["stability", "--basin-starts", "3"], "--basin-starts does nothing with --basin-models 0"),
    (["simulate", *SIM3, "--model", "no-such-model.safetensors"], "no-such-model.safetensors does not exist"),
]


@pytest.mark.parametrize("argv,match", MATRIX, ids=[" ".join(a[:1] + a[-2:]) for a, _ in MATRIX])
def test_the_matrix_of_refused_options(argv, match, tmp_path, capsys):
    """Every row of the new-user round that is refused before any computation: one line, exit 2, nothing
    written (the slow rows, and those that need files, are in tests/test_reliability.py and above)."""
    out = [] if argv[0] == "spectrum" else ["--out", str(tmp_path / "o")]
    assert main([*argv, *out]) == 2
    assert match in _err(capsys)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("make,inspect_says,spectrum_says", [
    (lambda d: d.mkdir(), "is a directory, not a converted .safetensors file", "has no config.json"),
    (lambda d: d.write_bytes(b"\x00" * 64), "jaxattn", "jaxattn"),
    (lambda d: d.write_text("hello\n"), "jaxattn", "jaxattn"),
])
def test_inspect_and_spectrum_of_what_is_no_converted_file(make, inspect_says, spectrum_says, tmp_path, capsys):
    """A directory given to `inspect` was "does not exist or is not a file" (`spectrum` reads it as a checkpoint
    folder); garbage files are one line each."""
    f = tmp_path / "m.safetensors"
    make(f)
    for command, says in (("inspect", inspect_says), ("spectrum", spectrum_says)):
        assert main([command, str(f)]) == 2
        assert says in _err(capsys)


# ------------------------------------------------------------------ the new-user round of 2026-11-27 (commit 814a5fa)
# Every subcommand tried as a new user would (bad input first, then one tiny run), on the 2-core CPU machine, after
# issue 49's reliability fixes. One row per try: the command (S = --d 4 --heads 1 --depth 1 --num-init 4 --n 3),
# what happened, the judgement (good / awkward / unclear message / traceback / silent / stall / data loss / crash)
# and, for a row that is not good, whether it was fixed in this round (with its test) or remains.
ROUND_2026_11_27 = [
    ("jaxattn ; jaxattn frobnicate", "rc 2, one line each (COMMAND required; invalid choice, listed)", "good", ""),
    ("simulate S --model nosuch.safetensors", "rc 2 '--d only applies to --model random', not that the file is "
     "missing", "awkward", "fixed: the missing model is said first (MATRIX)"),
    ("simulate --model '' | bad.safetensors | random bytes | /etc/passwd | an empty folder",
     "rc 2, one line each (empty string; not a readable safetensors file; has no config.json)", "good", ""),
    ("simulate S --d 0 | --d -4 | --heads 3 | --n 0 | --num-init -1 | --seed -1 | --chunk 0 | --steps 1.5",
     "rc 2, one line naming the option and the value", "good", ""),
    ("simulate S --alpha nan | --beta inf | --mask diagonal | --norm l3", "rc 2, one line each", "good", ""),
    ("simulate --n 100000000000", "rc 2, refused before allocating, with the estimate", "good", ""),
    ("simulate --config nosuch.toml | truncated TOML | truncated JSON", "rc 2, one line with the parser's position",
     "good", ""),
    ("simulate --config typo.toml (num_inti = 4)", "rc 2 'unknown option(s) in config file: num_inti': no file, no "
     "hint", "awkward", "fixed: names the file and the option meant (test_cli)"),
    ("simulate --config neg.toml (n = -3) | type.toml (num_init = 'four')", "rc 2 'config value n: must be > 0, got "
     "-3': the file is not named", "awkward",
     "fixed: '... (in neg.toml)', also solve's and a grid's (test_store_messages)"),
    ("simulate --config empty.toml ; --config RUN/config.json (replay)", "rc 0, the defaults; the replayed run",
     "good", ""),
    ("simulate S --out r/sim (tiny run)", "rc 0 in 8.5 s, summary printed, 3 files and the marker", "good", ""),
    ("simulate S --out r/sim again ; with --beta 2", "rc 2 'holds a finished run ... pass --overwrite'", "good", ""),
    ("simulate S --beta 2 --overwrite --out r/sim", "rc 0, replaced; no .r.jaxattn-replace left", "good", ""),
    ("simulate (80000 conditions) SIGINT after the first chunks, then the same command",
     "rc 130 'interrupted; run the same command again to resume'; rerun: 4000 resumed, rc 0", "good", ""),
    ("simulate SIGINT, then rerun with --beta 3", "rc 2 'r/simint3/.jaxattn-sweep holds a sweep with another "
     "configuration (beta: 1.0 there, 3.0 now; beta: 1.0 there, 3 now)'", "unclear message",
     "fixed: beta said once (test_reliability); remains: the internal .jaxattn-sweep path and 'a sweep'"),
    ("simulate S | head -1 (stdout, and 2>&1)", "rc 0, first line printed, the run complete", "good", ""),
    ("analyze nosuch --d 4", "rc 2 '--d only applies to --model random'", "awkward", "fixed (as simulate's)"),
    ("analyze nosuch | bad.safetensors | an empty folder", "rc 2, one line each (offline hub id said)", "good", ""),
    ("analyze random --gammas 1,,2 | --gammas inf | --steer-target nan | --num-init 0 | --n -1 | --order x | "
     "--chunk -5 | --prolong nan", "rc 2, one line each", "good", ""),
    ("analyze random --alpha -1", "rc 0, a negative step size accepted and run (64 s at default sizes)",
     "unclear message", "fixed: a step size <= 0 refused by simulate, analyze, spectrum and ja.simulate (test_cli)"),
    ("analyze random S --no-figures --out r/an (tiny run)", "rc 0 in 24 s, report.md", "good", ""),
    ("solve S --t1 -1 | nan | --dt 0 | -0.1 | --space torus | --solver rk99 | --rtol 0 | --atol inf | --saves 0 | "
     "--max-steps -3", "rc 2, one line each", "good", ""),
    ("solve S --space flat --rescaled (float32)", "rc 2 at once, why and what to pass", "good", ""),
    ("solve S --t1 0.2 --out r/so (tiny run) ; the same again", "rc 0 in 17 s; again rc 0, 4 of 4 resumed (a store "
     "of the same configuration)", "good", ""),
    ("solve S --t1 0.3 --out r/so (finished, changed)", "rc 2 '... another configuration (dynamics.t1: 0.2 there, "
     "0.3 now)': the key, not --t1", "awkward", "remains"),
    ("solve S --t1 0.3 --overwrite --out r/so", "rc 0, replaced", "good", ""),
    ("solve (4000 conditions) SIGINT after the first chunk, then the same command", "rc 130; rerun 1500 computed, "
     "2500 resumed", "good", ""),
    ("solve S | head -1", "rc 0; the progress bar on stderr is labelled 'sweep:'", "awkward",
     "fixed: 'solve:' (sweep_grid's label, not recorded; test_store_messages)"),
    ("sweep ; nosuch.toml ; a folder ; truncated TOML", "rc 2, one line each", "good", ""),
    ("sweep empty.toml", "rc 0, the defaults (1,000 conditions)", "good", ""),
    ("sweep gridrep.toml (n = [3, 3]) | gridneg.toml (n = -3) | gridtypo.toml ([modle])", "rc 2, one line each "
     "(the known keys listed)", "good", ""),
    ("sweep RUN/config.json (a finished simulate run's)", "rc 2 \"unknown key 'command' (known: ...)\": not that it "
     "is a run's config.json, not a grid", "unclear message",
     "fixed: said to be a `simulate` run's, replayed with `jaxattn simulate --config` (test_store_messages)"),
    ("sweep grid.toml --out '' | under a file | a simulate run | a solve store", "rc 2, one line each", "good", ""),
    ("sweep grid.toml --chunk 0", "rc 2 'unrecognized arguments' (chunk is a key of the grid)", "good", ""),
    ("sweep (40000 conditions) SIGINT, changed grid, the same grid", "rc 130; rc 2 naming model.depth; rc 0, "
     "24,000 resumed", "good", ""),
    ("sweep --overwrite on a finished store of the same grid", "rc 0, 40,000 resumed, nothing recomputed (simulate "
     "--overwrite recomputes)", "awkward", "fixed: resumed as documented, and said in one line (test_store_messages)"),
    ("consensus random | nosuch.safetensors | bad.safetensors", "rc 2, one line each", "good", ""),
    ("consensus --prompts 0 | --tokens -3 | --until nan | -1 | --block 0 | --dtype float8 | --gpt2-like-n -1 | "
     "--no-synthetic --t1 5", "rc 2, one line each", "good", ""),
    ("consensus minilm --passes 1 --prompts 2 --tokens 4 --no-synthetic (tiny run) ; again ; --overwrite",
     "rc 0 in 28 s; rc 2 finished run; rc 0 replaced", "good", ""),
    ("consensus SIGINT mid-run, then a tiny run into the same --out", "rc 130 'nothing was kept', --out absent; "
     "rc 0", "good", ""),
    ("consensus tiny | head -1", "rc 0, the run complete", "good", ""),
    ("consensus --block 5 without --until", "rc 0, --block changes nothing and is recorded", "silent",
     "fixed: refused, --block does nothing with --until 0 (ConsensusConfig.inert); CO12's command drops it "
     "(test_consensus, test_reproduce)"),
    ("clusters --n 0 | --t1 inf | --beta nan | --num -1 | --table-n 3,x | --table-beta 1,1 | --good-d 0 | "
     "--ensembles gaussian | --good-samples 0 | --high-dim-d 0 | --rate-n 1", "rc 2, one line each", "good", ""),
    ("clusters --high-dim-n 64 | --rate-n 5,8 (no --check-num)", "rc 0, Fig. 7(b) and the rate check silently not "
     "run (they run among the theorem checks)", "silent", "fixed: refused, naming --check-num 0 (MATRIX)"),
    ("clusters --n 4 --n-1d 4 --t1 1 --num 4 --table-n 4 --table-d 2 --table-beta 1 --good-d 1,2 ... (tiny run)",
     "rc 0 in 80 s (compilation on the busy 2-core machine)", "awkward", "remains: slow for the smallest options"),
    ("clusters tiny --overwrite, SIGINT after 20 s", "rc 130; the old run whole, the replacement removed; the line "
     "says 'nothing was kept' while the old run is kept", "unclear message",
     "fixed: 'OUT is left as it was found (the earlier run in it is whole)' (test_robustness)"),
    ("stability --d 0 | --tokens 2,70 | --models 0 | --alpha nan | --beta -1 | --time x | --time discrete --t1 5 | "
     "--steps -1 | --perturb-num -2 | --exhaustive-max -1", "rc 2, one line each", "good", ""),
    ("stability --d 3 --heads 2 ; --basin-starts 3", "rc 0 (67 s), --heads / --basin-starts changed nothing (no "
     "--multi-head-models / --basin-models) and were recorded", "silent", "fixed: refused (MATRIX)"),
    ("metastability --dims 1 | --betas 0 | --t1 -5 | --t-min 10 | --saves 3 | --dynamics C3 | --dynamics D1 --rtol | "
     "--hessian-tol 2 | --movie --movie-beta 3 | --dtype float16 | --n 4,4", "rc 2, one line each", "good", ""),
    ("metastability --dims 2 --n 4 --betas 1 --num 2 --t1 5 --saves 10 --movie --movie-beta 1 (tiny run)",
     "rc 0 in 19 s, movie.gif and trajectory.safetensors", "good", ""),
    ("metastability ... --no-movie --movie-beta 1", "rc 0, --movie-beta changes nothing and is recorded", "silent",
     "fixed: refused, --movie-beta does nothing with --no-movie (MetastabilityConfig.inert)"),
    ("movie ; nosuch ; an empty folder ; a sweep store ; a consensus run ; a file", "rc 2, one line each", "good", ""),
    ("movie r/sim --out x.txt | --out under a file | --out ''", "rc 2, one line each", "good", ""),
    ("movie r/sim ; again ; movie r/so --out m.gif ; again", "rc 0; rc 2 'exists ... --overwrite'; rc 0 in 33 s; "
     "rc 2", "good", ""),
    ("movie RUN with a truncated trajectory.safetensors (movie.gif present)", "rc 2 'movie.gif exists' before the "
     "corrupt input; with --overwrite: rc 2 'not a readable trajectory file'", "awkward", "remains"),
    ("convert ; nosuch ; an empty folder ; garbage config.json ; truncated model.safetensors ; no weights ; "
     "model_type mamba", "rc 2, one line each", "good", ""),
    ("convert CKPT --out '' | a folder | under a file | x.bin", "rc 2, one line each", "good", ""),
    ("convert CKPT --out g.safetensors (tiny GPT-2) ; again ; --overwrite ; --no-progress",
     "rc 0; rc 2 exists; rc 0; rc 0", "good", ""),
    ("inspect ; truncated file ; a header with a mis-shaped tensor ; a text file", "rc 2, one line each (the "
     "checksum names the modified file)", "good", ""),
    ("inspect g.safetensors [--no-progress]", "rc 0, the summary", "good", ""),
    ("spectrum random | nosuch.safetensors | truncated | --order x | --order step --alpha inf", "rc 2, one line each",
     "good", ""),
    ("spectrum CKPT-folder ; g.safetensors ; --no-progress --progress ; minilm --order step --alpha 0.5 ; | head -1",
     "rc 0 each", "good", ""),
]
ROUND_2026_11_27_COUNTS = {"good": 45, "awkward": 9, "unclear message": 4, "silent": 4}


def test_the_round_of_2026_11_27_is_counted():
    """The counts quoted for the round are the rows' (every row not good says whether it was fixed or remains)."""
    counts: dict[str, int] = {}
    for _, _, judgement, _ in ROUND_2026_11_27:
        counts[judgement] = counts.get(judgement, 0) + 1
    assert counts == ROUND_2026_11_27_COUNTS
    assert all(bool(fix) == (judgement != "good") for _, _, judgement, fix in ROUND_2026_11_27)
