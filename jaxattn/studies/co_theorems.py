"""Three statements of the consensus paper (Rodríguez Abella et al., *The asymptotic behavior of attention in
transformers*), measured directly on its continuous model (:func:`jaxattn.solve`):

* **Theorem 3.1 / Lemma 3.2** (``potential.csv``): one head, value matrix the identity, ``A = QᵀK`` symmetric
  positive definite and the tokens on its ellipsoid ``E_A = {x : xᵀAx = 1}`` (flow C1 with ``S = A``). The
  potential ``E(X) = (1/(2β)) Σ_{i,j} exp(β <Q x_i, K x_j>)`` has Euclidean gradient ``Σ_j e_ij A x_j`` in ``x_i``;
  in the metric ``Σ_i Z_i <v_i, A w_i>`` (``Z_i`` the row normaliser of the softmax) its gradient on ``E_A`` is the
  flow, so ``E`` never decreases; with the unnormalised kernel (``a_ij = e_ij / n``) the same holds in the constant
  metric ``n Σ_i <v_i, A w_i>``. Measured: the largest relative decrease of ``E`` between dense saved times, over
  random models and starts, for both kernels; and two controls where the hypothesis is broken (``QᵀK`` not
  symmetric; the tokens on the unit sphere instead of ``E_A``), where ``E`` is no potential of the flow and can
  fall — so the monotonicity check is seen to be able to fail on real data.
* **Theorem 5.2 with time-varying Q(t), K(t)** (``theorem52.csv``, ``theorem52_series.csv``): causal attention, one
  head, a constant symmetric value matrix with a simple top eigenvalue, tokens starting in the open hemisphere of its
  top eigenvector ``v1``; ``Q, K`` only bounded functions of time (the hypothesis asks no more): a new uniform random
  set every unit of time (piecewise constant) and smooth ``Q(t) = Q0 D_q(t)``, ``K(t) = K0 D_k(t)`` with diagonal
  ``D(t) = diag(1 + sin(t + φ_k)/2)`` (jaxattn's reading of §6.1's time-varying products, whose formulas the text
  lost). The tokens should reach the consensus at ``+v1``.
* **Theorem 5.3**: the same with a time-varying symmetric value matrix
  ``V(t) = R(t) V0 R(t)ᵀ``, ``R(t)`` the rotation by the angle ``ωt`` in the plane of ``V0``'s two top eigenvectors:
  its spectrum is constant and ``v1(t) = cos(ωt) v1 + sin(ωt) v2`` moves at the speed ``ω``. The tokens, started in
  the hemisphere of ``v1(0)``, should end in a ball around ``v1(t)`` whose radius grows with ``ω`` and vanishes at
  ``ω = 0``. Measured per condition over the last quarter of the horizon: the radius ``max_i (1 − |<x_i, v1(t)>|)``
  and which pole the tokens follow (``theorem53.csv``); the radius at every saved time (``theorem53_series.csv``).

Float64 throughout (in a scope; the caller's JAX setting is left as it was).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxattn.analysis.spectral import layer_matrices
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.fields import Flow
from jaxattn.dynamics.options import Save
from jaxattn.dynamics.prompts import hemisphere_tokens
from jaxattn.io.results import atomic_write_text
from jaxattn.model.nn import ellipsoid
from jaxattn.model.params import Layers, Model, from_heads
from jaxattn.model.sampling import random_model
from jaxattn.studies import plots
from jaxattn.studies.skeleton import csv_text
from jaxattn.studies.verdicts import T

#: solver tolerances of every solve here: the relative decrease tolerated in E (T("machine") = 1e-9) is ten times
#: the solver's rtol, and the consensus tolerance T("zero") = 1e-6 far above both
RTOL, ATOL = 1e-10, 1e-12
#: the two kernels of Theorem 3.1 / Lemma 3.2
KERNELS = ("softmax", "unnormalised")
#: the potential's settings: the theorem's hypothesis, and two controls that break it
SETTINGS = ("theorem", "control: QᵀK not symmetric", "control: unit sphere")
#: a symmetric value matrix with a simple top eigenvalue (the consensus study's Theorem 5.2 spectrum at d = 3)
SPECTRUM = (1.0, 0.25, -0.5)


# ------------------------------------------------------------------------------------------ Theorem 3.1, Lemma 3.2
def random_spd(rng: np.random.Generator, d: int, lo: float = 0.5, hi: float = 2.0) -> np.ndarray:
    """``U diag(λ) Uᵀ`` with ``U`` orthogonal and ``λ`` uniform in ``[lo, hi]``: symmetric positive definite."""
    U, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (U * rng.uniform(lo, hi, d)) @ U.T


def potential_model(rng: np.random.Generator, d: int, symmetric: bool) -> tuple[Model, np.ndarray, np.ndarray]:
    """One head, ``V = O = I``, score scale 1, a random invertible ``Q`` and ``K = Q^{-T} A`` so that ``QᵀK = A``:
    ``A`` symmetric positive definite (``symmetric``), or that plus a skew part as large. Returns the model, ``A``
    and its symmetric part ``S`` (the ellipsoid the tokens live on)."""
    S = random_spd(rng, d)
    G = rng.normal(size=(d, d))
    A = S if symmetric else S + (G - G.T) / 2
    Q = rng.normal(size=(d, d)) + 2.0 * np.eye(d)  # invertible with probability 1; kept away from singular
    K = np.linalg.solve(Q.T, A)
    one = lambda M: jnp.asarray(M)[None, None]
    return from_heads(one(Q), one(K), one(np.eye(d)), one(np.eye(d)), scale=1.0), A, S


def potential(t, X: Float[Array, "n d"], ctx) -> dict:
    """``E(X) = (1/(2β)) Σ_ij exp(β x_iᵀ A x_j)`` (``ctx.aux``: ``A = QᵀK`` and ``β``)."""
    A, beta = ctx.aux["A"], ctx.aux["beta"]
    return {"E": jnp.sum(jnp.exp(beta * (X @ A @ X.T))) / (2.0 * beta)}


def largest_fall(E: np.ndarray) -> np.ndarray:
    """Per condition ``[B, T]``: the largest relative decrease ``(E_k − E_{k+1}) / E_k`` between consecutive saved
    times (negative: ``E`` rose at every step)."""
    return np.max((E[:, :-1] - E[:, 1:]) / E[:, :-1], axis=1)


def potential_rows(seed: int, sizes: tuple[tuple[int, int], ...], betas: tuple[float, ...], models: int, starts: int,
                   t1: float, saved: int) -> list[dict]:
    """One row per (setting, kernel, size, β): over ``models`` random models × ``starts`` random starts, the
    conditions whose potential decreased by more than ``T("machine")`` (relative) between two of ``saved`` times,
    the largest such decrease and the mean rise ``E(t1)/E(0) − 1``."""
    tol = T("machine")
    ts = np.linspace(0.0, t1, saved)
    rows = []
    for (n, d), beta, setting, kernel in ((s, b, g, k) for s in sizes for b in betas for g in SETTINGS
                                          for k in KERNELS):
        falls, rises, ok = [], [], True
        for m in range(models):
            # the same models and starts for both kernels of a setting: the kernels are compared on equal terms
            rng = np.random.default_rng([seed, n, d, int(1000 * beta), SETTINGS.index(setting), m])
            model, A, S = potential_model(rng, d, symmetric=setting != "control: QᵀK not symmetric")
            sphere = setting == "control: unit sphere"
            X0 = rng.normal(size=(starts, n, d))
            X0 = np.asarray(ellipsoid(jnp.asarray(X0), jnp.asarray(np.eye(d) if sphere else S)))
            sol = solve(model, X0, t1, flow=Flow(space="sphere" if sphere else "ellipsoid", attention=kernel),
                        S=None if sphere else S, beta=beta, rtol=RTOL, atol=ATOL, dtype=jnp.float64,
                        save=Save(ts=ts, observe=potential, aux={"A": jnp.asarray(A), "beta": jnp.asarray(beta)}))
            E = np.asarray(sol.observables["E"], np.float64)
            ok &= bool(np.all(np.asarray(sol.result) == 0))
            falls.append(largest_fall(E))
            rises.append(E[:, -1] / E[:, 0] - 1.0)
        fall, rise = np.concatenate(falls), np.concatenate(rises)
        rows.append({"setting": setting, "attention": kernel, "n": n, "d": d, "beta": beta, "conditions": fall.size,
                     "decreases": int(np.sum(~(fall <= tol))), "fall_tol": tol, "largest_fall": float(np.max(fall)),
                     "rise_mean": float(np.mean(rise)), "rise_min": float(np.min(rise)), "t1": t1, "saved": saved,
                     "solver_ok": ok})
    return rows


# ------------------------------------------------------------------------------------------ Theorem 5.2
def causal_symmetric_model(key, d: int, sets: int, spectrum=SPECTRUM) -> Model:
    """Causal, one head, ``O = I``, ``sets`` weight sets with uniform random ``Q, K`` (one per unit of time, cycled)
    and the first set's symmetric value matrix of ``spectrum`` in every set: ``V`` constant, ``Q(t), K(t)`` not."""
    m = random_model(key, d, 1, sets, shared=sets == 1, weights="uniform", value="symmetric", spectrum=spectrum,
                     mask="causal", unit_output=True, dtype=jnp.float64)
    L = m.layers
    return m.replace(layers=L.replace(v=jnp.broadcast_to(L.v[:1], L.v.shape), o=jnp.broadcast_to(L.o[:1], L.o.shape)))


