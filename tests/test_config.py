"""The one configuration mechanism (jaxattn.config): options declared once as dataclass fields, from which the
command-line options, the config-file checks and the sweep schema are derived, their choices the library's own."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json

import jax
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.cli import build_parser, main
from jaxattn.config import check_value, from_mapping, option, positive, specs
from jaxattn.dynamics.continuous import Solver
from jaxattn.errors import ConfigError
from jaxattn.model.sampling import seeded_model
from jaxattn.sweeps.grid import SCHEMA, validate_config


@dataclasses.dataclass(frozen=True)
class _Example:
    n: int = option(3, "tokens", check=positive)
    scale: float | None = option(None, "a scale", check=positive)
    sizes: list[int] = option([2, 3], "sizes", choices=(1, 2, 3, 4))
    on: bool = option(False, "a switch")
    save: int | str = option(1, "every or 'last'")
    kind: str = option("a", "a kind", choices=("a", "b"))
    internal: int = 0  # not an option


def test_specs_come_from_the_annotations():
    sp = specs(_Example)
    assert set(sp) == {"n", "scale", "sizes", "on", "save", "kind"}
    assert sp["n"].types == (int,) and not sp["n"].optional
    assert sp["scale"].types == (int, float) and sp["scale"].optional
    assert sp["sizes"].is_list and sp["sizes"].types == (int,) and sp["sizes"].default == [2, 3]
    assert sp["save"].types == (int, str)
    assert _Example().sizes is not _Example().sizes  # a list default is copied per instance


@pytest.mark.parametrize("key,value,match", [
    ("n", True, "expected int"), ("n", 2.0, "expected int"), ("n", 0, "must be > 0"),
    ("scale", float("inf"), "must be finite"), ("scale", "1", "expected float"),
    ("sizes", "2,3", "expected a list of int"), ("sizes", [], "at least one"), ("sizes", [2, 5], r"sizes\[1\]"),
    ("kind", "c", "must be one of a, b"), ("on", 1, "expected bool"),
])
def test_check_value_names_the_key(key, value, match):
    with pytest.raises(ConfigError, match=match):
        check_value(key, specs(_Example)[key], value)


def test_from_mapping_checks_and_refuses_unknown_keys():
    assert from_mapping(_Example, {"sizes": [4], "scale": 2, "save": "last"}) == _Example(sizes=[4], scale=2,
                                                                                         save="last")
    with pytest.raises(ConfigError, match="unknown key 'nn'"):
        from_mapping(_Example, {"nn": 1})


def test_command_line_options_are_derived():
    from jaxattn.cli._shared import add_options

    p = argparse.ArgumentParser()
    add_options(p, {"x": list(specs(_Example).values())})
    a = p.parse_args(["--sizes", "1,4", "--save", "last", "--on", "--scale", "0.5"])
    assert (a.sizes, a.save, a.on, a.scale, a.n) == ([1, 4], "last", True, 0.5, None)
    assert p.parse_args(["--save", "3"]).save == 3
    with pytest.raises(SystemExit):
        p.parse_args(["--kind", "c"])


def _choices(command: str) -> dict[str, tuple]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: tuple(a.choices) for a in sub.choices[command]._actions if a.choices}


@pytest.mark.e2e
def test_choices_are_the_library_constants():
    """Adding a normalisation, an attention kind, a solver... touches the module that implements it: every list
    of values offered is that module's constant (less the kinds that need an array, a Python argument)."""
    from jaxattn.dynamics._runner import SIMULATION_DTYPES
    from jaxattn.dynamics.continuous import SOLVERS
    from jaxattn.dynamics.discrete import NORMS, ROPES
    from jaxattn.dynamics.geometry import NEEDS_S, SPACES
    from jaxattn.dynamics.options import PATHS, PRECISIONS
    from jaxattn.model.attention import ATTENTIONS
    from jaxattn.model.sampling import INIT_KINDS, NEEDS_ARRAY, VALUE_KINDS, WEIGHT_KINDS
    from jaxattn.sweeps.grid import OBSERVABLES

    def plain(kinds, needs):
        return tuple(k for k in kinds if k not in needs)

    expected = {
        ("dynamics", "norm"): plain(NORMS, NEEDS_S), ("dynamics", "space"): plain(SPACES, NEEDS_S),
        ("dynamics", "attention"): ATTENTIONS, ("dynamics", "rope"): ROPES, ("dynamics", "solver"): tuple(SOLVERS),
        ("model", "weights"): WEIGHT_KINDS, ("model", "value"): plain(VALUE_KINDS, NEEDS_ARRAY),
        ("init", "kind"): plain(INIT_KINDS, NEEDS_ARRAY), ("", "dtype"): SIMULATION_DTYPES,
        ("", "matmul_precision"): tuple(PRECISIONS), ("", "path"): PATHS, ("", "observables"): tuple(OBSERVABLES),
    }
    for (sec, key), want in expected.items():
        assert SCHEMA[sec][key].choices == want, (sec, key)
    assert "ellipsoid" not in SCHEMA["dynamics"]["norm"].choices and "layernorm" in SCHEMA["dynamics"]["norm"].choices
    for command in ("simulate", "solve"):
        for dest, choices in _choices(command).items():
            spec = next(s for sec in SCHEMA.values() for s in sec.values() if s.dest == dest)
            assert choices == spec.choices, (command, dest)


