"""Repeated passes of a GPT-2-small-sized model without FFN: jaxattn against Hugging Face pass after pass.

Workload (the consensus paper's experiment): a random GPT-2-small-shaped model (d = 768, 12 heads,
12 layers, built offline from a config), random prompts of 200 tokens embedded with the model's
embeddings, 10 passes of every block followed by ``ln_f``, the FFN removed as the GPT-Consensus code
does (``x + Attn(ln_1 x)``), float32, the first-token consensus measure after every layer.

* ``jaxattn``: :func:`jaxattn.repeated_passes` with :data:`jaxattn.NO_FFN`, warm;
* ``hf``: ``GPT2Model`` (eager attention, MLP replaced by a module returning zeros, position
  embeddings zeroed so that feeding ``inputs_embeds`` pass after pass adds nothing) called 10 times,
  the measure computed from ``output_hidden_states``.

Both are checked to agree (first-token measure, max abs difference) before the times are reported.
The paper uses 100 prompts; the default here is 20 (``--prompts``) to keep the run to a few minutes on
2 CPU cores; the ratio does not depend on it.

:func:`bench` is the function behind the command line (``scripts/gpu_check.py`` calls it at GPU sizes,
with Hugging Face on CUDA where torch has it).

Run: ``.venv/bin/python benchmarks/consensus_passes.py [--prompts 2,20]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np


def bench(prompts=20, tokens=200, passes=10, *, d=768, layers=12, heads=12, device=None, on_result=None,
          compare_width=False) -> dict:
    """Both sides on one workload (a random GPT-2-shaped model of ``d``, ``layers``, ``heads``), checked to
    agree before they are timed; ``device`` is torch's (default: CUDA where torch has it). ``on_result(partial)``
    receives what is known after each phase (a caller stopped at a time budget keeps it). ``compare_width``
    also times jaxattn at 64 lanes: on a CPU the default width of such prompts before the block stopped widening at
    ``LANE_SATURATION``; on a GPU a narrower block than the default (the measurement a GPU entry needs)."""
    import jax
    import jax.numpy as jnp
    import torch
    import transformers

    import jaxattn as ja
    from jaxattn.analysis import observables
    from jaxattn.dynamics import prompts as prompt_mod
    from jaxattn.dynamics.passes import prompt_bytes

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_grad_enabled(False)
    cfg = transformers.GPT2Config(n_embd=d, n_layer=layers, n_head=heads, n_positions=max(tokens, 1024))
    torch.manual_seed(0)
    tm = transformers.GPT2Model(cfg).eval()
    tm.config._attn_implementation = "eager"
    tm.wpe.weight.zero_()
    with tempfile.TemporaryDirectory() as tmp:
        tm.save_pretrained(tmp)
        model = ja.load(ja.convert(tmp, f"{tmp}/m.safetensors"))

    class ZeroMLP(torch.nn.Module):
        def forward(self, x):
            return torch.zeros_like(x)

    for blk in tm.h:
        blk.mlp = ZeroMLP()
    tm = tm.to(device)
    ids = prompt_mod.random_prompts(jax.random.key(0), model, prompts, tokens)
    X0 = prompt_mod.embed_prompts(model, ids, dtype=jnp.float32)

    def jax_run(batch=None):
        res = ja.repeated_passes(model, X0, passes, dynamics=ja.NO_FFN, save=ja.Save(observe=observables.consensus),
                                 batch=batch or ja.Batch())
        return np.asarray(jax.block_until_ready(res.observables["first_token"]))

    def jax_64_run():  # the lane width every prompt of this size had by default before LANE_SATURATION
        return jax_run(ja.Batch(size=64))

    def hf_run():
        h = torch.from_numpy(np.array(X0)).to(device)
        out = []
        for _ in range(passes):
            o = tm(inputs_embeds=h, output_hidden_states=True)
            for x in o.hidden_states[1:]:
                u = x / x.norm(dim=-1, keepdim=True)
                out.append(1 - (u @ u[:, 0, :, None])[..., 0].mean(-1))
            h = o.last_hidden_state
        return torch.stack(out, 1).cpu().numpy()  # waits for the device

    def clock(fn):
        t = time.perf_counter()
        out = fn()
        return time.perf_counter() - t, out

    res: dict = {"workload": f"GPT-2-shaped random model (d={d}, {heads} heads, {layers} layers), {prompts} prompts x "
                             f"{tokens} tokens, {passes} passes, no FFN, float32",
                 "device": f"{jax.default_backend()} ({jax.devices()[0].device_kind}), "
                           f"torch {torch.__version__} on {device}"}

    def known(**values):
        res.update(values)
        if on_result is not None:
            on_result(dict(res))

    first, j = clock(jax_run)
    known(jaxattn_first_call_s=round(first, 3))
    hf_first, h = clock(hf_run)
    diff = float(np.abs(j[:, 1:] - h).max())  # agreement before the timed runs
    known(hf_first_call_s=round(hf_first, 3), max_abs_diff_first_token_measure=diff)
    if not diff < 1e-3:
        raise AssertionError(f"jaxattn and Hugging Face disagree by {diff:.3g}")
    tj, _ = clock(jax_run)
    known(jaxattn_s=round(tj, 3))
    th, _ = clock(hf_run)
    known(hf_s=round(th, 3), speedup=round(th / tj, 2))
    if compare_width:
        default_lanes = ja.dynamics.default_lanes(prompt_bytes(model, tokens, jnp.float32))
        jax_64_run()  # compiled at that width first
        t64, j64 = clock(jax_64_run)
        known(default_lanes=default_lanes, jaxattn_64_lanes_s=round(t64, 3), speedup_over_64_lanes=round(t64 / tj, 2),
              max_abs_diff_64_lanes=float(np.abs(j64 - j).max()))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="20", help="prompts, or several counts (e.g. 2,20): one result each")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--out", default="benchmarks/results_consensus.json")
    a = ap.parse_args()
    try:
        counts = [int(p) for p in a.prompts.split(",")]
    except ValueError:
        ap.error(f"--prompts must be a count or counts separated by commas (e.g. 2,20), got {a.prompts!r}")
    if min(counts) < 1:
        ap.error(f"--prompts must be positive, got {a.prompts!r}")
    runs = [bench(p, a.tokens, a.passes, compare_width=True) for p in counts]
    res = runs[0] if len(runs) == 1 else runs
    print(json.dumps(res, indent=2))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
