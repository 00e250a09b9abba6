"""What a call of ``jaxattn.simulate`` costs besides its program: the same run called as a user calls it and inside one
outer ``jax.jit`` (where the checks, the form's choice and the dispatch are traced once), side by side.

On an H200 (2026-11-28) every call read its weights' and states' flags back from the device, about 5 ms a call
before the program ran (against about 10 ms for 300 steps of the papers' sphere model over 2048 conditions); those
facts are now kept per array object (``jaxattn/model/concrete.py``). This benchmark measures the overhead that is
left, at a size where the program itself takes microseconds (the sphere model, d = 2, n = 32, B = 8, 2 steps):

* ``call``: ``simulate`` as a user calls it, the same model and states every time (what a sweep over β does);
* ``fresh``: ``simulate`` with new arrays of the same values every call (the flags are read again);
* ``jitted``: the same ``simulate`` inside one ``jax.jit``: the floor of a call.

``overhead_us``: ``call`` less ``jitted``, per call. Interleaved rounds, best of ``repeats`` (each a mean over
``calls`` calls).

Run: ``.venv/bin/python benchmarks/overhead.py [--repeats 5] [--calls 200]``. Results: printed, and written to
``benchmarks/results_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

D, N, B, STEPS, BETA, ALPHA = 2, 32, 8, 2, 4.0, 0.1


def _calls(k: int):
    """``{name: (prepare, call)}``: ``prepare()`` makes the inputs of ``k`` calls (untimed), ``call(inputs[i])`` runs
    the simulation once and reads its final states."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxattn as ja

    model = ja.random_model(jax.random.key(0), D, heads=1, weights="identity", value="identity", scale=1.0)
    X0 = ja.init_tokens(jax.random.key(1), B, N, D)
    run = jax.jit(lambda m, X: ja.simulate(m, X, STEPS, alpha=ALPHA, beta=BETA).final)
    same = lambda: [(model, X0)] * k
    # the same values in new arrays: nothing is known of them
    fresh = lambda: [jax.block_until_ready((jax.tree_util.tree_map(jnp.copy, model), jnp.copy(X0))) for _ in range(k)]
    sim = lambda mX: np.asarray(ja.simulate(*mX, STEPS, alpha=ALPHA, beta=BETA).final)
    return {"call": (same, sim), "fresh": (fresh, sim), "jitted": (same, lambda mX: np.asarray(run(*mX)))}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--out", default=str(Path(__file__).with_name("results_overhead.json")))
    a = p.parse_args(argv)
    if a.repeats < 1 or a.calls < 1:
        p.error("--repeats and --calls must be at least 1")
    import jax

    calls = _calls(a.calls)
    for prepare, fn in calls.values():  # compile
        fn(prepare()[0])
    best = {name: float("inf") for name in calls}
    for _ in range(a.repeats):
        for name, (prepare, fn) in calls.items():
            inputs = prepare()
            t = time.perf_counter()
            for x in inputs:
                fn(x)
            best[name] = min(best[name], (time.perf_counter() - t) / a.calls)
    us = {name: round(1e6 * s, 1) for name, s in best.items()}
    out = {"environment": {"jax": jax.__version__, "backend": jax.default_backend(),
                           "device": jax.devices()[0].device_kind, "cpu_count": os.cpu_count(),
                           "platform": platform.platform()},
           "case": {"d": D, "n": N, "B": B, "steps": STEPS, "beta": BETA, "alpha": ALPHA, "dtype": "float32"},
           "repeats": a.repeats, "calls": a.calls, "us_per_call": us,
           "overhead_us": round(us["call"] - us["jitted"], 1),
           "fresh_overhead_us": round(us["fresh"] - us["jitted"], 1)}
    for name, v in us.items():
        print(f"{name:7s} {v:9.1f} µs a call")
    print(f"overhead of a call: {out['overhead_us']} µs (new arrays every call: {out['fresh_overhead_us']} µs)")
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
