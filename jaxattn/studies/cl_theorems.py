"""Two statements of the clusters paper (Geshkovski et al., the emergence of clusters in self-attention dynamics)
beyond the continuous flow in the plane, measured directly:

* **Remarks 1 and 4** (discrete time): the results carry over to the transformer itself, the forward Euler
  iteration ``x_i ← x_i + Δt Σ_j P_ij V x_j`` (jaxattn's D4), at the ``Δt = 1`` used in practice and below it.
  Its rescaled tokens are ``z^[k] = R^{−k} x^[k]`` with ``R = I + Δt V``. With ``V = I`` (``Q = K = I``, as Fig. 5)
  the step reads ``z^[k+1] = (z^[k] + Δt Σ_j P_ij z_j^[k]) / (1 + Δt)``, a convex combination of the previous
  tokens, so their hull shrinks step by step (Proposition C.2); the substance is Theorem 3.1 in discrete time: the
  rescaled tokens end at the vertices of a convex polytope (or at 0). With the good triple of the study's planar
  pictures (``V`` symmetric with eigenvalues {1.35, −0.07}, Fig. 6) the same iteration tests Theorem 4.1 in
  discrete time: the coordinate along ``φ1`` ends on at most three values (``discrete.csv``, one row per condition).
* **Figs. 13–14** (good triples in R³): Theorem 4.1 and Fig. 6 are shown in the plane, their R³ examples in the
  appendix. Random good triples in d = 3 (``Q = K = I`` and a random symmetric ``V`` whose top eigenvalue is real,
  positive and simple, Fig. 6's setting one dimension up) under the continuous rescaled flow: the coordinates
  ``⟨ψ1, z_i⟩`` gather on at most three values, typically two (``good_triples_3d.csv``, one row per condition, the
  tolerance-free gap of the coordinates at the horizon and half-way, so that clusters still forming are told from a
  plateau).

Float64 throughout (in a scope; the caller's JAX setting is left as it was).
"""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from jaxattn.analysis.clusters import (
    classify_top,
    coordinate,
    gap_clusters,
    hyperplanes,
    polytope,
    random_matrices,
    top_eigen,
)
from jaxattn.dynamics.discrete import D4, simulate
from jaxattn.dynamics.options import Save
from jaxattn.io.results import atomic_write_text
from jaxattn.model.paper import paper_model
from jaxattn.model.sampling import init_tokens
from jaxattn.studies import plots
from jaxattn.studies.cluster_checks import _nothing, cluster_horizon, solve_rescaled
from jaxattn.studies.clusters import spectra_matrices
from jaxattn.studies.skeleton import csv_text
from jaxattn.studies.verdicts import T

#: Directions of the support-function test of the shrinking hull (unit vectors in every d of the run).
HULL_DIRECTIONS = 256


# ------------------------------------------------------------------------------------------ discrete time
def euler_tokens(V: Float[np.ndarray, "d d"], X0: Float[jax.Array, "B n d"], dt: float,
                 steps: int) -> Float[np.ndarray, "B T n d"]:
    """The transformer's tokens ``x^[k]``, ``k = 0..steps``: jaxattn's D4 map (``x_i ← x_i + Δt Σ_j P_ij V x_j``,
    softmax of ``⟨x_i, x_j⟩``, no normalisation) of the clusters paper's model with value ``V``, float64."""
    sim = simulate(paper_model(V), X0, steps, dynamics=D4, alpha=dt, save=Save(trajectory=True, observe=_nothing),
                   dtype=jnp.float64)
    return np.asarray(sim.trajectory, np.float64)


def rescale(X: Float[np.ndarray, "B T n d"], V: Float[np.ndarray, "d d"], dt: float) -> Float[np.ndarray, "B T n d"]:
    """Remark 4's rescaled tokens ``z^[k] = R^{−k} x^[k]``, ``R = I + Δt V`` (invertible for the runs' ``Δt``), for a
    diagonalisable ``V``.

    Formed in ``V``'s eigenbasis, each component scaled by its own ``(1 + Δt λ)^{−k}``: the matrix ``R^{−k}`` itself
    carries the rounding of its largest factor into every component, and against tokens of size ``(1 + Δt λ1)^k``
    that error is not small (the planar good triple at ``Δt = 0.1``: 300 steps, ``|x| ~ 6e16``, entries of ``R^{−k}``
    up to 8; its settled clusters along ``φ1`` drifted apart by 1e-2 over the last 30 steps). Along ``φ1`` the
    rescaled coordinate is then exact to round-off; along an eigenvalue below ``λ1`` the tokens' own rounding
    (relative to ``|x|``) is magnified by the rescaling, as it is in any float64 run of the map."""
    lam, P = np.linalg.eig(np.asarray(V, np.float64))
    k = np.arange(X.shape[1])
    scale = (1.0 + dt * lam)[None, :] ** -k[:, None]  # [T, d]
    Y = np.einsum("de,btne->btnd", np.linalg.inv(P), X)  # eigen-components of the tokens
    return np.einsum("de,btne->btnd", P, Y * scale[None, :, None, :]).real


