"""The benchmark suite: D1 token dynamics done several ways, on the same weights and initial
conditions, checked to agree, timed in one run on one device.

Every implementation computes D1 (x ← N(x + Σ_h O_h Σ_j a^h_ij V_h x_j), no biases, float32) and the
inter-token diameter after every layer:

* ``jaxattn``: :func:`jaxattn.simulate` (jit, vmap over conditions, scan over layers), warm;
* ``torch``: a hand-written batched PyTorch loop (fused QKV projection, batched matmuls);
* ``torch.compile``: the same layer function under ``torch.compile`` (inductor);
* ``torch-sdpa``: the loop with ``torch.nn.functional.scaled_dot_product_attention``;
* ``hf``: Hugging Face's own attention modules (``BertSelfAttention`` + output projection; the FFN
  and LayerNorm removed, biases zeroed) called layer by layer;
* ``numpy``: a NumPy loop over conditions (how research scripts are usually written; timed on a
  slice and scaled).

Workloads (the registry :data:`WORKLOADS`): W1 (random, d = 64, H = 4, 24 layers, n = 32), the real
all-MiniLM-L6-v2 weights at n = 10 and n = 64, and a GPT-2-small-shaped random model (d = 768,
H = 12, 12 layers, n = 64). Reported per implementation: seconds (best of 3), condition-steps per
second, achieved FLOP/s of the dynamics (8nd² + 4n²d per condition per step) next to the device's
float32 matmul throughput measured in the same run, compile time (first call minus warm) and the
ratio to jaxattn.

Run: ``make bench`` or ``.venv/bin/python benchmarks/run.py [--workloads W1,minilm10] [--quick]``.
Results: printed and written to ``benchmarks/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

WORKLOADS = {
    # name: (model, n, B, numpy slice)
    "W1": ("random:64:4:24", 32, 1024, 16),
    "minilm10": ("minilm", 10, 1000, 50),
    "minilm64": ("minilm", 64, 256, 8),
    "gpt2small64": ("random:768:12:12", 64, 64, 2),
}


def load(spec: str):
    import jax
    import jax.numpy as jnp

    import jaxattn as ja

    if spec == "minilm":
        return ja.load_any("minilm").astype(np.float32)
    _, d, h, depth = spec.split(":")
    return ja.random_model(jax.random.key(0), int(d), int(h), int(depth), shared=False, dtype=jnp.float32)


def weight_list(model):
    lay = model.layers
    out = []
    for g in model.schedule:
        q, k, v, o = (np.asarray(getattr(lay, n)[g], np.float32) for n in ("q", "k", "v", "o"))
        H, dh, d = q.shape
        out.append(dict(q=q, k=k, v=v, o=o, scale=float(lay.scale[g]), H=H, dh=dh,
                        wqkv=np.concatenate([q.reshape(H * dh, d), k.reshape(H * dh, d), v.reshape(H * dh, d)]),
                        wo=o.transpose(1, 0, 2).reshape(d, H * dh)))
    return out


# ------------------------------------------------------------------------------------ implementations
def _diameter_obs(t, X, ctx):
    from jaxattn.analysis.metrics import diameter

    return diameter(X)


def make_jaxattn(model, X0):
    import jax

    import jaxattn as ja

    def run():
        res = ja.simulate(model, X0, model.depth, observe=_diameter_obs)
        return np.asarray(jax.block_until_ready(res.observables))[:, 1:]

    return run


def _torch_layer(X, wqkv, wo, H, dh, scale, sdpa=False):
    import torch

    B, n, _ = X.shape
    qkv = (X @ wqkv.T).view(B, n, 3, H, dh).permute(2, 0, 3, 1, 4)  # [3, B, H, n, dh]
    q, k, v = qkv[0], qkv[1], qkv[2]
    if sdpa:
        heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
    else:
        heads = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
    Y = X + heads.transpose(1, 2).reshape(B, n, H * dh) @ wo.T
    Y = Y / Y.norm(dim=-1, keepdim=True)
    return Y, torch.cdist(Y, Y).amax(dim=(-2, -1))


def make_torch(ws, X0, mode):
    import torch

    torch.set_grad_enabled(False)
    tw = [dict(wqkv=torch.from_numpy(np.array(w["wqkv"])), wo=torch.from_numpy(np.array(w["wo"])), H=w["H"], dh=w["dh"],
               scale=w["scale"])
          for w in ws]
    X0t = torch.from_numpy(np.array(X0))
    layer = _torch_layer
    if mode == "compile":
        layer = torch.compile(_torch_layer, dynamic=False)

    def run():
        X, out = X0t, []
        for w in tw:
            X, diam = layer(X, w["wqkv"], w["wo"], w["H"], w["dh"], w["scale"], sdpa=(mode == "sdpa"))
            out.append(diam)
        return torch.stack(out, 1).numpy()

    return run


def make_hf(model, ws, X0):
    """Hugging Face's BertSelfAttention modules with the weights of each layer (biases zero)."""
    import torch
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertSelfAttention

    torch.set_grad_enabled(False)
    d = model.d_model
    cfg = BertConfig(hidden_size=d, num_attention_heads=model.n_heads, attention_probs_dropout_prob=0.0,
                     attn_implementation="eager")
    mods = []
    for w in ws:
        att = BertSelfAttention(cfg).eval()
        H, dh = w["H"], w["dh"]
        att.query.weight.copy_(torch.from_numpy(np.array(w["q"].reshape(H * dh, d))))
        att.key.weight.copy_(torch.from_numpy(np.array(w["k"].reshape(H * dh, d))))
        att.value.weight.copy_(torch.from_numpy(np.array(w["v"].reshape(H * dh, d))))
        for lin in (att.query, att.key, att.value):
            lin.bias.zero_()
        mods.append((att, torch.from_numpy(np.array(w["wo"]))))
    X0t = torch.from_numpy(np.array(X0))
    if abs(ws[0]["scale"] - 1 / np.sqrt(ws[0]["dh"])) > 1e-7:
        return None  # BERT's modules scale by 1/sqrt(d_h) only

    def run():
        X, out = X0t, []
        for att, wo in mods:
            ctx = att(X)[0]
            Y = X + ctx @ wo.T
            X = Y / Y.norm(dim=-1, keepdim=True)
            out.append(torch.cdist(X, X).amax(dim=(-2, -1)))
        return torch.stack(out, 1).numpy()

    return run


