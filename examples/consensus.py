# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Consensus, pass after pass
#
# *"The asymptotic behavior of attention in transformers".* Feed a model's output back as its input,
# pass after pass, and watch whether the tokens of a prompt collapse onto one direction: consensus,
# the dynamical face of the rank collapse of deep transformers. The paper measures it with its
# GPT-Consensus code through the first token, `1 − (1/n) Σ_j cos(x_1, x_j)` (0 when every token is
# parallel to the first), after every layer.
#
# `ja.repeated_passes` runs every block of a converted model and then its final LayerNorm, if it has
# one, and feeds the result to the next pass; position embeddings are added once, at the input. This
# notebook runs it on two real architectures: GPT-2 small (the paper's family) built from its
# `transformers` configuration with `transformers`' own random initialisation, and the trained
# all-MiniLM-L6-v2 (a post-norm BERT encoder). The [consensus tutorial](../../consensus/) covers the
# whole study (`jaxattn consensus`), with the theorem settings in continuous time. Numbers in bold are
# those the cells above printed.

# %%
# %matplotlib inline
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto in a kernel without ipywidgets

import time

import jax
import matplotlib.pyplot as plt
import numpy as np

import jaxattn as ja
from jaxattn.dynamics import prompts
from jaxattn.studies.architectures import random_architecture


def first_token(res) -> np.ndarray:
    """The first-token measure ``[prompts, layers + 1]`` of a run of passes."""
    return np.asarray(res.observables["first_token"])


# %% [markdown]
# ## GPT-2 small, random weights, attention only
#
# The paper's random periodic setting: the same random weights at every pass, and the FFN removed as
# the GPT-Consensus code removes it (`ja.NO_FFN`: each block is `x + Attn(LN1 x)`). Eight prompts of
# 32 token ids drawn uniformly from the vocabulary, embedded with the model's own embeddings, through
# 20 passes of the 12 blocks.

# %%
t = time.perf_counter()
gpt2 = random_architecture("gpt2", seed=0)  # transformers.GPT2Config() with its own initialisation
print(f"{gpt2.family}: d = {gpt2.d_model}, heads = {gpt2.n_heads}, blocks = {gpt2.depth}, {gpt2.norm_style}-norm")
ids = prompts.random_prompts(jax.random.key(0), gpt2, 8, 32)  # [8, 32] token ids
X0 = prompts.embed_prompts(gpt2, ids)  # [8, 32, 768]
passes = 20
gpt2_ft = first_token(ja.repeated_passes(gpt2, X0, passes, dynamics=ja.NO_FFN,
                                          save=ja.Save(observe=ja.observables.consensus)))
print(f"{gpt2_ft.shape[0]} prompts, {gpt2_ft.shape[1] - 1} layers in {time.perf_counter() - t:.0f} s")
boundaries = np.arange(0, passes + 1) * gpt2.depth
mean = gpt2_ft.mean(0)
for p in (0, 1, 5, 10, 20):
    print(f"after pass {p:2d}: mean first-token measure {mean[boundaries[p]]:.4f}, "
          f"largest prompt {gpt2_ft[:, boundaries[p]].max():.4f}")
rate = np.polyfit(np.arange(10, passes + 1), np.log(mean[boundaries[10:]]), 1)[0]
print(f"decay over the last 10 passes: a factor {np.exp(rate):.3f} per pass")

# %% [markdown]
# The first pass does most of the work: the mean measure drops from **0.9618** to **0.3341**. After
# that, consensus is approached geometrically, by a factor of about **0.882** per pass over the last
# ten, to **0.0405** after 20 passes (the farthest prompt at **0.0528**): these prompts are on their
# way to consensus, and the [reproduction page](../../reproductions/) follows such runs for up to 100
# passes.

# %%
fig, ax = plt.subplots(figsize=(8, 3.6))
layers = np.arange(gpt2_ft.shape[1])
ax.fill_between(layers, gpt2_ft.min(0), gpt2_ft.max(0), alpha=0.25, label="range over the 8 prompts")
ax.plot(layers, mean, color="k", label="mean")
for b in boundaries[1:-1]:
    ax.axvline(b, color="grey", lw=0.4)
ax.set(yscale="log", xlabel="layer (12 per pass)", ylabel="1 − mean cos(x_1, x_j)",
       title="GPT-2 small, random weights, no FFN, 20 passes")
ax.legend()
plt.show()

# %% [markdown]
# ## MiniLM, trained weights: with and without the FFN
#
# Now the trained weights of all-MiniLM-L6-v2, sixteen prompts of 32 tokens, 50 passes of its six
# blocks: the real blocks (`ja.FAITHFUL`: attention, FFN and the affine LayerNorms), and the blocks
# without their FFN. MiniLM is post-norm, so without the FFN a block is `LN1(x + Attn x)` (the
# `Dynamics` the consensus study uses for post-norm models).

# %%
minilm = ja.load_any("minilm")
ids = prompts.random_prompts(jax.random.key(0), minilm, 16, 32)
X0 = prompts.embed_prompts(minilm, ids)
runs = {"real blocks": ja.FAITHFUL, "no FFN": ja.Dynamics(norm="layernorm", ffn=False, biases=True)}
minilm_ft = {}
for name, dyn in runs.items():
    res = ja.repeated_passes(minilm, X0, 50, dynamics=dyn, save=ja.Save(observe=ja.observables.consensus))
    minilm_ft[name] = ft = first_token(res)
    ends = ft[:, -1]
    change = ft[:, -1].mean() - ft[:, -1 - 10 * minilm.depth].mean()
    print(f"{name:12s}: mean after 50 passes {ends.mean():.4f} (prompts {ends.min():.4f} to {ends.max():.4f}); "
          f"change over the last 10 passes {change:+.1e}")

# %% [markdown]
# Without the FFN the trained attention stops short of consensus: the mean settles at **0.3041** and
# does not move at all over the last ten passes (**+0.0e+00**): a plateau, not consensus. With the FFN
# the mean is still falling after 50 passes (**0.3933**, down by **2.3e-02** over the last ten), and
# some prompts are already at consensus (the smallest measure prints as **0.0000**). The
# [consensus tutorial](../../consensus/) runs these to 1000 passes: with the FFN the prompts do reach
# consensus, one by one, while the attention-only run stays on its plateau.

# %%
fig, ax = plt.subplots(figsize=(8, 3.6))
for (name, ft), color in zip(minilm_ft.items(), ("C3", "C0"), strict=True):
    ax.fill_between(np.arange(ft.shape[1]), np.maximum(ft.min(0), 1e-7), ft.max(0), alpha=0.2, color=color)
    ax.plot(ft.mean(0), color=color, label=f"{name} (mean and range, 16 prompts)")
ax.set(yscale="log", xlabel="layer (6 per pass)", ylabel="1 − mean cos(x_1, x_j)",
       title="all-MiniLM-L6-v2, trained weights, 50 passes")
ax.legend()
plt.show()