def top_eigenvectors(model: Model) -> tuple[np.ndarray, np.ndarray, float]:
    """``v1, v2`` of the first set's (symmetric) value matrix and its gap ``λ1 − λ2``."""
    lam, U = np.linalg.eigh(np.asarray(layer_matrices(model)[0], np.float64))
    return U[:, -1], U[:, -2], float(lam[-1] - lam[-2])


def smooth_qk(lw: Layers, phases: np.ndarray) -> Callable[[jax.Array], Layers]:
    """``t -> lw`` with ``Q(t) = Q0 diag(1 + sin(t + φ_q)/2)``, ``K(t) = K0 diag(1 + sin(t + φ_k)/2)``
    (``phases: [2, d]``): smooth, bounded, never singular where ``Q0, K0`` are not."""
    pq, pk = (jnp.asarray(p)[None, None, :] for p in phases)  # over the columns of [H, d_h, d]
    return lambda t: lw.replace(q=lw.q * (1.0 + jnp.sin(t + pq) / 2.0), k=lw.k * (1.0 + jnp.sin(t + pk) / 2.0))


def alignment(t, X: Float[Array, "n d"], ctx) -> dict:
    """Every token's ``<x_i/||x_i||, v1(t)>``, ``v1(t) = cos(ωt) v1 + sin(ωt) v2`` (``ctx.aux``: ``v1, v2, ω``)."""
    a = ctx.aux
    v = jnp.cos(a["omega"] * t) * a["v1"] + jnp.sin(a["omega"] * t) * a["v2"]
    return {"c": (X @ v) / jnp.linalg.norm(X, axis=-1)}


