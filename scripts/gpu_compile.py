"""``make gpu-compile``: the GPU programs of the benchmark workloads, compiled on this machine and read.

XLA's GPU compiler runs without a GPU (:mod:`jaxattn.aot`): every workload is compiled for the H100 and H200 targets
kept with the package, and for each program the report gives the kernels of its step loop by kind, the FLOPs and the
bytes they move (from the program's shapes), the roofline bound on each target (every kernel at the larger of its
compute and memory time), and an estimate of a step: ``a + b · kernels``, fitted to the per-step times the H200
runs measured (:data:`H200_STEPS`), or the roofline bound where that is larger. Beside jaxattn's programs stand the
floors that compute the same work: the 15-line JAX loop (:func:`jaxattn.aot.floor`, as ``benchmarks/papers.py`` times
it), bare and with the default observables, and its iteration variants (``lax.scan(unroll=k)``).

The CPU part (``--cpu``) runs the same workloads at a reduced batch on this machine's CPU and reports the achieved
FLOP/s and bytes/s of the compiled CPU program against the measured peaks (a matrix product and a copy).

A TPU v5e slice (``tpu:v5e:2x2``, through libtpu) gets the papers' cases and W1 (:data:`TPU_CASES`): its fusions a step
beside the GPU's kernels.

Run: ``make gpu-compile`` (creates ``.venv-gpu``: the CUDA plugin of jax's version and libtpu over ``.venv``), or
``.venv-gpu/bin/python scripts/gpu_compile.py [--cases sphere2,W1] [--targets h100,h200] [--cpu] [--markdown F]``.
Results: printed, and written to ``benchmarks/results_gpu_compile.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")  # the CUDA plugin's version check needs a driver
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process runs on the CPU; the GPU is only a compilation target

import jax
import jax.numpy as jnp
import numpy as np

import jaxattn as ja

#: Per-step times measured on the H200 (docs/gpu.md, fourth run, 2026-11-28, inside one ``jit``), with the kernels
#: its profile counted in each program's loop body: (program, kernels, µs a step).
H200_STEPS = (("floor", 4, 21.0), ("jaxattn, last step", 6, 27.0), ("floor, observed", 8, 27.0),
              ("jaxattn, observed", 11, 34.0))
#: The H200 runs' end-to-end times of the papers' sphere model at d = 2 (n = 32, B = 2048, 300 steps): program ->
#: seconds (fourth run, after the per-call overhead was cut), set beside the estimate.
H200_CALLS = {("sphere2", "floor"): 0.0073, ("sphere2", "jaxattn"): 0.0150, ("sphere2", "jaxattn-last"): 0.0140}

ALPHA = 0.1


@dataclasses.dataclass(frozen=True)
class Case:
    """A workload: its model, its tokens, steps and batch, and what the run keeps."""

    name: str
    model: Callable[[], ja.Model]
    n: int
    B: int
    steps: int
    beta: float = 1.0
    observe: str = "default"  # "default" (diameter and cosine consensus), "diameter" (benchmarks/run.py), "last"
    kind: str = "map"  # "map", "flow", "chunk"
    floor: bool = False  # the papers' one-head loop has a 15-line floor


def _sphere(d):
    return lambda: ja.random_model(jax.random.key(0), d, heads=1, weights="identity", value="identity", scale=1.0)


def _clusters(d):
    return lambda: ja.random_model(jax.random.key(0), d, heads=1, weights="identity", value="random", scale=1.0)


def _random(d, h, depth):
    return lambda: ja.random_model(jax.random.key(0), d, h, depth, shared=False, dtype=jnp.float32)


CASES = {c.name: c for c in (
    Case("sphere2", _sphere(2), 32, 2048, 300, 4.0, floor=True),
    Case("sphere3-n64", _sphere(3), 64, 2048, 200, 4.0, floor=True),
    Case("clusters16", _clusters(16), 64, 8192, 100, 4.0, floor=True),
    Case("clusters64", _clusters(64), 128, 1024, 50, 1.0, floor=True),
    Case("W1", _random(64, 4, 24), 32, 131072, 24, observe="diameter"),
    Case("minilm-shaped", _random(384, 12, 6), 10, 131072, 6, observe="diameter"),
    Case("gpt2small-shaped", _random(768, 12, 12), 64, 8192, 12, observe="diameter"),
    Case("C2-flow", _random(64, 4, 1), 32, 131072, 0, kind="flow"),
    Case("sweep-chunk", _sphere(2), 32, 2048, 300, 4.0, kind="chunk"),
)}


def _diameter_obs(t, X, ctx):
    return ja.observables.diameter(X)


def _save(case: Case, last: bool) -> ja.Save:
    if last:
        return ja.Save(every="last")
    return ja.Save(observe=_diameter_obs) if case.observe == "diameter" else ja.Save()


def jaxattn_program(case: Case, target: ja.aot.Target, *, last: bool = False, batch: ja.Batch | None = None):
    """jaxattn's program of ``case`` for ``target`` (``last``: observing the last step only)."""
    model = case.model()
    X0 = np.zeros((case.B, case.n, model.d_model), np.float32) + np.float32(1 / np.sqrt(model.d_model))
    batch = batch or ja.Batch()
    if case.kind == "flow":
        return ja.aot.compile(ja.solve, model, X0, 10.0, flow=ja.C2, rtol=1e-6, atol=1e-6,
                              save=ja.Save(ts=np.linspace(0, 10.0, 11)), batch=batch, target=target)
    if case.kind == "chunk":
        from jaxattn.sweeps import grid

        cfg = {"model": {"source": "random", "d": model.d_model, "heads": 1, "weights": "identity",
                         "value": "identity", "scale": 1.0},
               "dynamics": {"kind": "discrete", "steps": case.steps, "alpha": ALPHA, "beta": case.beta},
               "init": {"n": case.n}, "num_init": case.B}
        point = grid.point_of(grid.expand(grid.validate_config(cfg))[0])
        return ja.aot.compile(point.chunk, point.build_model({}), 0, case.B, case.B, batch=batch, target=target)
    return ja.aot.compile(ja.simulate, model, X0, case.steps, alpha=ALPHA, beta=case.beta, save=_save(case, last),
                          batch=batch, target=target)


