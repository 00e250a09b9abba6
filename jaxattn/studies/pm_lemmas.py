"""Three statements of the power-method paper's supplement (and its multistability companion), measured directly:

* **Lemma 9** (Supp. D.3.1): the attention matrix has rank 1 at a consensus, 2 at a bipartite consensus and ``m``
  at an ``m``-clustering (``lemma9.csv``: the numerical rank of the attention at the end states of random starts of
  single-head maps, classified by :func:`jaxattn.analysis.stability.classify`, and at every consensus and bipartite
  equilibrium ``±v_k`` of the same models);
* **Lemma 1** (multistability paper) / **Lemma 7** (Supp. D.2): ``W(x) = ½(λ1 − R(x))``, ``R(x) = xᵀVx / xᵀx`` the
  Rayleigh quotient of the symmetric value matrix, never increases along the Oja flow ``ẋ = P_x V x``, nor along
  its map ``x ← N(x + αVx)`` for a bounded step; for ``n`` agents (D3, uniform attention) the same with the mean
  token, ``W̄(X) = ½(λ1 − x̄ᵀVx̄)``, whose derivative along the flow is ``−(1/n) Σ_i ||P_{x_i} V x̄||² ≤ 0``
  (``lyapunov.csv``: the largest increase per condition at every step size of a grid and along the flow);
* **§2.3**, the steered spectrum: ``F' = F + β u wᵀ`` has principal eigenpair about ``(β wᵀu, u)`` for large ``β``,
  and when ``u, w`` are right and left eigenvectors of an eigenvalue ``λ_j`` (``wᵀu = 1``) the spectrum of ``F'``
  is that of ``F`` with ``λ_j`` replaced by ``λ_j + β`` (``steered_spectrum.csv``, on a model's last layer:
  MiniLM's by default).

Float64 throughout (in a scope; the caller's JAX setting is left as it was).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.analysis.spectral import eig_sorted, layer_matrices
from jaxattn.analysis.stability import System, attention_rank, classify, eigen_equilibria, settle, sign_patterns
from jaxattn.analysis.steering import steer
from jaxattn.dynamics.continuous import solve
from jaxattn.dynamics.discrete import D1, D3, simulate
from jaxattn.dynamics.fields import C2_OJA
from jaxattn.dynamics.options import Save
from jaxattn.io.checkpoints import load_any
from jaxattn.io.results import atomic_write_text
from jaxattn.model.params import Model
from jaxattn.model.sampling import init_tokens, random_model
from jaxattn.studies import plots
from jaxattn.studies.skeleton import csv_text
from jaxattn.studies.stability import random_symmetric_single_head
from jaxattn.studies.verdicts import T

#: the expected rank of the attention per class of equilibrium (Lemma 9); clustering: its number of clusters
EXPECTED_RANK = {"consensus": 1, "bipartite": 2}
#: the classes Lemma 9 is about (a polygonal end and one not settled are neither)
LEMMA9_KINDS = ("consensus", "bipartite", "clustering")
#: Lemma 9 is about equilibria: an end state counts as one when a step moves it by at most this (Frobenius, unit
#: tokens). Looser, the classification's default 1e-7 admits states still merging (6 "clusters" of 6 tokens 1e-4
#: apart, residuals 1.5e-9 to 7e-8 after 1500 steps) whose nearly equal attention rows measure a rank below m;
#: every settled consensus, bipartite and clustering end state of the run is within 1e-10.
SETTLED = 1e-10


# ------------------------------------------------------------------------------------------ Lemma 9
def lemma9(key, models: int, starts: int, n: int, d: int, alpha: float, betas: tuple[float, ...],
           steps: int) -> list[dict]:
    """One row per (model, β, configuration): the class, its clusters and the attention's numerical rank, for the end
    states of ``starts`` random starts of the single-head map (D1) and for every consensus and bipartite
    equilibrium at a real eigenvector of ``F``."""
    rows = []
    for i in range(models):
        model = random_symmetric_single_head(jax.random.fold_in(key, i), d)
        for beta in betas:
            sy = System(model, D1, alpha, beta)
            X0 = init_tokens(jax.random.fold_in(key, 1000 + i), starts, n, d, dtype=jnp.float64)
            end = settle(sy, X0, steps=steps)
            end = end / np.linalg.norm(end, axis=-1, keepdims=True)
            for X, t in zip(end, classify(sy, end, residual_tol=SETTLED), strict=True):  # every end, of any class
                rows.append({"model": i, "beta": beta, "source": "end state", "kind": t.kind,
                             "clusters": t.clusters, "rank": int(attention_rank(sy, X)[0]), "n": n, "d": d})
            cand = eigen_equilibria(sy.layer_matrix(), n, patterns=sign_patterns(n))
            for X, s in zip(np.asarray(cand.X), cand.signs, strict=True):
                kind = "consensus" if abs(int(np.sum(s))) == n else "bipartite"
                rows.append({"model": i, "beta": beta, "source": "equilibrium ±v_k", "kind": kind,
                             "clusters": 1 if kind == "consensus" else 2, "rank": int(attention_rank(sy, X)[0]),
                             "n": n, "d": d})
    return rows


def expected_rank(kind: str, clusters: int) -> int:
    """Lemma 9's rank: 1 at a consensus, 2 at a bipartite consensus, ``m`` at an ``m``-clustering."""
    return EXPECTED_RANK.get(kind, clusters)