def unit_directions(d: int, count: int = HULL_DIRECTIONS, seed: int = 0) -> Float[np.ndarray, "m d"]:
    """``count`` unit vectors of R^d (the coordinate axes and their opposites first, then random ones)."""
    rand = np.random.default_rng(seed).normal(size=(max(count - 2 * d, 0), d))
    U = np.concatenate([np.eye(d), -np.eye(d), rand])
    return U / np.linalg.norm(U, axis=1, keepdims=True)


def hull_excursion(Z: Float[np.ndarray, "T n d"], U: Float[np.ndarray, "m d"]) -> float:
    """The largest amount by which the tokens of a step reach beyond the hull of the step before in one of the
    directions ``U`` (the rise of the support function ``h_k(u) = max_i ⟨u, z_i^[k]⟩``), relative to the size
    ``max |z^[k]|`` of the step before; 0 when the hull never grew in those directions."""
    h = np.max(Z @ U.T, axis=1)  # [T, m]
    size = np.abs(Z).max(axis=(1, 2))[:-1, None]
    return float(max(np.max((h[1:] - h[:-1]) / size), 0.0))


def remaining(Z: Float[np.ndarray, "T n d"], rate: float) -> float:
    """How far the tokens may still move: the last step's largest move over ``rate``. Once the attention is Boolean
    a token approaches its leader by the factor ``1/(1 + rate)`` per step (``rate = Δt λ1``: ``Δt`` for ``V = I``),
    so the distance left is the last move over ``rate``."""
    return float(np.abs(Z[-1] - Z[-2]).max() / rate)


def at_vertex_or_origin(z: Float[np.ndarray, "n d"], tol: float) -> tuple[int, int, int]:
    """Theorem 3.1's end state: ``(tokens at a vertex of the polytope of the others' clusters, tokens at 0,
    vertices)``; tokens within ``tol`` of 0 are set aside first, the rest clustered at ``tol``."""
    origin = np.linalg.norm(z, axis=1) <= tol
    rest = z[~origin]
    if len(rest) == 0:
        return 0, int(origin.sum()), 0
    p = polytope(rest, tol)
    return p.vertex_tokens, int(origin.sum()), p.vertices


def identity_rows(key, dts: tuple[float, ...], horizon: float, num: int, ns: tuple[int, ...], ds: tuple[int, ...],
                  tol: float) -> list[dict]:
    """``V = I``, ``Q = K = I``: per step size, (n, d) and condition, where the rescaled tokens end after
    ``horizon / Δt`` steps, how far they may still move, and the hull's largest excursion over the run."""
    rows = []
    for n in ns:
        for d in ds:
            X0 = init_tokens(jax.random.fold_in(key, 1000 * n + d), num, n, d, kind="gaussian", dtype=jnp.float64)
            U = unit_directions(d)
            for dt in dts:
                steps = math.ceil(horizon / dt)
                Z = rescale(euler_tokens(np.eye(d), X0, dt, steps), np.eye(d), dt)
                for b in range(num):
                    finite = bool(np.all(np.isfinite(Z[b])))
                    vert, origin, nv = at_vertex_or_origin(Z[b, -1], tol) if finite else (0, 0, 0)
                    rows.append({"setting": "V = I", "dt": dt, "steps": steps, "n": n, "d": d, "condition": b,
                                 "finite": finite, "tol": tol, "remaining": remaining(Z[b], dt) if finite else math.inf,
                                 "at_vertices": vert, "at_origin": origin, "vertices": nv,
                                 "all_at_vertices": finite and vert + origin == n,
                                 "hull_excursion": hull_excursion(Z[b], U) if finite else math.inf,
                                 "hyperplanes": -1, "gap_hyperplanes": -1})
    return rows