def pole(c: np.ndarray) -> str:
    """Which consensus the tokens ``[..., n]`` of one condition follow: all on the side of ``+v1``, of ``−v1``, or
    split (read at every saved time given)."""
    return "+v1" if np.all(c > 0) else "-v1" if np.all(c < 0) else "split"


def theorem52_rows(seed: int, n: int, d: int, models: int, starts: int, sets: int, t1: float,
                   saved: int) -> tuple[list[dict], list[dict]]:
    """Per condition at ``t1``: ``off = max_i (1 − <x_i, v1>)`` and the pole; and per kind of weights the mean and
    largest ``off`` at every saved time (``piecewise``: a new set every unit of time; ``smooth``)."""
    ts = np.linspace(0.0, t1, saved)
    key = jax.random.key(seed)
    ends, series = [], []
    for kind in ("piecewise", "smooth"):
        offs = []
        for m in range(models):
            model = causal_symmetric_model(jax.random.fold_in(key, m), d, sets)
            v1, v2, gap = top_eigenvectors(model)
            X0 = hemisphere_tokens(jax.random.fold_in(key, 1000 + m), starts, n, d, pole=v1, dtype=jnp.float64)
            save = Save(ts=ts, observe=alignment, aux={"v1": jnp.asarray(v1), "v2": jnp.asarray(v2),
                                                       "omega": jnp.asarray(0.0)})
            fn = None
            if kind == "smooth":
                phases = np.random.default_rng([seed, m]).uniform(0.0, 2 * np.pi, (2, d))
                fn = smooth_qk(model.layers.take(0), phases)
            sol = solve(model, X0, t1, save=save, weights_fn=fn, rtol=RTOL, atol=ATOL, dtype=jnp.float64)
            c = np.asarray(sol.observables["c"], np.float64)  # [B, T, n]
            off = np.max(1.0 - c, axis=-1)  # [B, T]
            offs.append(off)
            res = np.asarray(sol.result)
            for b in range(starts):
                ends.append({"weights": kind, "model": m, "condition": b, "n": n, "d": d, "gap": gap,
                             "off_end": float(off[b, -1]), "pole": pole(c[b, -1]), "start_min": float(c[b, 0].min()),
                             "solver_ok": bool(res[b] == 0), "t1": t1})
        off = np.concatenate(offs)
        series += [{"weights": kind, "t": float(t), "off_mean": float(off[:, k].mean()),
                    "off_max": float(off[:, k].max())} for k, t in enumerate(ts)]
    return ends, series