# ------------------------------------------------------------------------------------------ Lemmas 1 and 7
def oja_model(key, spectrum: np.ndarray) -> Model:
    """One head, ``O = I``, a symmetric value matrix of the given spectrum (Assumption 1: ``λ1`` simple, > 0)."""
    return random_model(key, len(spectrum), 1, 1, unit_output=True, value="symmetric", spectrum=spectrum,
                        dtype=jnp.float64)


def _quotients(t, X, ctx):
    """The tokens' Rayleigh quotients ``R(x_i)`` and the mean token's ``x̄ᵀVx̄`` (``ctx.aux`` = V)."""
    xb = jnp.mean(X, axis=0)
    R = jnp.einsum("nd,de,ne->n", X, ctx.aux, X) / jnp.sum(X * X, axis=-1)
    return {"R": R, "mean": xb @ ctx.aux @ xb}


def _largest_rise(W: np.ndarray) -> np.ndarray:
    """Per condition ``[B, T]``: the largest increase of ``W`` between consecutive saved points (≤ 0: never rose)."""
    return np.max(np.diff(W, axis=1), axis=1)


def lyapunov(key, spectrum: np.ndarray, alphas: tuple[float, ...], num: int, n: int, steps: int,
             t1: float) -> list[dict]:
    """The largest rise of ``W`` (one token, n = 1) and of ``W̄`` (``n`` tokens, D3) between saved points, along the
    map at every ``α`` of ``alphas`` and along the Oja flow (rtol 1e-10), from ``num`` random starts each; ``rises``
    counts the conditions whose rise exceeds round-off (``T("machine")`` times ``λ1 − λd``)."""
    model = oja_model(jax.random.fold_in(key, 0), spectrum)
    V = np.asarray(layer_matrices(model)[0])
    lam = np.linalg.eigvalsh(V)
    lam1, lamd = float(lam[-1]), float(lam[0])
    tol = T("machine") * (lam1 - lamd)  # a rise above round-off, relative to W's range [0, (λ1 − λd)/2]
    aux = jnp.asarray(V)
    out = []
    for tokens, name in ((1, "one token, W"), (n, f"{n} tokens, W̄ of the mean")):
        X0 = init_tokens(jax.random.fold_in(key, tokens), num, tokens, V.shape[0], dtype=jnp.float64)
        key_obs = "R" if tokens == 1 else "mean"
        save = Save(observe=_quotients, aux=aux)
        runs = [(f"map α = {a:g}", a, simulate(model, X0, steps, dynamics=D3, alpha=a, save=save,
                                              dtype=jnp.float64).observables) for a in alphas]
        sol = solve(model, X0, t1, flow=C2_OJA, save=Save(ts=np.linspace(0.0, t1, steps + 1), observe=_quotients,
                                                          aux=aux), rtol=1e-10, atol=1e-12, dtype=jnp.float64)
        runs.append(("flow", float("nan"), sol.observables))
        for label, a, obs in runs:
            R = np.asarray(obs[key_obs]).reshape(num, -1)  # one token: R of that token; else x̄ᵀVx̄
            W = 0.5 * (lam1 - R)
            rise = _largest_rise(W)
            out.append({"system": name, "tokens": tokens, "run": label, "alpha": a, "conditions": num,
                        "rises": int(np.sum(rise > tol)), "rise_tol": tol, "largest_rise": float(rise.max()),
                        "W_start_mean": float(W[:, 0].mean()), "W_end_mean": float(W[:, -1].mean()),
                        "R_end_mean": float(R[:, -1].mean()), "lambda_1": lam1, "lambda_d": lamd,
                        "alpha_psd": 1.0 / abs(lamd) if lamd < 0 else float("inf"),
                        "alpha_bound": 2.0 / (abs(lamd) - lam1) if abs(lamd) > lam1 else float("inf"),
                        "solver_ok": bool(np.all(np.asarray(sol.result) == 0)) if label == "flow" else True})
    return out


