"""The compile tier (``make test-all``, in ``.venv-gpu``): the drivers compiled for an H100 and an H200 on this CPU
(:mod:`jaxattn.aot`), every backend-dependent choice taken for the target, and the GPU programs held to the floor.

XLA's GPU compiler runs here through jax's CUDA plugin, with no GPU. The kernel counts are held to the differences
between programs compiled the same way (jaxattn's against the 15-line floor's, :func:`jaxattn.aot.floor`): a compile
with the device present, and its autotuning, can fuse differently (the H200's profile counted 4, 6 and 11 where this
compiler gave 5, 7 and 14), so the device's own counts are checked whenever a GPU is lent (``make gpu-check``).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxattn as ja
from jaxattn.errors import ConfigError

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]

if importlib.util.find_spec("jax_cuda13_plugin") is None:  # the fast tier's .venv: these need make gpu-compile's
    if os.environ.get("JAXATTN_COMPILE_TIER"):
        raise RuntimeError("the compile tier runs in .venv-gpu (make test-all), which has jax's CUDA plugin: not here")
    pytest.skip("the compile tier needs jax's CUDA plugin (.venv-gpu, make test-all)", allow_module_level=True)
if importlib.util.find_spec("libtpu") is None:
    if os.environ.get("JAXATTN_COMPILE_TIER"):
        raise RuntimeError("the compile tier runs in .venv-gpu (make test-all), which has libtpu: not here")
    pytest.skip("the compile tier needs libtpu (.venv-gpu, make test-all)", allow_module_level=True)


@pytest.fixture(scope="module", params=["h100", "h200"])
def gpu(request):
    return ja.aot.target(request.param)


@pytest.fixture(scope="module")
def h100():
    return ja.aot.target("h100")


def sphere(d):
    return ja.random_model(jax.random.key(0), d, heads=1, weights="identity", value="identity", scale=1.0)


def clusters(d):
    return ja.random_model(jax.random.key(0), d, heads=1, weights="identity", value="random", scale=1.0)


def tokens(B, n, d):
    return np.asarray(ja.init_tokens(jax.random.key(1), B, n, d))


#: (model, n, B, steps, beta): the papers' regime at its benchmark shapes (benchmarks/papers.py)
SHAPES = {"sphere2": (sphere, 2, 32, 2048, 300, 4.0), "sphere3-n64": (sphere, 3, 64, 2048, 200, 4.0),
          "clusters16": (clusters, 16, 64, 8192, 100, 4.0)}


def _programs(name, target, observed):
    make, d, n, B, steps, beta = SHAPES[name]
    model = make(d)
    save = ja.Save() if observed else ja.Save(every="last")
    ours = ja.aot.compile(ja.simulate, model, tokens(B, n, d), steps, alpha=0.1, beta=beta, save=save, target=target)
    lay = model.layers
    F = np.asarray(lay.o[0, 0] @ lay.v[0, 0])
    loop = ja.aot.floor(steps, alpha=0.1, beta=beta, value=None if np.allclose(F, np.eye(d)) else F, observed=observed)
    return ours, ja.aot.compile_function(loop, np.zeros((B, n, d), np.float32), target=target)


@pytest.mark.parametrize("observed", [False, True], ids=["last", "observed"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_a_step_launches_at_most_one_kernel_more_than_the_floor(name, observed, h100):
    """jaxattn's step loop against the floor computing the same work (its default observables, or none): at most one
    kernel more, with every numerical promise kept (overflow read as NaN, the same numbers to round-off)."""
    ours, floor = _programs(name, h100, observed)
    assert ours.kernels_per_step() <= floor.kernels_per_step() + 1, (
        f"{name}: jaxattn {ours.kernels_per_step()} {[k.name for k in ours.step_loop().kernels]}, floor "
        f"{floor.kernels_per_step()} {[k.name for k in floor.step_loop().kernels]}")
    kinds = ours.by_kind()
    assert kinds["gemm"] <= floor.by_kind()["gemm"] + 1  # at most the bilinear form's F = O V, formed each step
    assert "copy" not in kinds  # no state copied between kernels


def test_the_sphere_model_observing_the_last_step_is_the_floor(gpu):
    """At d = 2 the loop body is the floor's to the kernel: the counter, the scores, the softmax, the weighted sum
    with the residual, the (scaled) normalisation."""
    ours, floor = _programs("sphere2", gpu, observed=False)
    assert ours.kernels_per_step() == floor.kernels_per_step() == 5
    assert sorted(ours.by_kind().items()) == [("elementwise", 1), ("gemm", 2), ("softmax", 2)]
    flops, _, moved = ours.step_cost()
    assert 25e6 < flops < 40e6 and 30e6 < moved < 45e6  # 2 B n² d products, the [B, n, n] scores through memory
    roof = ours.roofline()
    assert roof["memory"] > roof["compute"]  # on either target a step is bound by its traffic, not its arithmetic


def test_every_driver_compiles_for_the_target_with_its_choices(gpu):
    """simulate, solve, repeated_passes and a sweep's chunk, each compiled for the GPU target here: the program is a
    GPU's (Triton fusions), the lane width the GPU's default (a CPU would take 1024 for this batch), and nothing of the
    target leaks into this process's own runs."""
    model = sphere(2)
    X0 = tokens(2048, 32, 2)
    sim = ja.aot.compile(ja.simulate, model, X0, 10, beta=4.0, target=gpu)
    assert sim.lanes == 2048 and "__triton" in sim.text()
    flow = ja.aot.compile(ja.solve, ja.random_model(jax.random.key(0), 8, 2), tokens(64, 6, 8), 1.0, target=gpu)
    assert flow.lanes == 64 and flow.step_loop().kernels
    passes = ja.aot.compile(ja.repeated_passes, ja.random_model(jax.random.key(0), 8, 2, 3, shared=False),
                            tokens(16, 6, 8), 2, dynamics=ja.D1, target=gpu)
    assert passes.kernels_per_step() > 0
    from jaxattn.sweeps import grid

    cfg = {"model": {"source": "random", "d": 2, "heads": 1, "weights": "identity", "value": "identity",
                     "scale": 1.0}, "dynamics": {"kind": "discrete", "steps": 20, "beta": 4.0}, "init": {"n": 32},
           "num_init": 4096}
    point = grid.point_of(grid.expand(grid.validate_config(cfg))[0])
    chunk = ja.aot.compile(point.chunk, point.build_model({}), 0, 4096, 4096, target=gpu)
    assert chunk.lanes == 4096 and "__triton" in chunk.text()
    res = ja.simulate(model, X0[:8], 3)  # here, on the CPU, afterwards
    assert res.final.shape == (8, 32, 2) and jax.default_backend() == "cpu"


