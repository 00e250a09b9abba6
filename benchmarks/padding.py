"""What a small batch costs a condition: the sphere model (d = 2, n = 32, 300 steps, float32) at B = 64 and B = 1024.

Before the default lane width followed the batch, 64 conditions were padded to the CPU's 1024-lane block of a
one-head map: 13.6 ms a condition against 1.0 ms at B = 1024 (issue 48). Now ``Batch()`` runs them in one block of
64. Timed side by side, interleaved (one repeat of every run, then the next round), best of ``repeats``:

* ``default``: ``jaxattn.simulate`` with ``Batch()`` at each B;
* ``padded``: B = 64 with ``Batch(size=1024)``, the old default width, for comparison.

The figure of merit is ``ratio``: seconds per condition at B = 64 over those at B = 1024 with the default width
(issue 48 asks for at most 2 on a CPU).

Run: ``.venv/bin/python benchmarks/padding.py [--repeats 5]``. Results: printed, and written to
``benchmarks/results_padding.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

D, N, STEPS, BETA, ALPHA = 2, 32, 300, 4.0, 0.1
SIZES = (64, 1024)


def _runs():
    """``{name: (B, call)}``: each call simulates its batch and blocks on the final states."""
    import jax
    import numpy as np

    import jaxattn as ja

    model = ja.random_model(jax.random.key(0), D, heads=1, weights="identity", value="identity", scale=1.0)
    X0 = ja.init_tokens(jax.random.key(1), max(SIZES), N, D)

    def call(B: int, batch):
        X = X0[:B]
        return lambda: np.asarray(ja.simulate(model, X, STEPS, alpha=ALPHA, beta=BETA, batch=batch).final)

    runs = {f"default-B{B}": (B, call(B, ja.Batch())) for B in SIZES}
    runs["padded-B64"] = (64, call(64, ja.Batch(size=1024)))
    return runs


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(Path(__file__).with_name("results_padding.json")))
    a = p.parse_args(argv)
    import jax

    from jaxattn.dynamics.discrete import lanes_of

    runs = _runs()
    for _, fn in runs.values():  # compile
        fn()
    best = {name: float("inf") for name in runs}
    for _ in range(a.repeats):
        for name, (_, fn) in runs.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    import jaxattn as ja

    model = ja.random_model(jax.random.key(0), D, heads=1, weights="identity", value="identity", scale=1.0)
    rows = {name: {"B": B, "lanes": 1024 if name.startswith("padded") else lanes_of(model, N, conditions=B),
                   "seconds": round(best[name], 4), "ms_per_condition": round(1e3 * best[name] / B, 3)}
            for name, (B, _) in runs.items()}
    small, large = rows["default-B64"]["ms_per_condition"], rows["default-B1024"]["ms_per_condition"]
    out = {"environment": {"jax": jax.__version__, "backend": jax.default_backend(), "cpu_count": os.cpu_count(),
                           "platform": platform.platform()},
           "case": {"d": D, "n": N, "steps": STEPS, "beta": BETA, "alpha": ALPHA, "dtype": "float32"},
           "repeats": a.repeats, "runs": rows, "ratio": round(small / large, 2),
           "padded_ratio": round(rows["padded-B64"]["ms_per_condition"] / large, 2)}
    for name, r in rows.items():
        print(f"{name:14s} B = {r['B']:5d} lanes {r['lanes']:5d}  {r['seconds']:.4f} s  {r['ms_per_condition']:.3f} ms "
              "a condition")
    print(f"per condition, B = 64 over B = 1024: {out['ratio']} (padded to 1024 lanes: {out['padded_ratio']})")
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