def test_every_option_of_a_dynamics_is_reachable_everywhere():
    """Every field of Dynamics (maps) is a sweep key and a `simulate` option; every field of Flow a sweep key
    and a `solve` option."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {c: {o for a in sub.choices[c]._actions for o in a.option_strings} for c in ("simulate", "solve")}
    for cls, command in ((ja.Dynamics, "simulate"), (ja.Flow, "solve"), (Solver, "solve")):
        for f in dataclasses.fields(cls):
            assert f.name in SCHEMA["dynamics"], (cls.__name__, f.name)
            assert SCHEMA["dynamics"][f.name].field == f.name, (cls.__name__, f.name)
            assert "--" + f.name.replace("_", "-") in flags[command], (command, f.name)


def test_the_schema_is_the_objects_options():
    """Every key is declared by exactly the field of an object of its section that runs it (nothing restated): a
    key's default is that field's (Save.every's 1 is the configuration's spelling of its None, every step), a
    key declared by a map's object only applies to maps, and Save's and Batch's keys map back onto their fields."""
    from jaxattn.sweeps.grid import CONTINUOUS_ONLY, DISCRETE_ONLY, SECTIONS

    for sec, objects in SECTIONS.items():
        declared = {key for cls in objects for key in specs(cls)}
        assert declared == set(SCHEMA[sec]), sec
        for key, spec in SCHEMA[sec].items():
            owners = [cls for cls in objects if key in specs(cls)]
            for cls in owners:
                field = next(f for f in dataclasses.fields(cls) if f.name == spec.field)
                default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
                assert default == spec.default or (cls, key) == (ja.Save, "save"), (sec, key, cls)
    assert SCHEMA["dynamics"]["save"].default == 1 and ja.Save().every is None
    assert {"dynamics.norm", "dynamics.rope", "dynamics.save", "path"} <= set(DISCRETE_ONLY)
    assert {"dynamics.space", "dynamics.solver", "dynamics.max_steps", "dynamics.t1"} <= set(CONTINUOUS_ONLY)
    shared = {"dynamics.attention", "dynamics.biases", "dynamics.beta", "matmul_precision"}
    assert not shared & (set(DISCRETE_ONLY) | set(CONTINUOUS_ONLY))
    assert SCHEMA[""]["matmul_precision"].field == "precision" and SCHEMA["dynamics"]["save_steps"].field == "steps"
    # a point takes only the options of its own kind: a flow's batch is not handed the maps' path
    from jaxattn.sweeps.grid import expand, point_of

    both = expand(validate_config({"path": "plain", "dynamics": {"kind": ["discrete", "continuous"]}}))
    assert [point_of(p).batch.path for p in both] == ["plain", "auto"]


