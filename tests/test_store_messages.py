"""Issue 66, section 4: the messages of the sweep store's commands in the user's own words: a missing folder, a
run's config.json given as a grid, ``--overwrite`` of the same configuration, a bad value in a config file, and
the progress bar's label. Each test failed on the code before."""

import json
import re

import pytest

import jaxattn as ja
from jaxattn.cli import main
from jaxattn.errors import ConfigError

SMALL = ["--num-init", "4", "--n", "3", "--d", "4", "--heads", "1", "--depth", "1", "--chunk", "4"]
SOLVE = ["solve", *SMALL, "--t1", "0.2", "--saves", "3"]
GRID = "num_init = 4\nchunk = 4\n[init]\nn = 3\n[model]\nd = 4\nheads = 1\ndepth = 1\n"


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error:") and err.count("\n") == 1, err
    return err


def test_a_missing_sweep_folder_is_said_not_to_exist(tmp_path, capsys):
    """It was "not a jaxattn sweep store (no manifest.json)", as of a folder that exists and holds something else."""
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"^{re.escape(str(missing))} does not exist$"):
        ja.open_sweep(missing)
    assert main(["movie", str(missing), "--no-progress"]) == 2  # was "is not a directory"
    assert _err(capsys) == f"jaxattn: error: {missing} does not exist\n"
    with pytest.raises(ConfigError, match=r"is not a jaxattn sweep store \(no manifest.json\)$"):  # as before
        ja.open_sweep(tmp_path)
    assert not missing.exists()


def test_a_runs_config_json_given_to_sweep_is_said_to_be_one(tmp_path, capsys):
    """`jaxattn sweep RUN/config.json` said "unknown key 'command'": it is a run's record, replayed by its command."""
    run = tmp_path / "run"
    assert main(["simulate", *SMALL, "--no-progress", "--out", str(run)]) == 0
    capsys.readouterr()
    config = run / "config.json"
    assert main(["sweep", str(config), "--no-progress", "--out", str(tmp_path / "s")]) == 2
    err = _err(capsys)
    assert f"{config} is the config.json of a `jaxattn simulate` run, not a grid" in err, err
    assert f"`jaxattn simulate --config {config}`" in err and "unknown key" not in err
    assert not (tmp_path / "s").exists()
    with pytest.raises(ConfigError, match=r"^the configuration is the config\.json of a `jaxattn simulate` run"):
        ja.sweep_grid(json.loads(config.read_text()), tmp_path / "s", progress=False)


def test_overwrite_of_a_store_of_the_same_configuration_says_that_it_resumes(tmp_path, capsys):
    """docs/cli.md: a store of the same configuration is resumed, with --overwrite too; that was silent."""
    grid, out = tmp_path / "g.toml", tmp_path / "s"
    grid.write_text(GRID)
    assert main(["sweep", str(grid), "--overwrite", "--no-progress", "--out", str(out)]) == 0  # a new store
    assert capsys.readouterr().err == ""
    assert main(["sweep", str(grid), "--overwrite", "--no-progress", "--out", str(out)]) == 0
    assert capsys.readouterr().err == (f"jaxattn: note: {out} already holds this configuration: --overwrite kept it "
                                       "and resumed it (4 conditions kept, 0 computed); to start over, remove it or "
                                       "choose another --out\n")
    grid.write_text(GRID.replace("depth = 1", "depth = 2"))  # another configuration: replaced, nothing to say
    assert main(["sweep", str(grid), "--overwrite", "--no-progress", "--out", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert ja.open_sweep(out).manifest["config"]["model"]["depth"] == 2


def test_a_bad_value_in_a_config_file_names_the_file(tmp_path, capsys):
    """docs/cli.md: an error about a value from a file names the file; `config value n: must be > 0, got -3` did
    not, and solve blamed it on --n, which was not typed."""
    flat, table, grid = tmp_path / "c.toml", tmp_path / "t.toml", tmp_path / "g.toml"
    flat.write_text("n = -3\n")
    table.write_text("[init]\nn = -3\n")
    grid.write_text(GRID.replace("n = 3", "n = -3"))
    for argv, want in ((["simulate", "--config", str(flat)], f"config value n: must be > 0, got -3 (in {flat})"),
                       (["solve", "--config", str(flat)], f"config value n: must be > 0, got -3 (in {flat})"),
                       (["solve", "--config", str(table)], f"config value [init] n: must be > 0, got -3 (in {table})"),
                       (["solve", "--config", str(flat), "--n", "0"], "--n: must be > 0, got 0"),  # the typed one
                       (["sweep", str(grid)], f"config file {grid}: init.n: must be > 0, got -3")):
        assert main([*argv, "--no-progress", "--out", str(tmp_path / "o")]) == 2
        assert _err(capsys) == f"jaxattn: error: {want}\n", argv
        assert not (tmp_path / "o").exists()


def test_the_progress_bar_says_the_commands_word_and_changes_no_store(tmp_path, capsys):
    """solve's bar was labelled `sweep:`. The label is only shown: a store written under one resumes under another."""
    assert main([*SOLVE, "--progress", "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "solve: 100%" in err and "sweep:" not in err, err
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    assert main(["sweep", str(grid), "--progress", "--out", str(tmp_path / "g")]) == 0
    assert "sweep: 100%" in capsys.readouterr().err
    sw = ja.sweep_grid(str(grid), tmp_path / "g", progress=False, label="mine")
    assert (sw.summary["computed"], sw.summary["resumed"]) == (0, 4)
    assert "mine" not in (tmp_path / "g" / "manifest.json").read_text()
