"""The movies of docs/gallery.md, made again: ``python scripts/gallery.py [OUT]`` (default docs/img/gallery).

Each is one small computation drawn with ``jaxattn.plots.movie`` (panels of 240 x 260 pixels, at most 60
frames, so that each file stays small). About a minute on a 2-core CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxattn as ja
from jaxattn.analysis.clusters import count_clusters
from jaxattn.analysis.energy import energy
from jaxattn.model.paper import paper_model

PANEL = (240, 260)
FRAMES = 60


def metastable(d: int, beta: float, n: int = 32, t1: float = 1000.0, seed: int = 0):
    """One condition of the metastability study: states, times and observables on a logarithmic grid."""
    ts = np.concatenate([[0.0], np.geomspace(0.1, t1, FRAMES - 1)])
    X0 = ja.init_tokens(jax.random.key(seed), 1, n, d, dtype=jnp.float64)
    sol = ja.solve(paper_model(np.eye(d)), X0, t1, beta=beta, save=ja.Save(ts=ts, trajectory=True), rtol=1e-7,
                   atol=1e-9, dtype=jnp.float64)
    traj = np.asarray(sol.trajectory[0])
    obs = {"2*beta*E": 2 * beta * np.asarray(energy(traj, beta)), "clusters": np.asarray(count_clusters(traj, 1e-3))}
    return traj, ts, obs


def main(out: Path) -> None:
    jax.config.update("jax_enable_x64", True)  # the plateaus are resolved in float64
    out.mkdir(parents=True, exist_ok=True)
    # 1. metastable clusters on the circle and on the sphere, beta = 8 and 16
    panels, obs_all, titles = [], {}, []
    for d, beta in ((2, 8.0), (2, 16.0)):
        traj, ts, obs = metastable(d, beta)
        panels.append(traj)
        titles.append(f"circle, n = 32, beta = {beta:g}")
        for k, v in obs.items():
            obs_all.setdefault(k, []).append(v)
    ja.plots.movie(panels, out / "circle.gif", ts=ts, observables={k: np.stack(v) for k, v in obs_all.items()},
                   titles=titles, panel=PANEL, fps=8)
    traj, ts, obs = metastable(3, 8.0)
    ja.plots.movie(traj, out / "sphere.gif", ts=ts, observables=obs, titles=["sphere, n = 32, beta = 8"],
                   panel=PANEL, fps=8)
    traj, ts, obs = metastable(8, 4.0)
    ja.plots.movie(traj, out / "d8.gif", ts=ts, observables=obs, titles=["S^7, n = 32, beta = 4"], panel=PANEL,
                   fps=8)
    # 2. a random model (Q, K, V Gaussian) on the sphere: three conditions side by side
    model = ja.random_model(jax.random.key(3), 3, 1)
    X0 = ja.init_tokens(jax.random.key(4), 3, 16, 3)
    ts = np.linspace(0.0, 12.0, FRAMES)
    sol = ja.solve(model, X0, 12.0, save=ja.Save(ts=ts, trajectory=True))
    ja.plots.movie(np.asarray(sol.trajectory), out / "random_model.gif", ts=ts,
                   observables={"diameter": np.asarray(sol.observables["diameter"])},
                   titles=[f"condition {i}" for i in range(3)], panel=PANEL, fps=8)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "img" / "gallery")