def floor_program(case: Case, target: ja.aot.Target, *, observed: bool, unroll: int = 1):
    model = case.model()
    lay = model.layers
    F = np.asarray(lay.o[0, 0] @ lay.v[0, 0])
    V = None if np.allclose(F, np.eye(F.shape[0])) else F
    X0 = np.zeros((case.B, case.n, model.d_model), np.float32)
    loop = ja.aot.floor(case.steps, alpha=ALPHA, beta=case.beta, value=V, observed=observed, unroll=unroll)
    return ja.aot.compile_function(loop, X0, target=target)


def fit(points=H200_STEPS) -> tuple[float, float]:
    """``(a, b)`` of the least-squares line ``µs a step = a + b · kernels`` through :data:`H200_STEPS`."""
    k = np.array([p[1] for p in points], float)
    t = np.array([p[2] for p in points], float)
    b, a = np.polyfit(k, t, 1)
    return float(a), float(b)


def describe(prog: ja.aot.Program, steps: int, fitted: tuple[float, float]) -> dict:
    """One program's row: its step loop's kernels and their costs, per step (an unrolled loop's body holds several
    steps: ``steps_per_iteration``)."""
    loop = prog.step_loop()
    trips = (loop.trips or 1) * loop.calls
    per = max(1, round(steps / trips)) if steps and loop.trips else 1  # no proven trip count (a TPU's): one a step
    flops, trans, moved = prog.step_cost()
    roof = prog.roofline()
    a, b = fitted
    kernels = len(loop.kernels) / per
    return {"kernels": kernels, "body_kernels": len(loop.kernels), "steps_per_iteration": per,
            "by_kind": dict(sorted(prog.by_kind().items())), "kernel_names": [k.name for k in loop.kernels],
            "loop_trips": trips, "launches_per_step": prog.launches() / steps if steps else None, "lanes": prog.lanes,
            "mflop_step": flops / per / 1e6, "mtrans_step": trans / per / 1e6, "mb_step": moved / per / 1e6,
            "roofline_us": {k: v / per * 1e6 for k, v in roof.items()},
            # the fit holds where launches bound a step; where the traffic does, the roofline is the better floor
            "estimate_us": max(a + b * kernels, roof["bound"] / per * 1e6)}


