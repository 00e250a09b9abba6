"""The fused Pallas kernel (interpret mode, on every backend) against the plain JAX path, and its selection."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.dynamics import _kernels as kernels
from jaxattn.errors import ConfigError

CASES = [
    # mask, heads, shared, dynamics
    ("full", 4, False, ja.D1),
    ("causal", 2, True, ja.D1),
    ("local:3", 1, False, ja.D1),
    ("causal", 2, False, ja.D3),
    ("full", 1, True, ja.D4),
    ("local:2", 4, False, ja.Dynamics(attention="unnormalised")),
    ("full", 2, False, ja.D5),
]


@pytest.fixture
def interpreted(monkeypatch):
    """The kernel in Pallas interpret mode on any backend: these tests check its algorithm; whether it compiles and
    wins on a GPU is ``make gpu-check``'s kernels stage (the H200 of 2026-11-28 compiled it and it agreed; the
    shapes tested here include some its shared memory refuses, and interpret mode checks the algorithm at all)."""
    from jaxattn.dynamics import discrete

    monkeypatch.setattr(discrete, "fused_simulate", functools.partial(kernels.fused_simulate, interpret=True))


@pytest.mark.e2e
@pytest.mark.parametrize("mask,heads,shared,dyn", CASES)
@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 2e-6), (jnp.float64, 1e-13)])
def test_fused_matches_plain(mask, heads, shared, dyn, dtype, tol, interpreted):
    d, n = 8, 5
    model = ja.random_model(jax.random.key(0), d, heads, 3, shared=shared, mask=mask)
    S = None
    if dyn.norm == "ellipsoid":
        A = np.random.default_rng(0).normal(size=(d, d))
        S = A @ A.T / d + np.eye(d)
    X0 = ja.init_tokens(jax.random.key(1), 19, n, d, kind="ellipsoid" if S is not None else "sphere", S=S,
                        dtype=dtype)
    kw = dict(dynamics=dyn, alpha=0.8, beta=1.3, S=S, dtype=dtype)
    fused = ja.simulate(model, X0, 5, batch=ja.Batch(path="fused"), **kw)
    plain = ja.simulate(model, X0, 5, batch=ja.Batch(path="plain"), **kw)
    np.testing.assert_allclose(np.asarray(fused.final), np.asarray(plain.final), rtol=0, atol=tol)
    for name in ("diameter", "cos_consensus"):
        np.testing.assert_allclose(np.asarray(fused.observables[name]), np.asarray(plain.observables[name]),
                                   rtol=0, atol=5 * tol)
    last = ja.simulate(model, X0, 5, save=ja.Save(every="last"), batch=ja.Batch(path="fused"), **kw)
    assert last.observables["diameter"].shape == (19, 1)
    np.testing.assert_allclose(np.asarray(last.final), np.asarray(plain.final), rtol=0, atol=tol)
    np.testing.assert_allclose(np.asarray(last.observables["diameter"][:, 0]),
                               np.asarray(plain.observables["diameter"][:, -1]), rtol=0, atol=5 * tol)


@pytest.mark.e2e
@pytest.mark.parametrize("n,d,heads,mask", [(16, 16, 4, "causal"), (20, 12, 3, "local:4")])
def test_fused_matches_plain_at_other_paddings(n, d, heads, mask, interpreted):
    """No padding of the tokens or coordinates (n = d = 16), and every axis padded (n = 20 to 32 with a window,
    d = 12 to 16, three heads to four): the padded tokens never act as keys and stay copies of token 0."""
    model = ja.random_model(jax.random.key(2), d, heads, 2, mask=mask)
    X0 = ja.init_tokens(jax.random.key(3), 3, n, d, dtype=jnp.float64)
    kw = dict(alpha=0.5, beta=2.0, dtype=jnp.float64)
    fused = ja.simulate(model, X0, 4, batch=ja.Batch(path="fused"), **kw)
    plain = ja.simulate(model, X0, 4, batch=ja.Batch(path="plain"), **kw)
    np.testing.assert_allclose(np.asarray(fused.final), np.asarray(plain.final), rtol=0, atol=1e-13)
    for name in ("diameter", "cos_consensus"):
        np.testing.assert_allclose(np.asarray(fused.observables[name]), np.asarray(plain.observables[name]),
                                   rtol=0, atol=5e-13)


@pytest.mark.fast_cases('uniform', 'unnormalised')
@pytest.mark.parametrize("dyn", [ja.D1, ja.Dynamics(attention="uniform"), ja.Dynamics(attention="unnormalised")],
                         ids=["softmax", "uniform", "unnormalised"])
def test_the_kernel_divides_after_the_weighted_sum(dyn):
    """As the plain path's softmax: each head divides its weighted sum (``N × DH``) by the row normaliser instead of
    normalising the ``N × N`` weights first. Read from the interpreted kernel's program: n = 20 tokens pad to
    N = 32, three heads of 4 to DH = 16, d = 12 to D = 16, so a 32 × 32 division can only be the weights'."""
    model = ja.random_model(jax.random.key(0), 12, 3, 2, mask="local:4")
    X0 = ja.init_tokens(jax.random.key(1), 2, 20, 12, dtype=jnp.float64)
    text = jax.jit(lambda X: kernels.fused_simulate(model, X, 3, dyn=dyn, alpha=0.5, beta=1.0, interpret=True)
                   ).lower(X0).as_text()
    assert not re.findall(r"stablehlo\.divide .*tensor<(?:\d+x)*32x32xf64>", text)
    # the check sees what it checks: one division of the weighted sum per head (and the normalisation's)
    assert len(re.findall(r"stablehlo\.divide .*tensor<(?:\d+x)*32x16xf64>", text)) >= 3


