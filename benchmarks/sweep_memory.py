"""Peak host memory of a sweep does not grow with the number of initial conditions.

Runs the same small grid point (D1, d = 16, H = 2, 8 layers, n = 8 tokens, observables only) into a
fresh store with N = 10^4 and N = 10^6 initial conditions, each in a fresh process, and reports the
peak resident set size (``ru_maxrss``) and the throughput of both. Chunks of 16,384 conditions.

Run: ``.venv/bin/python benchmarks/sweep_memory.py`` (about 2 minutes on 2 CPU cores).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

CHILD = """
import json, resource, sys, time
import jaxattn.sweeps.grid as g
n = int(sys.argv[1])
cfg = {"num_init": n, "chunk": 16384, "model": {"d": 16, "heads": 2, "depth": 8, "shared": False},
       "init": {"n": 8}}
t = time.perf_counter()
sw = g.sweep_grid(cfg, sys.argv[2], progress=False)
sec = time.perf_counter() - t
print(json.dumps({"num_init": n, "seconds": round(sec, 2), "conditions_per_s": round(n / sec),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


def main():
    rows = []
    for n in (10_000, 1_000_000):
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, "-c", CHILD, str(n), f"{tmp}/s"], capture_output=True, text=True,
                                 check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    ratio = rows[1]["peak_rss_mib"] / rows[0]["peak_rss_mib"]
    res = {"rows": rows, "peak_rss_ratio_1e6_over_1e4": round(ratio, 3)}
    print(json.dumps(res, indent=2))
    with open("benchmarks/results_sweep_memory.json", "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
