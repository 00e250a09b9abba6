"""The papers' regime: one head, identity or structured weights, small d, many initial conditions.

The clustering and consensus papers simulate D1 on the sphere, ``x_i <- N(x_i + α Σ_j a_ij V x_j)`` with
``a_ij = softmax_j(β <x_i, x_j>)`` (``Q = K = I``, score scale 1), for thousands of initial conditions.
Their public scripts are a few lines of batched torch that compute ``X Xᵀ``, the softmax and the
weighted sum and nothing else. Side by side, on the same initial tokens, checked to agree before
anything is timed (final states within :data:`AGREE`), timed in one run (best of ``repeats``):

* ``torch``: that loop, hand-written (``bmm``, ``softmax``, ``bmm``, normalise; ``X Vᵀ`` when V ≠ I);
* ``torch.compile``: the same step under ``torch.compile`` (inductor);
* ``jax-floor``: the same loop in JAX, 15 lines (``lax.scan`` of einsum, softmax, einsum), under ``jit``:
  the in-house floor of what the overhead of :func:`jaxattn.simulate` should be measured against;
* ``jax-floor-bcast``: the floor written with broadcast products (what XLA's CPU backend fuses best at small d);
* ``jax-floor-blocks``: the floor run over blocks of conditions of the width :func:`jaxattn.simulate` chooses
  (``lax.map`` over the blocks, each block the loop above): at large ``B`` the whole-batch loops stream arrays of
  hundreds of MB through memory at every step, so the floor for a blocked simulator is the blocked floor;
* ``jax-floor-observed``: the blocked floor computing the default observables at every step in the fewest lines
  (:func:`jaxattn.aot.floor_observables`): the floor for ``jaxattn`` with its observables, so that ``jaxattn``
  against it is jaxattn's own overhead, and ``jax-floor-observed`` against ``jax-floor-blocks`` what the observables
  cost in any implementation;
* ``jaxattn``: :func:`jaxattn.simulate` with its default observables (diameter and cosine consensus at every step);
* ``jaxattn-last``: :func:`jaxattn.simulate` observing the last step only (``Save(every="last")``);
* ``jaxattn-general``: ``jaxattn`` with the general form forced (``Batch(form=ja.model.forms.GENERAL)``: four
  projections per head, no structure used): what the structure-aware forms gain;
* ``jaxattn-lanes64``: ``jaxattn`` in blocks of 64 conditions (``Batch(size=64)``, the CPU's width for every model
  before one-head maps got wider blocks): what the wider blocks gain;
* the iteration variants: ``jax-floor-unroll4``/``8`` (the floor's ``lax.scan(unroll=k)``) and
  ``jaxattn-last-unroll4``/``8`` (``jaxattn-last`` with ``Batch(unroll=k)``): on a GPU each iteration of a loop
  launches its kernels and checks its condition, and only the device's clock says what fewer iterations gain.

Timings are interleaved (one repeat of every implementation, then the next round) and the best of
``repeats`` kept: on a shared CPU the speed drifts over minutes, and a drift must not favour whichever
implementation happened to run first.

Agreement is checked over the first :data:`CHECK_STEPS` steps (final states within :data:`AGREE`): over
hundreds of steps at β = 4 the clustering dynamics amplify float32 round-off near ties between clusters
(different but equally exact summation orders end 5e-3 apart at step 300), which says nothing about
whether two implementations compute the same map.

Cases (:data:`CASES`): the sphere model (``Q = K = V = O = I``) at d = 2 and 3, n = 32 and 64; the
clustering paper's model (``Q = K = I``, a random ``V``) at d = 16 and 64; float32 and float64.

A second part, :func:`mean_field`, runs the sphere model at growing n in fresh processes (a few steps, one
condition) and reports the time per step and the peak memory: the attention is evaluated over key
chunks where it would not fit (:mod:`jaxattn.model.forms`), so memory grows like n, not n².

Run: ``.venv/bin/python benchmarks/papers.py [--quick] [--cases sphere2,...] [--mean-field]``.
Results: printed, and written to ``benchmarks/results_papers.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: max abs difference of the states after CHECK_STEPS steps allowed against the torch loop before anything is timed
AGREE = {"float32": 1e-4, "float64": 1e-12}
CHECK_STEPS = 10
IMPLS = ("torch", "torch.compile", "jax-floor", "jax-floor-bcast", "jax-floor-blocks", "jax-floor-observed", "jaxattn",
         "jaxattn-last", "jaxattn-general", "jaxattn-lanes64", "jax-floor-unroll4", "jax-floor-unroll8",
         "jaxattn-last-unroll4", "jaxattn-last-unroll8")
#: name: (d, n, B, steps, beta, value) -- value 'identity' (the sphere model) or 'random' (the clustering model)
CASES = {
    "sphere2": (2, 32, 2048, 300, 4.0, "identity"),
    "sphere3-n64": (3, 64, 2048, 200, 4.0, "identity"),
    "sphere3-B8192": (3, 32, 8192, 100, 4.0, "identity"),
    "clusters16": (16, 64, 8192, 100, 4.0, "random"),
    "clusters64": (64, 128, 1024, 50, 1.0, "random"),
    "sphere16-n32": (16, 32, 1024, 40, 4.0, "identity"),  # the sphere model in the regime a user reported (issue 29)
}
ALPHA = 0.1


def _model(d: int, value: str, dtype: str):
    import jax

    import jaxattn as ja

    return ja.random_model(jax.random.key(0), d, heads=1, weights="identity", value=value, scale=1.0, dtype=dtype)


def _value_matrix(model) -> np.ndarray:
    """``F = O V`` of the one head: the matrix applied to the weighted sum."""
    lay = model.layers
    return np.asarray(lay.o[0, 0] @ lay.v[0, 0])


def make_torch(X0, V, steps, beta, compiled: bool):
    import jax
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    # on a GPU machine (make gpu-check) torch runs on the GPU too, when its build has CUDA
    dev = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
    eye = np.allclose(V, np.eye(V.shape[0]))
    Vt = torch.from_numpy(np.ascontiguousarray(V.T)).to(dev)

    def step(X):
        P = torch.softmax(beta * torch.bmm(X, X.transpose(1, 2)), dim=-1)
        U = torch.bmm(P, X)
        Y = X + ALPHA * (U if eye else U @ Vt)
        return Y / Y.norm(dim=-1, keepdim=True)

    f = torch.compile(step) if compiled else step
    X0t = torch.from_numpy(np.array(X0)).to(dev)  # a writable copy (torch refuses read-only buffers)

    def run(k=steps):
        with torch.no_grad():
            X = X0t
            for _ in range(k):
                X = f(X)
        return X.cpu().numpy()  # the copy to the host waits for the device

    return run


def make_floor(X0, V, steps, beta, bcast: bool, lanes: int | None = None, observed: bool = False, unroll: int = 1):
    """The floor; ``lanes``: run it over blocks of that many conditions (padded with copies of the first);
    ``observed``: with the default observables at every step (:func:`jaxattn.aot.floor_observables`, returned by the
    program so that XLA computes them); ``unroll``: steps per iteration of its loop (``lax.scan(unroll=...)``)."""
    import jax
    import jax.numpy as jnp

    from jaxattn.aot import floor_observables

    eye = np.allclose(V, np.eye(V.shape[0]))
    Vj = jnp.asarray(V, X0.dtype)
    HI = jax.lax.Precision.HIGHEST

    @functools.partial(jax.jit, static_argnums=1)
    def loop(X, k):
        def f(X, _):
            # full float32 products, as jaxattn and torch compute them (a GPU's default is TF32 for einsum)
            G = ((X[:, :, None, :] * X[:, None, :, :]).sum(-1) if bcast
                 else jnp.einsum("bid,bjd->bij", X, X, precision=HI))
            P = jax.nn.softmax(beta * G, axis=-1)
            U = (P[..., None] * X[:, None, :, :]).sum(2) if bcast else jnp.einsum("bij,bjd->bid", P, X, precision=HI)
            Y = X + ALPHA * (U if eye else jnp.matmul(U, Vj.T, precision=HI))
            Y = Y / jnp.linalg.norm(Y, axis=-1, keepdims=True)
            return Y, (floor_observables(Y) if observed else None)

        Y, seen = jax.lax.scan(f, X, None, length=k, unroll=min(unroll, max(k, 1)))
        return Y, ((floor_observables(X), seen) if observed else None)

    Xj = jnp.asarray(X0)
    if lanes is None:
        return lambda k=steps: np.asarray(loop(Xj, k)[0])
    B = Xj.shape[0]
    pad = (-B) % lanes
    Xp = jnp.concatenate([Xj, jnp.broadcast_to(Xj[:1], (pad, *Xj.shape[1:]))]) if pad else Xj
    blocks = Xp.reshape(-1, lanes, *Xj.shape[1:])
    by_block = jax.jit(lambda Xb, k: jax.lax.map(lambda x: loop(x, k), Xb), static_argnums=1)

    def run(k=steps):
        return np.asarray(by_block(blocks, k)[0].reshape(-1, *Xj.shape[1:])[:B])

    def observables(k):  # {name: [B, k + 1]}, to check against jaxattn's before anything is timed
        first, seen = by_block(blocks, k)[1]
        return {name: np.concatenate([a[:, :, None], b.transpose(0, 2, 1)], -1).reshape(-1, k + 1)[:B]
                for name, a, b in zip(("diameter", "cos_consensus"), first, seen, strict=True)}

    run.observables = observables  # type: ignore[attr-defined]
    return run


def lanes_of(model, n: int, dtype, B: int) -> int:
    """The block width :func:`jaxattn.simulate` chooses for ``B`` of this model's conditions of ``n`` tokens
    (``Batch()``)."""
    from jaxattn.dynamics.discrete import lanes_of as simulate_lanes

    return simulate_lanes(model, n, dtype=dtype, conditions=B)


def make_jaxattn(model, X0, steps, beta, last: bool, general: bool = False, size: int | None = None,
                 unroll: int = 1):
    import jax.numpy as jnp

    import jaxattn as ja

    Xj = jnp.asarray(X0)
    save = ja.Save(every="last") if last else ja.Save()
    batch = (ja.Batch(form=ja.model.forms.GENERAL, size=size, unroll=unroll) if general
             else ja.Batch(size=size, unroll=unroll))
    return lambda k=steps: np.asarray(ja.simulate(model, Xj, k, alpha=ALPHA, beta=beta, save=save,
                                                  batch=batch).final)


def timed(fns: dict, repeats: int) -> dict:
    """``{name: (first_s, best_s)}``: one call each (compiles), then ``repeats`` interleaved rounds."""
    first = {}
    for name, fn in fns.items():
        t = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t
    best = dict(first)
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return {name: (first[name], best[name]) for name in fns}


def bench_case(name: str, dtype: str, repeats: int = 3, quick: bool = False, impls=IMPLS) -> dict:
    import jax

    import jaxattn as ja
    from jaxattn.dynamics.discrete import form_of

    d, n, B, steps, beta, value = CASES[name]
    if quick:
        B, steps = max(B // 16, 64), max(steps // 10, 5)
    model = _model(d, value, dtype)
    V = _value_matrix(model)
    X0 = np.asarray(ja.init_tokens(jax.random.key(1), B, n, d, dtype=dtype))
    makers = {
        "torch": lambda: make_torch(X0, V, steps, beta, compiled=False),
        "torch.compile": lambda: make_torch(X0, V, steps, beta, compiled=True),
        "jax-floor": lambda: make_floor(X0, V, steps, beta, bcast=False),
        "jax-floor-bcast": lambda: make_floor(X0, V, steps, beta, bcast=True),
        "jax-floor-blocks": lambda: make_floor(X0, V, steps, beta, bcast=False, lanes=lanes_of(model, n, dtype, B)),
        "jax-floor-observed": lambda: make_floor(X0, V, steps, beta, bcast=False, lanes=lanes_of(model, n, dtype, B),
                                                 observed=True),
        "jaxattn": lambda: make_jaxattn(model, X0, steps, beta, last=False),
        "jaxattn-last": lambda: make_jaxattn(model, X0, steps, beta, last=True),
        "jaxattn-general": lambda: make_jaxattn(model, X0, steps, beta, last=False, general=True),
        "jaxattn-lanes64": lambda: make_jaxattn(model, X0, steps, beta, last=False, size=64),
        "jax-floor-unroll4": lambda: make_floor(X0, V, steps, beta, bcast=False, unroll=4),
        "jax-floor-unroll8": lambda: make_floor(X0, V, steps, beta, bcast=False, unroll=8),
        "jaxattn-last-unroll4": lambda: make_jaxattn(model, X0, steps, beta, last=True, unroll=4),
        "jaxattn-last-unroll8": lambda: make_jaxattn(model, X0, steps, beta, last=True, unroll=8),
    }
    form = form_of(model, ja.D1, n, dtype)
    res: dict = {"d": d, "n": n, "B": B, "steps": steps, "beta": beta, "alpha": ALPHA, "value": value, "dtype": dtype,
                 "form": ja.model.forms.describe(form), "results": {}}
    ref, ready = None, {}
    for impl in impls:
        try:
            fn = makers[impl]()
            check = fn(CHECK_STEPS)
        except Exception as e:  # an implementation that cannot run here (torch.compile without a compiler)
            res["results"][impl] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            continue
        if ref is None:
            ref = check
        err = float(np.abs(check - ref).max())
        if not err <= AGREE[dtype]:  # NaN fails too
            res["results"][impl] = {"error": f"disagrees with {impls[0]} after {CHECK_STEPS} steps by {err:.3g} "
                                             f"(allowed {AGREE[dtype]:g})"}
            print(f"  {name} {dtype} {impl:16s} {res['results'][impl]['error']}", flush=True)
            continue
        ready[impl] = (fn, err)
    if "jax-floor-observed" in ready:  # its observables are jaxattn's, step by step
        got = ready["jax-floor-observed"][0].observables(CHECK_STEPS)
        want = ja.simulate(model, X0, CHECK_STEPS, alpha=ALPHA, beta=beta).observables
        err = max(float(np.abs(got[k] - np.asarray(want[k])).max()) for k in got)
        if not err <= 10 * AGREE[dtype]:
            res["results"]["jax-floor-observed"] = {"error": f"observables disagree with jaxattn's by {err:.3g}"}
            del ready["jax-floor-observed"]
    for impl, (first, best) in timed({k: f for k, (f, _) in ready.items()}, repeats).items():
        row = {"seconds": round(best, 4), "compile_s": round(max(first - best, 0.0), 2), "max_abs_diff": ready[impl][1]}
        res["results"][impl] = row
        print(f"  {name} {dtype} {impl:16s} {row['seconds']:.3f} s", flush=True)
    ok = {k: v["seconds"] for k, v in res["results"].items() if "seconds" in v}
    floor = min((ok[k] for k in ("jax-floor", "jax-floor-bcast", "jax-floor-blocks") if k in ok), default=None)
    for impl in ("jaxattn", "jaxattn-last", "jaxattn-general", "jaxattn-lanes64"):
        if impl in ok:
            res[f"{impl}_vs_torch"] = round(ok["torch"] / ok[impl], 2) if "torch" in ok else None
            compiled = ok.get("torch.compile")
            res[f"{impl}_vs_torch_compile"] = round(compiled / ok[impl], 2) if compiled else None
            res[f"{impl}_over_floor"] = round(ok[impl] / floor, 2) if floor else None
    if "jaxattn" in ok and "jaxattn-last" in ok:
        res["observables_cost"] = round(ok["jaxattn"] / ok["jaxattn-last"] - 1.0, 3)
    if "jaxattn" in ok and "jax-floor-observed" in ok:  # jaxattn's own overhead where both observe every step
        res["jaxattn_over_observed_floor"] = round(ok["jaxattn"] / ok["jax-floor-observed"], 2)
    if "jax-floor-observed" in ok and "jax-floor-blocks" in ok:  # the observables' cost in the floor itself
        res["floor_observables_cost"] = round(ok["jax-floor-observed"] / ok["jax-floor-blocks"] - 1.0, 3)
    return res


# ------------------------------------------------------------------------------- mean field
def _mean_field_child(n: int, d: int, steps: int, dtype: str) -> dict:
    """One run of ``steps`` steps of the sphere model at ``n`` tokens (one condition), in this process."""
    import jax

    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jaxattn as ja
    from jaxattn.dynamics.discrete import form_of

    model = _model(d, "identity", dtype)
    X0 = ja.init_tokens(jax.random.key(1), 1, n, d, dtype=dtype)
    save = ja.Save(every="last")  # the default observables of the final state (diameter over row chunks)
    run = lambda k: ja.simulate(model, X0, k, alpha=ALPHA, beta=4.0, save=save).final.block_until_ready()
    run(1)  # compile the one-step program; the timed run compiles its own (steps is static)
    t = time.perf_counter()
    run(steps)
    secs = time.perf_counter() - t
    form = form_of(model, ja.D1, n, dtype)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"n": n, "d": d, "steps": steps, "dtype": dtype, "seconds_per_step": secs / steps,
            "peak_rss_bytes": peak, "key_chunk": form.key_chunk}


def mean_field(ns=(1024, 4096, 16384, 65536, 100_000), d: int = 3, steps: int = 3, dtype: str = "float32") -> list:
    """The sphere model at each ``n`` in a fresh process: seconds per step and peak memory (RSS)."""
    rows = []
    for n in ns:
        p = subprocess.run([sys.executable, __file__, "--child", str(n), str(d), str(steps), dtype],
                           capture_output=True, text=True, env={**os.environ, "XLA_FLAGS": ""})
        if p.returncode:
            rows.append({"n": n, "error": (p.stderr or p.stdout).strip().splitlines()[-1:]})
        else:
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print("  mean field", rows[-1], flush=True)
    return rows


def environment() -> dict:
    import jax

    info = {"jax": jax.__version__, "jax_backend": jax.default_backend(), "jax_device": jax.devices()[0].device_kind,
            "cpu_count": os.cpu_count(), "platform": platform.platform()}
    try:
        import torch

        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
    except ImportError:
        info["torch"] = None
    return info


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated names of CASES")
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny batches and few steps (a smoke test)")
    p.add_argument("--mean-field", action="store_true", help="also the n-scaling runs (fresh processes)")
    p.add_argument("--out", default=str(Path(__file__).with_name("results_papers.json")))
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        n, d, steps, dtype = a.child
        print(json.dumps(_mean_field_child(int(n), int(d), int(steps), dtype)))
        return {}
    import jax

    if "float64" in a.dtypes:
        jax.config.update("jax_enable_x64", True)
    unknown = [c for c in a.cases.split(",") if c not in CASES] + [i for i in a.impls.split(",") if i not in IMPLS] + \
        [t for t in a.dtypes.split(",") if t not in AGREE]
    if unknown:
        p.error(f"unknown case, implementation or dtype: {', '.join(unknown)} (cases: {', '.join(CASES)}; "
                f"implementations: {', '.join(IMPLS)}; dtypes: {', '.join(AGREE)})")
    out = {"environment": environment(), "cases": []}
    for name in a.cases.split(","):
        for dtype in a.dtypes.split(","):
            out["cases"].append(bench_case(name, dtype, a.repeats, a.quick, tuple(a.impls.split(","))))
    if a.mean_field:
        out["mean_field"] = mean_field(ns=(512, 2048, 8192) if a.quick else (1024, 4096, 16384, 65536, 100_000))
    Path(a.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