# ------------------------------------------------------------------------------------------ §2.3
def _hausdorff(a: np.ndarray, b: np.ndarray) -> float:
    """The largest distance from an eigenvalue of one list to the nearest of the other (both ways)."""
    D = np.abs(a[:, None] - b[None, :])
    return float(max(D.min(axis=1).max(), D.min(axis=0).max()))


def steered_spectrum(model: Model, gammas: tuple[float, ...], eigen: int, seed: int) -> list[dict]:
    """The last layer's steered spectrum: with a random unit ``u`` (``w = u``) the principal eigenpair of ``F'``
    against ``(β wᵀu, u)`` at every gain; and for each of the ``eigen`` real eigenvalues of largest real part, with
    ``u, w`` its right and left eigenvectors (``wᵀu = 1``), the distance of the steered spectrum to the predicted
    one (``λ_j`` replaced by ``λ_j + β``), relative to the largest |eigenvalue|."""
    g = model.schedule[-1]
    F = layer_matrices(model)[g]
    lam, vec = eig_sorted(F)
    lamL, vecL = eig_sorted(F.T)
    u = np.random.default_rng(seed).normal(size=F.shape[0])
    u /= np.linalg.norm(u)
    rows = []
    for gamma in gammas:
        steered, info = steer(model, u, gamma)  # a shared last set is copied: read the steered one by its index
        lam2, vec2 = eig_sorted(layer_matrices(steered)[info.weight_set])
        v1 = vec2[:, 0]
        gap = float(lam2[0].real - (lam2[2] if abs(lam2[1].imag) > 0 else lam2[1]).real)
        rows.append({"test": "random u", "j": 0, "gamma": gamma, "beta": info.beta, "lambda_j": float(lam[0].real),
                     "lambda1_after_re": float(lam2[0].real), "lambda1_after_im": float(lam2[0].imag),
                     "predicted": info.beta, "rel_error": abs(lam2[0] - info.beta) / info.beta,
                     "align_u": float(abs(np.vdot(v1, u)) / np.linalg.norm(v1)), "gap_after": gap,
                     "lambda1_before": float(abs(lam[0])), "spectrum_distance": float("nan")})
    real = [k for k in range(len(lam)) if lam[k].imag == 0][:eigen]
    for k in real:
        uk = vec[:, k].real / np.linalg.norm(vec[:, k].real)
        # the left eigenvector of the same eigenvalue: the eigenvector of Fᵀ nearest to it, scaled so that wᵀu = 1
        m = int(np.argmin(np.abs(lamL - lam[k])))
        wk = vecL[:, m].real / float(vecL[:, m].real @ uk)
        for gamma in gammas:
            steered, info = steer(model, uk, gamma, wk)
            after = np.linalg.eigvals(layer_matrices(steered)[info.weight_set])
            predicted = lam.copy()
            predicted[k] = lam[k] + info.beta
            rows.append({"test": "eigenvector", "j": k + 1, "gamma": gamma, "beta": info.beta,
                         "lambda_j": float(lam[k].real), "lambda1_after_re": float(after.real.max()),
                         "lambda1_after_im": float("nan"), "predicted": float(predicted.real.max()),
                         "rel_error": float("nan"), "align_u": float("nan"), "gap_after": float("nan"),
                         "lambda1_before": float(abs(lam[0])),
                         "spectrum_distance": _hausdorff(after, predicted) / float(np.abs(predicted).max())})
    return rows


