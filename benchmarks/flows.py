"""The continuous-time workload: jaxattn.solve against torchdiffeq's odeint, in one run.

Workload (flow workload of the continuous-time engine): the C2 flow on the unit sphere,
``ẋ_i = P_{x_i} Σ_h O_h Σ_j a^h_ij V_h x_j``, for a random shared-weight model with d = 64, H = 4,
B = 1024 initial conditions of n = 32 tokens, integrated from t = 0 to t1 = 10 with an adaptive
5th-order Runge–Kutta pair at rtol = atol = 1e-6, float32 on the CPU:

* ``jaxattn``: :func:`jaxattn.solve` (Tsit5, PID controller, one adaptive step size per condition,
  diameter and cosine consensus saved at 11 times), warm; the first call with compilation apart;
* ``torchdiffeq``: ``odeint(..., method="dopri5")`` on the same vector field written in PyTorch
  (batched tensor ``[B, n, d]``, one step size for the whole batch, as such scripts are written).

Both final states are checked to agree (max abs difference reported; they use different error
norms and step sequences, so agreement is to the tolerance, not to round-off) before timing.

On a GPU torchdiffeq runs on CUDA where torch has it. :func:`bench` is the function behind the
command line (``scripts/gpu_check.py`` calls it at GPU sizes); without torchdiffeq it times jaxattn
alone and says so.

Run: ``.venv/bin/python benchmarks/flows.py`` (needs ``pip install torchdiffeq``, the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np


def jax_side(B, n, d, H, t1, rtol, seed):
    import jax
    import jax.numpy as jnp

    import jaxattn as ja

    model = ja.random_model(jax.random.key(seed), d, H, 1, dtype=jnp.float32)
    X0 = ja.init_tokens(jax.random.key(seed + 1), B, n, d)
    ts = np.linspace(0.0, t1, 11)

    def run():
        sol = ja.solve(model, X0, t1, flow=ja.C2, rtol=rtol, atol=rtol, save=ja.Save(ts=ts))
        return jax.block_until_ready(sol)

    t = time.perf_counter()
    sol = run()
    first = time.perf_counter() - t
    times = []
    for _ in range(3):
        t = time.perf_counter()
        sol = run()
        times.append(time.perf_counter() - t)
    lay = model.layers
    w = {k: np.asarray(getattr(lay, k)[0]) for k in ("q", "k", "v", "o")}
    w["scale"] = float(lay.scale[0])
    return dict(first=first, warm=min(times), final=np.asarray(sol.final), X0=np.asarray(X0), w=w,
                steps=np.asarray(sol.num_steps), ok=bool(np.all(np.asarray(sol.result) == 0)))


def torch_side(X0, w, t1, rtol, device="cpu"):
    import torch
    from torchdiffeq import odeint

    torch.set_num_threads(max(torch.get_num_threads(), 1))
    q, k, v, o = (torch.from_numpy(np.array(w[name])).to(device) for name in ("q", "k", "v", "o"))
    scale = w["scale"]
    nfe = [0]

    def f(t, X):  # X: [B, n, d]
        nfe[0] += 1
        Q = torch.einsum("bnd,hkd->bhnk", X, q)
        K = torch.einsum("bnd,hkd->bhnk", X, k)
        Vv = torch.einsum("bnd,hkd->bhnk", X, v)
        A = torch.softmax(Q @ K.transpose(-1, -2) * scale, dim=-1)
        U = torch.einsum("bhnk,hdk->bnd", A @ Vv, o)
        return U - (X * U).sum(-1, keepdim=True) * X / (X * X).sum(-1, keepdim=True)

    x0 = torch.from_numpy(np.array(X0)).to(device)
    tt = torch.linspace(0.0, t1, 11).to(device)
    with torch.no_grad():
        t = time.perf_counter()
        out = odeint(f, x0, tt, rtol=rtol, atol=rtol, method="dopri5")
        final = out[-1].cpu().numpy()  # waits for the device
        sec = time.perf_counter() - t
    return dict(seconds=sec, final=final, nfe=nfe[0])


def bench(B=1024, n=32, d=64, heads=4, t1=10.0, rtol=1e-6, device=None) -> dict:
    """Both sides on one workload, checked to agree; ``device`` is torch's (default: CUDA where torch has it).
    Without torchdiffeq only jaxattn is timed (``torchdiffeq_error`` says why)."""
    import jax

    j = jax_side(B, n, d, heads, t1, rtol, 0)
    if not j["ok"]:
        raise AssertionError("a jaxattn solve failed")
    res = {
        "workload": f"C2 sphere flow, B={B} n={n} d={d} H={heads}, t1={t1}, rtol=atol={rtol}, float32",
        "device": f"{platform.machine()} {jax.default_backend()} ({jax.devices()[0].device_kind})",
        "jaxattn_warm_s": round(j["warm"], 3), "jaxattn_first_call_s": round(j["first"], 3),
        "jaxattn_steps_per_condition_median": int(np.median(j["steps"])),
        # Tsit5: 6 new evaluations of the field per step (FSAL), each 8nd² + 4n²d + O(nd) per condition
        "jaxattn_gflops_approx": round(6 * float(np.sum(j["steps"])) * (8 * n * d * d + 4 * n * n * d)
                                       / j["warm"] / 1e9, 2),
    }
    try:
        import torch
        import torchdiffeq  # noqa: F401
    except ImportError as e:
        res["torchdiffeq_error"] = f"not installed ({e}); jaxattn timed alone"
        return res
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    t = torch_side(j["X0"], j["w"], t1, rtol, device)
    diff = float(np.abs(j["final"] - t["final"]).max())
    if not diff < 1e-3:
        raise AssertionError(f"jaxattn and torchdiffeq disagree: max abs difference {diff:.3g}")
    res["device"] += f", torch {torch.__version__} on {device}"
    res.update({"torchdiffeq_dopri5_s": round(t["seconds"], 3), "torchdiffeq_function_evaluations": t["nfe"],
                "speedup_vs_torchdiffeq": round(t["seconds"] / j["warm"], 2), "max_abs_difference": diff})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=1024)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--t1", type=float, default=10.0)
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--out", default="benchmarks/results_flows.json")
    a = ap.parse_args()
    res = bench(a.B, a.n, a.d, a.heads, a.t1, a.rtol)
    if "torchdiffeq_error" in res:
        raise SystemExit(f"torchdiffeq: {res['torchdiffeq_error']} (pip install -e '.[bench]')")
    print(json.dumps(res, indent=2))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