def make_numpy(ws, X0):
    def run():
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
                Y = X + np.einsum("hik,hdk->id", a @ v, w["o"])
                X = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
                out[b, k] = np.linalg.norm(X[:, None] - X[None], axis=-1).max()
        return out

    return run


# ------------------------------------------------------------------------------------ harness
def timed(fn, repeats):
    t = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t
    best = first
    for _ in range(repeats - 1):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return first, best, out


def matmul_throughput():
    """The device's float32 matmul throughput (FLOP/s), measured with JAX on 2048² matrices."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (2048, 2048), jnp.float32)
    f = jax.jit(lambda a: a @ a)
    jax.block_until_ready(f(a))
    t = time.perf_counter()
    for _ in range(5):
        r = f(a)
    jax.block_until_ready(r)
    return 5 * 2 * 2048**3 / (time.perf_counter() - t)


def bench_workload(name, repeats, quick):
    import jax

    import jaxattn as ja

    spec, n, B, nb = WORKLOADS[name]
    if quick:
        B, nb = max(B // 8, 8), max(nb // 4, 1)
    model = load(spec)
    ws = weight_list(model)
    d, L = model.d_model, model.depth
    X0 = np.asarray(ja.init_tokens(jax.random.key(1), B, n, d, kind="gaussian"))
    flops_per_cond_step = 8 * n * d * d + 4 * n * n * d
    impls = {"jaxattn": make_jaxattn(model, X0), "torch": make_torch(ws, X0, "eager"),
             "torch.compile": make_torch(ws, X0, "compile"), "torch-sdpa": make_torch(ws, X0, "sdpa"),
             "hf": make_hf(model, ws, X0)}
    rows, ref = {}, None
    for label, fn in impls.items():
        if fn is None:
            continue
        first, best, out = timed(fn, repeats)
        if ref is None:
            ref = out
        err = float(np.abs(out - ref).max())
        assert err < 1e-3, f"{name}: {label} disagrees with jaxattn by {err:.3g}"
        rows[label] = dict(seconds=round(best, 4), compile_s=round(max(first - best, 0.0), 2), max_abs_diff=err,
                           cond_steps_per_s=round(B * L / best),
                           gflops=round(B * L * flops_per_cond_step / best / 1e9, 2))
    fn = make_numpy(ws, X0[:nb])
    t = time.perf_counter()
    out = fn()
    sec = (time.perf_counter() - t) * B / nb
    err = float(np.abs(out - ref[:nb]).max())
    assert err < 1e-3, f"{name}: numpy disagrees with jaxattn by {err:.3g}"
    rows["numpy"] = dict(seconds=round(sec, 3), extrapolated_from=nb, max_abs_diff=err,
                         cond_steps_per_s=round(B * L / sec), gflops=round(B * L * flops_per_cond_step / sec / 1e9, 3))
    base = rows["jaxattn"]["seconds"]
    for r in rows.values():
        r["jaxattn_speedup"] = round(r["seconds"] / base, 2)
    return {"model": spec, "n": n, "B": B, "d": d, "heads": model.n_heads, "layers": L, "results": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from {', '.join(WORKLOADS)}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smaller batches (a smoke run; results not written)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"))
    a = p.parse_args(argv)
    import jax
    import torch

    names = [w for w in a.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    res = {"device": {"jax_backend": jax.default_backend(), "jax_device": jax.devices()[0].device_kind,
                      "cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                      "torch_threads": torch.get_num_threads()},
           "matmul_gflops_float32": round(matmul_throughput() / 1e9, 1), "workloads": {}}
    for name in names:
        res["workloads"][name] = bench_workload(name, a.repeats, a.quick)
        print(name, json.dumps(res["workloads"][name]["results"]), flush=True)
    print(json.dumps(res, indent=2))
    if not a.quick:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
