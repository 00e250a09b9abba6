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

Run: ``python benchmarks/kernel.py [--B 131072] [--out benchmarks/results_kernel.json]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=131_072)
    ap.add_argument("--out", default="benchmarks/results_kernel.json")
    a = ap.parse_args()
    import jax
    import jax.numpy as jnp

    import jaxattn as ja

    if jax.default_backend() != "gpu":
        print("no GPU: the fused kernel runs only in interpret mode here (tested for correctness in the suite); "
              "nothing to time")
        return
    H, L = 4, 24
    rows = []
    for d in (8, 16, 32, 64, 128):
        for n in (10, 32, 64):
            model = ja.random_model(jax.random.key(0), d, H, L, shared=False, dtype=jnp.float32)
            X0 = ja.init_tokens(jax.random.key(1), a.B, n, d)
            res = {}
            for kernel in ("plain", "fused"):
                def f(model=model, X0=X0, kernel=kernel):  # the loop's values, bound now
                    return jax.block_until_ready(ja.simulate(model, X0, L, kernel=kernel))

                out = f()
                t = time.perf_counter()
                for _ in range(3):
                    out = f()
                res[kernel] = ((time.perf_counter() - t) / 3, out)
            err = float(np.abs(np.asarray(res["plain"][1].final) - np.asarray(res["fused"][1].final)).max())
            flops = (8 * n * d * d + 4 * n * n * d) * a.B * L
            row = {"d": d, "n": n, "plain_ms": round(res["plain"][0] * 1e3, 2),
                   "fused_ms": round(res["fused"][0] * 1e3, 2),
                   "speedup": round(res["plain"][0] / res["fused"][0], 2), "max_abs_diff": err,
                   "fused_tflops": round(flops / res["fused"][0] / 1e12, 2),
                   "plain_bytes_per_cond_layer": 4 * (6 * n * d + 2 * H * n * n + 2 * n * d),
                   "fused_bytes_per_cond_layer": round(4 * 2 * n * d / L + 8, 1)}
            rows.append(row)
            print(row, flush=True)
    out = {"device": jax.devices()[0].device_kind, "B": a.B, "rows": rows}
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