def test_an_option_declared_twice_otherwise_is_refused():
    """Two objects of a section may share a key only with one declaration (the attention of a map and of a flow);
    declared twice with other help, the schema refuses to build."""
    from jaxattn.config import about, option
    from jaxattn.sweeps._schema import _section

    @dataclasses.dataclass(frozen=True)
    class A:
        x: int = option(1, "one help")

    @dataclasses.dataclass(frozen=True)
    class B:
        x: int = option(1, "another help")

    @dataclasses.dataclass(frozen=True)
    class C:
        x: int = dataclasses.field(default=1, metadata=about("one help"))

    assert _section((A, C))["x"].help == "one help"
    with pytest.raises(TypeError, match="declares the option 'x' otherwise"):
        _section((A, B))


def test_a_list_default_is_a_new_list_each_time():
    """The declarations are read once and kept, but a list default is handed out as a new list each time (as a
    dataclass's default_factory does): a caller that changes one changes nobody else's."""
    first, second = specs(_Example)["sizes"].default, specs(_Example)["sizes"].default
    assert first == second == [2, 3] and first is not second
    first.append(4)
    assert specs(_Example)["sizes"].default == [2, 3]


def test_an_option_says_which_kind_of_dynamics_it_is_for_or_none():
    """A misspelt kind would leave the key in neither list of one-kind keys, and a key set at a point of the other
    kind would be recorded rather than refused: the declaration refuses it."""
    from jaxattn.config import about

    assert about("x", only="discrete")["option"]["only"] == "discrete"
    with pytest.raises(ValueError, match=r"about\(only=\.\.\.\) must be None, 'discrete' or 'continuous'"):
        about("x", only="discret")


@pytest.mark.parametrize("save,batch", [
    (ja.Save(every=3), None), (ja.Save(every="last"), None), (ja.Save(steps=[5, 0, 2]), None),
    (None, ja.Batch(precision="tf32")), (None, ja.Batch(path="plain")),
    (ja.Save(every=2), ja.Batch(precision="bf16", path="plain")),
])
def test_save_and_batch_are_keys_that_come_back_as_themselves(save, batch):
    """Every option field of Save and Batch set, written as the keys it declares (what sweep_grid does with
    save= and batch=), validated and built into a point, gives back the object's fields."""
    from jaxattn.sweeps._schema import keys_of
    from jaxattn.sweeps.grid import expand, point_of

    raw: dict = {}
    for dotted, v in keys_of(save, batch).items():
        sec, _, key = dotted.rpartition(".")
        (raw.setdefault(sec, {}) if sec else raw)[key] = v
    pt = point_of(expand(validate_config(raw))[0])
    for obj, got in ((save, pt.save), (batch, pt.batch)):
        if obj is not None:
            for spec in specs(type(obj)).values():
                assert getattr(got, spec.field) == getattr(obj, spec.field), spec.name


def test_the_solver_record_holds_solves_keywords():
    """Solver's fields are solve's keyword arguments with solve's defaults (the tolerances written out), so a flow
    point hands them to solve as they are, and a configuration's solver options are checked where they are held."""
    params = inspect.signature(ja.solve).parameters
    for f in dataclasses.fields(Solver):
        assert f.name in params and params[f.name].kind is inspect.Parameter.KEYWORD_ONLY, f.name
        if params[f.name].default is not None:
            assert params[f.name].default == f.default, f.name
    assert Solver().keywords() == {"solver": "tsit5", "rtol": 1e-6, "atol": 1e-8, "dt": None, "max_steps": 100_000}
    with pytest.raises(ConfigError, match="euler has no error estimate"):
        Solver(solver="euler")
    assert Solver(solver="euler", dt=0.1).dt == 0.1