#: The custom call a Triton kernel lowers to: jaxlib <= 0.10.2 carries the Triton module for XLA to compile; later
#: jaxlibs (the GPU images' 0.11) compile it to PTX while lowering (through the CUDA plugin) and call the result.
TRITON_CALLS = ("__gpu$xla.gpu.triton", "triton_kernel_call_ffi")


def lower_for_cuda(fn, *args):
    """``fn(*args)`` lowered for CUDA with ``jax.export``, on any machine: Pallas' Triton lowering runs here (the
    stage where both H200 runs stopped). Returns the module's text; skips where this jaxlib compiles Triton while
    lowering and has no compiler for it (a jaxlib after 0.10.2 without the CUDA plugin)."""
    with jax.default_matmul_precision("highest"):
        try:
            exported = jax.export.export(jax.jit(fn), platforms=("cuda",), disabled_checks=[
                jax.export.DisabledSafetyCheck.custom_call(t) for t in TRITON_CALLS])(*args)
        except RuntimeError as e:
            if "Triton compilation handler" not in str(e):
                raise
            pytest.skip(f"jax {jax.__version__} compiles Triton to PTX while lowering, which needs the CUDA plugin "
                        f"({str(e).splitlines()[0]})")
    text = exported.mlir_module()
    assert any(t in text for t in TRITON_CALLS), "no Triton kernel in the lowered module"
    return text


def _lowers(n, d, heads, dtype, *, mask="full", every=None, shared=False, dyn=ja.D1):
    model = ja.random_model(jax.random.key(0), d, heads, 3, shared=shared, mask=mask, dtype=dtype)
    S = np.eye(d) if dyn.norm == "ellipsoid" else None
    lower_for_cuda(lambda X: kernels.fused_simulate(model, X, 5, dyn=dyn, alpha=0.1, beta=1.0, S=S, every=every,
                                                    interpret=False), jnp.zeros((4, n, d), dtype))


@pytest.mark.fast_cases('128-16-float32-full-2-False-dyn6', '128-16-float32-local:3-1-False-dyn2',
                        '128-16-float64-full-1-True-dyn4', '128-16-float64-full-2-False-dyn6',
                        '128-16-float64-local:2-4-False-dyn5', '5-8-float32-causal-2-False-dyn3',
                        '5-8-float32-causal-2-True-dyn1', '5-8-float32-full-1-True-dyn4',
                        '5-8-float32-full-2-False-dyn6', '5-8-float32-local:3-1-False-dyn2',
                        '5-8-float64-causal-2-False-dyn3', '5-8-float64-causal-2-True-dyn1',
                        '5-8-float64-full-1-True-dyn4', '5-8-float64-full-2-False-dyn6',
                        '5-8-float64-full-4-False-dyn0', '5-8-float64-local:2-4-False-dyn5',
                        '5-8-float64-local:3-1-False-dyn2')
