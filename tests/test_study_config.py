"""The studies on the one configuration mechanism (issue 20): each study's ``Config`` declares its options
(:mod:`jaxattn.config`), and its command's options, config-file keys and checks are derived from them; list
options are lists in Python, in config files and in a replayed ``config.json``."""

from __future__ import annotations

import argparse
import json

import pytest

from jaxattn.cli import build_parser, main, resolve
from jaxattn.cli._study import config_of
from jaxattn.config import specs
from jaxattn.errors import ConfigError, JaxattnError
from jaxattn.studies import STUDIES, clusters, stability
from jaxattn.studies import power_method as pm

#: What each study command takes beside its configuration's fields: the run directory, and the model it runs on.
OWN = {"analyze": {"model", "out", "overwrite", "config", "d", "heads", "depth", "shared", "mask"},
       "consensus": {"model", "out", "overwrite", "config", "progress"},
       "clusters": {"out", "overwrite", "config", "progress"},
       "stability": {"out", "overwrite", "config", "progress"},
       "metastability": {"out", "overwrite", "config", "progress"}}


def _parser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _resolved(tmp_path, command: str, text: str, name: str = "c.toml") -> dict:
    path = tmp_path / name
    path.write_text(text)
    args = build_parser().parse_args([command, "--config", str(path)])
    return resolve(args, args.defaults)


@pytest.mark.parametrize("command", sorted(OWN))
def test_study_command_options_are_its_configs_fields(command):
    """The options of a study command are its configuration's option fields plus its own, and it checks each one
    by the field's declaration (no option written twice)."""
    p = _parser(command)
    given = {a.dest for a in p._actions if a.dest != "help"}
    fields = specs(STUDIES[command].Config)
    assert given == set(fields) | OWN[command]
    defaults = p.get_default("defaults")
    for name, spec in fields.items():
        assert defaults[name] == spec, name
        action = next(a for a in p._actions if a.dest == name)
        assert action.help.startswith(("comma-separated: " if spec.is_list else "") + spec.help.replace("%", "%%"))


def test_list_options_are_lists_in_python():
    """A list option is declared a sequence (what it accepts: the runtime checker lets a tuple through) and is a
    list once checked."""
    assert clusters.Config().table_d == [2, 3] and clusters.Config().ensembles == ["ginibre", "symmetric"]
    assert stability.Config().tokens == [3, 4, 5] and pm.Config().gammas == [1.0, 10.0, 100.0, 1000.0]
    assert clusters.Config().table_n is not clusters.Config().table_n  # one list per configuration
    cfg = stability.Config(tokens=(4, 3))
    cfg.check()  # a tuple is a list too
    assert cfg.tokens == [4, 3]
    assert stability.Config(tokens=[5, 3]).ns() == [3, 5]  # in order (a repeated n is refused: test_reliability)


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
@pytest.mark.parametrize("config,match", [
    (lambda: stability.Config(tokens="3,4"), r"tokens must be a list \(tokens=\[...\]\), not comma-separated text; "
                                            r"got '3,4'"),
    (lambda: clusters.Config(table_beta="1"), "table_beta must be a list"),
    (lambda: clusters.Config(table_d=[2, 1]), r"table_d\[1\]: must be >= 2 \(the polytope analysis needs a hull\)"),
    (lambda: clusters.Config(ensembles=["gue"]), r"ensembles\[0\]: must be one of ginibre, symmetric"),
    (lambda: pm.Config(gammas=[1.0, -1.0]), r"gammas\[1\]: must be >= 0"),
    (lambda: pm.Config(init="ellipsoid"), "init: must be one of"),
    (lambda: stability.Config(time="sometimes"), "time: must be one of discrete, continuous, both"),
])
def test_python_configs_are_checked_by_their_declarations(config, match):
    """The comma-separated text of the command line is refused from Python, in one line saying what to give."""
    with pytest.raises(ConfigError, match=match):
        config().check()


def test_list_options_from_a_config_file_are_lists(tmp_path):
    cfg = _resolved(tmp_path, "clusters", 'table_d = [2, 3]\ntable_beta = [1, 4.5]\nensembles = ["ginibre"]\n')
    study = config_of(clusters.Config, cfg)
    assert (study.table_d, study.table_beta, study.ensembles, study.table_n) == ([2, 3], [1, 4.5], ["ginibre"], [10])
    assert _resolved(tmp_path, "analyze", '{"gammas": [0, 2.5]}', "c.json")["gammas"] == [0, 2.5]
    assert _resolved(tmp_path, "stability", "tokens = [3]\n")["tokens"] == [3]


@pytest.mark.parametrize("command,text,msg", [
    ("clusters", "table_d = [2, 1]\n", "config value table_d[1]: must be >= 2 (the polytope analysis needs a hull), "
                                       "got 1"),
    ("stability", 'tokens = "3,4"\n', "config value tokens: expected a list of int, got '3,4'"),
    ("stability", "models = 0\n", "config value models: must be > 0, got 0"),
    ("consensus", 'dtype = "float8"\n', "config value dtype: must be one of float16, bfloat16, float32, float64"),
    ("analyze", "gammas = [1, nan]\n", "config value gammas[1]: must be finite, got nan"),
])
def test_a_bad_config_file_value_is_one_line_naming_the_key(tmp_path, capsys, command, text, msg):
    (tmp_path / "c.toml").write_text(text)
    assert main([command, "--config", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"jaxattn: error: {msg}"), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command,recorded,key,want", [
    ("analyze", {"gammas": "1,10,100,1000", "num_init": 4}, "gammas", [1, 10, 100, 1000]),
    ("stability", {"tokens": "3,4,5", "figures": False}, "tokens", [3, 4, 5]),
    ("clusters", {"table_n": "10", "table_beta": "1,4", "ensembles": "ginibre,symmetric"}, "table_beta", [1, 4]),
])
def test_a_config_json_of_comma_separated_lists_replays(tmp_path, command, recorded, key, want):
    """Runs before list options were lists recorded them as the command line's text: replayed as lists."""
    run = {"command": command, "config": recorded}
    if command == "analyze":
        run["model"] = "minilm"
    cfg = _resolved(tmp_path, command, json.dumps(run), "config.json")
    assert cfg[key] == want and all(cfg[k] == v for k, v in recorded.items() if not isinstance(v, str))
    config_of(STUDIES[command].Config, cfg)  # a valid configuration
    run["config"][key] = "1,x"
    with pytest.raises(JaxattnError, match=f"config value {key}: expected"):
        _resolved(tmp_path, command, json.dumps(run), "config.json")


def test_integer_gains_resume_a_run_of_float_gains():
    """The command line reads ``--gammas 1,10`` as integers (a float option takes them); the run they decide is the
    one of ``[1.0, 10.0]``, so its resume fingerprint is the same (before lists were lists, the CLI gave floats)."""
    assert pm._as_floats(pm.Config(gammas=[1, 10], alpha=1)) == pm._as_floats(pm.Config(gammas=[1.0, 10.0]))
    assert pm._as_floats(pm.Config())["gammas"] == [1.0, 10.0, 100.0, 1000.0]
