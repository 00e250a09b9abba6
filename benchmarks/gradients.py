"""The cost of a gradient through a long map: time and memory of ``jax.grad`` of a simulation against the
forward pass alone, with and without rematerialisation.

Workload: W1 (random, d = 64, H = 4, 24 layer weight sets, n = 32 tokens), B = 64 conditions, float32, the
map run for 24, 240 and 2,400 steps (the schedule cycles: prolonged passes), the loss the mean final diameter.
Three programs per length, each jitted and timed warm (best of 3):

* ``forward``: ``jaxattn.simulate`` (observables at the last step only);
* ``grad``: ``jax.grad`` of that loss with respect to every weight of the model, through jaxattn's map core
  (a two-level rematerialised scan: the gradient stores about 2·√L states);
* ``grad, no remat``: the same map written as a plain ``lax.scan`` over ``jaxattn.dynamics.discrete.step`` (what a
  user would write without the core), differentiated as is — JAX then stores every step's intermediates (above
  ``--plain-max`` steps only compiled for its memory, not run: it would need gigabytes);
* ``one block``: the gradient of a single block against its forward pass (no scan, nothing
  rematerialised): the floor no arrangement of the scan can go under.

Times are the best of 3 warm calls, in CPU seconds of the process (``time.process_time``: all of XLA's
threads) as well as wall seconds, so the ratios hold on a machine shared with other jobs.

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
from jaxattn.dynamics.discrete import step


def _best(f, *args, repeat: int = 3) -> tuple[float, float]:
    """Best (wall, CPU) seconds of ``repeat`` warm calls."""
    jax.block_until_ready(f(*args))  # compile
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(f(*args))
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def _memory(f, *args) -> int:
    m = jax.jit(f).lower(*args).compile().memory_analysis()
    return int(m.temp_size_in_bytes + m.output_size_in_bytes)


def one_block(model, X0) -> dict:
    """The gradient of one block against its forward pass: the cost of the backward pass itself."""
    def loss(m):
        return jax.vmap(ja.metrics.diameter)(jax.vmap(lambda x: step(x, 0, m, ja.D1, 0.1, 1.0))(X0)).mean()

    (fw, fc), (gw, gc) = _best(jax.jit(loss), model, repeat=10), _best(jax.jit(jax.grad(loss)), model, repeat=10)
    return dict(forward_s=fw, forward_cpu_s=fc, grad_s=gw, grad_cpu_s=gc, grad_over_forward_cpu=gc / fc)


def measure(steps_list=(24, 240, 2400), B: int = 64, n: int = 32, d: int = 64, heads: int = 4, depth: int = 24,
            plain_max: int = 240, on_row=None):
    """``(rows, block)``: one row per length of ``steps_list``; ``on_row(rows, block)`` is called with what is
    measured so far after the block and after each row (a caller stopped at a time budget keeps it)."""
    model = ja.random_model(jax.random.key(0), d, heads, depth, shared=False, dtype=jnp.float32)
    X0 = ja.init_tokens(jax.random.key(1), B, n, d)
    block = one_block(model, X0)
    print(f"one block: forward {block['forward_cpu_s'] * 1e3:.2f} ms CPU, gradient {block['grad_cpu_s'] * 1e3:.2f} ms "
          f"CPU ({block['grad_over_forward_cpu']:.2f}x)", flush=True)
    rows: list[dict] = []
    if on_row is not None:
        on_row(rows, block)
    for steps in steps_list:
        def loss(m, steps=steps):
            res = ja.simulate(m, X0, steps, alpha=0.1, save=ja.Save(every="last"), batch=ja.Batch(size=B, path="plain"))
            return res.observables["diameter"][:, -1].mean()

        def plain_loss(m, steps=steps):  # the same map as a bare lax.scan of step, no rematerialisation
            def body(X, k):
                return jax.vmap(lambda x: step(x, k, m, ja.D1, 0.1, 1.0))(X), None

            X, _ = jax.lax.scan(body, X0, jnp.arange(steps, dtype=jnp.int32))
            return jax.vmap(ja.metrics.diameter)(X).mean()

        fwd = jax.jit(loss)
        grad = jax.jit(jax.grad(loss))
        row = dict(steps=steps, B=B, forward_bytes=_memory(loss, model), grad_bytes=_memory(jax.grad(loss), model),
                   grad_plain_bytes=_memory(jax.grad(plain_loss), model))
        row["forward_s"], row["forward_cpu_s"] = _best(fwd, model)
        row["grad_s"], row["grad_cpu_s"] = _best(grad, model)
        if steps <= plain_max:
            grad_plain = jax.jit(jax.grad(plain_loss))
            g1, g2 = grad(model), grad_plain(model)
            row["grads_agree_rel"] = max(
                float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))
                for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2), strict=True))
            row["grad_plain_s"], row["grad_plain_cpu_s"] = _best(grad_plain, model)
        row["grad_over_forward_time"] = row["grad_s"] / row["forward_s"]
        row["grad_over_forward_cpu"] = row["grad_cpu_s"] / row["forward_cpu_s"]
        rows.append(row)
        if on_row is not None:
            on_row(rows, block)
        plain = (f"{row['grad_plain_cpu_s']:.3f} s CPU, agree to {row['grads_agree_rel']:.1e}"
                 if "grad_plain_s" in row else "not run")
        print(f"steps {steps:5d}: forward {row['forward_cpu_s']:.3f} s CPU {row['forward_bytes'] / 2**20:8.1f} MiB | "
              f"grad {row['grad_cpu_s']:.3f} s CPU ({row['grad_over_forward_cpu']:.2f}x; wall "
              f"{row['grad_over_forward_time']:.2f}x) {row['grad_bytes'] / 2**20:8.1f} MiB | no remat "
              f"{row['grad_plain_bytes'] / 2**20:8.1f} MiB, {plain}", flush=True)
    for a, b in itertools.pairwise(rows):  # how memory grows from one length to the next
        b["grad_memory_growth"] = b["grad_bytes"] / a["grad_bytes"]
        b["steps_growth"] = b["steps"] / a["steps"]
    return rows, block


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="24,240,2400")
    p.add_argument("--plain-max", type=int, default=240, help="longest map whose no-remat gradient is run")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results_gradients.json"))
    args = p.parse_args(argv)
    rows, block = measure(tuple(int(s) for s in args.steps.split(",")), plain_max=args.plain_max)
    info = dict(device=str(jax.devices()[0].device_kind), backend=jax.default_backend(), jax=jax.__version__,
                cpus=os.cpu_count(), numpy=np.__version__)
    with open(args.out, "w") as f:
        json.dump(dict(info=info, one_block=block, rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
