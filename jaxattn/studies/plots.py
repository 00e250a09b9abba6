"""Figures of the studies (matplotlib, optional dependency, no display needed): the set-up and the atomic
save every study's figures go through (:func:`pyplot`, :func:`save`), the power-method study's figures, and
movies of trajectories (:func:`movie`, :func:`frames`, from :mod:`jaxattn.plotting`): ``ja.plots``."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from jaxattn.io.results import atomic_write_bytes
from jaxattn.plotting import encoder_available, frames, movie
from jaxattn.studies.skeleton import csv_rows

#: The x axis of the per-layer figures: the step k of layers.csv and the report (its layer maps state k to k+1).
STEP = "step k (layer k maps state k to k+1)"


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or ``None`` without matplotlib (the ``[plot]`` extra): a study
    then writes no figures."""
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - exercised only without the [plot] extra
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, dpi: int = 110) -> Path:
    """``fig`` as a PNG file, written atomically (a killed run leaves no half-written figure), then closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    fig.clf()
    plt = pyplot()
    if plt is not None:
        plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def from_tables(run: Path, dest: Path | None, figures: Sequence[tuple[str, Sequence[str], Callable]]) -> list[str]:
    """Figures drawn from the tables of a finished run in ``run`` (its own version's or an earlier one's) into ``dest``
    (default ``run``): for each ``(name, tables, draw)``, ``draw(plt, *rows)`` with the rows of each table (text, as
    written), its figure saved as ``name``; a figure whose tables are missing or empty, or whose ``draw`` returns
    ``None``, is left out, and without matplotlib none is drawn. Returns the names written."""
    plt = pyplot()
    if plt is None:
        return []
    run = Path(run)
    dest = run if dest is None else Path(dest)
    names = []
    for name, tables, draw in figures:
        read = [csv_rows(run / t) for t in tables]
        fig = draw(plt, *read) if all(read) else None
        if fig is not None:
            save(fig, dest / name, 120)
            names.append(name)
    return names


def eigenvalues_figure(plt, eigvals: np.ndarray, name: str):
    """The eigenvalues of every weight set's ``F`` (``eigvals: [G, d]``, λ1 first) in the complex plane, coloured by
    weight set with its key (a colour bar), λ1 marked; beside them the histogram of all their real parts."""
    fig, ax = plt.subplots(1, 2, figsize=(11.5, 4.2))
    G = eigvals.shape[0]
    cmap = plt.get_cmap("viridis")
    norm = plt.Normalize(0, max(G - 1, 1))
    for g in range(G):
        lam = eigvals[g]
        ax[0].scatter(lam.real, lam.imag, s=6, color=cmap(norm(g)), alpha=0.6)
        ax[0].scatter([lam[0].real], [lam[0].imag], s=40, marker="x", color="red", label="λ1" if g == 0 else None)
    ax[0].axhline(0, color="k", lw=0.5)
    ax[0].axvline(0, color="k", lw=0.5)
    ax[0].set(xlabel="Re λ", ylabel="Im λ", title=f"{name}: eigenvalues of F, {G} weight set(s)")
    ax[0].legend(fontsize=8, loc="upper left")
    if G > 1:  # which colour is which weight set (one set: one colour, nothing to tell apart)
        bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax[0], pad=0.02)
        bar.set_label("weight set")
    ax[1].hist(eigvals.real.reshape(-1), bins=60, color="steelblue")
    ax[1].set(xlabel="Re λ", ylabel="count", title="real parts of all eigenvalues")
    return fig


def steering_figure(plt, rows: Sequence[dict]):
    """The alignment with ``u`` after the last layer against the steering gain (``rows``: the steering table), per
    dynamics its mean and 1% quantile, the unsteered mean and the smallest gain found for the target; the key
    beside the axes, where it covers no curve."""
    fig, ax = plt.subplots(figsize=(8.5, 4))
    for dyn in sorted({r["dynamics"] for r in rows}):
        sel = [r for r in rows if r["dynamics"] == dyn and r["gamma"] > 0]
        if sel:
            sel = sorted(sel, key=lambda r: r["gamma"])
            gam = np.array([r["gamma"] for r in sel])
            m = np.array([r["align_mean"] for r in sel])
            q = np.array([r["align_q01"] for r in sel])
            ax.plot(gam, m, "o-", label=f"{dyn}: mean")
            ax.plot(gam, q, ":", label=f"{dyn}: 1% quantile")
    base = [r for r in rows if r["gamma"] == 0]
    if base:
        ax.axhline(base[0]["align_mean"], color="k", lw=0.6, label="unsteered mean")
    for r in rows:
        if r.get("found_by", "grid").startswith("bisection"):
            ax.plot([r["gamma"]], [r["align_mean"]], "*", ms=12, color="k",
                    label=f"smallest γ for the target: {r['gamma']:.4g}")
    ax.set(xscale="log", xlabel="gain γ", ylabel="|<x, u>| / ||x|| after the last layer", ylim=(0, 1.02),
           title="rank-1 steering of the last layer")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return fig


def power_method_figures(out: Path, spec, tables: dict, finals: dict, name: str) -> list[Path]:
    """Write the study's figures into ``out``; return their paths (empty without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return []
    out = Path(out)
    paths = []

    paths.append(save(eigenvalues_figure(plt, spec.eigvals, name), out / "eigenvalues.png"))

    # per-layer metrics with bands
    runs = [r for r in ("main", "prolonged", "ffn_layernorm") if r in tables]
    fig, ax = plt.subplots(3, len(runs), figsize=(5 * len(runs), 9), squeeze=False)
    for c, run in enumerate(runs):
        rows = tables[run]
        k = np.array([r["step"] for r in rows])
        for rr, (a, b, sa, sb, label) in enumerate([
                ("rho1", "rhobar", "rho1_std", "rhobar_std", "ρ"),
                ("drho1", "drhobar", "drho1_std", "drhobar_std", "Δρ"),
                ("P1", "P_rhobar", None, None, "P")]):
            y1 = np.array([r[a] for r in rows])
            y2 = np.array([r[b] for r in rows])
            ax[rr, c].plot(k, y1, "o-", color="C3", ms=3, label=f"{label}1 (principal)")
            if label == "P":  # P̄ is the paper's: the mean of every eigendirection's P_k (directions.csv)
                if run == "main" and tables.get("directions"):
                    dr = tables["directions"]
                    ax[rr, c].plot([r["step"] for r in dr], [r["Pbar"] for r in dr], "s--", color="C0", ms=3,
                                   label="P̄ (mean of the P_k)")
                else:  # no per-direction run: the other baseline, under its own name
                    ax[rr, c].plot(k, y2, "^:", color="0.5", ms=3, label="P(Δρ̄ > 0), not the paper's P̄")
                ax[rr, c].legend(fontsize=7)
            else:
                ax[rr, c].plot(k, y2, "s--", color="C0", ms=3, label=f"{label}̄ (all eigendirections)")
            if sa:
                s1 = np.array([r[sa] for r in rows])
                s2 = np.array([r[sb] for r in rows])
                ax[rr, c].fill_between(k, y1 - s1, y1 + s1, color="C3", alpha=0.15)
                ax[rr, c].fill_between(k, y2 - s2, y2 + s2, color="C0", alpha=0.15)
            if label == "P":
                ax[rr, c].axhline(0.5, color="k", lw=0.6)
            if label == "Δρ":
                ax[rr, c].axhline(0.0, color="k", lw=0.6)
            ax[rr, c].set(xlabel=STEP, ylabel=label)
        ax[0, c].set_title(run)
        ax[0, c].legend(fontsize=8)
    paths.append(save(fig, out / "metrics.png"))
    plt.close(fig)

    # histograms of the final alignment with v1 and with the 2-D subspace
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        ax[0].hist(finals[f"{run}.rho1_final"], bins=50, range=(0, 1), alpha=0.5, label=run)
        ax[1].hist(finals[f"{run}.rho2_final"], bins=50, range=(0, 1), alpha=0.5, label=run)
    ax[0].set(xlabel="ρ(x, v1) at the last layer", ylabel="tokens")
    ax[1].set(xlabel="ρ(x, 2-D subspace) at the last layer", ylabel="tokens")
    ax[0].legend(fontsize=8)
    paths.append(save(fig, out / "alignment_hist.png"))
    plt.close(fig)

    # which layer matters: d(mean ρ1)/d log F_k per block
    if tables.get("sensitivity"):
        rows = tables["sensitivity"]
        fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
        k = np.array([r["block"] for r in rows])
        ax[0].bar(k, [r["dR_dlogF"] for r in rows], color="C3")
        ax[0].axhline(0, color="k", lw=0.6)
        ax[0].set(xlabel=STEP, ylabel="dR / d log F_k", title="R = mean ρ1 after the last block")
        ax[1].plot(k, [r["grad_O"] for r in rows], "o-", label="‖∂R/∂O_k‖")
        ax[1].plot(k, [r["grad_V"] for r in rows], "s--", label="‖∂R/∂V_k‖")
        ax[1].plot(k, [r["grad_Q"] for r in rows], "^:", label="‖∂R/∂Q_k‖")
        ax[1].set(xlabel=STEP, ylabel="gradient norm (v1 fixed)", yscale="log")
        ax[1].legend(fontsize=8)
        paths.append(save(fig, out / "sensitivity.png"))
        plt.close(fig)

    paths.append(save(steering_figure(plt, tables["steering"]), out / "steering.png"))

    # the paper's Fig. 2: ρ1, Δρ1, P1 in every layer, unmodified and with the last layer steered
    if "steered" in tables:
        fig, ax = plt.subplots(1, 3, figsize=(14, 3.8))
        gamma = tables["steer_target"][0]["gamma"] if "steer_target" in tables else float("nan")
        for c, (key, label) in enumerate((("rho1", "ρ1"), ("drho1", "Δρ1"), ("P1", "P1"))):
            for run, style, lab in (("main", "s--", "unmodified"),
                                    ("steered", "o-", f"last layer steered, γ = {gamma:.4g}")):
                rows = tables[run]
                ax[c].plot([r["step"] for r in rows], [r[key] for r in rows], style, ms=4, label=lab)
            ax[c].set(xlabel=STEP, ylabel=label)
            if key == "P1":
                ax[c].axhline(0.5, color="k", lw=0.6)
            if key == "drho1":
                ax[c].axhline(0.0, color="k", lw=0.6)
        ax[0].legend(fontsize=8)
        fig.suptitle(f"{name}: alignment with the principal eigenvector per layer, last layer steered")
        paths.append(save(fig, out / "steered_metrics.png"))
        plt.close(fig)

    # consensus: mean inter-token distance
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        rows = tables[run]
        ax.semilogy([r["step"] for r in rows], [max(r["diameter"], 1e-16) for r in rows], "o-", ms=3, label=run)
    ax.set(xlabel=STEP, ylabel="mean max ||x_i − x_j||", title="inter-token distance (consensus)")
    ax.legend(fontsize=8)
    paths.append(save(fig, out / "consensus.png"))
    plt.close(fig)
    paths += layer_figures(out, tables.get("main") or [])
    return paths


