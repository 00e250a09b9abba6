"""``jaxattn movie RUN_DIR``: a run's trajectory as an animated GIF (and an MP4 where an encoder is installed), and
``--movie`` of ``simulate`` and ``solve`` (see :mod:`jaxattn.plotting` and :mod:`jaxattn.io.trajectory`).

A run directory that holds a trajectory (``trajectory.safetensors``: ``metastability``, or ``simulate``/``solve``
run with ``--movie``) is rendered as saved. A finished ``simulate`` or ``solve`` run without one is recomputed for
its first conditions from its ``config.json`` (the same model, the same draws: condition ``i`` starts from
``fold_in(key(seed), i)``), and the recomputed observables are compared with the ones the run stored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import jax
import numpy as np

from jaxattn.cli._shared import dtype_arg, load_model_arg
from jaxattn.cli._study import command
from jaxattn.config import Spec, add_argument, option, specs
from jaxattn.dynamics.discrete import simulate
from jaxattn.dynamics.options import Batch, Save
from jaxattn.errors import ConfigError, integer
from jaxattn.io import rundir
from jaxattn.io.results import load_arrays, weights_sha256
from jaxattn.io.store import open_sweep, record_file
from jaxattn.io.trajectory import load_trajectory, save_trajectory
from jaxattn.model.sampling import init_tokens
from jaxattn.plotting import NO_ENCODER, encoder_available, movie
from jaxattn.sweeps.grid import FlowRun, dynamics_of, expand, fields_of, point_of

TRAJECTORY = "trajectory.safetensors"
#: Conditions drawn side by side when a run's trajectory is recomputed.
CONDITIONS = 3
#: Frames of a recomputed solve: at least this many saved times (the run's own among them).
FRAMES = 100


@dataclasses.dataclass(frozen=True)
class MovieOption:
    """``--movie`` of ``simulate`` (a config-file key too; ``solve`` takes the flag alone)."""

    movie: bool = option(False, f"also save the states of the first {CONDITIONS} conditions (recomputed, "
                                f"{TRAJECTORY}) and render them to movie.gif (and movie.mp4 where an encoder is "
                                "installed)")


#: The option ``--movie``.
MOVIE: Spec = specs(MovieOption)["movie"]


def movie_option(group) -> dict[str, Spec]:
    """``--movie`` in ``group`` (a parser or argument group); returned as :func:`jaxattn.cli._shared.add_options`
    returns options."""
    add_argument(group, MOVIE)
    return {MOVIE.dest: MOVIE}


def register(sub) -> None:
    p = command(sub, "movie",
                help="render a run's trajectory as an animated GIF (and MP4 where an encoder is installed)",
                description="Render the tokens of a run over time: on the circle (d = 2), on a wire-frame "
                            "sphere (d = 3) or projected on the top 3 principal directions of the final state "
                            "(d > 3), several conditions side by side, the time and an observable in the "
                            "corner. RUN_DIR holds a saved trajectory (trajectory.safetensors: metastability, "
                            "or simulate/solve run with --movie), or is a finished simulate or solve run, "
                            "whose first conditions are then recomputed from its config.json and checked "
                            "against the observables it stored. Writes RUN_DIR/movie.gif, and movie.mp4 "
                            "where an encoder is installed (pip install imageio-ffmpeg).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    p.add_argument("--out", help="the movie file, .gif or .mp4 [RUN_DIR/movie.gif, and RUN_DIR/movie.mp4 where an "
                                 "encoder is installed]")
    p.add_argument("--conditions", type=int, help=f"conditions side by side when the trajectory is recomputed "
                                                  f"[{CONDITIONS}]")
    p.add_argument("--fps", type=float, default=12.0, help="frames per second [12]")
    p.add_argument("--max-frames", type=int, default=400, help="most frames; a longer trajectory is sampled evenly "
                                                               "[400]")
    p.add_argument("--overwrite", action="store_true", help="replace an existing movie file")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress bar on stderr [True]")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} {'is not a directory' if run_dir.exists() else 'does not exist'}")
    if args.conditions is not None and args.conditions < 1:
        raise ConfigError(f"--conditions must be >= 1, got {args.conditions}")
    integer("--max-frames", args.max_frames, minimum=2)
    if not (math.isfinite(args.fps) and 0 < args.fps <= 100):
        raise ConfigError(f"--fps must be in (0, 100], got {args.fps:g}")
    if args.out is not None:
        targets = [rundir.file_out(args.out, args.overwrite)]
        if targets[0].suffix.lower() == ".mp4" and not encoder_available():
            raise ConfigError(NO_ENCODER)
    else:
        targets = [run_dir / "movie.gif"] + ([run_dir / "movie.mp4"] if encoder_available() else [])
        for t in targets:
            rundir.file_out(t, args.overwrite, option="movie")
    saved = run_dir / TRAJECTORY
    if saved.is_file():
        if args.conditions is not None:
            raise ConfigError(f"--conditions: {run_dir} holds a saved trajectory, drawn as saved")
        tr = load_trajectory(saved)
    else:
        tr = recompute(run_dir, args.conditions or CONDITIONS)
        if args.conditions is not None and len(tr["trajectory"]) < args.conditions:
            print(f"jaxattn: warning: --conditions {args.conditions}: the run has {len(tr['trajectory'])} "
                  f"condition(s), all drawn", file=sys.stderr)
    for target in targets:
        render(tr, target, fps=args.fps, max_frames=args.max_frames, progress=args.progress)
        print(f"movie        {target}")
    if args.out is None and not encoder_available():
        print(f"movie.mp4    not written: {NO_ENCODER}")
    return 0


def render(tr: dict, target: Path, *, fps: float = 12.0, max_frames: int = 400, progress: bool = False) -> Path:
    """Write the trajectory ``tr`` (as :func:`jaxattn.io.trajectory.load_trajectory` returns it) to ``target``; a
    file in a run directory is recorded in its marker first."""
    _record(target)
    return movie(tr["trajectory"], target, ts=tr["ts"], observables=tr["observables"], titles=tr["titles"],
                 time_label=tr["time_label"], fps=fps, max_frames=max_frames, progress=progress)


def _record(path: Path) -> None:
    """Record a file jaxattn is about to write into a run directory (its marker) or beside a sweep store without
    one (its manifest: a ``solve`` run), so that an ``--overwrite`` of the run removes it too."""
    if rundir.read_marker(path.parent) is None and (path.parent / "manifest.json").is_file():
        record_file(path.parent, path.name)
    else:
        rundir.record(path)


def write_movie(out: Path, conditions: int = CONDITIONS, *, progress: bool = False, shown: Path | None = None
                ) -> list[Path]:
    """``--movie`` of ``simulate`` and ``solve``: the first ``conditions`` of the run just written into ``out``
    recomputed (:func:`recompute`), saved as ``trajectory.safetensors`` and rendered to ``movie.gif`` (and
    ``movie.mp4`` where an encoder is installed; one line on stdout where not). A trajectory that cannot be drawn
    (not finite) leaves the run as it is, with one warning line. The files are named in ``shown`` (default ``out``:
    the ``--out`` a replacement written in ``out`` is swapped into)."""
    try:
        tr = recompute(out, conditions)
    except ConfigError as e:
        print(f"jaxattn: warning: no movie: {e}", file=sys.stderr)
        return []
    _record(out / TRAJECTORY)  # jaxattn's, so that an --overwrite of the run removes it too
    save_trajectory(out / TRAJECTORY, tr["trajectory"], tr["ts"], observables=tr["observables"], titles=tr["titles"],
                    time_label=tr["time_label"], note=tr["note"])
    written = [render(tr, out / "movie.gif", progress=progress)]
    if encoder_available():
        written.append(render(tr, out / "movie.mp4", progress=progress))
    where = out if shown is None else shown
    print(f"trajectory   {where / TRAJECTORY}")  # the run's report listed its files before these were written
    for path in written:
        print(f"movie        {where / path.name}")
    if not encoder_available():
        print(f"movie.mp4    not written: {NO_ENCODER}")
    return written


def recompute(run_dir: Path, conditions: int) -> dict:
    """The trajectories of the first ``conditions`` of the finished ``simulate`` or ``solve`` run in ``run_dir``,
    as :func:`jaxattn.io.trajectory.load_trajectory` returns them (one panel per condition, the diameter and the
    run's other scalar observables in the corner). The observables recomputed are compared with those stored;
    a difference beyond round-off is said on stderr (the movie is still drawn)."""
    config = run_dir / "config.json"
    if not config.is_file():
        raise ConfigError(f"{run_dir} holds no saved trajectory ({TRAJECTORY}) and is not a finished simulate or "
                          "solve run (no config.json): nothing to render")
    try:
        record = json.loads(config.read_text())
    except (OSError, ValueError) as e:  # the run's own record, damaged: not "not a run"
        why = e.strerror if isinstance(e, OSError) and e.strerror else f"not valid JSON: {e}"
        raise ConfigError(f"{config} is unreadable ({why}): the run's trajectories cannot be recomputed without it; "
                          "restore it, or run the command again with --movie") from None
    command = record.get("command") if isinstance(record, dict) else None
    if command in ("simulate", "solve") and not isinstance(record.get("config"), dict):
        raise ConfigError(f"{config} records a {command} run without its configuration (an edited or damaged "
                          "file): the run's trajectories cannot be recomputed")
    if command not in ("simulate", "solve"):
        what = f"a `jaxattn {command}` run" if isinstance(command, str) else "no jaxattn run"
        raise ConfigError(f"{run_dir} holds no saved trajectory ({TRAJECTORY}) and its config.json records {what}, "
                          "not a finished simulate or solve run: nothing to render")
    tr = _simulate(run_dir, record["config"], conditions) if command == "simulate" else \
        _solve(run_dir, record["config"], conditions)
    worst = _compare(tr.pop("stored"), tr["observables"], tr.pop("every"), tr.pop("dtype"))
    if worst is not None:
        print(f"jaxattn: warning: the recomputed observables differ from those {run_dir} stored by up to {worst:.3g} "
              "(another jaxattn version or device?); the movie shows the recomputed trajectories", file=sys.stderr)
    return tr


def _simulate(run_dir: Path, cfg: dict, K: int) -> dict:
    K = min(K, int(cfg["num_init"]))
    dtype = dtype_arg(cfg["dtype"])
    model = load_model_arg(cfg["model"], cfg)
    if cfg.get("weights_sha256") not in (None, weights_sha256(model)):
        raise ConfigError(f"the model of {run_dir} ({cfg['model']}) is not the one the run used (its weights "
                          "changed): cannot recompute its trajectories")
    X0 = init_tokens(jax.random.key(cfg["seed"]), K, cfg["n"], model.d_model, kind=cfg["init"], dtype=dtype)
    res = simulate(model, X0, cfg["steps"], dynamics=dynamics_of(cfg), alpha=cfg["alpha"], beta=cfg["beta"],
                   save=Save(trajectory=True), batch=Batch(**fields_of(Batch, cfg)), dtype=dtype)
    stored = load_arrays(run_dir / "observables.safetensors")
    traj = np.asarray(res.trajectory, np.float64)
    if not np.all(np.isfinite(traj)):
        raise ConfigError(f"the recomputed trajectories of {run_dir} are not finite: nothing to draw")
    return {"trajectory": list(traj), "ts": np.arange(traj.shape[1], dtype=np.float64),
            "observables": _scalars(res.observables, K), "titles": [f"condition {i}" for i in range(K)],
            "time_label": "step", "note": f"jaxattn simulate: conditions 0-{K - 1} recomputed",
            "stored": {k.split(".", 1)[1]: v[:K] for k, v in stored.items() if k.startswith("observables.")},
            "every": 1, "dtype": cfg["dtype"]}


def _solve(run_dir: Path, cfg: dict, K: int) -> dict:
    p = point_of(expand(cfg)[0])
    if not isinstance(p.run, FlowRun):  # jaxattn solve writes flows only: the record was edited
        raise ConfigError(f"the solve run in {run_dir} records dynamics.kind = 'discrete': nothing to recompute")
    K = min(K, p.num_init)
    dtype = dtype_arg(p.dtype)
    model = p.build_model({})
    X0 = init_tokens(jax.random.key(p.seed), K, p.n, model.d_model, kind=p.init, dtype=dtype)
    every = max(1, math.ceil(FRAMES / (p.run.saves - 1)))  # the run's saved times are every `every`-th frame
    ts = np.linspace(0.0, p.run.t1, (p.run.saves - 1) * every + 1)
    sol = p.run.run(model, X0, Save(ts=ts, observe=p.save.observe, trajectory=True), p.batch, dtype)
    arrays = open_sweep(run_dir).arrays(0)
    traj = np.asarray(sol["trajectory"], np.float64)
    if not np.all(np.isfinite(traj)):
        raise ConfigError(f"the recomputed trajectories of {run_dir} are not finite (failed solves): nothing to draw")
    space = p.run.flow.space + (" rescaled" if p.run.flow.rescaled else "")
    return {"trajectory": list(traj), "ts": ts, "observables": _scalars(sol["observables"], K),
            "titles": [f"condition {i} ({space})" for i in range(K)], "time_label": "t",
            "note": f"jaxattn solve: conditions 0-{K - 1} recomputed",
            "stored": {k.split(".", 1)[1]: v[:K] for k, v in arrays.items() if k.startswith("observables.")},
            "every": every, "dtype": p.dtype}


def _scalars(observables, K: int) -> dict:
    """The observables with one number per saved time (``[K, T]``), for the corner of the movie."""
    out = {}
    items = observables.items() if isinstance(observables, dict) else []
    for name, v in items:
        a = np.asarray(v, np.float64)
        if a.ndim == 2 and a.shape[0] == K:
            out[name] = a
    return out


def _compare(stored: dict, recomputed: dict, every: int, dtype: str) -> float | None:
    """The largest difference between the stored observables and the recomputed ones at the run's saved times,
    when beyond round-off (``None`` when they agree)."""
    tol = 1e-4 if dtype == "float32" else 1e-9
    worst = 0.0
    for name, a in stored.items():
        if name not in recomputed:
            continue
        b = recomputed[name][:, ::every]
        a = np.asarray(a, np.float64)
        if a.shape != b.shape:
            return math.inf
        both = np.isfinite(a) & np.isfinite(b)
        if np.any(np.isfinite(a) != np.isfinite(b)):
            return math.inf
        diff = np.abs(a - b)[both] / (1.0 + np.abs(a[both]))
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst if worst > tol else None
