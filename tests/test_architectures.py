"""``jaxattn architectures NAME``: the consensus study's passes on a paper architecture with random weights (once
``python -m jaxattn.studies.architectures``)."""

from __future__ import annotations

import json

import pytest

from jaxattn.cli import main

pytest.importorskip("transformers")
pytest.importorskip("torch")

TINY = ["--prompts", "2", "--tokens", "4", "--passes", "2", "--no-figures", "--no-progress"]


@pytest.mark.e2e  # about 15 s on two cores: the passes compile for each run
def test_a_random_architecture_runs_the_consensus_passes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["architectures", "gpt2-tiny", *TINY, "--seed", "3", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.count("first-token measure") == 4 and f"report       {out}/report.md" in said  # FFN x weights
    record = json.loads((out / "config.json").read_text())
    assert record["model"] == "gpt2-tiny (random weights, seed 3)"
    assert (record["config"]["synthetic"], record["config"]["random_periodic"]) == (False, False)
    assert (record["config"]["prompts"], record["config"]["tokens"], record["config"]["seed"]) == (2, 4, 3)
    assert main(["architectures", "gpt2-tiny", *TINY, "--out", str(out)]) == 2  # a finished run: --overwrite
    assert "--overwrite" in capsys.readouterr().err


def test_the_paper_scale_is_the_default_and_bad_input_is_one_line(tmp_path, capsys):
    from jaxattn.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    options = sub["architectures"].get_default("defaults")  # what the command line resolves against
    assert [options[k].default for k in ("prompts", "tokens", "passes", "seed")] == [100, 200, 100, 0]
    with pytest.raises(SystemExit) as e:
        main(["architectures", "gpt5", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "invalid choice: 'gpt5'" in capsys.readouterr().err
    assert main(["architectures", "gpt2-tiny", *TINY, "--block", "0", "--out", str(tmp_path / "r")]) == 2
    assert "block" in capsys.readouterr().err and not (tmp_path / "r").exists()