def layer_figures(out: Path, rows: list[dict]) -> list[Path]:
    """``layers.png`` from the unmodified run's per-layer rows (as the study makes them, or as read back from
    ``layers.csv``): the correlation with the principal eigenvector of the cumulative product Φ(k) = F(k)⋯F(1)
    against ρ̄ (the paper's Supp. Fig. 8), and the tilt Δρ1 of each layer against its spectral gap (§4)."""
    plt = pyplot()
    if plt is None or not rows:
        return []
    col = lambda key: np.array([float(r[key]) for r in rows])
    k = col("step")
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].plot(k, col("rho_phi"), "o-", color="C3", ms=3, label="ρ(Φ(k)): the cumulative product's eigenvector")
    ax[0].plot(k, col("rhobar"), "s--", color="C0", ms=3, label="ρ̄ (all eigendirections of the layer)")
    ax[0].set(xlabel=STEP, ylabel="mean |<x, u>| / ||x||", title="cumulative product Φ(k) = F(k)⋯F(1)")
    ax[0].legend(fontsize=7)
    ax[1].scatter(col("gap"), col("drho1"), color="C3")  # points, not a line over the layers
    for g, t, s in zip(col("gap"), col("drho1"), k, strict=True):
        ax[1].annotate(f"{int(s)}", (g, t), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax[1].axhline(0.0, color="k", lw=0.6)
    ax[1].set(xlabel="spectral gap Re λ1 − Re λ2 of the layer", ylabel="Δρ1 (numbers: the layer)",
              title="tilt against the gap")
    path = save(fig, out / "layers.png")
    plt.close(fig)
    return [path]


__all__ = ["STEP", "encoder_available", "frames", "layer_figures", "movie", "power_method_figures", "pyplot", "save"]