def good_triple_rows(key, V: Float[np.ndarray, "d d"], dts: tuple[float, ...], horizon: float, num: int, n: int,
                     tol: float) -> list[dict]:
    """The good triple ``V`` (``Q = K = I``) in discrete time: per step size and condition, the parallel hyperplanes
    ``{⟨ψ1, z⟩ = c}`` holding the rescaled tokens at the end (at ``tol`` and tolerance-free) and how far their
    coordinates may still move (at the rate ``Δt λ1``)."""
    lam1 = top_eigen(V).value.real
    X0 = init_tokens(key, num, n, V.shape[0], kind="gaussian", dtype=jnp.float64)
    rows = []
    for dt in dts:
        steps = math.ceil(horizon / dt)
        Z = rescale(euler_tokens(V, X0, dt, steps), V, dt)
        c = np.asarray(coordinate(jnp.asarray(Z[:, -2:]), V))  # [B, 2, n]
        h = hyperplanes(jnp.asarray(np.nan_to_num(Z[:, -1])), V, tol)
        for b in range(num):
            finite = bool(np.all(np.isfinite(Z[b])))
            rows.append({"setting": "good triple", "dt": dt, "steps": steps, "n": n, "d": V.shape[0], "condition": b,
                         "finite": finite, "tol": tol,
                         "remaining": float(np.abs(c[b, 1] - c[b, 0]).max() / (dt * lam1)) if finite else math.inf,
                         "at_vertices": -1, "at_origin": -1, "vertices": -1, "all_at_vertices": False,
                         "hull_excursion": math.nan, "hyperplanes": int(h.count[b]) if finite else -1,
                         "gap_hyperplanes": int(h.gap_count[b]) if finite else -1})
    return rows


# ------------------------------------------------------------------------------------------ good triples in R³
def good_symmetric(key, d: int, tries: int = 1000) -> Float[np.ndarray, "d d"]:
    """A random symmetric ``V`` (the orthogonal ensemble) whose top eigenvalue is real, positive and simple,
    divided by that eigenvalue: scaling ``V`` by ``c > 0`` only changes the rescaled flow's clock (``e^{t cV}``,
    ``ż = c (...)``: time ``ct``), so ``λ1 = 1`` loses nothing and gives every triple the same horizon."""
    for i in range(tries):
        V = np.asarray(random_matrices(jax.random.fold_in(key, i), d, 1, "symmetric"), np.float64)[0]
        if int(classify_top(V)) == 0:  # "good": λ1 > |λ2| (real and positive for a symmetric V)
            return V / top_eigen(V).value.real
    raise RuntimeError(f"no good symmetric matrix in {tries} draws")  # pragma: no cover - about half are good


def triple_horizon(decades: float, lam1: float = 1.0) -> float:
    """The time the hyperplanes' gap needs to grow by ``decades``: once the attention is Boolean each coordinate
    ``c_i = ⟨ψ1, z_i⟩`` obeys ``ċ_i = λ1 (c_leader − c_i)``, a gap growing at ``λ1 / ln 10`` decades per unit time
    (:func:`~jaxattn.studies.cluster_checks.cluster_horizon` at the rate ``λ1``)."""
    return cluster_horizon(lam1, decades)


def triple_rows(key, triples: int, num: int, n: int, d: int, t1: float, tol: float) -> list[dict]:
    """``triples`` random good triples (``Q = K = I``, :func:`good_symmetric`), ``num`` Gaussian conditions of ``n``
    tokens each, the rescaled flow to ``t1``: per condition the hyperplanes at the end (at ``tol`` and
    tolerance-free) and the gap of the coordinates (decades) at ``t1`` and ``t1/2``."""
    rows = []
    for i in range(triples):
        V = good_symmetric(jax.random.fold_in(key, i), d)
        lam = np.sort(np.linalg.eigvalsh(V))[::-1]
        phi = top_eigen(V).right
        X0 = init_tokens(jax.random.fold_in(key, 1000 + i), num, n, d, kind="gaussian", dtype=jnp.float64)
        sol = solve_rescaled(paper_model(V), X0, np.asarray([0.0, t1 / 2, t1]), trajectory=True, max_steps=200_000)
        Z = np.asarray(sol.trajectory, np.float64)  # [B, 3, n, d]
        ok = np.asarray(sol.ok) & np.all(np.isfinite(Z), axis=(1, 2, 3))
        Zs = jnp.asarray(np.where(ok[:, None, None, None], Z, 0.0))
        h = hyperplanes(Zs[:, -1], V, tol)
        gaps = np.asarray(gap_clusters(np.asarray(coordinate(Zs[:, 1:], V))[..., None]).gap)  # [B, 2]: t1/2, t1
        for b in range(num):
            rows.append({"triple": i, "condition": b, "n": n, "d": d, "lambda_1": float(lam[0]),
                         "lambda_2": float(lam[1]), "lambda_3": float(lam[-1]), "qk": float(phi @ phi), "t1": t1,
                         "solver_ok": bool(ok[b]), "hyperplanes": int(h.count[b]) if ok[b] else -1,
                         "gap_hyperplanes": int(h.gap_count[b]) if ok[b] else -1,
                         "gap_decades": float(gaps[b, 1]) if ok[b] else math.nan,
                         "gap_decades_mid": float(gaps[b, 0]) if ok[b] else math.nan})
    return rows