def _without_kernel(case: Case):
    """The form ``case``'s model runs in, without its one-kernel attention (``Form(kernel=False)``), where that
    kernel applies (:mod:`jaxattn.model.fused`); ``None`` elsewhere."""
    from jaxattn.model import forms, fused

    model = case.model()
    form = forms.choose(model, case.n)
    H, dh = model.layers.q.shape[1:3]
    if not (form.scores == form.values == "heads" and fused.applies(case.n, H, dh, np.float32, None)):
        return None
    return dataclasses.replace(form, kernel=False)


def programs(case: Case, target: ja.aot.Target) -> dict[str, Callable[[], ja.aot.Program]]:
    """The programs compiled for ``case``: jaxattn's (every step observed, and the last step only where a map), and
    its floors with their iteration variants where it has one."""
    out: dict[str, Callable[[], ja.aot.Program]] = {"jaxattn": lambda: jaxattn_program(case, target)}
    if case.kind == "map":
        out["jaxattn-last"] = lambda: jaxattn_program(case, target, last=True)
        xla = _without_kernel(case)
        if xla is not None:  # the one-kernel attention's A/B: the same form with XLA's own kernels
            out["jaxattn-last-xla"] = functools.partial(jaxattn_program, case, target, last=True,
                                                        batch=ja.Batch(form=xla))
    if case.floor:  # the iteration variants (Batch(unroll=k)), observing the last step
        for k in (4, 8):
            out[f"jaxattn-last-unroll{k}"] = functools.partial(jaxattn_program, case, target, last=True,
                                                               batch=ja.Batch(unroll=k))
    if case.floor:
        out["floor"] = lambda: floor_program(case, target, observed=False)
        out["floor-observed"] = lambda: floor_program(case, target, observed=True)
        for k in (2, 4, 8):
            out[f"floor-unroll{k}"] = functools.partial(floor_program, case, target, observed=False, unroll=k)
    return out


#: On a TPU target (its kernels a step beside the GPU's: "runs unchanged on TPU" checked to the compiled program) the
#: papers' cases and W1, jaxattn's programs and the floors (a TPU compiles several times slower than a GPU here).
TPU_CASES = ("sphere2", "sphere3-n64", "clusters16", "W1")
TPU_PROGRAMS = ("jaxattn", "jaxattn-last", "floor", "floor-observed")


