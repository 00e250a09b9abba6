"""`jaxattn consensus`: a complete run directory on a tiny GPT-2, and clear refusals."""

import csv
import json

import numpy as np
import pytest

pytest.importorskip("transformers")

import jaxattn as ja
from jaxattn.cli import main

from . import hf_models


def _csv_rows(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    hf_models.build("gpt2", folder)
    return ja.convert(str(folder), str(folder / "gpt2.safetensors"))


@pytest.mark.e2e
def test_a_float64_study_leaves_x64_as_it_was(gpt2_file, tmp_path):
    """The study switched jax_enable_x64 on for the rest of the process with dtype float64; now it enables it in a
    scope (only the command may switch it on, for its own process)."""
    import jax

    from jaxattn.studies import consensus

    model = ja.load(gpt2_file)
    cfg = consensus.Config(passes=1, prompts=2, tokens=3, dtype="float64", synthetic=False, figures=False)
    jax.config.update("jax_enable_x64", False)  # the user's default (the tests' conftest turns it on)
    try:
        tables = consensus.run(tmp_path / "c", cfg, model=model)
        assert jax.config.jax_enable_x64 is False
    finally:
        jax.config.update("jax_enable_x64", True)
    assert [r["run"] for r in tables["summary"]] == ["ffn_periodic", "ffn_redrawn", "ffn_random_periodic",
                                                     "no_ffn_periodic", "no_ffn_redrawn", "no_ffn_random_periodic"]
    assert all(np.isfinite(r["first_token_end"]) for r in tables["summary"])


@pytest.mark.e2e
def test_consensus_writes_a_complete_run(gpt2_file, tmp_path, capsys):
    out = tmp_path / "c"
    rc = main(["consensus", str(gpt2_file), "--passes", "4", "--prompts", "6", "--tokens", "9", "--synthetic-num", "6",
               "--t1", "20", "--out", str(out), "--no-progress"])
    assert rc == 0
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "passes.csv", "summary.csv", "synthetic.csv", "report.md", "passes.png",
            "synthetic.png"} <= names
    for png in ("passes.png", "synthetic.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _csv_rows(out / "passes.csv")
    assert len(rows) == 6 * (4 * 3 + 1)  # 6 runs x (passes x depth + 1) layers
    prompts = _csv_rows(out / "prompts.csv")
    assert len(prompts) == 6 * 6 * (4 + 1)  # 6 runs x 6 prompts x every pass boundary
    at = {(r["run"], r["layer"]): float(r["first_token_mean"]) for r in rows}
    for run in {r["run"] for r in prompts}:  # the per-prompt table is the per-layer one, prompt by prompt
        for layer in range(0, 13, 3):
            vals = [float(r["first_token"]) for r in prompts if r["run"] == run and int(r["layer"]) == layer]
            assert np.mean(vals) == pytest.approx(at[(run, str(layer))], rel=1e-6)
    summary = _csv_rows(out / "summary.csv")
    report = (out / "report.md").read_text()
    for r in summary:
        assert f"| {r['run']} | {float(r['first_token_start']):.4f} |" in report
    syn = _csv_rows(out / "synthetic.csv")
    last = {r["setting"]: r for r in syn if float(r["t"]) == 20.0}
    assert float(last["causal_two_heads"]["first_token_mean"]) < 1e-6  # consensus on the first token
    hem = [float(r["hemisphere_min"]) for r in syn if r["setting"] == "hemisphere"]
    assert min(np.diff(hem)) > -1e-12  # the Lyapunov function never decreases
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["command"] == "consensus" and cfg["config"]["passes"] == 4 and "versions" in cfg


@pytest.mark.fast_cases('args1-exceed', 'args2---synthetic-d: must be >= 2 (tokens on a sphere)',
                        'args3---t1: must be finite')
@pytest.mark.parametrize("args,match", [
    (["--passes", "0"], "--passes: must be > 0"),
    (["--tokens", "500"], "exceed"),
    (["--synthetic-d", "1"], "--synthetic-d: must be >= 2 (tokens on a sphere)"),
    (["--t1", "nan"], "--t1: must be finite"),
])
def test_consensus_bad_input(gpt2_file, tmp_path, capsys, args, match):
    out = tmp_path / "c"
    rc = main(["consensus", str(gpt2_file), "--out", str(out), "--no-progress", "--prompts", "2", *args])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("jaxattn: error:") and match in err and err.count("\n") == 1
    assert not out.exists()


def test_block_without_until_is_refused_as_changing_nothing(gpt2_file, tmp_path, capsys):
    """Issue 66: ``--block`` without ``--until`` was accepted and recorded, though the passes then run at once (the
    blocks are those between the checks of ``--until``): refused in one line, on the command line and in Python."""
    from jaxattn.errors import ConfigError
    from jaxattn.studies import consensus

    out = tmp_path / "c"
    assert main(["consensus", str(gpt2_file), "--block", "5", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error: --block does nothing with --until 0 (") and err.count("\n") == 1, err
    assert not out.exists()
    with pytest.raises(ConfigError, match=r"^block does nothing with until = 0 \("):
        consensus.Config(block=5).check()
    consensus.Config(block=5, until=1e-3).check()  # with --until it sets the blocks
    consensus.Config(until=1e-3).check()


def test_passes_figure_marks_at_most_twenty_passes_and_draws_the_range_over_prompts(tmp_path, monkeypatch):
    """A thousand passes: a line every 50 passes, not a thousand grey lines; the band is the range over the prompts
    at the pass boundaries (read from CSV text), which stays on a log axis where the mean minus one standard
    deviation (a lagging prompt) would not."""
    from jaxattn.studies import consensus, plots

    plt = plots.pyplot()
    if plt is None:
        pytest.skip("matplotlib is not installed")
    depth, passes = 2, 1000
    level = lambda layer: 0.5 * 0.995 ** layer
    rows = [{"run": "a", "layer": str(k), "first_token_mean": repr(level(k)), "first_token_std": "0.9"}
            for k in range(passes * depth + 1)]
    prompts = [{"run": "a", "prompt": str(p), "layer": str(k), "first_token": repr(f * level(k))}
               for k in range(0, passes * depth + 1, depth) for p, f in enumerate((0.9, 1.0, 1.1))]
    seen = {}
    monkeypatch.setattr(plots, "save", lambda fig, path, dpi: seen.setdefault("fig", fig))
    assert consensus.passes_figure(tmp_path / "passes.png", rows, prompts, depth)
    ax = seen["fig"].axes[0]
    marks = [line for line in ax.lines if len(set(np.asarray(line.get_xdata(), float))) == 1]
    assert len(marks) == consensus.MARKED_PASSES and "a line every 50 passes" in ax.get_xlabel()
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() >= 0.9 * level(passes * depth) * (1 - 1e-9)  # the smallest prompt, not an axis floor
    assert ys.max() <= 1.1 * level(0) * (1 + 1e-9)
    plt.close(seen["fig"])
