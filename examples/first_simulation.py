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
# # A first simulation
#
# A self-attention layer moves the tokens of one input: each token is pulled towards the tokens it
# attends to, the skip connection keeps it where it was, and a normalisation puts it back on the
# sphere. Layer after layer this is a discrete-time dynamical system (the map D1 of the
# [models page](../../models/)); jaxattn runs it over thousands of random initial conditions at once.
#
# This notebook runs three small experiments: the map D1 on a random causal model, the same model as
# a flow on the sphere (C2, solved with an adaptive Runge–Kutta method), and the clustering of tokens
# on the circle as the inverse temperature β grows. Every number the text quotes in bold is one the
# cells above it printed (`tests/test_notebooks.py` checks them).

# %%
# %matplotlib inline
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import jaxattn as ja

print("jax", jax.__version__, "on", jax.default_backend(), "| jaxattn", ja.__version__)

# %% [markdown]
# ## Thousands of conditions through a random causal model
#
# A random model of dimension 64 with 4 heads and 12 layers, one weight set per layer and a causal
# mask (token `i` attends to tokens `j ≤ i`). The initial conditions are 4000 configurations of
# 10 tokens drawn uniformly on the unit sphere. `steps` may exceed the depth: the 12 weight sets are
# then cycled, as when the model is applied to its own output, pass after pass.

# %%
model = ja.random_model(jax.random.key(0), d=64, heads=4, depth=12, shared=False, mask="causal")
X0 = ja.init_tokens(jax.random.key(1), 4000, 10, 64)  # [B, n, d], tokens on the unit sphere
t = time.perf_counter()
res = ja.simulate(model, X0, steps=48)  # one compiled program for every condition
diameter = np.asarray(res.observables["diameter"])  # [B, 49]: steps 0..48
cos_consensus = np.asarray(res.observables["cos_consensus"])
print(f"{X0.shape[0]} conditions x 48 steps in {time.perf_counter() - t:.1f} s (compilation included)")
print("diameter shape:", diameter.shape)
for k in (0, 12, 24, 48):
    print(f"step {k:2d}: mean diameter {diameter[:, k].mean():.3f}, mean 1 - cos {cos_consensus[:, k].mean():.4f}")

# %% [markdown]
# The tokens contract: the mean diameter `max ‖x_i − x_j‖` falls from **1.596** at the start to
# **0.326** after one pass of the twelve layers, **0.049** after two and **0.001** after four. Consensus is
# reached condition by condition at different rates; the spread over conditions shows it.

# %%
steps = np.arange(diameter.shape[1])
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for ax, values, name in ((axes[0], diameter, "diameter"), (axes[1], cos_consensus, "1 − mean cos")):
    lo, med, hi = np.quantile(np.maximum(values, 1e-12), [0.1, 0.5, 0.9], axis=0)
    ax.fill_between(steps, lo, hi, alpha=0.3, label="10%–90% of conditions")
    ax.plot(steps, med, label="median")
    ax.set(yscale="log", xlabel="step (12 layers per pass)", ylabel=name)
    for p in (12, 24, 36):
        ax.axvline(p, color="grey", lw=0.5)
axes[0].legend()
fig.suptitle(f"D1 on a random causal model, {X0.shape[0]} conditions")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The same model as a flow
#
# Letting the step go to zero gives the attention flow on the sphere, C2:
# `ẋ_i = P_{x_i} Σ_h O_h Σ_j a^h_ij V_h x_j`, with a new weight set every unit of time. `ja.solve`
# integrates it with diffrax (Tsit5, an adaptive step size for every condition) and evaluates the
# observables at the saved times.

# %%
ts = jnp.linspace(0.0, 20.0, 41)
sol = ja.solve(model, X0[:200], t1=20.0, flow=ja.C2, save=ja.Save(ts=ts))
flow_cos = np.asarray(sol.observables["cos_consensus"])  # [200, 41]
print("every adaptive solve succeeded:", bool(sol.ok.all()))
print(f"mean 1 - cos at t = 0: {flow_cos[:, 0].mean():.4f}, t = 10: {flow_cos[:, 20].mean():.4f}, "
      f"t = 20: {flow_cos[:, -1].mean():.4f}")

# %% [markdown]
# The flow reaches consensus too: the mean `1 − cos` falls from **0.9994** to **0.0003** at `t = 20`
# (it is about 1 for random tokens, whose mean cosine is about 0, and 0 at consensus).

# %%
fig, ax = plt.subplots(figsize=(5, 3.6))
ax.plot(np.asarray(ts), np.maximum(flow_cos[:50].T, 1e-12), color="C0", alpha=0.15, lw=0.8)
ax.plot(np.asarray(ts), flow_cos.mean(0), color="k", label="mean of 200")
ax.set(yscale="log", xlabel="t", ylabel="1 − mean cos", title="C2: 50 conditions and the mean")
ax.legend()
plt.show()

# %% [markdown]
# ## Clusters on the circle
#
# The clustering papers' model: one head with `Q = K = V = O = I` and score scale 1, so that
# `a_ij ∝ exp(β ⟨x_i, x_j⟩)`, on the unit circle (`d = 2`). The same 32 tokens are run at four
# values of β with the step size `alpha=0.1`; the whole trajectory is kept (`Save(trajectory=True)`), and the
# angle of every token is drawn against the step.

# %%
circle = ja.random_model(jax.random.key(0), 2, heads=1, weights="identity", value="identity", scale=1.0)
X_circle = ja.init_tokens(jax.random.key(2), 1, 32, 2)
betas = [1.0, 4.0, 16.0, 64.0]
fig, axes = plt.subplots(1, len(betas), figsize=(12, 3.2), sharey=True)
for ax, beta in zip(axes, betas, strict=True):
    run = ja.simulate(circle, X_circle, steps=400, alpha=0.1, beta=beta, save=ja.Save(trajectory=True))
    traj = np.asarray(run.trajectory[0])  # [401, 32, 2]
    angle = np.arctan2(traj[..., 1], traj[..., 0])
    ax.plot(angle, ".", ms=0.6, color="C0")
    ax.set(title=f"β = {beta:g}", xlabel="step")
    final = np.sort(angle[-1])
    gaps = np.diff(np.concatenate([final, final[:1] + 2 * np.pi]))
    print(f"beta = {beta:4.0f}: {int((gaps > 0.05).sum())} cluster(s) after 400 steps")
axes[0].set_ylabel("angle of each token")
fig.tight_layout()
plt.show()

# %% [markdown]
# At small β the 32 tokens merge into one cluster quickly; as β grows the attention becomes local,
# tokens first gather into several clusters, which merge only slowly afterwards (the metastable
# clusters of the clustering papers): at β = 64, **9** clusters remain after 400 steps.
#
# Next: the [power-method notebook](../power_method/) runs a real model's weights, and the
# [phase diagram](../phase_diagram/) sweeps β and the number of tokens into a store.
