"""The fused Pallas kernel against the plain JAX path: the papers' sphere model, then the W1 family (GPU only).

First the papers' sphere model (:data:`SPHERE_CASES`, from ``benchmarks/papers.py``: d = 2, n = 32, 300 steps and
d = 3, n = 64, 200 steps, B = 2048, one head, identity weights), where a step is a few microseconds of arithmetic and
the plain path's launches per step are most of its time: the kernel runs all the steps of a condition in one launch.
Then D1 with H = 4 heads, 24 layers, float32 with full-precision products, d ∈ {8, 16, 32, 64, 128} and
n ∈ {10, 32, 64}, B = 131,072 conditions (``--B``). Default observables at every step throughout. Reported per
shape: milliseconds of both paths (checked to agree), the kernel's speed-up and, for the W1 family, achieved FLOP/s
of the dynamics (8nd² + 4n²d per condition per step) and the bytes each path moves per condition per layer:
the plain path writes and reads the projections [n, 3d], the scores [H, n, n] and the update [n, d]
(≈ 4·(2·3nd + 2·Hn² + 2·nd) bytes), the kernel only the tile's tokens (in at the first layer, out
at the last: 4·2nd/L) and its two observables. A shape the kernel refuses before compiling (more shared memory
than the device has: d = 128 at four heads on an H200) is a row with the reason.

On a machine without a GPU the kernel only runs in Pallas interpret mode, which is a correctness
tool, not a fast path: the script says so and exits.

:func:`bench_sphere` and :func:`bench` are the functions behind the command line (``scripts/gpu_check.py`` calls
them).

Run: ``python benchmarks/kernel.py [--B 131072] [--out benchmarks/results_kernel.json]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import numpy as np

SHAPES = [(d, n) for d in (8, 16, 32, 64, 128) for n in (10, 32, 64)]
#: The papers' sphere model (benchmarks/papers.py: one head, Q = K = V = O = I, score scale 1, its α and β, B = 2048),
#: timed first: a step there is a few microseconds of arithmetic, so the plain path's launches per step are most of
#: its time, and the kernel runs every step of a condition in one launch.
SPHERE_CASES = ("sphere2", "sphere3-n64")


def _papers():
    """``benchmarks/papers.py`` as a module (the folder is not a package): its sphere model and cases."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("jaxattn_benchmarks_papers", Path(__file__).with_name("papers.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _refusal(e: BaseException) -> str | None:
    """The reason jaxattn refused the forced kernel before compiling it (``KernelTooBig``: a shape over the
    device's shared memory), or ``None`` for any other error (a failed compilation included)."""
    from jaxattn.dynamics import KernelTooBig

    return str(e) if isinstance(e, KernelTooBig) else None


def _time_paths(model, X0, steps: int, repeats: int, check_steps: int | None = None, **kw) -> dict:
    """Both paths of one simulation: the fused one is checked to agree with the plain one (final states, max abs
    difference below 1e-4) after ``check_steps`` steps (default: all) before either is timed; then the mean of
    ``repeats`` calls of each."""
    import jax

    import jaxattn as ja

    def go(path, k=steps):
        return jax.block_until_ready(ja.simulate(model, X0, k, batch=ja.Batch(path=path), **kw))

    # compiled, and checked before any clock runs; the kernel first, so that a shape it refuses costs no compilation
    k = min(check_steps or steps, steps)
    outs = {path: go(path, k) for path in ("fused", "plain")}
    err = float(np.abs(np.asarray(outs["plain"].final) - np.asarray(outs["fused"].final)).max())
    if not err < 1e-4:
        raise AssertionError(f"the fused kernel disagrees with the plain path by {err:.3g} after {k} steps")
    fns = {path: functools.partial(go, path) for path in ("plain", "fused")}
    for f in fns.values():
        f()  # compiled at the timed length
    ms = {}
    for k, f in fns.items():
        t = time.perf_counter()
        for _ in range(repeats):
            f()
        ms[k] = (time.perf_counter() - t) / repeats
    return {"max_abs_diff": err, "plain_ms": round(ms["plain"] * 1e3, 2), "fused_ms": round(ms["fused"] * 1e3, 2),
            "speedup": round(ms["plain"] / ms["fused"], 2)}


def _run_row(row: dict, go, on_row) -> dict:
    """``row`` updated by ``go()``; a refusal or an error is a result (the other rows still run)."""
    try:
        row.update(go())
    except Exception as e:
        why = _refusal(e)
        if why is not None:
            row["refused"] = why
        else:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    if on_row:
        on_row(row)
    return row