#: The configuration keys that a point's objects hold under another name (jaxattn.sweeps._point): every other key is
#: a field of the same name of one of them. A key added to the schema without a home fails the test below.
MAPPED = {"name": None, "chunk": None,  # the sweep's label and its unit of storage: not a point's
          "matmul_precision": "batch.precision", "path": "batch.path", "model.source": "model",
          "dynamics.kind": "run", "dynamics.save": "save.every", "dynamics.save_steps": "save.steps",
          "init.kind": "init"}


def _other_value(spec, default):
    """A valid value of a key other than its default."""
    if spec.choices:
        return next(c for c in spec.choices if c != default and c != [default])
    if spec.types == (bool,):
        return not default
    if default is None:
        return (7,) if spec.is_list else 7  # a list option's value: a tuple compares equal to the field it becomes
    return default + ("-other" if isinstance(default, str) else 3 if isinstance(default, int) else 0.375)


def test_every_key_of_a_point_reaches_the_field_of_its_name():
    """A grid point is the drivers' objects (Dynamics or Flow, Save, Batch, the random model's law), built in one
    place: each key given a value other than its default, alone, comes out in the field of the same name of one of
    those objects (or where MAPPED says)."""
    from jaxattn.sweeps.grid import FlowRun, MapRun, expand, point_of

    def homes(pt):
        run = pt.run
        inner = [run.dynamics] if isinstance(run, MapRun) else [run.flow, run.solver]
        return [*inner, pt, run, pt.model, pt.save, pt.batch]  # the solver's name before the run's solver record

    def find(pt, name):
        for obj in homes(pt):
            if dataclasses.is_dataclass(obj) and name in {f.name for f in dataclasses.fields(obj)}:
                return getattr(obj, name)
        raise AssertionError(f"no object of the point has a field {name!r}")

    base = {kind: expand(validate_config({"dynamics": {"kind": kind}}))[0] for kind in ("discrete", "continuous")}
    checked = 0
    for sec, keys in SCHEMA.items():
        for key, spec in keys.items():
            flat = f"{sec}.{key}" if sec else key
            if MAPPED.get(flat, "") is None or key == "observables":
                continue
            kinds = (["continuous"] if spec.help.startswith("continuous") else ["discrete"]
                     if spec.help.startswith("discrete:") else ["discrete", "continuous"])
            for kind in kinds:
                if flat == "dynamics.kind":
                    assert isinstance(point_of(base[kind]).run, MapRun if kind == "discrete" else FlowRun)
                    continue
                p = {**base[kind], flat: _other_value(spec, base[kind][flat])}
                if flat == "dynamics.rescaled":
                    p["dynamics.space"] = "flat"
                if flat == "dynamics.solver":  # a solver without an error estimate needs a fixed step: one with
                    p[flat] = "dopri5"
                pt, ref = point_of(p), point_of(base[kind])  # ref: the default is not the value given
                where = MAPPED.get(flat)
                if where == "model":
                    got = pt.model
                elif where == "init":
                    got = getattr(pt, where)
                elif where:
                    obj, attr = where.split(".")
                    got = getattr(getattr(pt, obj), attr)
                elif flat == "dynamics.unit_output":  # D2: the dynamics, and the random model drawn with O = I
                    assert pt.run.dynamics.unit_output and pt.model.unit_output
                    got = True
                else:
                    got = find(pt, key)
                assert got == p[flat] != find(ref, key) if not where else got == p[flat], (flat, kind, got)
                checked += 1
    assert checked >= 40
    # observables: the default pair is the drivers' default (None), any other
    # list the named observables
    for kind in ("discrete", "continuous"):
        assert point_of(base[kind]).save.observe is None
        pt = point_of({**base[kind], "observables": ["mean_distance", "diameter"]})
        assert pt.save.observe.names == ("mean_distance", "diameter") == pt.observables, kind