def test_a_batch_over_several_target_devices_is_one_program_per_device(h100):
    """Batch(devices=...) with a topology's devices: the batch split over them (here one device, the target's only
    one, named explicitly), and devices that are not the target's refused in one line."""
    model = sphere(2)
    prog = ja.aot.compile(ja.simulate, model, tokens(512, 32, 2), 5, target=h100,
                          batch=ja.Batch(devices=h100.devices, size=256))
    assert prog.lanes == 256 and prog.devices == 1
    with pytest.raises(ConfigError, match="not h100's"):
        ja.aot.compile(ja.simulate, model, tokens(8, 32, 2), 5, target=h100, batch=ja.Batch(devices=jax.devices()))
    with pytest.raises(ConfigError, match="unknown target"):
        ja.aot.target("a100")


def test_the_report_compiles_every_workload_for_both_targets(tmp_path):
    """make gpu-compile's report (and so the programs the gpu-check window runs, compiled here first): every workload
    and floor compiles for the H100 and the H200 (and the papers' cases and W1 for a TPU slice), and the Markdown
    table has a row for each."""
    out = tmp_path / "report.json"
    md = tmp_path / "report.md"
    r = subprocess.run([sys.executable, "scripts/gpu_compile.py", "--json", str(out), "--markdown", str(md)],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    rows = json.loads(out.read_text())["gpu"]["rows"]
    assert not [row for row in rows if "error" in row]
    assert {row["target"] for row in rows} == {"h100", "h200", "tpu:v5e:2x2"}
    assert len(md.read_text().splitlines()) >= len(rows) + 3


def test_the_iteration_variants_hold_several_steps_an_iteration(h100):
    """Batch(unroll=k): k steps in one iteration of the compiled loop (what the gpu-check window times against the
    plain loop), every step's kernels there, the loop's own counter once."""
    model = sphere(2)
    X0 = tokens(2048, 32, 2)
    one = ja.aot.compile(ja.simulate, model, X0, 40, beta=4.0, save=ja.Save(every="last"), target=h100)
    four = ja.aot.compile(ja.simulate, model, X0, 40, beta=4.0, save=ja.Save(every="last"), target=h100,
                          batch=ja.Batch(unroll=4))
    assert four.by_kind()["gemm"] == 4 * one.by_kind()["gemm"]
    assert four.kernels_per_step() < 4 * one.kernels_per_step()


@pytest.fixture(scope="module")
def tpu():
    return ja.aot.target("tpu:v5e:2x2")


def test_every_driver_compiles_for_a_tpu_slice(tpu):
    """"Runs unchanged on TPU", checked to the compiled program: simulate on one chip and split over the slice's four
    (shard_map), solve, repeated_passes and a sweep's chunk compile for a v5e 2x2 here, with a TPU's lane width."""
    model = sphere(2)
    X0 = tokens(2048, 32, 2)
    one = ja.aot.compile(ja.simulate, model, X0, 20, beta=4.0, target=tpu)
    assert one.lanes == 2048 and one.kernels_per_step() > 0
    four = ja.aot.compile(ja.simulate, model, X0, 20, beta=4.0, target=tpu, batch=ja.Batch(devices=tpu.devices))
    assert four.devices == 4 and four.lanes == 512
    flow = ja.aot.compile(ja.solve, ja.random_model(jax.random.key(0), 8, 2), tokens(64, 6, 8), 1.0, target=tpu)
    assert flow.step_loop().kernels
    passes = ja.aot.compile(ja.repeated_passes, ja.random_model(jax.random.key(0), 8, 2, 3, shared=False),
                            tokens(16, 6, 8), 2, dynamics=ja.D1, target=tpu)
    assert passes.kernels_per_step() > 0


def test_a_users_own_jit_of_the_pure_core_gets_the_gpus_arrangement(h100):
    """``jit(vmap(simulate_one))`` compiled for the H100 by the user, with no jaxattn.aot in between: the arithmetic's
    arrangement is chosen as the program is lowered (jaxattn.model.backend), so its step holds the floor's kernels
    too (it held 7 against the floor's 5). The model in float32, a float32 run's (the suite runs with x64 on)."""
    model = sphere(2).astype(np.float32)
    core = jax.vmap(lambda x: ja.simulate_one(model, x, 300, alpha=0.1, beta=4.0, save=ja.Save(every="last")).final)
    ours = ja.aot.compile_function(core, np.zeros((2048, 32, 2), np.float32), target=h100)
    floor = ja.aot.compile_function(ja.aot.floor(300, alpha=0.1, beta=4.0), np.zeros((2048, 32, 2), np.float32),
                                    target=h100)
    assert ours.kernels_per_step() <= floor.kernels_per_step() + 1
    assert ours.kernels_per_step() == 5


def test_w1s_attention_on_an_nvidia_gpu_is_one_kernel_and_no_transpose(h100):
    """W1's layer step (d = 64, four heads of 16, n = 32) compiled for the H100: the attention is one Triton kernel
    (jaxattn.model.fused) reading the projections as their products write them, so no kernel transposes them or
    holds the ``n × n`` scores, and the step moves about half the bytes of XLA's own program (``Form(kernel=False)``:
    15 kernels, 2.08 GB a block of 8,192; with the kernel 9 and 1.01 GB). Both compile through to the target."""
    import dataclasses

    from jaxattn.model import forms

    model = ja.random_model(jax.random.key(0), 64, 4, 2, shared=False).astype(np.float32)
    X0 = tokens(8192, 32, 64).astype(np.float32)
    xla_form = dataclasses.replace(forms.choose(model, 32), kernel=False)
    programs = {kernel: ja.aot.compile(ja.simulate, model, X0, 2, save=ja.Save(every="last"), target=h100,
                                       batch=ja.Batch(**({} if kernel else {"form": xla_form})))
                for kernel in (True, False)}
    ours, xla = programs[True], programs[False]
    kinds = ours.by_kind()
    assert kinds["pallas"] == 1 and xla.by_kind().get("pallas", 0) == 0
    assert kinds["gemm"] == 4  # the three projections and the output, the scores' and weighted sum's inside the kernel
    step = ours.step_loop().kernels
    assert not [k for k in step if k.shape.endswith(",32,32]") or (k.kind == "elementwise" and k.bytes > 2**24)]
    assert ours.kernels_per_step() <= xla.kernels_per_step() - 5
    (_, _, ours_bytes), (_, _, xla_bytes) = ours.step_cost(), xla.step_cost()
    assert ours_bytes <= 0.55 * xla_bytes
    attention = next(k for k in step if k.kind == "pallas")  # its arithmetic counted from its sizes: 4 n² H d_h a lane
    assert attention.flops >= 8192 * 4 * 32 * 32 * 64 and attention.transcendentals == 8192 * 4 * 32 * 32