def load_float64(spec: str) -> Model:
    """A model by name or path (:func:`jaxattn.io.checkpoints.load_any`) in float64: its steered spectrum exact to
    round-off, not to float32's digits."""
    return load_any(spec).astype(jnp.float64)


# ------------------------------------------------------------------------------------------ figures
def claim_figures(run: Path, dest: Path | None = None) -> list[str]:
    """The study's figures, drawn from the tables of a finished run in ``run`` (this version's or an earlier one's)
    into ``dest`` (default ``run``): ``lemma9.png``, ``lyapunov.png``, ``steered_spectrum.png``
    (:func:`jaxattn.studies.plots.from_tables`). Returns the names written."""
    return plots.from_tables(run, dest, (("lemma9.png", ("lemma9.csv",), _lemma9_figure),
                                         ("lyapunov.png", ("lyapunov.csv",), _lyapunov_figure),
                                         ("steered_spectrum.png", ("steered_spectrum.csv",), _steered_figure)))


def _lemma9_figure(plt, rows: list[dict[str, str]]):
    """How many states have each (clusters, attention rank): Lemma 9 puts them all on the diagonal."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, (source, title) in zip(axes, (("end state", "end states of random starts"),
                                          ("equilibrium ±v_k", "equilibria at the eigenvectors ±v_k")), strict=True):
        # the lemma's classes only: an end state still moving is no equilibrium, a polygonal one none of its classes
        mine = [r for r in rows if r["source"] == source and r["kind"] in LEMMA9_KINDS]
        left = sum(r["source"] == source and r["kind"] not in LEMMA9_KINDS for r in rows)
        if not mine:
            ax.set_axis_off()
            continue
        m = max(max(int(r["clusters"]), int(r["rank"])) for r in mine)
        counts = np.zeros((m, m), int)
        for r in mine:
            counts[int(r["rank"]) - 1, int(r["clusters"]) - 1] += 1
        ax.imshow(np.log10(1 + counts), origin="lower", cmap="Blues", extent=(0.5, m + 0.5, 0.5, m + 0.5))
        for (i, j), c in np.ndenumerate(counts):
            if c:
                ax.text(j + 1, i + 1, str(c), ha="center", va="center", fontsize=8)
        ax.plot([0.5, m + 0.5], [0.5, m + 0.5], "r--", lw=0.8, label="rank = clusters (Lemma 9)")
        ax.set(xlabel="clusters of the state (1: consensus)", ylabel="numerical rank of the attention",
               xticks=range(1, m + 1), yticks=range(1, m + 1))
        ax.set_title(title + (f" ({left} not settled or of no class of the lemma, left out)" if left else ""),
                     fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def _lyapunov_figure(plt, rows: list[dict[str, str]]):
    """The share of starts along which W (W̄) rose, against the map's step α, with the step bounds; the flow
    apart."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, system in enumerate(dict.fromkeys(r["system"] for r in rows)):
        mine = [r for r in rows if r["system"] == system]
        share = lambda r: int(r["rises"]) / max(int(r["conditions"]), 1)
        maps = sorted((float(r["alpha"]), share(r)) for r in mine if r["run"] != "flow")
        flow = [share(r) for r in mine if r["run"] == "flow"]
        if maps:
            ax.plot(*zip(*maps, strict=True), "o-", color=f"C{i}", label=f"{system}: the map")
        if flow:
            ax.axhline(flow[0], color=f"C{i}", ls=":", label=f"{system}: the flow ({flow[0]:.2g})")
    r0 = rows[0]
    ax.axvline(float(r0["alpha_psd"]), color="0.4", ls="--", lw=0.8, label="I + αV positive semi-definite below")
    ax.axvline(float(r0["alpha_bound"]), color="0.4", ls="-.", lw=0.8, label="the step bound 2/(|λ_d| − λ1)")
    ax.set(xlabel="step α of the map", ylabel="share of starts along which W rose",
           title=f"W = ½(λ1 − R(x)) along the Oja map and flow (λ1 {float(r0['lambda_1']):g}, "
                 f"λ_d {float(r0['lambda_d']):g})")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _steered_figure(plt, rows: list[dict[str, str]]):
    """F' = F + β u wᵀ: λ1(F') against β wᵀu for a random u (left); at an eigenpair, the distance of the spectrum
    from F's with λ_j moved to λ_j + β (right)."""
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8))
    rand = [r for r in rows if r["test"] == "random u"]
    if rand:
        beta = np.array([float(r["beta"]) for r in rand])
        axes[0].loglog(beta, [float(r["lambda1_after_re"]) for r in rand], "o", label="Re λ1(F')")
        axes[0].loglog(beta, [float(r["predicted"]) for r in rand], "-", lw=0.8, label="β wᵀu")
        axes[0].loglog(beta, [float(r["rel_error"]) for r in rand], "s--", label="relative difference")
        axes[0].loglog(beta, [1 - float(r["align_u"]) for r in rand], "^--", label="1 − |<v1(F'), u>|")
        axes[0].set(xlabel="β (the gain γ times |λ1(F)|)", title="a random direction u")
        axes[0].legend(fontsize=7)
    eig = [r for r in rows if r["test"] == "eigenvector"]
    for j in sorted({int(r["j"]) for r in eig}):
        mine = [r for r in eig if int(r["j"]) == j]
        axes[1].loglog([float(r["beta"]) for r in mine], [float(r["spectrum_distance"]) for r in mine], "o-",
                       label=f"u, w at λ_{j} = {float(mine[0]['lambda_j']):.3g}")
    axes[1].axhline(T("closed-form"), color="r", ls="--", lw=0.8, label="closed-form tolerance")
    axes[1].set(xlabel="β", ylabel="distance to F's spectrum with λ_j + β (relative)",
                title="u, w right and left eigenvectors")
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.title.set_fontsize(9)
    fig.tight_layout()
    return fig