#: Fingerprints of sweep stores written before the schema was derived from dataclasses (computed with that
#: code): a store written then still resumes.
OLD_FINGERPRINTS = [
    ({}, "97070c7c1b83908f"),
    ({"kernel": "plain", "dynamics": {"beta": [1.0, 2.0]}, "init": {"n": 5}}, "3965581d783ea4da"),
    ({"dynamics": {"kind": "continuous", "t1": 3.0}, "observables": ["diameter"]}, "fa14b14aaa25d6a7"),
]


@pytest.mark.parametrize("raw,want", OLD_FINGERPRINTS)
def test_old_stores_keep_their_fingerprint(raw, want):
    from jaxattn.io.store import fingerprint
    from jaxattn.sweeps._schema import decisive

    assert fingerprint({"config": decisive(validate_config(raw)), "lanes": None}) == want


def test_renamed_key_still_reads():
    assert validate_config({"kernel": "plain"})[""]["path"] == "plain"
    assert validate_config({"path": "plain"})[""]["path"] == "plain"


def _sweep_and_simulate(tmp_path, dynamics: dict, model_opts: dict, dyn: ja.Dynamics):
    """The diameters of a sweep point with ``dynamics`` keys, and of ``ja.simulate`` of the same conditions."""
    cfg = {"num_init": 4, "chunk": 4, "seed": 3, "init": {"n": 4},
           "model": {"source": "random", "d": 4, "depth": 2, **model_opts}, "dynamics": dynamics}
    sw = ja.sweep_grid(cfg, tmp_path / "s", progress=False)
    model = seeded_model(3, 4, model_opts.get("heads", 4), 2, unit_output=dyn.unit_output)
    X0 = ja.init_tokens(jax.random.key(3), 4, 4, 4, dtype=np.float32)
    ref = ja.simulate(model, X0, 2, dynamics=dyn, dtype="float32")
    return sw.arrays(0)["observables.diameter"], np.asarray(ref.observables["diameter"])


@pytest.mark.e2e
def test_sweep_reaches_rope(tmp_path):
    got, want = _sweep_and_simulate(tmp_path, {"rope": "on"}, {"heads": 2}, ja.Dynamics(rope="on"))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    plain, _ = _sweep_and_simulate(tmp_path / "plain", {}, {"heads": 2}, ja.D1)
    assert not np.allclose(got, plain)  # the key reached the dynamics: RoPE changes the numbers


@pytest.mark.e2e
def test_sweep_reaches_unit_output(tmp_path):
    got, want = _sweep_and_simulate(tmp_path, {"unit_output": True}, {"heads": 1}, ja.D2)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    plain, _ = _sweep_and_simulate(tmp_path / "plain", {}, {"heads": 1}, ja.D1)
    assert not np.allclose(got, plain)  # a model drawn with O = I, not the default one