def report(cases, targets, fitted) -> dict:
    rows = []
    for tname in targets:
        target = ja.aot.target(tname)
        for name in cases:
            case = CASES[name]
            if target.platform == "tpu" and name not in TPU_CASES:
                continue
            for prog_name, make in programs(case, target).items():
                if target.platform == "tpu" and prog_name not in TPU_PROGRAMS:
                    continue
                t0 = time.perf_counter()
                try:
                    prog = make()
                except Exception as e:  # a program that does not compile is a result, recorded
                    rows.append({"target": tname, "case": name, "program": prog_name,
                                 "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
                    print(f"{tname} {name} {prog_name}: {rows[-1]['error']}", flush=True)
                    continue
                steps = case.steps if case.kind != "flow" else 1
                row = {"target": tname, "case": name, "program": prog_name,
                       "compile_s": round(time.perf_counter() - t0, 2), **describe(prog, steps, fitted)}
                rows.append(row)
                print(f"{tname:5} {name:17} {prog_name:15} kernels {row['kernels']:5.3g} {row['by_kind']} "
                      f"{row['mflop_step']:.3g} MFLOP {row['mb_step']:.3g} MB/step, roofline "
                      f"{row['roofline_us']['bound']:.3g} us, estimate {row['estimate_us']:.3g} us "
                      f"({row['compile_s']} s)", flush=True)
    return {"rows": rows}


def cpu_report(cases, B: int) -> dict:
    """The workloads at ``B`` conditions on this CPU: the compiled program's FLOPs and bytes a call (jaxattn's
    reading of its own CPU program) against the measured call time and the CPU's measured peaks."""
    peak = _cpu_peaks()
    cpu = ja.aot.Target("cpu", "cpu", tuple(jax.local_devices()[:1]), ja.dynamics.memory_limit(), peak["flops"],
                        peak["bytes"], 1)
    rows = []
    for name in cases:
        case = dataclasses.replace(CASES[name], B=min(B, CASES[name].B))
        if case.kind != "map":
            continue
        model = case.model()
        X0 = ja.init_tokens(jax.random.key(1), case.B, case.n, model.d_model)
        prog = ja.aot.compile(ja.simulate, model, X0, case.steps, alpha=ALPHA, beta=case.beta,
                              save=_save(case, False), target=cpu)
        run = functools.partial(_simulate, model, X0, case)
        run()
        best = min(_timed(run) for _ in range(3))
        blocks = max(1, case.B // max(prog.lanes, 1))
        flops, _, moved = prog.step_cost()
        total_f, total_b = flops * case.steps * blocks, moved * case.steps * blocks
        rows.append({"case": name, "B": case.B, "lanes": prog.lanes, "seconds": best,
                     "kernels": prog.kernels_per_step(), "gflops": total_f / best / 1e9, "gbytes": total_b / best / 1e9,
                     "flops_share": total_f / best / peak["flops"], "bytes_share": total_b / best / peak["bytes"]})
        print(f"cpu {name:17} B {case.B:6} {best * 1e3:8.2f} ms  {rows[-1]['gflops']:.3g} GFLOP/s "
              f"({100 * rows[-1]['flops_share']:.1f}% of {peak['flops'] / 1e9:.3g})  {rows[-1]['gbytes']:.3g} GB/s "
              f"({100 * rows[-1]['bytes_share']:.1f}% of {peak['bytes'] / 1e9:.3g})", flush=True)
    return {"peaks": peak, "rows": rows}


def _simulate(model, X0, case: Case):
    return jax.block_until_ready(ja.simulate(model, X0, case.steps, alpha=ALPHA, beta=case.beta,
                                             save=_save(case, False)).final)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _cpu_peaks() -> dict:
    """This CPU's float32 matrix-product FLOP/s (1024², best of 5) and copy bytes/s (256 MiB read and written)."""
    a = jnp.ones((1024, 1024), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    jax.block_until_ready(mm(a))
    t = min(_timed(lambda: jax.block_until_ready(mm(a))) for _ in range(5))
    big = jnp.ones((2**26,), jnp.float32)
    cp = jax.jit(lambda x: x + 1.0)
    jax.block_until_ready(cp(big))
    tc = min(_timed(lambda: jax.block_until_ready(cp(big))) for _ in range(5))
    return {"flops": 2 * 1024**3 / t, "bytes": 2 * big.nbytes / tc}


def into_docs(page: Path, md: str) -> None:
    """The report's tables into ``page`` between its markers (docs/gpu.md), the rest of the page as it is."""
    gpu, _, cpu = md.partition("\nThis CPU")
    text = page.read_text()
    for name, table in (("GPU tables", gpu), ("CPU table", cpu.split("\n", 2)[-1] if cpu else "")):
        start, end = f"<!-- make gpu-compile: the {name} -->\n", f"\n<!-- end of the {name} -->"
        if not table or start not in text:
            continue
        a, b = text.index(start) + len(start), text.index(end)
        text = text[:a] + table.strip() + text[b:]
    tmp = page.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(page)


def markdown(res: dict) -> str:
    """The report's tables, as docs/gpu.md holds them."""
    a, b = res["fit"]["a_us"], res["fit"]["b_us"]
    lines = [f"Estimate of a step: {a:.1f} µs + {b:.2f} µs a kernel (least squares through the H200's "
             f"{len(H200_STEPS)} measured programs), or the roofline bound where that is larger.", "",
             "| target | workload | program | lanes | kernels a step | by kind | MFLOP a step | MB a step | "
             "roofline µs (compute / memory / bound) | estimate µs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["gpu"]["rows"]:
        if "error" in r:
            lines.append(f"| {r['target']} | {r['case']} | {r['program']} | | {r['error']} | | | | | |")
            continue
        kinds = ", ".join(f"{v} {k}" for k, v in r["by_kind"].items())
        roof = r["roofline_us"]
        lines.append(f"| {r['target']} | {r['case']} | {r['program']} | {r['lanes'] or ''} | {r['kernels']:.3g} | "
                     f"{kinds} | "
                     f"{r['mflop_step']:.3g} | {r['mb_step']:.3g} | {roof['compute']:.3g} / {roof['memory']:.3g} / "
                     f"{roof['bound']:.3g} | {r['estimate_us']:.3g} |")
    if res.get("cpu"):
        pk = res["cpu"]["peaks"]
        lines += ["", f"This CPU (measured peaks: {pk['flops'] / 1e9:.3g} GFLOP/s float32, {pk['bytes'] / 1e9:.3g} "
                  "GB/s):", "", "| workload | B | lanes | kernels a step | call | GFLOP/s | share of peak | GB/s | "
                  "share of bandwidth |", "|---|---|---|---|---|---|---|---|---|"]
        for r in res["cpu"]["rows"]:
            lines.append(f"| {r['case']} | {r['B']} | {r['lanes']} | {r['kernels']} | {r['seconds'] * 1e3:.3g} ms | "
                         f"{r['gflops']:.3g} | {100 * r['flops_share']:.1f}% | {r['gbytes']:.3g} | "
                         f"{100 * r['bytes_share']:.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    p.add_argument("--targets", default="h100,h200,tpu:v5e:2x2", help="comma-separated targets (jaxattn.aot.target)")
    p.add_argument("--cpu", action="store_true", help="also run the maps on this CPU (reduced batch)")
    p.add_argument("--cpu-batch", type=int, default=1024, help="conditions of the CPU part (default 1024)")
    p.add_argument("--json", default="benchmarks/results_gpu_compile.json", help="where the results go ('' none)")
    p.add_argument("--markdown", default="", help="also write the tables as Markdown to this file")
    p.add_argument("--docs", default="", help="and put them into this page between its markers (docs/gpu.md)")
    args = p.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    targets = [t for t in args.targets.split(",") if t]
    try:  # an unknown target, or one this environment cannot compile for, before any work: one line
        for t in targets:
            ja.aot.target(t)
    except ja.errors.ConfigError as e:
        p.error(str(e))
    a, b = fit()
    res = {"jax": jax.__version__, "jaxattn": ja.__version__, "python": platform.python_version(),
           "fit": {"a_us": a, "b_us": b, "points": H200_STEPS}, "h200_calls": {f"{k[0]}/{k[1]}": v
                                                                               for k, v in H200_CALLS.items()},
           "gpu": report(cases, targets, (a, b))}
    if args.cpu:
        res["cpu"] = cpu_report(cases, args.cpu_batch)
    if args.json:
        tmp = Path(args.json).with_suffix(".tmp")  # written whole or not at all
        tmp.write_text(json.dumps(res, indent=1, default=str) + "\n")
        tmp.replace(args.json)
    if args.markdown:
        Path(args.markdown).write_text(markdown(res))
    if args.docs:
        into_docs(Path(args.docs), markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
