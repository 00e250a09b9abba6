"""Issue 30, the third reliability round: what the last rounds' notes left, each case refused in one line (or
made right) and checked here, every test failing on the code before the round."""

import json

import numpy as np
import pytest

import jaxattn as ja
from jaxattn.cli import main
from jaxattn.config import check_value, specs
from jaxattn.errors import ConfigError

from . import hf_models

SMALL = ["--num-init", "4", "--n", "3", "--d", "4", "--heads", "1", "--depth", "1", "--chunk", "4", "--no-progress"]


def _rc(argv: list[str]) -> int:
    """The exit status of a command line, whether argparse refused it (SystemExit) or the command did."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("jaxattn: error:") and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    hf_models.build("gpt2", folder)
    return ja.convert(str(folder), str(folder / "gpt2.safetensors"))


# ------------------------------------------------------------------ config files and list options
def test_duplicate_keys_in_a_json_config_are_refused(tmp_path, capsys):
    """json.loads keeps the last of two equal keys: the run would silently use one of two values."""
    f = tmp_path / "c.json"
    f.write_text('{"alpha": 0.5, "alpha": 2.0}')
    assert main(["simulate", "--config", str(f), "--out", str(tmp_path / "o")]) == 2
    assert "gives the key 'alpha' twice" in _err(capsys)
    f.write_text('{"num-init": 4, "num_init": 8}')  # two spellings of one option
    assert main(["simulate", "--config", str(f), "--out", str(tmp_path / "o")]) == 2
    assert "num_init twice" in _err(capsys)
    g = tmp_path / "g.json"
    g.write_text('{"num_init": 4, "model": {"d": 4, "d": 8}}')
    assert main(["sweep", str(g), "--out", str(tmp_path / "s")]) == 2
    assert "gives the key 'd' twice" in _err(capsys)
    g.write_text('{"num_init": 4, "num-init": 8}')
    with pytest.raises(ConfigError, match="num_init is given twice"):
        ja.sweep_grid(json.loads(g.read_text()), tmp_path / "s2", progress=False)
    assert not any((tmp_path / d).exists() for d in ("o", "s", "s2"))


@pytest.mark.parametrize("argv,match", [
    (["analyze", "random", "--gammas", "1,,2"], "--gammas: item 2 of '1,,2' is empty"),
    (["analyze", "random", "--gammas", "1,2,"], "--gammas: item 3 of '1,2,' is empty"),
    (["stability", "--tokens", "3,3"], "--tokens: 3 is given twice"),
    (["clusters", "--table-beta", "1,1.0"], "--table-beta: 1.0 is given twice"),
    (["clusters", "--ensembles", "ginibre,ginibre"], "--ensembles: 'ginibre' is given twice"),
])
def test_list_options_refuse_empty_and_repeated_items(argv, match, tmp_path, capsys):
    """`--gammas 1,,2` ran with [1, 2]; `--tokens 3,3` counted n = 3 once while the run recorded it twice."""
    assert _rc([*argv, "--out", str(tmp_path / "o")]) == 2
    assert match in _err(capsys)
    assert not (tmp_path / "o").exists()


def test_repeated_list_items_are_refused_from_python_and_files(tmp_path, capsys):
    from jaxattn.studies import stability

    with pytest.raises(ConfigError, match="tokens: 4 is given twice"):
        stability.Config(tokens=[3, 4, 4]).check()
    f = tmp_path / "c.toml"
    f.write_text('observables = ["diameter", "diameter"]\nnum_init = 4\n')
    assert main(["sweep", str(f), "--out", str(tmp_path / "s")]) == 2
    assert "observables: 'diameter' is given twice" in _err(capsys)


def test_option_checks_take_numpy_numbers(tmp_path):
    """Arithmetic on arrays gives NumPy scalars: the checks refused them ("expected int"), and one that slipped
    through could not be recorded in JSON."""
    from jaxattn.studies import clusters, power_method

    cfg = power_method.StudyConfig(num_init=np.int64(8), alpha=np.float32(0.5), gammas=[np.float64(2.0)],
                                   ffn_study=np.bool_(False))
    cfg.check()
    assert type(cfg.num_init) is int and type(cfg.alpha) is float and type(cfg.gammas[0]) is float
    assert type(cfg.ffn_study) is bool
    json.dumps(check_value("n", specs(clusters.Config)["table_n"], [np.int32(3)]))
    sw = ja.sweep_grid({"num_init": np.int64(4), "chunk": 4, "init": {"n": np.int64(3)},
                        "model": {"d": 4, "heads": 1, "depth": np.int64(1)}}, tmp_path / "g", progress=False)
    assert sw.points[0]["num_init"] == 4
