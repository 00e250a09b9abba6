"""The cost of a gradient through a long map: time and memory of ``jax.grad`` of a simulation against the
forward pass alone, with and without rematerialisation.

Workload: W1 (random, d = 64, H = 4, 24 layer weight sets, n = 32 tokens), B = 64 conditions, float32, the
map run for 24, 240 and 2,400 steps (the schedule cycles: prolonged passes), the loss the mean final diameter.
Three programs per length, each jitted and timed warm (best of 3):

* ``forward``: ``jaxattn.simulate`` (observables at the last step only);
* ``grad``: ``jax.grad`` of that loss with respect to every weight of the model, through jaxattn's map core
  (a two-level rematerialised scan: the gradient stores about 2·√L states);
* ``grad, no remat``: the same map written as a plain ``lax.scan`` over ``jaxattn.step`` (what a user would
  write without the core), differentiated as is — JAX then stores every step's intermediates.

Memory is XLA's own buffer assignment for the compiled program (``compiled.memory_analysis()``: temporary
buffers plus outputs), deterministic and independent of the allocator. Targets (issue 19): gradient memory
growing at most like √steps, gradient time ≤ 4× the forward pass.

Run: ``.venv/bin/python benchmarks/gradients.py [--steps 24,240,2400]``; results printed and written to
``benchmarks/results_gradients.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxattn as ja


def _best(f, *args, repeat: int = 3) -> float:
    jax.block_until_ready(f(*args))  # compile
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return min(times)


def _memory(f, *args) -> int:
    m = jax.jit(f).lower(*args).compile().memory_analysis()
    return int(m.temp_size_in_bytes + m.output_size_in_bytes)


def measure(steps_list=(24, 240, 2400), B: int = 64, n: int = 32, d: int = 64, heads: int = 4, depth: int = 24):
    model = ja.random_model(jax.random.key(0), d, heads, depth, shared=False, dtype=jnp.float32)
    X0 = ja.init_tokens(jax.random.key(1), B, n, d)
    rows = []
    for steps in steps_list:
        def loss(m, steps=steps):
            res = ja.simulate(m, X0, steps, alpha=0.1, save=ja.Save(every="last"), batch=ja.Batch(size=B, path="plain"))
            return res.observables["diameter"][:, -1].mean()

        def plain_loss(m, steps=steps):  # the same map as a bare lax.scan of ja.step, no rematerialisation
            def body(X, k):
                return jax.vmap(lambda x: ja.step(x, k, m, ja.D1, 0.1, 1.0))(X), None

            X, _ = jax.lax.scan(body, X0, jnp.arange(steps, dtype=jnp.int32))
            return jax.vmap(ja.metrics.diameter)(X).mean()

        fwd = jax.jit(loss)
        grad = jax.jit(jax.grad(loss))
        grad_plain = jax.jit(jax.grad(plain_loss))
        g1, g2 = grad(model), grad_plain(model)
        err = max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))
                  for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2), strict=True))
        row = dict(steps=steps, B=B, forward_s=_best(fwd, model), grad_s=_best(grad, model),
                   grad_plain_s=_best(grad_plain, model), forward_bytes=_memory(loss, model),
                   grad_bytes=_memory(jax.grad(loss), model), grad_plain_bytes=_memory(jax.grad(plain_loss), model),
                   grads_agree_rel=err)
        row["grad_over_forward_time"] = row["grad_s"] / row["forward_s"]
        rows.append(row)
        print(f"steps {steps:5d}: forward {row['forward_s']:.3f} s {row['forward_bytes'] / 2**20:8.1f} MiB | "
              f"grad {row['grad_s']:.3f} s ({row['grad_over_forward_time']:.2f}x) {row['grad_bytes'] / 2**20:8.1f} MiB"
              f" | no remat {row['grad_plain_s']:.3f} s {row['grad_plain_bytes'] / 2**20:8.1f} MiB | "
              f"gradients agree to {err:.1e}", flush=True)
    for a, b in itertools.pairwise(rows):  # how memory grows from one length to the next
        b["grad_memory_growth"] = b["grad_bytes"] / a["grad_bytes"]
        b["steps_growth"] = b["steps"] / a["steps"]
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="24,240,2400")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results_gradients.json"))
    args = p.parse_args(argv)
    rows = measure(tuple(int(s) for s in args.steps.split(",")))
    info = dict(device=str(jax.devices()[0].device_kind), backend=jax.default_backend(), jax=jax.__version__,
                cpus=os.cpu_count(), numpy=np.__version__)
    with open(args.out, "w") as f:
        json.dump(dict(info=info, rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
