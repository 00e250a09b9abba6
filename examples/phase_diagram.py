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
# # A phase diagram over (β, n)
#
# The clustering papers' model on the sphere: one head with `Q = K = V = O = I` and score scale 1,
# `x_i ← N(x_i + α Σ_j a_ij x_j)` with `a_ij ∝ exp(β ⟨x_i, x_j⟩)`. At small inverse temperature β every
# token attends to every other and the tokens reach consensus fast; at large β attention is local, the
# tokens first gather into several clusters, and those merge only after long metastable plateaus. How
# does the picture depend on β and on the number of tokens `n`?
#
# A grid of runs is what `ja.sweep_grid` (the `jaxattn sweep` command) is for: every point of the grid
# over many initial conditions, into a resumable Zarr store, read back with `ja.open_sweep` as pandas
# tables (the [sweeps page](../../sweeps/) describes the configuration and the store). Numbers in bold
# are those the cells above printed.

# %%
# %matplotlib inline
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto in a kernel without ipywidgets

import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import jaxattn as ja

# %% [markdown]
# ## The grid
#
# The configuration is a TOML file, as the command line takes it: any value given as a list is an
# axis of the grid, and the grid is the product of its axes. Here five values of β times five numbers
# of tokens, 25 points, each over 256 initial conditions drawn uniformly on the sphere in dimension 3,
# 200 steps with the step size `alpha=0.5` (a time of 100), the observables saved every other step.

# %%
config = """
num_init = 256
chunk = 256
seed = 0
observables = ["diameter", "cos_consensus"]

[model]
d = 3
heads = 1
depth = 1
weights = "identity"   # Q = K = I
value = "identity"     # V = O = I
scale = 1.0            # scores beta <x_i, x_j>, as in the clustering papers

[dynamics]
alpha = 0.5
steps = 200
save = 2
beta = [1.0, 2.0, 4.0, 8.0, 16.0]   # an axis

[init]
n = [4, 8, 16, 32, 64]             # another axis
kind = "sphere"
"""
Path("runs").mkdir(exist_ok=True)
Path("runs/phase-diagram.toml").write_text(config)
t = time.perf_counter()
# overwrite=True: a store of another configuration there (an earlier version of this grid) is replaced
sweep = ja.sweep_grid("runs/phase-diagram.toml", "runs/phase-diagram", progress=False, overwrite=True)
print(f"{len(sweep)} grid points computed in {time.perf_counter() - t:.0f} s")
t = time.perf_counter()
ja.sweep_grid("runs/phase-diagram.toml", "runs/phase-diagram", progress=False)  # again: every chunk is finished
print(f"run again: resumed, nothing recomputed, in {time.perf_counter() - t:.1f} s")

# %% [markdown]
# Points that differ only in β share one compiled program (β is traced), so the 25 points compile five
# programs, one per `n`. Running the same configuration again into the same store finds every chunk
# finished and verified against its checksum, and recomputes nothing.
#
# ## Reading the store
#
# Everything below is read back from `runs/phase-diagram`, as it would be in another session or on
# another machine: `table()` has one row per grid point and initial condition with the last saved
# value of every observable, and `arrays(point)` the saved time series.

# %%
store = ja.open_sweep("runs/phase-diagram")
table = store.table()
print(table.shape, list(table.columns))
table["consensus"] = table["cos_consensus"] < 1e-3  # every token within about 2.5 degrees of the others
fraction = table.pivot_table(index="init.n", columns="dynamics.beta", values="consensus", aggfunc="mean")
print("fraction of conditions at consensus after 200 steps:")
print(fraction.round(3).to_string())

# %%
fig, ax = plt.subplots(figsize=(5.5, 4))
im = ax.imshow(fraction.to_numpy(), origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
ax.set_xticks(range(fraction.shape[1]), [f"{b:g}" for b in fraction.columns])
ax.set_yticks(range(fraction.shape[0]), [str(n) for n in fraction.index])
for (i, j), v in np.ndenumerate(fraction.to_numpy()):
    ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.5 else "k", fontsize=8)
ax.set(xlabel="β", ylabel="n (tokens)", title="fraction at consensus at t = 100")
fig.colorbar(im, ax=ax)
plt.show()

# %% [markdown]
# The transition is sharp in β and drifts with `n`: at β = 2 almost every condition is at consensus
# whatever `n`, at β = 8 almost none is; at β = 4 the fraction falls from **0.512** with four tokens to
# **0.137** with 64. More tokens make more clusters, which take longer to merge.
#
# ## How long consensus takes
#
# The saved time series (every other step) give, for every point, the fraction of its conditions at
# consensus at every saved time, and the first time at which half of them are there: the time scale of
# the diagram.

# %%
alpha = 0.5


def half_time(point: int) -> float:
    """The first saved time at which half the point's conditions are at consensus (inf: not by t = 100)."""
    series = store.arrays(point)["observables.cos_consensus"]  # [conditions, saved times]
    times = np.asarray(store.points[point]["times"]) * alpha  # saved steps times the step size
    at = (series < 1e-3).mean(0) >= 0.5
    return float(times[at.argmax()]) if at.any() else np.inf


halves = table.groupby(["init.n", "dynamics.beta"])["point"].first().map(half_time).unstack()
print("time at which half the conditions are at consensus:")
print(halves.to_string())

# %%
fig, ax = plt.subplots(figsize=(6, 3.6))
for i, p in enumerate(store.points):
    if p["params"]["init.n"] == 32:
        series = store.arrays(i)["observables.cos_consensus"]
        times = np.asarray(p["times"]) * alpha
        ax.plot(times, np.maximum(np.median(series, 0), 1e-9), label=f"β = {p['params']['dynamics.beta']:g}")
ax.axhline(1e-3, color="grey", lw=0.8, ls="--")
ax.set(yscale="log", xlabel="t", ylabel="median of 1 − mean cos", title="n = 32: the median condition")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Half the conditions are at consensus by `t` = **8.0** to **10.0** at β = 1 and **12.0** to **14.0** at
# β = 2, a little later with more tokens; at β = 4 only with four tokens, at **96.0**, close to the end
# of the run. The median curves show why: past β = 2 they fall to a plateau
# and stay there, the metastable clusters that the [clusters tutorial](../../clusters/) and the
# metastability study measure in detail. A store records the configuration it was made with and
# refuses another one unless told to replace it (`overwrite=True`, as the first call above does): to
# keep this diagram and extend it, write the new axes into a store of their own.
