"""One vocabulary across the drivers: ``Save`` and ``Batch`` validate themselves, mean the same thing in
``simulate``, ``solve``, ``repeated_passes``, ``sweep`` and ``sweep_grid``, and the loose keywords they replaced
are refused with a message that says where each went."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.dynamics._runner import default_lanes, working_bytes
from jaxattn.errors import ConfigError


def _model():
    return ja.random_model(jax.random.key(0), 8, 2, 3, shared=False, dtype=jnp.float64)


def _tokens(B=5):
    return ja.init_tokens(jax.random.key(1), B, 4, 8, dtype=jnp.float64)


def _along_w(t, X, ctx):  # an observable with aux: the mean coordinate along ctx.aux["w"]
    return {"along": jnp.mean(X @ ctx.aux["w"])}


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
@pytest.mark.parametrize("kwargs,match", [
    (dict(every=0), r"Save\(every=...\) must be None, a positive integer or 'last', got 0"),
    (dict(every=2.5), r"Save\(every=...\) must be"),
    (dict(every=True), r"Save\(every=...\) must be"),
    (dict(every="first"), r"Save\(every=...\) must be"),
    (dict(ts=[[0.0, 1.0]]), r"Save\(ts=...\) must be a non-empty 1-D sequence"),
    (dict(ts=[]), r"Save\(ts=...\) must be a non-empty 1-D sequence"),
    (dict(ts=[1.0, 0.5]), r"Save\(ts=...\) must be finite, non-decreasing"),
    (dict(ts=[0.0, float("nan")]), r"Save\(ts=...\) must be finite, non-decreasing"),
    (dict(ts=["a"]), r"Save\(ts=...\) must be a 1-D sequence of times"),
    (dict(trajectory="yes"), r"Save\(trajectory=...\) must be True or False"),
    (dict(observe="diameter"), r"Save\(observe=...\) must be a function"),
    (dict(size=0), r"Batch\(size=...\) must be None or a positive integer, got 0"),
    (dict(size=2.5), r"Batch\(size=...\) must be"),
    (dict(size=True), r"Batch\(size=...\) must be"),
    (dict(devices="cpu"), r"Batch\(devices=...\) must be a sequence of JAX devices"),
    (dict(devices=[]), r"Batch\(devices=...\) must be a non-empty sequence"),
    (dict(devices=[0, 1]), r"Batch\(devices=...\) must be a non-empty sequence"),
    (dict(precision="fp8"), r"Batch\(precision=...\) must be one of highest, tf32, bf16"),
    (dict(path="kernel"), r"Batch\(path=...\) must be one of auto, plain"),
])
def test_options_validate_with_one_line_naming_the_field(kwargs, match):
    cls = ja.Save if set(kwargs) <= {"every", "ts", "trajectory", "observe", "aux"} else ja.Batch
    with pytest.raises(ConfigError, match=match) as e:
        cls(**kwargs)
    assert "\n" not in str(e.value)


def test_batch_is_hashable_and_compares_by_value():
    a = ja.Batch(size=8, devices=jax.local_devices())  # a list of devices is kept as a tuple
    b = ja.Batch(size=8, devices=tuple(jax.local_devices()))
    assert a == b and hash(a) == hash(b) and isinstance(a.devices, tuple)
    assert ja.Batch() != ja.Batch(precision="tf32")
    assert ja.Save(every=3) == ja.Save(every=3) and ja.Save(every=3) != ja.Save(every="last")


OPTION_RECORDS = {ja.Batch: {}, ja.Dynamics: {}, ja.Flow: {}, ja.model.forms.Form: {},
                  ja.model.rope.Rope: {"dim": 4}}


@pytest.mark.unchecked_types("dataclasses.replace with an object() checks again")
@pytest.mark.parametrize("cls", OPTION_RECORDS, ids=lambda c: c.__name__)
def test_every_option_is_one_kind_of_record(cls):
    """One record kind for options: an equinox Module checked in ``__check_init__``, every field static (hashed
    into the compiled program, never a traced leaf), one spelling per value, equal and hashed by value,
    ``dataclasses.replace`` checking again as the constructor does."""
    import dataclasses

    import equinox as eqx

    kwargs = OPTION_RECORDS[cls]
    a, b = cls(**kwargs), cls(**kwargs)
    assert isinstance(a, eqx.Module) and a == b and hash(a) == hash(b)
    assert all(f.metadata.get("static") for f in dataclasses.fields(cls)), "a field is a pytree leaf"
    assert jax.tree_util.tree_leaves(a) == []
    # a jit argument without static_argnums: nothing traced, the option read as a Python value
    assert jax.jit(lambda opt, x: x + int(opt == a))(a, 1) == 2
    first = dataclasses.fields(cls)[0].name
    with pytest.raises(ConfigError):
        dataclasses.replace(a, **{first: object()})


def test_option_records_give_values_one_spelling():
    assert ja.Batch(size=np.int64(8)).size.__class__ is int
    assert ja.model.forms.Form(identity=["v", "q"]) == ja.model.forms.Form(identity=("q", "v"))
    assert ja.model.forms.Form(key_chunk=np.int32(16)).key_chunk.__class__ is int
    assert ja.model.forms.Form(masked=np.bool_(False)).masked is False
    with pytest.raises(ConfigError, match=r"Form\(identity=...\) must name members"):
        ja.model.forms.Form(identity=3)


def test_a_rope_models_weights_hash_is_the_one_stores_were_stamped_with():
    """``weights_sha256`` reads a RoPE with every field: equal RoPEs, however built (a JSON round trip), hash alike,
    and the digests are those of the code that stamped existing stores (before options were equinox Modules)."""
    from jaxattn.io.results import weights_sha256

    rng = np.random.default_rng(0)
    q, kv, o = rng.normal(size=(1, 2, 4, 8)), rng.normal(size=(1, 2, 4, 8)), rng.normal(size=(1, 2, 8, 4))
    Rope = ja.model.rope.Rope
    wanted = {Rope(dim=4): "027df125312d4bacfdc81275b8d5a76327b2b44ce18175890382185761c75ff6",
              Rope(dim=4, theta=500000.0, kind="llama3", factor=8.0, original_max_positions=8192):
              "15f6e23f4dcc5dd56ef5b0713d36a78f76f736266feb8d272ef419374efb086c"}
    for rope, digest in wanted.items():
        for same in (rope, Rope.from_json(rope.to_json())):
            model = ja.model.params.from_heads(q, kv, kv, o, masks="causal", rope=same)
            assert weights_sha256(model) == digest


def test_a_sweep_stamp_records_the_dynamics_with_every_field():
    """The stamp of a sweep store names the dynamics with all its fields, defaults included (as the dataclass
    repr did before options were equinox Modules): stores stamped then still resume."""
    from jaxattn.config import record_repr

    assert record_repr(ja.FAITHFUL) == ("Dynamics(norm='layernorm', ffn=True, pre_ln=True, biases=True, "
                                        "attention='softmax', drop_ln2=False, rope='model', unit_output=False)")
    assert record_repr(ja.D1) == ("Dynamics(norm='l2', ffn=False, pre_ln=False, biases=False, attention='softmax', "
                                  "drop_ln2=False, rope='none', unit_output=False)")


def test_the_same_save_and_batch_work_in_every_driver():
    model, X0 = _model(), _tokens()
    save = ja.Save(observe=_along_w, aux={"w": jnp.ones(8) / np.sqrt(8)})
    batch = ja.Batch(size=4, precision="highest", devices=jax.local_devices()[:1])
    sim = ja.simulate(model, X0, 6, save=save, batch=batch)
    passes = ja.repeated_passes(model, X0, 2, dynamics=ja.D1, save=save, batch=batch)
    assert sim.observables["along"].shape == passes.observables["along"].shape == (5, 7)
    # two passes of a 3-block model without a final norm are 6 steps of the map
    np.testing.assert_allclose(np.asarray(passes.observables["along"]), np.asarray(sim.observables["along"]),
                               rtol=0, atol=1e-13)
    sol = ja.solve(model, X0, 1.0, save=save, batch=batch)
    assert sol.observables["along"].shape == (5, 101) and bool(sol.ok.all())
    out = ja.sweep(model, num_init=5, n=4, steps=6, dtype="float64", save=save, batch=batch, progress=False)
    ref = ja.simulate(model, ja.init_tokens(jax.random.key(0), 5, 4, 8, dtype=jnp.float64), 6, save=save, batch=batch)
    # the same width gives the same bits within a driver; across two drivers (two compiled programs) only the CPU's
    # code generation is identical: on an H200 the last step differed by 1-2 ulp (at most 1.1e-16, 4 of 35 values)
    tol = 0.0 if jax.default_backend() == "cpu" else 4e-16
    np.testing.assert_allclose(out["observables.along"], np.asarray(ref.observables["along"]), rtol=0, atol=tol)


@pytest.mark.e2e
def test_save_every_means_the_same_steps_in_maps():
    model, X0 = _model(), _tokens()
    save = ja.Save(every=4, trajectory=True)
    sim = ja.simulate(model, X0, 6, save=save)
    passes = ja.repeated_passes(model, X0, 2, dynamics=ja.D1, save=save)
    redrawn = ja.repeated_passes(model, X0, 2, dynamics=ja.D1, save=save, redraw=True, key=jax.random.key(5))
    one = ja.simulate_one(model, X0[0], 6, save=save)
    for res in (sim, passes, redrawn):
        assert res.observables["diameter"].shape == (5, 3)  # steps 0, 4 and the last, 6
        assert res.trajectory.shape == (5, 3, 4, 8)
        np.testing.assert_array_equal(np.asarray(res.trajectory[:, -1]), np.asarray(res.final))
    np.testing.assert_allclose(np.asarray(passes.trajectory), np.asarray(sim.trajectory), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(one.trajectory), np.asarray(sim.trajectory[0]), rtol=0, atol=1e-13)
    out = ja.sweep(model, num_init=3, n=4, steps=6, save=ja.Save(every=4), progress=False)
    assert out["observables.diameter"].shape == (3, 3)


@pytest.mark.fast_cases('dtype3', 'float64_1', 'float64_2')
@pytest.mark.parametrize("dtype", ["float64", np.float64, jnp.float64, np.dtype("float64")])
def test_dtype_is_a_name_a_numpy_or_a_jax_dtype_in_every_driver(dtype):
    model, X0 = _model(), _tokens().astype(jnp.float32)
    assert ja.simulate(model, X0, 2, dtype=dtype).final.dtype == jnp.float64
    assert ja.solve(model, X0, 0.5, dtype=dtype).final.dtype == jnp.float64
    assert ja.repeated_passes(model, X0, 1, dynamics=ja.D1, dtype=dtype).final.dtype == jnp.float64
    assert ja.sweep(model, num_init=2, n=4, steps=2, dtype=dtype, progress=False)["final"].dtype == np.float64


@pytest.mark.e2e
def test_repeated_passes_dtype_defaults_to_the_states_like_the_other_drivers():
    model, X0 = _model(), _tokens()
    assert ja.repeated_passes(model, X0, 1, dynamics=ja.D1).final.dtype == jnp.float64
    assert ja.simulate(model, X0, 1).final.dtype == jnp.float64


@pytest.mark.e2e
def test_batch_size_none_follows_the_batch_and_a_fixed_size_keeps_the_bits_whatever_the_split():
    """``Batch(size=None)`` is the runner's width for the batch: 7 conditions run in one block of 8, the numbers of an
    explicit width of 8. A fixed size gives the same bits however the batch is split (``repeated_passes`` used to run
    the whole batch as one block); the default widths of the parts (4 lanes each) agree with the whole to round-off."""
    model, X0 = _model(), _tokens(7)
    lanes = default_lanes(working_bytes(4, 8, 2, jnp.float64), conditions=7)
    assert lanes == 8
    for run in (lambda X, b: ja.repeated_passes(model, X, 2, dynamics=ja.D1, batch=b).final,
                lambda X, b: ja.simulate(model, X, 6, batch=b).final,
                lambda X, b: ja.solve(model, X, 0.5, batch=b).final):
        whole = np.asarray(run(X0, ja.Batch()))
        np.testing.assert_array_equal(whole, np.asarray(run(X0, ja.Batch(size=lanes))))
        fixed = ja.Batch(size=lanes)
        split = np.concatenate([np.asarray(run(X0[:3], fixed)), np.asarray(run(X0[3:], fixed))])
        np.testing.assert_array_equal(whole, split)
        split = np.concatenate([np.asarray(run(X0[:3], ja.Batch())), np.asarray(run(X0[3:], ja.Batch()))])
        np.testing.assert_allclose(whole, split, rtol=0, atol=1e-13)


@pytest.mark.e2e
def test_one_head_maps_run_in_wider_blocks_whatever_the_split():
    """The papers' one-head models get a wider default block on a CPU (WIDE_LANES, while a block's steps fit
    WIDE_BLOCK_BYTES); several heads keep DEFAULT_LANES. A small batch caps it (7 conditions: 8 lanes); at a fixed
    width the numbers do not depend on the split, and differ from another width's only by round-off."""
    from jaxattn.dynamics import _runner

    base = _runner.DEFAULT_LANES.get(jax.default_backend(), 1024)
    small = working_bytes(4, 3, 1, jnp.float64)
    assert default_lanes(None) == base and default_lanes(None, None) == base
    assert default_lanes(None, small, conditions=7) == 8
    if jax.default_backend() != "cpu":
        assert default_lanes(None, small) == base
        return
    assert default_lanes(None, small) == _runner.WIDE_LANES["cpu"] > base
    assert default_lanes(None, small, conditions=5000) == _runner.WIDE_LANES["cpu"]  # a large batch: the full width
    room = _runner.WIDE_BLOCK_BYTES["cpu"]
    assert default_lanes(None, room // 256) == 256 and default_lanes(None, room // 256 + 1) == 128  # blocks fit room
    assert default_lanes(None, room) == base  # never narrower than the default
    assert default_lanes(2**28, small) < base  # the memory budget still narrows it
    model = ja.random_model(jax.random.key(0), 3, 1, 2, shared=False, dtype=jnp.float64)
    X0 = ja.init_tokens(jax.random.key(1), 7, 4, 3, dtype=jnp.float64)
    whole = np.asarray(ja.simulate(model, X0, 6).final)
    np.testing.assert_array_equal(whole, np.asarray(ja.simulate(model, X0, 6, batch=ja.Batch(size=8)).final))
    wide = ja.Batch(size=1024)
    at_1024 = np.asarray(ja.simulate(model, X0, 6, batch=wide).final)
    parts = [np.asarray(ja.simulate(model, X, 6, batch=wide).final) for X in (X0[:3], X0[3:])]
    np.testing.assert_array_equal(at_1024, np.concatenate(parts))
    for other in (at_1024, np.asarray(ja.simulate(model, X0, 6, batch=ja.Batch(size=base)).final)):
        np.testing.assert_allclose(whole, other, rtol=0, atol=1e-13)
    two = _model()  # two heads: the default width stays DEFAULT_LANES for a large batch
    assert default_lanes(working_bytes(4, 8, 2, jnp.float64), conditions=5000) == base
    np.testing.assert_array_equal(np.asarray(ja.simulate(two, _tokens(7), 3).final),
                                  np.asarray(ja.simulate(two, _tokens(7), 3, batch=ja.Batch(size=8)).final))


def test_default_lanes_narrow_for_large_conditions():
    full = default_lanes()
    assert default_lanes(1) == full
    big = default_lanes(2**28)  # 256 MiB a condition: a block fits the backend's budget
    assert big < full and full % big == 0 and big >= 1
    assert default_lanes(2**50) == 1
    # a block stops widening where it would exceed the narrower of the memory budget and the saturation size
    # (a wider block only pads a small batch): a few prompts of a GPT-2-sized model are not padded to 64 lanes
    from jaxattn.dynamics import _runner

    cap = min(_runner.block_budget(), _runner.LANE_SATURATION.get(jax.default_backend(), _runner.block_budget()))
    for n in (10, 50, 100, 200, 1000):
        for dtype in (jnp.float32, jnp.float64):
            cb = working_bytes(n, 768, 12, dtype, hidden=3072)
            lanes = default_lanes(cb)
            assert lanes == 1 or lanes * cb <= cap
            assert lanes == full or 2 * lanes * cb > cap
    if jax.default_backend() == "cpu":
        assert default_lanes(working_bytes(200, 768, 12, jnp.float32, hidden=3072)) == 8
        assert default_lanes(working_bytes(10, 384, 12, jnp.float32, hidden=1536)) == full  # small prompts: all 64


@pytest.mark.e2e
def test_save_passes_through_jit_with_traced_times():
    model, X0 = _model(), _tokens(2)
    f = jax.jit(lambda save: ja.solve(model, X0, 1.0, save=save).observables["diameter"])
    ts = jnp.linspace(0.0, 1.0, 3)
    np.testing.assert_allclose(np.asarray(f(ja.Save(ts=ts))),
                               np.asarray(ja.solve(model, X0, 1.0, save=ja.Save(ts=ts)).observables["diameter"]),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("call,match", [
    (lambda m, X: ja.simulate(m, X, 2, observe=None), r"simulate\(\) no longer takes observe=: use save=jaxattn.Save"),
    (lambda m, X: ja.simulate(m, X, 2, batch_size=4, kernel="plain"),
     r"no longer takes batch_size=, kernel=: use batch=jaxattn.Batch\(size=...\); batch=jaxattn.Batch\(path=...\)"),
    (lambda m, X: ja.simulate_one(m, X[0], 2, trajectory=True), r"simulate_one\(\) no longer takes trajectory="),
    (lambda m, X: ja.solve(m, X, 1.0, ts=[0.0, 1.0]), r"solve\(\) no longer takes ts=: use save=jaxattn.Save\(ts"),
    (lambda m, X: ja.solve(m, X, 1.0, devices=jax.local_devices()), r"batch=jaxattn.Batch\(devices=...\)"),
    (lambda m, X: ja.repeated_passes(m, X, 1, batch_size=None), r"repeated_passes\(\) no longer takes batch_size="),
    (lambda m, X: ja.repeated_passes(m, X, 1, aux={}), r"save=jaxattn.Save\(aux=...\)"),
    (lambda m, X: ja.sweep(m, num_init=2, n=4, steps=1, precision="tf32"), r"batch=jaxattn.Batch\(precision="),
    (lambda m, X: ja.sweep_grid({}, "unused", lanes=8), r"sweep_grid\(\) no longer takes lanes="),
])
def test_a_removed_keyword_says_where_it_went(call, match):
    with pytest.raises(TypeError, match=match):
        call(_model(), _tokens(2))


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
@pytest.mark.parametrize("call,match", [
    (lambda m, X: ja.simulate(m, X, 2, save="last"), r"save must be a jaxattn.Save, got 'last' \(steps to save"),
    (lambda m, X: ja.simulate(m, X, 2, save=ja.Save(ts=[0.0])), r"Save\(ts=...\) gives times of a flow; simulate"),
    (lambda m, X: ja.simulate_one(m, X[0], 2, save=ja.Save(ts=[0.0])), r"simulate_one runs a map"),
    (lambda m, X: ja.repeated_passes(m, X, 1, save=ja.Save(ts=[0.0])), r"repeated_passes runs a map"),
    (lambda m, X: ja.solve(m, X, 1.0, save=ja.Save(every=2)), r"Save\(every=...\) gives steps of a map; solve"),
    (lambda m, X: ja.solve(m, X, 1.0, batch=8), r"batch must be a jaxattn.Batch, got 8"),
    (lambda m, X: ja.sweep(m, num_init=2, n=4, steps=1, save=ja.Save(trajectory=True)), r"not trajectories"),
    (lambda m, X: ja.sweep_grid({"matmul_precision": "bf16"}, "unused", batch=ja.Batch(precision="tf32")),
     r"matmul_precision is given twice: 'bf16' by the configuration and 'tf32' by batch="),
    (lambda m, X: ja.sweep_grid({}, "unused", save=ja.Save(trajectory=True)), r"not trajectories"),
    (lambda m, X: ja.sweep_grid({}, "unused", save=ja.Save(observe=_along_w)), r"saves named observables"),
    (lambda m, X: ja.sweep_grid({"dynamics": {"kind": "continuous"}}, "unused", save=ja.Save(ts=[0.0, 1.0])),
     r"dynamics.saves equally spaced times"),
    (lambda m, X: ja.sweep_grid({"dynamics": {"save": 2}}, "unused", save=ja.Save(steps=[1])),
     r"dynamics.save_steps lists the steps to observe; dynamics.save gives a period"),
])
def test_a_field_that_does_not_apply_is_refused(call, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=match):
        call(_model(), _tokens(2))
    assert not (tmp_path / "unused").exists()


@pytest.mark.unchecked_types("wrong kinds of values on purpose: the user's one-line errors")
@pytest.mark.fast_cases('kwargs3-beta must be a finite number')
@pytest.mark.parametrize("kwargs,match", [
    (dict(dynamics=ja.D2), r"unit_output=True \(D2\) needs a single-head model"),
    (dict(dynamics="D1"), r"dynamics must be a jaxattn.Dynamics"),
    (dict(alpha=float("nan")), r"alpha must be a finite number"),
    (dict(beta=float("inf")), r"beta must be a finite number"),
])
def test_a_sweep_refused_for_its_dynamics_leaves_nothing_and_blocks_nothing(kwargs, match, tmp_path):
    """The refusal comes before the store: the corrected call then runs into the same folder."""
    out = tmp_path / "sw"
    with pytest.raises(ConfigError, match=match):
        ja.sweep(_model(), num_init=2, n=4, steps=2, out_dir=out, progress=False, **kwargs)
    assert not out.exists()
    got = ja.sweep(_model(), num_init=2, n=4, steps=2, out_dir=out, progress=False)
    assert got["observables.diameter"].shape == (2, 3)


@pytest.mark.e2e
def test_a_numpy_integer_every_is_a_python_int(tmp_path):
    save = ja.Save(every=np.int64(2))
    assert type(save.every) is int and save == ja.Save(every=2)
    got = ja.sweep(_model(), num_init=2, n=4, steps=3, save=save, out_dir=tmp_path / "sw", progress=False)
    ref = ja.sweep(_model(), num_init=2, n=4, steps=3, save=ja.Save(every=2), progress=False)
    np.testing.assert_array_equal(got["observables.diameter"], ref["observables.diameter"])


def test_an_observable_of_the_wrong_signature_is_named():
    """An observe function that cannot take (t, X, ctx) raised Python's TypeError about positional arguments from
    inside the traced program; every driver now names the expected signature first."""
    model = ja.random_model(jax.random.key(0), 4, 1, 1)
    X0 = ja.init_tokens(jax.random.key(1), 2, 3, 4)
    wrong = ja.Save(observe=lambda X: X.sum())
    for call in (lambda: ja.simulate(model, X0, 2, save=wrong), lambda: ja.simulate_one(model, X0[0], 2, save=wrong),
                 lambda: ja.solve(model, X0, 1.0, save=ja.Save(observe=lambda t, X: X.sum())),
                 lambda: ja.repeated_passes(model, X0, passes=1, dynamics=ja.D1, save=wrong)):
        with pytest.raises(ConfigError, match=r"^Save\(observe=...\) is called as observe\(t, X, ctx\) .*"
                                              r"<lambda>\(.*\) cannot take those three arguments$"):
            call()

    def extra(t, X, ctx=None, *, scale=1.0):  # defaults and keyword-only parameters are fine
        return scale * X.sum()

    assert ja.simulate(model, X0, 2, save=ja.Save(observe=extra)).observables.shape == (2, 3)
