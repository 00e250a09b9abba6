"""The fused Pallas kernel against the plain JAX path on the W1 family (GPU only).

D1 with H = 4 heads, 24 layers, float32 with full-precision products, d ∈ {8, 16, 32, 64, 128} and
n ∈ {10, 32, 64}, B = 131,072 conditions (``--B``), default observables at every step. Reported per
shape: milliseconds of both paths (checked to agree), the kernel's speed-up, achieved FLOP/s of the
dynamics (8nd² + 4n²d per condition per step) and the bytes each path moves per condition per layer:
the plain path writes and reads the projections [n, 3d], the scores [H, n, n] and the update [n, d]
(≈ 4·(2·3nd + 2·Hn² + 2·nd) bytes), the kernel only the tile's tokens (in at the first layer, out
at the last: 4·2nd/L) and its two observables.

On a machine without a GPU the kernel only runs in Pallas interpret mode, which is a correctness
tool, not a fast path: the script says so and exits.

:func:`bench` is the function behind the command line (``scripts/gpu_check.py`` calls it).

Run: ``python benchmarks/kernel.py [--B 131072] [--out benchmarks/results_kernel.json]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

SHAPES = [(d, n) for d in (8, 16, 32, 64, 128) for n in (10, 32, 64)]


def bench(B=131_072, shapes=SHAPES, *, heads=4, layers=24, repeats=3, peak_flops=None, deadline=None,
          on_row=None) -> dict:
    """Both paths on every ``(d, n)`` of ``shapes``: the fused one is checked to agree with the plain one
    (final states, max abs difference below 1e-4) before either is timed. Off a GPU the kernel runs in
    interpret mode and its times mean nothing (``interpret`` says so). ``deadline`` (``time.monotonic()``)
    leaves out the shapes not started by then; ``on_row(row)`` sees each row as it ends."""
    import jax
    import jax.numpy as jnp

    import jaxattn as ja

    H, L = heads, layers
    rows = []
    for d, n in shapes:
        if deadline is not None and time.monotonic() > deadline:
            rows.append({"d": d, "n": n, "error": "not run: the time budget was spent"})
            continue
        row: dict = {"d": d, "n": n}
        try:
            model = ja.random_model(jax.random.key(0), d, min(H, d), L, shared=False, dtype=jnp.float32)
            X0 = ja.init_tokens(jax.random.key(1), B, n, d)
            fns = {k: (lambda model=model, X0=X0, k=k: jax.block_until_ready(
                       ja.simulate(model, X0, L, batch=ja.Batch(path=k)))) for k in ("plain", "fused")}
            outs = {k: f() for k, f in fns.items()}  # compiled, and checked before any clock runs
            err = float(np.abs(np.asarray(outs["plain"].final) - np.asarray(outs["fused"].final)).max())
            row["max_abs_diff"] = err
            if not err < 1e-4:
                raise AssertionError(f"the fused kernel disagrees with the plain path by {err:.3g}")
            ms = {}
            for k, f in fns.items():
                t = time.perf_counter()
                for _ in range(repeats):
                    f()
                ms[k] = (time.perf_counter() - t) / repeats
            flops = (8 * n * d * d + 4 * n * n * d) * B * L
            row.update(plain_ms=round(ms["plain"] * 1e3, 2), fused_ms=round(ms["fused"] * 1e3, 2),
                       speedup=round(ms["plain"] / ms["fused"], 2),
                       plain_tflops=round(flops / ms["plain"] / 1e12, 3),
                       fused_tflops=round(flops / ms["fused"] / 1e12, 3),
                       plain_bytes_per_cond_layer=4 * (6 * n * d + 2 * H * n * n + 2 * n * d),
                       fused_bytes_per_cond_layer=round(4 * 2 * n * d / L + 8, 1))
            if peak_flops:
                row["fused_peak_fraction"] = round(flops / ms["fused"] / peak_flops, 4)
                row["plain_peak_fraction"] = round(flops / ms["plain"] / peak_flops, 4)
        except Exception as e:  # a shape that fails (or disagrees) is a result; the others still run
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        if on_row:
            on_row(row)
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
    out = bench(a.B, on_row=lambda row: print(row, flush=True))
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