# ------------------------------------------------------------------------------------------ Theorem 5.3
def rotating_value(lw: Layers, v1: np.ndarray, v2: np.ndarray, omega: float) -> Callable[[jax.Array], Layers]:
    """``t -> lw`` with ``V(t) = R(t) V0 R(t)ᵀ``, ``R(t)`` the rotation by ``ωt`` in the plane of ``v1, v2``
    (``R v1 = cos(ωt) v1 + sin(ωt) v2``): differentiable, bounded, symmetric, of constant spectrum; ``O = I``."""
    P = jnp.asarray(np.outer(v1, v1) + np.outer(v2, v2))
    J = jnp.asarray(np.outer(v2, v1) - np.outer(v1, v2))
    V0 = lw.v[0]
    eye = jnp.eye(V0.shape[0], dtype=V0.dtype)

    def at(t):
        R = eye + (jnp.cos(omega * t) - 1.0) * P + jnp.sin(omega * t) * J
        return lw.replace(v=(R @ V0 @ R.T)[None])

    return at


def first_token_lag(omega: float, gap: float) -> float:
    """``1 − cos θ*`` of a lone token in the rotation plane lagging ``v1(t)`` at the steady angle ``θ*``:
    ``θ̇ = ω − (gap/2) sin 2θ`` (its Oja flow in the rotating frame) gives ``sin 2θ* = 2ω/gap``; nan where
    ``ω > gap/2`` (no steady lag)."""
    s = 2.0 * omega / gap
    return 1.0 - math.cos(0.5 * math.asin(s)) if s <= 1 else math.nan


def basin_edge(omega: float, gap: float) -> float:
    """The smallest ``<x, v1(0)>`` from which a lone token in the rotation plane, with ``v1(t)`` moving away from it,
    keeps up: the unstable steady angle of ``θ̇ = ω − (gap/2) sin 2θ`` is ``90° − θ*`` (1 where ``ω > gap/2``)."""
    s = 2.0 * omega / gap
    return math.sin(0.5 * math.asin(s)) if s <= 1 else 1.0


