"""Side-by-side speed and memory of the D1 simulation, as ratios measured in one run.

Workload: the real all-MiniLM-L6-v2 layer weights (d = 384, 12 heads, 6 layers), D1 dynamics
(α = 1, L2, no FFN), B random Gaussian initial conditions of n = 10 tokens, keeping the
inter-token diameter after every layer. Alternatives:

* ``numpy-loop``: the way research scripts are usually written: one initial condition at a time,
  layer by layer, NumPy matmuls vectorised over tokens and heads;
* ``torch-batched``: PyTorch on the CPU, batched over all initial conditions (a competent port);
* ``jaxattn``: :func:`jaxattn.simulate` (jit + vmap + scan), timed warm (compilation reported apart).

All three are checked to agree before any timing is reported. Memory: peak resident memory of a
fresh process running jaxattn with observables only, for growing B, with and without chunking.

Run: ``make bench`` (or ``python benchmarks/run.py --quick``). Results: printed, and written to
``benchmarks/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np


def load_minilm():
    import jaxattn as ja

    return ja.load_any("minilm")


def weights(model):
    lay = model.layers
    return [dict(q=np.asarray(lay.q[g], np.float32), k=np.asarray(lay.k[g], np.float32),
                 v=np.asarray(lay.v[g], np.float32), o=np.asarray(lay.o[g], np.float32),
                 scale=float(lay.scale[g])) for g in model.schedule]


def numpy_loop(X0, ws):
    out = np.empty((X0.shape[0], len(ws)), np.float32)
    for b in range(X0.shape[0]):
        X = X0[b]
        for k, w in enumerate(ws):
            q = np.einsum("nd,hkd->hnk", X, w["q"])
            kk = np.einsum("nd,hkd->hnk", X, w["k"])
            v = np.einsum("nd,hkd->hnk", X, w["v"])
            s = q @ kk.transpose(0, 2, 1) * w["scale"]
            a = np.exp(s - s.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            upd = np.einsum("hik,hdk->id", a @ v, w["o"])
            Y = X + upd
            X = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
            out[b, k] = np.linalg.norm(X[:, None] - X[None], axis=-1).max()
    return out


def torch_batched(X0, ws):
    import torch

    torch.set_grad_enabled(False)
    X = torch.from_numpy(X0)
    tw = [{k: (torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in w.items()} for w in ws]
    out = []
    for w in tw:
        q = torch.einsum("bnd,hkd->bhnk", X, w["q"])
        kk = torch.einsum("bnd,hkd->bhnk", X, w["k"])
        v = torch.einsum("bnd,hkd->bhnk", X, w["v"])
        a = torch.softmax(q @ kk.transpose(-1, -2) * w["scale"], dim=-1)
        upd = torch.einsum("bhik,hdk->bid", a @ v, w["o"])
        Y = X + upd
        X = Y / Y.norm(dim=-1, keepdim=True)
        out.append(torch.cdist(X, X).amax(dim=(-2, -1)))
    return torch.stack(out, 1).numpy()


def jaxattn_run(model, X0):
    import jax

    import jaxattn as ja

    res = ja.simulate(model, X0, model.depth, observe=_diameter)
    return np.asarray(jax.block_until_ready(res.observables))[:, 1:]


def _diameter(X, k):
    from jaxattn.metrics import diameter

    return diameter(X)


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def memory_child(B: int, chunk: int) -> None:
    """Run in a fresh process: jaxattn D1 from B conditions; print the peak RSS in MiB.

    ``chunk > 0``: observables only, in chunks of ``chunk``; ``chunk = 0``: the whole
    trajectory kept (what a script that stores every layer's tokens needs).
    """
    import resource

    import jax

    import jaxattn as ja

    model = load_minilm()
    if chunk > 0:
        out = ja.sweep(model, num_init=B, n=10, steps=model.depth, chunk=chunk, init="gaussian", progress=False,
                       keep_final=False)
    else:
        X0 = ja.init_tokens(jax.random.key(0), B, 10, model.d_model, kind="gaussian")
        out = np.asarray(ja.simulate(model, X0, model.depth, trajectory=True).trajectory)
    jax.block_until_ready(out)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-init", type=int, default=1000)
    p.add_argument("--quick", action="store_true", help="fewer conditions and repeats (a smoke run)")
    p.add_argument("--memory-child", nargs=2, type=int, metavar=("B", "CHUNK"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child:
        return memory_child(*args.memory_child)

    import jax

    import jaxattn as ja

    B = 200 if args.quick else args.num_init
    reps = 1 if args.quick else 3
    model = load_minilm()
    ws = weights(model)
    X0 = np.asarray(ja.init_tokens(jax.random.key(0), B, 10, model.d_model, kind="gaussian"))
    m32 = model.astype(np.float32)

    t0 = time.perf_counter()
    jaxattn_run(m32, X0)  # first call: compilation included
    first = time.perf_counter() - t0
    t_j, out_j = best_of(lambda: jaxattn_run(m32, X0), reps)
    nb = max(B // 10, 20)  # the loop is slow: time it on a slice and scale linearly
    t_np, out_np = best_of(lambda: numpy_loop(X0[:nb], ws), 1)
    t_np *= B / nb
    t_t, out_t = best_of(lambda: torch_batched(X0, ws), reps)
    err_np = float(np.abs(out_np - out_j[:nb]).max())
    err_t = float(np.abs(out_t - out_j).max())
    assert err_np < 1e-4 and err_t < 1e-4, (err_np, err_t)

    mem = {}
    runs = [(1000, 500), (16000, 500), (1000, 0), (16000, 0)] if not args.quick else [(200, 100), (800, 100)]
    for Bm, chunk in runs:
        r = subprocess.run([sys.executable, __file__, "--memory-child", str(Bm), str(chunk)], capture_output=True,
                           text=True, check=True)
        label = f"B={Bm}, observables, chunk={chunk}" if chunk else f"B={Bm}, whole trajectory"
        mem[label] = round(float(r.stdout.strip().splitlines()[-1]), 1)

    res = {
        "workload": f"all-MiniLM-L6-v2 D1, B={B}, n=10, {model.depth} layers, float32, diameter per layer",
        "seconds": {"jaxattn_warm": round(t_j, 4), "jaxattn_first_call_incl_compile": round(first, 3),
                    "torch_batched": round(t_t, 4), "numpy_loop_extrapolated": round(t_np, 3)},
        "speedup_vs_numpy_loop": round(t_np / t_j, 1), "speedup_vs_torch_batched": round(t_t / t_j, 2),
        "max_abs_diff_vs_jaxattn": {"numpy_loop": err_np, "torch_batched": err_t},
        "peak_rss_mib": mem,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "jax_backend": jax.default_backend()},
    }
    print(json.dumps(res, indent=2))
    if not args.quick:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"), "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