@pytest.mark.parametrize("mask,heads,shared,dyn", CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("n,d", [(5, 8), (128, 16)])
def test_the_kernel_lowers_through_pallas_triton(mask, heads, shared, dyn, dtype, n, d):
    """The kernel as Pallas' Triton lowering sees it on a GPU, lowered here for CUDA without one (``jax.export``):
    every array a power of two, every product a 2-D dot. On the H200 of 2026-11-26 all 56 cases stopped in this
    lowering (an array of shape (16, 5, 8); a batched dot at n = 128); the rewritten kernel compiled on the H200 of
    2026-11-28 wherever its shared memory sufficed. Compiling the Triton module to GPU code,
    and proving the kernel there, is ``make gpu-check``'s kernels stage (with jax 0.11 the lowering itself
    compiles to PTX: there, this test does that too)."""
    _lowers(n, d, heads, dtype, mask=mask, shared=shared, dyn=dyn)


#: Issue 48: the grid ``make gpu-check`` lowers (its suite stage runs this file with the GPU image's jax): every n and
#: d, 1 and 4 heads (4 only where they divide d: d = 2 and 3 have no 4-head model), float32 and float64, full and
#: causal masks, observed at every step and at the last. 400 lowerings, about 0.2 s each on a CPU with jax 0.10.2.
GRID_N = (5, 10, 32, 64, 128)
GRID_D = (2, 3, 8, 16, 64, 128)
GRID = [(n, d, heads, dtype, mask, every) for n in GRID_N for d in GRID_D for heads in (1, 4) if d % heads == 0
        for dtype in ("float32", "float64") for mask in ("full", "causal") for every in (None, "last")]
#: The fast tier's part of it: the four corners and the H200 runs' sizes ((5, 8) and (10, 128): a block of 5 or 10
#: tokens; (128, 16) and (128, 128): a batched dot), each in two variants that between them take every value of
#: heads, dtype, mask and observation (and the sizes between, once each).
GRID_FAST = [(n, d, *variant) for n, d in [(5, 2), (5, 128), (128, 2), (128, 128), (5, 8), (10, 128), (128, 16),
                                           (10, 3), (32, 64), (64, 16)]
             for variant in [(1, "float32", "full", None), (4 if d % 4 == 0 else 1, "float64", "causal", "last")]]


def _grid_id(n, d, heads, dtype, mask, every):
    return f"n{n}-d{d}-H{heads}-{dtype}-{mask}-{'last' if every else 'every'}"


@pytest.mark.fast_cases('n128-d16-H1-float32-full-every', 'n128-d16-H4-float64-causal-last',
                        'n128-d2-H1-float64-causal-last', 'n5-d8-H1-float32-full-every',
                        'n5-d8-H4-float64-causal-last', 'n64-d16-H1-float32-full-every')
@pytest.mark.parametrize("n,d,heads,dtype,mask,every", GRID_FAST, ids=[_grid_id(*c) for c in GRID_FAST])
def test_the_kernel_lowers_at_the_corners_of_the_grid(n, d, heads, dtype, mask, every):
    _lowers(n, d, heads, jnp.dtype(dtype), mask=mask, every=every)


@pytest.mark.e2e
@pytest.mark.parametrize("n,d,heads,dtype,mask,every", GRID, ids=[_grid_id(*c) for c in GRID])
def test_the_kernel_lowers_over_the_whole_grid(n, d, heads, dtype, mask, every):
    """Every point of the grid (issue 48). On jax 0.10.2 all 400 lower (82 s in one process on 2 cores)."""
    _lowers(n, d, heads, jnp.dtype(dtype), mask=mask, every=every)


@pytest.mark.e2e
def test_the_lowering_check_catches_the_h200s_errors():
    """The check sees what it checks: the kernel with its tokens left unpadded (the first H200 run's block of 5) and
    a batched dot (the assertion the second met at n = 128) both fail in this lowering, on a CPU."""
    model = ja.random_model(jax.random.key(0), 16, 1, 1, dtype=jnp.float32)
    lay = model.layers
    f32, i32 = jnp.float32, jnp.int32

    def unpadded(X):
        return kernels._fused(X, jnp.zeros((8,), i32), lay.q, lay.k, lay.v, lay.o, jnp.zeros((1,), i32),
                              jnp.zeros((1,), i32), lay.scale.astype(f32), jnp.ones(2, f32), jnp.eye(16, dtype=f32),
                              n=5, heads=1, steps=5, norm="l2", attention="softmax", every=True, interpret=False)

    with pytest.raises(ValueError, match="power of 2"):
        lower_for_cuda(unpadded, jnp.zeros((4, 5, 16), f32))
    lower_for_cuda(unpadded, jnp.zeros((4, 16, 16), f32))  # padded, the same call lowers

    from jax.experimental import pallas as pl

    def batched(x_ref, o_ref):
        o_ref[...] = jax.lax.dot_general(x_ref[...], x_ref[...], (((2,), (1,)), ((0,), (0,))))

    def call(x):
        return pl.pallas_call(batched, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=kernels._triton_params())(x)

    with pytest.raises((AssertionError, NotImplementedError, ValueError)):
        lower_for_cuda(call, jnp.zeros((2, 16, 16), f32))


@pytest.mark.e2e
def test_a_forced_kernel_that_fails_to_compile_is_one_line(monkeypatch):
    """What the first GPU run met (Pallas' Triton lowering refusing the kernel, pages of traceback): a forced fused
    path says in one line which backend failed, the compiler's first line, and the path that runs the same map."""
    def refuse(*args, **kwargs):
        raise ValueError("The Pallas Triton lowering currently requires that all operations have array arguments "
                         "and results whose size is a power of 2.\n(second line)")

    monkeypatch.setattr(kernels, "_fused", refuse)
    model = ja.random_model(jax.random.key(0), 8, 2, 2)
    X0 = ja.init_tokens(jax.random.key(1), 3, 5, 8)
    with pytest.raises(ConfigError, match=r"Batch\(path='fused'\): the fused kernel failed on the \w+ backend "
                       r"\(ValueError: The Pallas Triton lowering .*power of 2\.\); Batch\(path='plain'\)") as e:
        ja.simulate(model, X0, 2, batch=ja.Batch(path="fused"))
    assert "\n" not in str(e.value) and isinstance(e.value.__cause__, ValueError)


def _custom(t, X, ctx):
    return X[:, 0]


@pytest.mark.e2e
def test_selection():
    model = ja.random_model(jax.random.key(0), 8, 2, 2)
    big = ja.random_model(jax.random.key(0), 256, 2, 1)
    args = dict(observe=None, trajectory=False, every=None, n=10)
    assert kernels.choose_path("auto", model, ja.D1, **args) == "plain"
    assert kernels.choose_path("plain", model, ja.D1, **args) == "plain"
    assert kernels.choose_path("fused", model, ja.D1, **args) == "fused"
    refusals = [
        (dict(model=model, dyn=ja.Dynamics(biases=True)), "attention-only"),
        (dict(model=model, dyn=ja.D1, observe=_custom), "default observables"),
        (dict(model=model, dyn=ja.D1, trajectory=True), "no trajectory"),
        (dict(model=model, dyn=ja.D1, every=3), "every step or the last"),
        (dict(model=big, dyn=ja.D1), "d <= 128"),
        (dict(model=model, dyn=ja.D1, n=500), "n <= 128"),
    ]
    for over, match in refusals:
        kw = {**args, **over}
        assert kernels.choose_path("auto", kw.pop("model"), kw.pop("dyn"), **kw) == "plain"
        kw = {**args, **over}
        with pytest.raises(ConfigError, match=match):
            kernels.choose_path("fused", kw.pop("model"), kw.pop("dyn"), **kw)
    with pytest.raises(ConfigError, match=r"Batch\(path=...\) must be"):
        kernels.choose_path("triton", model, ja.D1, **args)


@pytest.mark.parametrize("backend", ["gpu", "cuda", "rocm", "tpu", "cpu"])
def test_auto_runs_nothing_unproven(monkeypatch, backend):
    """``auto`` is the plain path on a GPU until ``make gpu-check`` has shown the kernel correct and faster there
    (``PROVEN_ON``); ``fused`` still forces it."""
    model = ja.random_model(jax.random.key(0), 8, 2, 2)
    args = dict(observe=None, trajectory=False, every=None, n=10)
    monkeypatch.setattr(kernels.jax, "default_backend", lambda: backend)
    assert kernels.choose_path("auto", model, ja.D1, **args) == "plain"
    assert kernels.choose_path("fused", model, ja.D1, **args) == "fused"
    monkeypatch.setattr(kernels, "PROVEN_ON", (backend,))  # what a proving GPU run would switch on
    assert kernels.choose_path("auto", model, ja.D1, **args) == "fused"
    assert kernels.choose_path("auto", model, ja.Dynamics(biases=True), **args) == "plain"


def test_the_shared_memory_estimate_gives_the_h200s_refusals():
    """The four shared-memory refusals of the H200 run of 2026-11-28 (d = 128, H = 4), to the byte; the shapes that
    compiled and ran there fit its 232,448 bytes."""
    refused = {(10, 4): 278_580, (128, 4): 393_268, (10, 8): 540_724, (128, 8): 655_412}
    for (n, itemsize), requested in refused.items():
        assert kernels.shared_bytes(n, 128, 4, 32, itemsize) == requested
    limit = kernels.SHARED_MEMORY["9.0"]
    for n, d, heads, itemsize in [(5, 8, 4, 4), (5, 8, 4, 8), (128, 16, 4, 8), (32, 64, 4, 4)]:
        assert kernels.shared_bytes(n, d, heads, max(d // heads, 1), itemsize) < limit


def test_a_kernel_too_big_for_the_chip_is_refused_before_compiling(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(kernels.jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(kernels.jax, "devices", lambda *a: [SimpleNamespace(compute_capability="9.0")])
    monkeypatch.setattr(kernels, "PROVEN_ON", ("gpu",))
    args = dict(observe=None, trajectory=False, every=None, n=10)
    fits = ja.random_model(jax.random.key(0), 64, 4, 1, dtype=jnp.float32)
    big = ja.random_model(jax.random.key(0), 128, 4, 1, dtype=jnp.float32)
    assert kernels.choose_path("auto", fits, ja.D1, **args) == "fused"
    assert kernels.choose_path("auto", big, ja.D1, **args) == "plain"
    with pytest.raises(kernels.KernelTooBig, match=r"278,580 bytes of shared memory .* this GPU has 232,448"):
        kernels.choose_path("fused", big, ja.D1, **args)
    with pytest.raises(ConfigError, match="d <= 128") as e:  # a kernel that does not apply is not "too big"
        kernels.choose_path("fused", ja.random_model(jax.random.key(0), 256, 4, 1), ja.D1, **args)
    assert not isinstance(e.value, kernels.KernelTooBig)
    monkeypatch.setattr(kernels.jax, "devices", lambda *a: [SimpleNamespace(compute_capability="8.6")])
    assert kernels.choose_path("auto", fits, ja.D1, **args) == "fused"  # 73,780 bytes of 101,376
    assert kernels.choose_path("auto", fits.astype(jnp.float64), ja.D1, **args) == "plain"  # 139,316
    assert kernels.choose_path("auto", fits, ja.D1, **args, dtype=jnp.float64) == "plain"  # the run's dtype decides
    monkeypatch.setattr(kernels.jax, "devices", lambda *a: [SimpleNamespace(compute_capability="99.0")])
    assert kernels.choose_path("auto", big, ja.D1, **args) == "fused"  # a device not listed: the compiler decides


@pytest.mark.e2e
def test_sweep_records_the_kernel_and_agrees(tmp_path):
    from jaxattn.sweeps import grid

    cfg = {"num_init": 40, "chunk": 32, "model": {"d": 8, "heads": 2, "depth": 3, "shared": False},
           "init": {"n": 5}, "kernel": ["plain", "fused"]}
    sw = grid.sweep_grid(cfg, tmp_path / "s", progress=False)
    assert [p["kernel"] for p in sw.points] == ["plain", "fused"]
    a, b = sw.arrays(0), sw.arrays(1)
    np.testing.assert_allclose(a["observables.diameter"], b["observables.diameter"], rtol=0, atol=2e-6)


def test_auto_falls_back_to_the_plain_path_when_the_kernel_cannot_run(monkeypatch):
    import jaxattn.dynamics.discrete as discrete

    model = ja.random_model(jax.random.key(0), 8, 2, 2)
    X0 = ja.init_tokens(jax.random.key(1), 5, 4, 8, dtype=jnp.float64)
    plain = ja.simulate(model, X0, 3, batch=ja.Batch(path="plain"))

    def broken(*a, **k):
        raise NotImplementedError("no lowering for this backend")

    monkeypatch.setattr(discrete, "choose_path", lambda *a, **k: "fused")
    monkeypatch.setattr(discrete, "fused_simulate", broken)
    with pytest.warns(RuntimeWarning, match="using the plain path"):
        auto = ja.simulate(model, X0, 3, batch=ja.Batch(path="auto"))
    np.testing.assert_array_equal(np.asarray(auto.final), np.asarray(plain.final))
    with pytest.raises(ConfigError, match="fused kernel failed") as e:  # forced: the failure is the user's answer
        ja.simulate(model, X0, 3, batch=ja.Batch(path="fused"))
    assert isinstance(e.value.__cause__, NotImplementedError)