def study(out: Path, models: int = 12, starts: int = 32, n: int = 6, d: int = 3, alpha: float = 0.5,
          betas: str = "1,4,9", steps: int = 1500, lyap_num: int = 64, lyap_n: int = 10, lyap_steps: int = 200,
          alphas: str = "0.2,0.4,1,1.5", t1: float = 20.0, gammas: str = "1,10,20,100,1000", eigen: int = 3,
          model: str = "minilm", seed: int = 0) -> None:
    """Write ``lemma9.csv``, ``lyapunov.csv`` and ``steered_spectrum.csv`` into ``out``, and the figures drawn from
    them (:func:`claim_figures`); the options as the reproductions' registry writes them: lists as comma-separated
    text."""
    floats = lambda s: tuple(float(x) for x in str(s).split(","))
    with jax.enable_x64(True):
        key = jax.random.key(seed)
        out = Path(out)
        rows = lemma9(jax.random.fold_in(key, 1), models, starts, n, d, alpha, floats(betas), steps)
        atomic_write_text(out / "lemma9.csv", csv_text(rows))
        # λ1 = 1 simple, |λ_d| = 2.5 > λ1: the map's step bound 2/(|λ_d| − λ1) = 4/3 is finite, I + αV is
        # positive semi-definite up to α = 1/|λ_d| = 0.4
        spectrum = np.asarray([1.0, 0.5, 0.2, -0.7, -1.5, -2.5])
        atomic_write_text(out / "lyapunov.csv", csv_text(lyapunov(jax.random.fold_in(key, 2), spectrum,
                                                                  floats(alphas), lyap_num, lyap_n, lyap_steps, t1)))
        atomic_write_text(out / "steered_spectrum.csv",
                          csv_text(steered_spectrum(load_float64(model), floats(gammas), eigen, seed + 1)))
    claim_figures(out)