def theorem53_rows(seed: int, n: int, d: int, models: int, starts: int, omegas: tuple[float, ...], t1: float,
                   saved: int) -> tuple[list[dict], list[dict]]:
    """Per (ω, condition), over the saved times of the last quarter of ``[0, t1]``: the mean radius
    ``max_i (1 − |<x_i, v1(t)>|)``, its largest value, its value at ``t1``, and the pole the tokens follow (``+v1``:
    the one of the hemisphere they started in); and per ω the mean and largest radius at every saved time."""
    ts = np.linspace(0.0, t1, saved)
    late = ts >= 0.75 * t1
    key = jax.random.key(seed)
    rows: list[dict] = []
    radii: dict[float, list[np.ndarray]] = {w: [] for w in omegas}
    for m in range(models):
        model = causal_symmetric_model(jax.random.fold_in(key, m), d, 1)
        v1, v2, gap = top_eigenvectors(model)
        X0 = hemisphere_tokens(jax.random.fold_in(key, 1000 + m), starts, n, d, pole=v1, dtype=jnp.float64)
        for omega in omegas:
            save = Save(ts=ts, observe=alignment, aux={"v1": jnp.asarray(v1), "v2": jnp.asarray(v2),
                                                       "omega": jnp.asarray(omega)})
            sol = solve(model, X0, t1, save=save, weights_fn=rotating_value(model.layers.take(0), v1, v2, omega),
                        rtol=RTOL, atol=ATOL, dtype=jnp.float64)
            whole = np.asarray(sol.observables["c"], np.float64)
            radii[omega].append(np.max(1.0 - np.abs(whole), axis=-1))  # [B, T]
            c = whole[:, late]  # [B, T_late, n]
            radius = radii[omega][-1][:, late]  # [B, T_late]
            res = np.asarray(sol.result)
            behind = np.asarray(X0[:, 0] @ jnp.asarray(v2)) < 0  # v1(t) moves away from the first token
            rows += [{"omega": omega, "model": m, "condition": b, "n": n, "d": d, "gap": gap,
                      "radius": float(radius[b].mean()), "radius_max": float(radius[b].max()),
                      "radius_end": float(radius[b, -1]),
                      "first_lag": float(np.mean(1.0 - c[b, :, 0])), "first_lag_predicted": first_token_lag(omega, gap),
                      "first_start": float(whole[b, 0, 0]), "first_behind": bool(behind[b]),
                      "basin_edge": basin_edge(omega, gap), "pole": pole(c[b]), "solver_ok": bool(res[b] == 0),
                      "t1": t1} for b in range(starts)]
    series = [{"omega": w, "t": float(t), "radius_mean": float(r[:, k].mean()), "radius_max": float(r[:, k].max())}
              for w, r in ((w, np.concatenate(radii[w])) for w in omegas) for k, t in enumerate(ts)]
    return rows, series


# ------------------------------------------------------------------------------------------ figures
def claim_figures(run: Path, dest: Path | None = None) -> list[str]:
    """The study's figures, drawn from the tables of a finished run in ``run`` (this version's or an earlier one's)
    into ``dest`` (default ``run``): ``potential.png``, ``theorem52.png``, ``theorem53.png``
    (:func:`jaxattn.studies.plots.from_tables`). Returns the names written."""
    return plots.from_tables(run, dest, (
        ("potential.png", ("potential.csv",), _potential_figure),
        ("theorem52.png", ("theorem52_series.csv",), _theorem52_figure),
        ("theorem53.png", ("theorem53_series.csv", "theorem53.csv"), _theorem53_figure)))


