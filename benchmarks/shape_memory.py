"""Memory a long-lived process keeps per new shape: jaxattn against plain JAX.

A notebook or a sweep over many shapes calls ``ja.simulate`` with a new number of tokens ``n`` again and again.
Every new shape compiles new XLA programs, and JAX keeps every compiled program (its code is mapped into the
process: each executable is several memory maps) for as long as the function it belongs to lives. This measures,
after each of ``K`` new ``n``, the resident set size (``VmRSS``), the number of memory maps
(``/proc/self/maps``; the kernel's limit, ``vm.max_map_count``, is 65,530 by default, past which XLA's compiler
dies) and the number of XLA compilations (``jax.monitoring``), in a fresh process per variant:

* ``jaxattn``: ``ja.init_tokens`` then ``ja.simulate`` (D1, a random 4-head model, d = 32, 6 layers, 64
  conditions, observables only) at n = 4, 5, ..., 4 + K - 1;
* ``plain-jax``: the same map written as one ``jax.jit``-ed function of plain JAX (the same shapes, the same
  number of layers; its tokens drawn by ``jax.random.normal`` and normalised inside the program);
* ``jaxattn-padded``: ``jaxattn`` with 48 conditions, padded to the runner's block of 64;
* ``jaxattn+clear``: ``jaxattn`` with ``jax.clear_caches()`` after each shape (what a driver that knows a shape
  will not come back can do).

``--checkout PATH`` runs the variants on another checkout's ``jaxattn`` (``PYTHONPATH``): an earlier commit, checked
out with ``git worktree add``, gives the numbers before a change.

The first few shapes warm up what every shape shares (tracing machinery, the first compilations), so the growth
per shape is the slope between shape ``WARM`` and the last. Results go to ``benchmarks/results_shape_memory.json``
(with ``--label``: under that key, so a run before and after a change sit side by side).

Run: ``.venv/bin/python benchmarks/shape_memory.py [--shapes 30] [--label after]`` (a few minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).with_name("results_shape_memory.json")
WARM = 5  # shapes before the slope is measured

CHILD = r"""
import functools, json, sys, time
import jax, jax.numpy as jnp, numpy as np

variant, K = sys.argv[1], int(sys.argv[2])
compiles = [0]
def listener(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        compiles[0] += 1
jax.monitoring.register_event_duration_secs_listener(listener)

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

def maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)

B, D, H, DEPTH = 48 if "padded" in variant else 64, 32, 4, 6
if variant.startswith("jaxattn"):
    import jaxattn as ja
    model = ja.random_model(jax.random.key(0), d=D, heads=H, depth=DEPTH, shared=False)
    def step(n):
        X0 = ja.init_tokens(jax.random.key(n), B, n, D)
        res = ja.simulate(model, X0, DEPTH)
        jax.block_until_ready(res.observables)
else:
    keys = jax.random.split(jax.random.key(0), 4)
    dh = D // H
    W = {k: jax.random.normal(kk, (DEPTH, H, dh, D)) / np.sqrt(D) for k, kk in zip("qkv", keys[:3])}
    W["o"] = jax.random.normal(keys[3], (DEPTH, H, D, dh)) / np.sqrt(dh)

    @functools.partial(jax.jit, static_argnames="n")
    def plain(key, W, n):
        X = jax.random.normal(key, (B, n, D))
        X = X / jnp.linalg.norm(X, axis=-1, keepdims=True)
        def layer(X, w):
            q = jnp.einsum("hed,bnd->bhne", w["q"], X)
            k = jnp.einsum("hed,bnd->bhne", w["k"], X)
            v = jnp.einsum("hed,bnd->bhne", w["v"], X)
            a = jax.nn.softmax(jnp.einsum("bhne,bhme->bhnm", q, k) / np.sqrt(dh), axis=-1)
            X = X + jnp.einsum("hde,bhne->bnd", w["o"], jnp.einsum("bhnm,bhme->bhne", a, v))
            X = X / jnp.linalg.norm(X, axis=-1, keepdims=True)
            diam = jnp.max(jnp.linalg.norm(X[:, :, None] - X[:, None], axis=-1), axis=(1, 2))
            return X, diam
        X, diam = jax.lax.scan(layer, X, W)
        return X, diam
    def step(n):
        jax.block_until_ready(plain(jax.random.key(n), W, n=n))

rows = []
for i in range(K):
    n = 4 + i
    t = time.perf_counter()
    step(n)
    if variant.endswith("+clear"):
        jax.clear_caches()
    rows.append({"n": n, "rss_mib": round(rss_mib(), 1), "maps": maps(), "compiles": compiles[0],
                 "seconds": round(time.perf_counter() - t, 2)})
print(json.dumps(rows))
"""


def slope(rows: list[dict], key: str) -> float:
    """Growth of ``key`` per shape: a least-squares line through the shapes after the warm-up."""
    import numpy as np

    tail = rows[WARM:]
    x = np.arange(len(tail))
    return float(np.polyfit(x, [r[key] for r in tail], 1)[0])


def run(variant: str, shapes: int, checkout: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=checkout) if checkout else None
    out = subprocess.run([sys.executable, "-c", CHILD, variant, str(shapes)], capture_output=True, text=True,
                         check=True, env=env, cwd=checkout).stdout
    rows = json.loads(out.strip().splitlines()[-1])
    return {"rows": rows, "per_shape": {"rss_mib": round(slope(rows, "rss_mib"), 2),
                                        "maps": round(slope(rows, "maps"), 1),
                                        "compiles": round(slope(rows, "compiles"), 2)},
            "after": {k: rows[-1][k] for k in ("rss_mib", "maps", "compiles")}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", type=int, default=30, help="new shapes n = 4, 5, ... [30]")
    p.add_argument("--label", default="now", help="the key the results are stored under [now]")
    p.add_argument("--variants", default="jaxattn,jaxattn-padded,plain-jax,jaxattn+clear")
    p.add_argument("--checkout", help="the checkout whose jaxattn runs (default: the installed one)")
    args = p.parse_args()
    res = {}
    for variant in args.variants.split(","):
        res[variant] = run(variant, args.shapes, args.checkout)
        print(f"{variant:<14} per new shape: {res[variant]['per_shape']}  after {args.shapes} shapes: "
              f"{res[variant]['after']}", flush=True)
    if "jaxattn" in res and "plain-jax" in res:
        ratio = res["jaxattn"]["per_shape"]["rss_mib"] / max(res["plain-jax"]["per_shape"]["rss_mib"], 1e-9)
        print(f"jaxattn / plain JAX, RSS per shape: {ratio:.2f}x")
    stored = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    stored[args.label] = {**stored.get(args.label, {}), "shapes": args.shapes, "warm": WARM, **res}  # variants merged
    RESULTS.write_text(json.dumps(stored, indent=1) + "\n")


if __name__ == "__main__":
    main()