def triple_figure(path: Path, key, n: int, d: int, t1: float) -> None:
    """One condition of the first triple: the coordinate ``⟨ψ1, z_i⟩`` of every token against time (as Fig. 6's
    right panel, in R³)."""
    plt = plots.pyplot()
    if plt is None:
        return
    V = good_symmetric(jax.random.fold_in(key, 0), d)
    ts = np.linspace(0.0, t1, 121)
    X0 = init_tokens(jax.random.fold_in(key, 1000), 1, n, d, kind="gaussian", dtype=jnp.float64)
    Z = np.asarray(solve_rescaled(paper_model(V), X0, ts, trajectory=True, max_steps=200_000).trajectory[0])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ts, np.asarray(coordinate(jnp.asarray(Z), V)), color="C0", lw=0.7)
    ax.set(xlabel="t", ylabel="⟨ψ1, z_i(t)⟩",
           title=f"good triple in R³, Q = K = I, V eigenvalues {np.round(np.linalg.eigvalsh(V)[::-1], 2).tolist()}")
    ax.title.set_fontsize(9)
    fig.tight_layout()
    plots.save(fig, path, 110)


# ------------------------------------------------------------------------------------------ the study
def study(out: Path, dts: str = "1,0.5,0.1", horizon: float = 30.0, num: int = 64, table_n: str = "10,20,40",
          table_d: str = "2,3", triple_n: int = 40, good_num: int = 64, triples: int = 8,
          triple_num: int = 32, triple_horizons: float = 2.0, tol: float = 1e-3, seed: int = 0) -> None:
    """Write ``discrete.csv``, ``good_triples_3d.csv``, ``good_triples_3d.png`` and ``discrete.png`` into ``out``
    (the options as the reproductions' registry writes them: lists as comma-separated text). ``horizon``: the
    discrete runs' time ``k Δt``; ``triple_horizons``: the flow's horizon in multiples of the time the gap of clear
    clusters needs."""
    floats = lambda s: tuple(float(x) for x in str(s).split(","))
    ints = lambda s: tuple(int(x) for x in str(s).split(","))
    with jax.enable_x64(True):
        key = jax.random.key(seed)
        out = Path(out)
        good = spectra_matrices(jax.random.fold_in(jax.random.key(seed), 10))["good"]  # the planar pictures' triple
        rows = identity_rows(jax.random.fold_in(key, 1), floats(dts), horizon, num, ints(table_n), ints(table_d), tol)
        rows += good_triple_rows(jax.random.fold_in(key, 2), good, floats(dts), horizon, good_num, triple_n, tol)
        atomic_write_text(out / "discrete.csv", csv_text(rows))
        t1 = triple_horizons * triple_horizon(T("clear-clusters"))
        atomic_write_text(out / "good_triples_3d.csv",
                          csv_text(triple_rows(jax.random.fold_in(key, 3), triples, triple_num, triple_n, 3, t1, tol)))
        triple_figure(out / "good_triples_3d.png", jax.random.fold_in(key, 3), triple_n, 3, t1)
    claim_figures(out)  # from the tables just written, as for a run made by an earlier version


# ------------------------------------------------------------------------------------------ figures from the tables
def claim_figures(run: Path, dest: Path | None = None) -> list[str]:
    """The claims' figures, drawn from the tables of a finished run in ``run`` (this version's or an earlier one's)
    into ``dest`` (default ``run``): ``discrete.png`` (``discrete.csv``; :func:`jaxattn.studies.plots.from_tables`).
    Returns the names written."""
    return plots.from_tables(run, dest, (("discrete.png", ("discrete.csv",), _discrete_figure),))