@pytest.mark.e2e
def test_simulate_command_reaches_unit_output(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["simulate", "--unit-output", "--heads", "1", "--d", "4", "--depth", "2", "--n", "3", "--num-init",
                 "2", "--out", str(out), "--no-progress"]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["unit_output"] is True
    capsys.readouterr()
    assert main(["simulate", "--drop-ln2", "--num-init", "2", "--out", str(tmp_path / "p")]) == 2
    assert "--drop-ln2" in capsys.readouterr().err  # the flag, not the Python name


@pytest.mark.parametrize("argv,match", [
    (["--n", "0"], "--n: must be > 0, got 0"),
    (["--mask", "diagonal"], "--mask: "),
    (["--steps", "-1"], "--steps: must be >= 0"),
])
def test_simulate_command_line_values_are_checked_by_their_declaration(argv, match, tmp_path, capsys):
    assert main(["simulate", *argv, "--num-init", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_simulate_config_file_values_are_checked_by_their_declaration(tmp_path, capsys):
    (tmp_path / "c.toml").write_text('attention = "sparsemax"\n')
    assert main(["simulate", "--config", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o")]) == 2
    assert "config value attention: must be one of softmax, uniform, unnormalised" in capsys.readouterr().err


# ------------------------------------------------------------------ found by a new user's probe
@pytest.mark.parametrize("raw,match", [
    ({"model": {"mask": "local:0"}},
     r"^model.mask: local mask needs a positive window, e.g. 'local:4', got 'local:0'$"),
    ({"kernel": "plain", "path": "auto"}, "kernel is the old name of path: give one of them"),
    ({"kernel": "bogus"}, r"^kernel: must be one of auto, plain, got 'bogus'$"),
    ({"path": "fused"}, r"^path: got 'fused': the fused Pallas kernel was removed .*'auto' and 'plain' run the plain"),
    ({"kernel": "fused"}, r"^kernel: got 'fused': the fused Pallas kernel was removed"),
    ({"path": ["plain", "fused"]}, r"^path\[1\]: got 'fused'"),
    ({"seed": [0, 0]}, "seed: the axis repeats 0, which would run one point twice"),
    ({"dynamics": {"beta": [1.0, 1]}}, r"dynamics.beta: the axis repeats 1"),
    ({"dynamics": {"attention": "uniform", "rope": "on"}}, "dynamics.rope does nothing with dynamics.attention"),
    ({"dtype": "float64", "matmul_precision": "tf32"}, "matmul_precision does nothing with dtype = 'float64'"),
    ({"dynamics": {"kind": "continuous", "layer_time": 2.0}}, "dynamics.layer_time does nothing with model.shared"),
])
def test_sweep_refuses_what_would_mislead(raw, match):
    with pytest.raises(ConfigError, match=match):
        validate_config(raw)


@pytest.mark.fast_cases('argv1---matmul-precision does nothing with --dtype float64',
                        "argv2---mask: mask must be 'full', 'causal' or 'local:W', got 'foo'\\n")
@pytest.mark.parametrize("argv,match", [
    (["--attention", "uniform", "--rope", "on"], "--rope does nothing with --attention uniform"),
    (["--dtype", "float64", "--matmul-precision", "tf32"], "--matmul-precision does nothing with --dtype float64"),
    (["--mask", "foo"], "--mask: mask must be 'full', 'causal' or 'local:W', got 'foo'\n"),
])
def test_simulate_refuses_what_would_mislead(argv, match, tmp_path, capsys):
    assert main(["simulate", *argv, "--num-init", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("got") <= 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags,raw", [
    (["--attention", "uniform", "--beta", "2"], {"dynamics": {"attention": "uniform", "beta": 2.0}}),
    (["--dtype", "float64", "--matmul-precision", "bf16"], {"dtype": "float64", "matmul_precision": "bf16"}),
])
def test_simulate_refuses_by_the_sweeps_rules(flags, raw, tmp_path, capsys):
    """simulate's options that would change nothing are the sweep's (one home for the rule): the same reason, the
    keys said as flags."""
    with pytest.raises(ConfigError) as sweep_err:
        validate_config(raw)
    assert main(["simulate", *flags, "--num-init", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    reason = str(sweep_err.value).split(" (", 1)[1].split(")", 1)[0]
    assert f"({reason})" in err and f"{flags[2]} does nothing with {flags[0]} {flags[1]}" in err, (err, reason)


def test_studies_refuse_a_matmul_precision_that_does_nothing():
    from jaxattn.studies import consensus, power_method

    for cls in (power_method.Config, consensus.Config):
        cls(dtype="float64").check()
        cls(matmul_precision="bf16").check()
        with pytest.raises(ConfigError, match="matmul_precision = 'bf16' does nothing with dtype = 'float64'"):
            cls(dtype="float64", matmul_precision="bf16").check()
