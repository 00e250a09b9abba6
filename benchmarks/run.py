"""The benchmark suite: D1 token dynamics done several ways, on the same weights and initial
conditions, checked to agree, timed in one run on one device.

Every implementation computes D1 (x ← N(x + Σ_h O_h Σ_j a^h_ij V_h x_j), no biases, float32) and the
inter-token diameter after every layer:

* ``jaxattn``: :func:`jaxattn.simulate` (jit, vmap over conditions, scan over layers), warm;
* ``jaxattn-cores``: the same with the batch split over every local device (``Batch(devices=...)``). On a CPU the
  command line makes one XLA device per core (``--cpu-devices``; XLA's ``--xla_force_host_platform_device_count``,
  set before JAX starts): XLA runs a batched product of small matrices (the attention's scores and weighted sums)
  on one thread, so one device per core is what puts every core to work on them. Left out with one device;
* ``jaxattn-xla`` (asked for by name: ``make gpu-check`` times it on W1): the same without the one-kernel attention an
  NVIDIA GPU runs (``Form(kernel=False)``: XLA's own kernels, the projections transposed and the scores in device
  memory); on other devices the same program as ``jaxattn``;
* ``torch``: a hand-written batched PyTorch loop (fused QKV projection, batched matmuls);
* ``torch.compile``: the same layer function under ``torch.compile`` (inductor);
* ``torch-sdpa``: the loop with ``torch.nn.functional.scaled_dot_product_attention``;
* ``jaxattn-tf32`` and ``torch.compile-tf32``: ``jaxattn`` with ``Batch(precision="tf32")`` and ``torch.compile``
  with TF32 products (``torch.set_float32_matmul_precision("high")`` around its calls): the faster products of an
  NVIDIA GPU from Ampere on, compared with each other; on a CPU both compute full float32. Not in the default
  selection (``make gpu-check`` runs them on W1); checked against ``jaxattn`` at :data:`AGREE_TF32`;
* ``hf``: Hugging Face's own attention modules (``BertSelfAttention`` + output projection; the FFN
  and LayerNorm removed, biases zeroed) called layer by layer;
* ``numpy``: a NumPy loop over conditions (how research scripts are usually written; timed on a
  slice and scaled).

Workloads (the registry :data:`WORKLOADS`): W1 (random, d = 64, H = 4, 24 layers, n = 32), the real
all-MiniLM-L6-v2 weights at n = 10 and n = 64, and a GPT-2-small-shaped random model (d = 768,
H = 12, 12 layers, n = 64). Reported per implementation: seconds (best of 3, timed in interleaved
rounds), condition-steps per second, achieved FLOP/s of the dynamics (8nd² + 4n²d per condition per
step) next to the device's float32 matmul throughput measured in the same run, compile time (first
call minus warm) and the ratio to jaxattn.

On a GPU the torch implementations run on CUDA when torch has it, in chunks of ``--torch-chunk``
conditions so that a million conditions fit beside JAX. The initial states are placed on the device
before the clock starts, except in chunked runs (each chunk's transfer is timed). Every
implementation's first call is checked against jaxattn before it is timed; one that disagrees, or
fails, is reported as such and not timed. :func:`bench` is the function behind the command line
(``scripts/gpu_check.py`` calls it at GPU sizes).

Run: ``make bench`` or ``.venv/bin/python benchmarks/run.py [--workloads W1,minilm10] [--quick]``.
Results: printed and written to ``benchmarks/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

#: max abs difference of the diameters allowed against jaxattn before an implementation is timed
AGREE = 1e-3
#: the same for the TF32 rows (10-bit mantissa: W1's diameters moved by up to 8.3e-4 on the H200, 2026-11-28)
AGREE_TF32 = 1e-2
#: the implementations, in the order they run (jaxattn first: it is the reference)
IMPLS = ("jaxattn", "jaxattn-cores", "torch", "torch.compile", "torch-sdpa", "hf", "numpy")
#: the TF32 pair (``make gpu-check``'s W1 runs them after ``jaxattn``, the reference)
TF32 = ("jaxattn-tf32", "torch.compile-tf32")
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


def make_jaxattn(model, X0, devices=None, precision="highest", kernel=True):
    """``simulate`` on the default device, or with the batch split over ``devices`` (``None`` where fewer than two:
    that row is left out); ``precision`` of its float32 products (``Batch(precision=...)``); ``kernel=False``: the
    chosen form without its one-kernel attention on an NVIDIA GPU (``Form(kernel=False)``, XLA's own kernels)."""
    import dataclasses

    import jax

    import jaxattn as ja

    if devices is not None and len(devices) < 2:
        return None
    opts = {} if kernel else {"form": dataclasses.replace(ja.model.forms.choose(model, X0.shape[1]), kernel=False)}
    batch = ja.Batch(precision=precision, **opts) if devices is None else ja.Batch(devices=devices,
                                                                                  precision=precision, **opts)
    X0 = jax.device_put(X0)  # on the device once: the clock measures the dynamics, not the transfer

    def run():
        res = ja.simulate(model, X0, model.depth, save=ja.Save(observe=_diameter_obs), batch=batch)
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


def torch_device() -> str:
    """``'cuda'`` where torch has CUDA (a GPU image), else ``'cpu'``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _chunks(B: int, chunk: int | None):
    chunk = chunk or B
    return [(s, min(s + chunk, B)) for s in range(0, B, chunk)]


def make_torch(ws, X0, mode, device="cpu", chunk=None, tf32=False):
    """``mode``: 'eager', 'compile' or 'sdpa'; ``tf32``: float32 products in TF32 during its calls (and the
    compilation), as ``torch.set_float32_matmul_precision("high")`` gives them on an NVIDIA GPU from Ampere on."""
    import contextlib

    import torch

    torch.set_grad_enabled(False)
    tw = [dict(wqkv=torch.from_numpy(np.array(w["wqkv"])).to(device), wo=torch.from_numpy(np.array(w["wo"])).to(device),
               H=w["H"], dh=w["dh"], scale=w["scale"])
          for w in ws]
    X0t = torch.from_numpy(np.array(X0))
    if len(_chunks(X0t.shape[0], chunk)) == 1:
        X0t = X0t.to(device)  # on the device once, as for jaxattn; in chunks each goes there in turn
    layer = _torch_layer
    if mode == "compile":
        layer = torch.compile(_torch_layer, dynamic=False)

    @contextlib.contextmanager
    def products():
        if not tf32:
            yield
            return
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before)

    def run():
        with products():
            return _run()

    def _run():
        parts = []
        for a, b in _chunks(X0t.shape[0], chunk):
            X, out = X0t[a:b].to(device), []
            for w in tw:
                X, diam = layer(X, w["wqkv"], w["wo"], w["H"], w["dh"], w["scale"], sdpa=(mode == "sdpa"))
                out.append(diam)
            parts.append(torch.stack(out, 1).cpu().numpy())  # .cpu() waits for the device
        return np.concatenate(parts)

    return run


def make_hf(model, ws, X0, device="cpu", chunk=None):
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
        mods.append((att.to(device), torch.from_numpy(np.array(w["wo"])).to(device)))
    X0t = torch.from_numpy(np.array(X0))
    if len(_chunks(X0t.shape[0], chunk)) == 1:
        X0t = X0t.to(device)
    if abs(ws[0]["scale"] - 1 / np.sqrt(ws[0]["dh"])) > 1e-7:
        return None  # BERT's modules scale by 1/sqrt(d_h) only

    def run():
        parts = []
        for a, b in _chunks(X0t.shape[0], chunk):
            X, out = X0t[a:b].to(device), []
            for att, wo in mods:
                ctx = att(X)[0]
                Y = X + ctx @ wo.T
                X = Y / Y.norm(dim=-1, keepdim=True)
                out.append(torch.cdist(X, X).amax(dim=(-2, -1)))
            parts.append(torch.stack(out, 1).cpu().numpy())
        return np.concatenate(parts)

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
def matmul_throughput(precision: str = "highest", size: int = 2048) -> float:
    """The device's float32 matmul throughput (FLOP/s), measured with JAX on ``size``² matrices at XLA's
    ``precision`` ('highest': full float32; 'tensorfloat32'; 'bfloat16')."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    f = jax.jit(lambda a: jnp.matmul(a, a, precision=precision))
    jax.block_until_ready(f(a))
    reps = 5 if jax.default_backend() == "cpu" else 50
    t = time.perf_counter()
    for _ in range(reps):
        r = f(a)
    jax.block_until_ready(r)
    return reps * 2 * size**3 / (time.perf_counter() - t)


def load_average() -> float | None:
    """Other jobs' load (the 1-minute load average) where the system reports one: a busy machine moves the ratios
    (one CPU-bound job beside the suite slowed torch more than XLA; the matrix-product probe says how fast the
    machine was)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def environment() -> dict:
    """The device the numbers come from."""
    import jax

    info = {"jax_backend": jax.default_backend(), "jax_device": jax.devices()[0].device_kind,
            "cpu_count": os.cpu_count(), "platform": platform.platform(), "jax_devices": len(jax.local_devices()),
            "xla_flags": os.environ.get("XLA_FLAGS", ""), "load_average_1min": load_average()}
    try:
        import torch

        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads(), torch_device=torch_device())
    except ImportError:
        info["torch"] = None
    return info


def _check(label, out, ref):
    err, allowed = float(np.abs(out - ref).max()), AGREE_TF32 if label in TF32 else AGREE
    if not err < allowed:  # NaN fails too
        raise AssertionError(f"{label} disagrees with jaxattn by {err:.3g} (allowed {allowed:g})")
    return err


def bench_workload(name, repeats=3, quick=False, *, spec=None, n=None, B=None, nb=None, impls=IMPLS,
                   device=None, torch_chunk=None, peak_flops=None):
    """One workload (a name of :data:`WORKLOADS`, or ``spec, n, B, nb`` given) through ``impls``.

    Returns ``{model, n, B, d, heads, layers, results: {impl: row}}``; a row has seconds (best of
    ``repeats``), compile seconds, the max abs difference from jaxattn, condition-steps/s, GFLOP/s and,
    with ``peak_flops``, the fraction of that peak; an implementation that fails or disagrees has an
    ``error`` row instead and is not timed."""
    import jax

    import jaxattn as ja

    if spec is None:
        spec, n, B, nb = WORKLOADS[name]
        if quick:
            B, nb = max(B // 8, 8), max(nb // 4, 1)
    if device is None and any(i not in ("jaxattn", "numpy") for i in impls):
        device = torch_device()
    model = load(spec)
    ws = weight_list(model)
    d, L = model.d_model, model.depth
    X0 = np.asarray(ja.init_tokens(jax.random.key(1), B, n, d, kind="gaussian"))
    flops_per_cond_step = 8 * n * d * d + 4 * n * n * d
    makers: dict[str, Callable] = {
        "jaxattn": lambda: make_jaxattn(model, X0),
        "jaxattn-cores": lambda: make_jaxattn(model, X0, jax.local_devices()),
        "jaxattn-xla": lambda: make_jaxattn(model, X0, kernel=False),
        "torch": lambda: make_torch(ws, X0, "eager", device, torch_chunk),
        "torch.compile": lambda: make_torch(ws, X0, "compile", device, torch_chunk),
        "torch-sdpa": lambda: make_torch(ws, X0, "sdpa", device, torch_chunk),
        "jaxattn-tf32": lambda: make_jaxattn(model, X0, precision="tf32"),
        "torch.compile-tf32": lambda: make_torch(ws, X0, "compile", device, torch_chunk, tf32=True),
        "hf": lambda: make_hf(model, ws, X0, device, torch_chunk),
    }

    def row(sec, first=None, **extra):
        r = dict(seconds=round(sec, 4), **extra, cond_steps_per_s=round(B * L / sec),
                 gflops=round(B * L * flops_per_cond_step / sec / 1e9, 2))
        if first is not None:
            r["compile_s"] = round(max(first - sec, 0.0), 2)
        if peak_flops:
            r["peak_fraction"] = round(B * L * flops_per_cond_step / sec / peak_flops, 4)
        return r

    rows: dict[str, dict] = {}
    ready: dict[str, tuple[Callable, float, float]] = {}  # label: (run, first call seconds, difference)
    ref = None
    for label in [i for i in impls if i in makers]:
        try:
            fn = makers[label]()
            if fn is None:
                continue
            t = time.perf_counter()
            out = fn()
            first = time.perf_counter() - t
            if ref is None:
                if label != "jaxattn":
                    raise ValueError("jaxattn must run first: it is the reference")
                ref = out
            ready[label] = (fn, first, _check(label, out, ref))  # agreement first, then the clock
        except Exception as e:  # one implementation's failure is a result, not the end of the workload
            rows[label] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            if label == "jaxattn":
                break
    # interleaved rounds (one call of each implementation, then the next round), best of `repeats` each: a slow
    # spell of a shared machine then slows every implementation's round alike instead of one implementation's calls
    best = {label: first for label, (_, first, _) in ready.items()}
    for _ in range(repeats - 1):
        for label, (fn, _, _) in ready.items():
            t = time.perf_counter()
            fn()
            best[label] = min(best[label], time.perf_counter() - t)
    for label, (_, first, err) in ready.items():
        rows[label] = row(best[label], first, max_abs_diff=err)
    rows = {label: rows[label] for label in impls if label in rows}  # the order of `impls`
    if "numpy" in impls and ref is not None:
        try:
            fn = make_numpy(ws, X0[:nb])
            t = time.perf_counter()
            out = fn()
            sec = (time.perf_counter() - t) * B / nb
            rows["numpy"] = row(sec, extrapolated_from=nb, max_abs_diff=_check("numpy", out, ref[:nb]))
        except Exception as e:
            rows["numpy"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    base = rows.get("jaxattn", {}).get("seconds")
    for r in rows.values():
        if base and "seconds" in r:
            r["jaxattn_speedup"] = round(r["seconds"] / base, 2)
    tf32 = [rows.get(label, {}).get("seconds") for label in TF32]
    if all(tf32):  # the TF32 rows against each other: jaxattn's TF32 speed-up over torch.compile's
        rows[TF32[1]]["jaxattn_tf32_speedup"] = round(tf32[1] / tf32[0], 2)
    return {"model": spec, "n": n, "B": B, "d": d, "heads": model.n_heads, "layers": L, "torch_device": device,
            "torch_chunk": torch_chunk, "results": rows}


def bench(names=None, repeats=3, quick=False, *, workloads: dict | None = None, impls=IMPLS, device=None,
          torch_chunk=None, peak_flops=None, deadline: float | None = None,
          on_workload: Callable[[str, dict], None] | None = None) -> dict:
    """The suite as a function: ``names`` from :data:`WORKLOADS` (default all), or ``workloads``
    ``{label: (model spec, n, B, numpy slice)}`` at other sizes. ``deadline`` (``time.monotonic()``)
    leaves out the workloads not started by then; ``on_workload(label, result)`` sees each as it ends."""
    res = {"device": environment(), "matmul_gflops_float32": round(matmul_throughput() / 1e9, 1), "workloads": {}}
    todo = workloads if workloads is not None else dict.fromkeys(names or WORKLOADS)
    for label, sizes in todo.items():
        if deadline is not None and time.monotonic() > deadline:
            res["workloads"][label] = {"error": "not run: the time budget was spent"}
            continue
        kw = {} if sizes is None else dict(zip(("spec", "n", "B", "nb"), sizes, strict=True))
        res["workloads"][label] = bench_workload(label, repeats, quick, impls=impls, device=device,
                                                 torch_chunk=torch_chunk, peak_flops=peak_flops, **kw)
        if on_workload:
            on_workload(label, res["workloads"][label])
    return res


def cpu_devices(count: int) -> None:
    """``count`` XLA devices on the CPU, unless ``XLA_FLAGS`` already says how many (read once, when JAX starts:
    call before any JAX computation)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if count > 1 and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from {', '.join(WORKLOADS)}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smaller batches (a smoke run; results not written)")
    p.add_argument("--torch-chunk", type=int, help="conditions per torch call [all]")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"))
    p.add_argument("--cpu-devices", type=int, default=os.cpu_count() or 1,
                   help="XLA devices on the CPU, for the jaxattn-cores row [one per core]; no effect once XLA_FLAGS "
                        "sets xla_force_host_platform_device_count")
    a = p.parse_args(argv)
    for flag, v in (("--repeats", a.repeats), ("--torch-chunk", a.torch_chunk), ("--cpu-devices", a.cpu_devices)):
        if v is not None and v < 1:
            p.error(f"{flag} must be at least 1, got {v}")
    if not a.quick and (os.path.isdir(a.out) or not os.path.isdir(os.path.dirname(os.path.abspath(a.out)))):
        p.error(f"--out {a.out}: not a file in an existing folder (checked before the minutes of timing)")
    cpu_devices(a.cpu_devices)
    load = load_average()
    if load is not None and load > 0.5 * (os.cpu_count() or 1):
        print(f"run.py: the machine is busy (load average {load:.1f} on {os.cpu_count()} cores): other jobs slow "
              "the implementations unequally, so the ratios move; recorded as load_average_1min", file=sys.stderr)
    names = [w for w in a.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    res = bench(names, a.repeats, a.quick, torch_chunk=a.torch_chunk,
                on_workload=lambda name, r: print(name, json.dumps(r["results"]), flush=True))
    print(json.dumps(res, indent=2))
    bad = [f"{w}: {k}: {r['error']}" for w, wr in res["workloads"].items() for k, r in wr.get("results", {}).items()
           if "error" in r]
    if not a.quick:
        from jaxattn.io.results import atomic_write_text  # after bench: importing jaxattn starts JAX

        atomic_write_text(a.out, json.dumps(res, indent=2) + "\n")  # an interrupted write keeps the old results
    if bad:
        raise SystemExit("failed or disagreed:\n" + "\n".join(bad))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # results are written only at the end (atomically): nothing half-written is left
        print("run.py: error: interrupted; nothing written", file=sys.stderr)
        raise SystemExit(2) from None