def _potential_figure(plt, rows: list[dict[str, str]]):
    """The share of conditions whose potential fell, per (size, β): none under the theorem's hypotheses, some in the
    two controls that break them."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    cases = list(dict.fromkeys((r["n"], r["d"], r["beta"]) for r in rows))
    x = np.arange(len(cases))
    width = 0.8 / len(SETTINGS)
    for i, setting in enumerate(SETTINGS):
        for k, (kernel, hatch) in enumerate(zip(KERNELS, ("", "//"), strict=True)):
            share = [next((int(r["decreases"]) / max(int(r["conditions"]), 1) for r in rows
                           if r["setting"] == setting and r["attention"] == kernel
                           and (r["n"], r["d"], r["beta"]) == c), np.nan) for c in cases]
            at = x + (i - (len(SETTINGS) - 1) / 2) * width + (k - 0.5) * width / 2
            extension = " (jaxattn's extension, not judged)" if kernel == "unnormalised" else ""
            ax.bar(at, share, width / 2, color=f"C{i}", hatch=hatch, label=f"{setting}, {kernel}{extension}")
            for a, v in zip(at, share, strict=True):
                if v == 0:  # no bar: say it is a zero, not a missing case
                    ax.text(a, 0.005, "0", color=f"C{i}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x, [f"n {n}, d {d}\nβ {float(b):g}" for n, d, b in cases], fontsize=7)
    ax.set(ylabel="share of conditions where E fell", ylim=(0, 1.35),
           title="E(X) = (1/(2β)) Σ_ij exp(β <Q x_i, K x_j>) along the flow: the theorem's setting and two controls")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    return fig


def _theorem52_figure(plt, series: list[dict[str, str]]):
    """max_i (1 − <x_i, v1>) against time for each kind of time-varying Q, K: the tokens reach the consensus at v1."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, weights in enumerate(dict.fromkeys(r["weights"] for r in series)):
        mine = [r for r in series if r["weights"] == weights]
        t = [float(r["t"]) for r in mine]
        ax.semilogy(t, [max(float(r["off_mean"]), 1e-18) for r in mine], color=f"C{i}", label=f"{weights}: mean")
        ax.semilogy(t, [max(float(r["off_max"]), 1e-18) for r in mine], color=f"C{i}", ls="--",
                    label=f"{weights}: largest")
    ax.set(xlabel="t", ylabel="max_i (1 − <x_i, v1>) over the conditions",
           title="Theorem 5.2: causal attention, constant symmetric V, time-varying Q(t), K(t)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _theorem53_figure(plt, series: list[dict[str, str]], ends: list[dict[str, str]]):
    """The radius around the moving consensus against time per speed ω (left), and its late mean against ω with a
    lone token's steady lag behind v1(t) (right)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    omegas = sorted({float(r["omega"]) for r in series})
    for i, w in enumerate(omegas):
        mine = [r for r in series if float(r["omega"]) == w]
        axes[0].semilogy([float(r["t"]) for r in mine], [max(float(r["radius_mean"]), 1e-18) for r in mine],
                         color=f"C{i}", label=f"ω = {w:g}")
    axes[0].set(xlabel="t", ylabel="mean of max_i (1 − |<x_i, v1(t)>|)", title="the radius around v1(t)")
    axes[0].legend(fontsize=7)
    moving = [w for w in omegas if w > 0]
    radius = [np.mean([float(r["radius"]) for r in ends if float(r["omega"]) == w] or [np.nan]) for w in moving]
    lag = [next((float(r["first_lag_predicted"]) for r in ends if float(r["omega"]) == w), np.nan) for w in moving]
    axes[1].loglog(moving, radius, "o", label="mean radius over the last quarter")
    axes[1].loglog(moving, lag, "-", lw=0.8, label="1 − cos θ*, sin 2θ* = 2ω/(λ1 − λ2)")
    axes[1].set(xlabel="speed ω of v1(t)", title="the radius against the speed (ω > 0: ω = 0 is off the log axis)")
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.title.set_fontsize(9)
    fig.tight_layout()
    return fig


def study(out: Path, sizes: str = "8x3,16x8", betas: str = "1,2,4", models: int = 4, starts: int = 16,
          t1: float = 10.0, saved: int = 201, n: int = 10, d: int = 3, sets: int = 10, horizon: float = 40.0,
          omegas: str = "0,0.01,0.02,0.05,0.1,0.2", seed: int = 0) -> None:
    """Write ``potential.csv``, ``theorem52.csv``, ``theorem53.csv`` and their ``_series.csv`` into ``out``, and the
    figures drawn from them (:func:`claim_figures`). The options as the reproductions' registry writes them: lists
    as comma-separated text; ``sizes`` as ``NxD`` pairs. ``t1``: the potential's horizon; ``horizon``: the causal
    settings'."""
    floats = lambda s: tuple(float(x) for x in str(s).split(","))
    pairs = tuple((int(a), int(b)) for a, b in (p.split("x") for p in str(sizes).split(",")))
    with jax.enable_x64(True):
        out = Path(out)
        atomic_write_text(out / "potential.csv", csv_text(potential_rows(seed, pairs, floats(betas), models, starts,
                                                                         t1, saved)))
        ends, series = theorem52_rows(seed + 1, n, d, models, starts, sets, horizon, 81)
        atomic_write_text(out / "theorem52.csv", csv_text(ends))
        atomic_write_text(out / "theorem52_series.csv", csv_text(series))
        ends, series = theorem53_rows(seed + 2, n, d, models, starts, floats(omegas), horizon, 161)
        atomic_write_text(out / "theorem53.csv", csv_text(ends))
        atomic_write_text(out / "theorem53_series.csv", csv_text(series))
    claim_figures(out)