def _settled(row: dict[str, str]) -> bool:
    """A condition whose tokens are finite and may move no farther than the run's tolerance (the reproductions'
    test: only those are asked where they end)."""
    return row["finite"] == "True" and float(row["remaining"]) <= float(row["tol"])


#: The discrete-time settings and what each is asked: (setting, label, test of a settled condition's row).
_DISCRETE = (("V = I", "V = I: every token at a vertex or 0", lambda r: r["all_at_vertices"] == "True"),
             ("good triple", "good triple: at most three hyperplanes", lambda r: 0 <= int(r["hyperplanes"]) <= 3))


def _discrete_figure(plt, rows: list[dict[str, str]]):
    """Per step Δt: the share of settled conditions at Theorem 3.1's end (V = I) and at Theorem 4.1's (good triple),
    and the largest excursion of a step's rescaled tokens beyond the previous step's hull (V = I)."""
    dts = sorted({float(r["dt"]) for r in rows}, reverse=True)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), gridspec_kw={"width_ratios": (3, 2)})
    width = 0.8 / len(_DISCRETE)
    for i, (setting, label, ends) in enumerate(_DISCRETE):
        share, notes = [], []
        for dt in dts:
            mine = [r for r in rows if r["setting"] == setting and float(r["dt"]) == dt]
            done = [r for r in mine if _settled(r)]
            hits = sum(ends(r) for r in done)
            share.append(hits / len(done) if done else np.nan)
            notes.append("" if not mine else f"none of {len(mine)}\nsettled" if not done else
                         f"{hits}/{len(done)}" + (f"\n({len(mine)})" if len(done) < len(mine) else ""))
        at = np.arange(len(dts)) + (i - (len(_DISCRETE) - 1) / 2) * width
        axes[0].bar(at, share, width, color=f"C{i}", label=label)
        for a, v, note in zip(at, share, notes, strict=True):
            if note:
                axes[0].text(a, (0.0 if np.isnan(v) else v) + 0.02, note, ha="center", va="bottom", fontsize=6)
    axes[0].set_xticks(range(len(dts)), [f"Δt = {dt:g}" for dt in dts])
    axes[0].set(ylabel="share of settled conditions", xlim=(-0.5, len(dts) - 0.5), ylim=(0, 1.35),
                title="where the rescaled tokens end (numbers: of the settled conditions;\nin brackets: all "
                      "conditions, where some have not settled)")
    axes[0].title.set_fontsize(8)
    axes[0].legend(fontsize=7, loc="upper right")
    ident = [r for r in rows if r["setting"] == "V = I"]
    if ident:
        worst = [max(float(r["hull_excursion"]) for r in ident if float(r["dt"]) == dt) for dt in dts]
        # an excursion of exactly 0 (the hull never grew) is drawn at the axis' floor
        floor = 1e-20
        axes[1].bar(range(len(dts)), [max(w, floor) if np.isfinite(w) else np.nan for w in worst], 0.6,
                    color="C2")
        for j, w in enumerate(worst):
            axes[1].text(j, max(w, floor) * 2 if np.isfinite(w) else floor,
                         f"{w:.1e}" if np.isfinite(w) and w else "0" if w == 0 else "overflowed", ha="center",
                         va="bottom", fontsize=6)
        axes[1].axhline(T("machine"), color="k", lw=0.6, ls="--", label=f"round-off tolerance {T('machine'):g}")
        axes[1].set_xticks(range(len(dts)), [f"Δt = {dt:g}" for dt in dts])
        top = max([1.0, *(10 * w for w in worst if np.isfinite(w))])
        axes[1].set(yscale="log", xlim=(-0.5, len(dts) - 0.5), ylim=(floor / 2, top),
                    ylabel="largest excursion / size of the step before",
                    title="V = I: tokens beyond the previous step's hull")
        axes[1].title.set_fontsize(8)
        axes[1].legend(fontsize=7, loc="upper left")
    else:
        axes[1].set_axis_off()
    sizes = "; ".join(f"{setting}: " + ", ".join(f"n {n} d {d}" for n, d in sorted(
        {(int(r["n"]), int(r["d"])) for r in rows if r["setting"] == setting}))
        for setting in dict.fromkeys(r["setting"] for r in rows))
    fig.suptitle(f"The transformer's Euler iteration (Q = K = I), rescaled z = (I + Δt V)^(−k) x\n{sizes}",
                 fontsize=9)
    fig.tight_layout()
    return fig