def bench_sphere(cases=SPHERE_CASES, *, B=None, steps=None, repeats=3, dtype="float32", deadline=None,
                 on_row=None) -> dict:
    """The papers' sphere model at each case of ``cases`` (names of ``papers.CASES``; ``B`` and ``steps``, when given,
    replace the case's): both paths with the default observables at every step, as ``papers.py``'s ``jaxattn`` and
    ``jaxattn-fused`` run it. Rows as :func:`bench`'s (no FLOP/s: the work of a step is a few thousand FLOPs a
    condition, its time the launches)."""
    import jax

    import jaxattn as ja

    papers = _papers()
    rows = []
    for name in cases:
        d, n, B0, steps0, beta, value = papers.CASES[name]
        row: dict = {"model": f"sphere ({name})", "d": d, "n": n, "B": B or B0, "steps": steps or steps0}
        if deadline is not None and time.monotonic() > deadline:
            rows.append({**row, "error": "not run: the time budget was spent"})
            continue

        def go(d=d, n=n, row=row, beta=beta, value=value):
            model = papers._model(d, value, dtype)
            X0 = ja.init_tokens(jax.random.key(1), row["B"], n, d, dtype=dtype)
            # agreement after papers.CHECK_STEPS steps: over hundreds of steps at beta = 4 the clustering dynamics
            # amplify float32 round-off near ties (on the H200, 2026-11-28: the plain path at two block widths
            # ended 4.6e-3 apart at step 300 in one condition of 2048, the kernel 1.4e-3 from the plain path)
            return _time_paths(model, X0, row["steps"], repeats, check_steps=papers.CHECK_STEPS,
                               alpha=papers.ALPHA, beta=beta)

        rows.append(_run_row(row, go, on_row))
    return {"device": jax.devices()[0].device_kind, "backend": jax.default_backend(),
            "interpret": jax.default_backend() != "gpu", "dtype": dtype, "rows": rows}


def bench(B=131_072, shapes=SHAPES, *, heads=4, layers=24, repeats=3, peak_flops=None, deadline=None,
          on_row=None) -> dict:
    """Both paths on every ``(d, n)`` of ``shapes``: the fused one is checked to agree with the plain one
    (final states, max abs difference below 1e-4) before either is timed. Off a GPU the kernel runs in
    interpret mode and its times mean nothing (``interpret`` says so). A shape the kernel refuses before compiling
    (over the device's shared memory) has its reason in ``refused``. ``deadline`` (``time.monotonic()``)
    leaves out the shapes not started by then; ``on_row(row)`` sees each row as it ends."""
    import jax
    import jax.numpy as jnp

    import jaxattn as ja

    H, L = heads, layers
    rows = []
    for d, n in shapes:
        row: dict = {"model": f"W1 family (H={H}, {L} layers)", "d": d, "n": n, "B": B, "steps": L}
        if deadline is not None and time.monotonic() > deadline:
            rows.append({**row, "error": "not run: the time budget was spent"})
            continue

        def go(d=d, n=n):
            model = ja.random_model(jax.random.key(0), d, min(H, d), L, shared=False, dtype=jnp.float32)
            X0 = ja.init_tokens(jax.random.key(1), B, n, d)
            out = _time_paths(model, X0, L, repeats)
            flops = (8 * n * d * d + 4 * n * n * d) * B * L
            secs = {k: out[f"{k}_ms"] / 1e3 for k in ("plain", "fused")}
            out.update(plain_tflops=round(flops / secs["plain"] / 1e12, 3),
                       fused_tflops=round(flops / secs["fused"] / 1e12, 3),
                       plain_bytes_per_cond_layer=4 * (6 * n * d + 2 * H * n * n + 2 * n * d),
                       fused_bytes_per_cond_layer=round(4 * 2 * n * d / L + 8, 1))
            if peak_flops:
                out["fused_peak_fraction"] = round(flops / secs["fused"] / peak_flops, 4)
                out["plain_peak_fraction"] = round(flops / secs["plain"] / peak_flops, 4)
            return out

        rows.append(_run_row(row, go, on_row))
    return {"device": jax.devices()[0].device_kind, "backend": jax.default_backend(),
            "interpret": jax.default_backend() != "gpu", "B": B, "heads": H, "layers": L, "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=131_072)
    ap.add_argument("--out", default="benchmarks/results_kernel.json")
    a = ap.parse_args()
    import jax

    if jax.default_backend() != "gpu":
        print("no GPU: the fused kernel runs only in interpret mode here (tested for correctness in the suite); "
              "nothing to time")
        return
    show = lambda row: print(row, flush=True)
    out = {"sphere": bench_sphere(on_row=show), "w1": bench(a.B, on_row=show)}
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
