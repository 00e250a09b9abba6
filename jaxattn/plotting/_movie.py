"""Movies of token trajectories, one frame per saved time: tokens on the circle (``d = 2``) or on a wire-frame
sphere (``d = 3``); for ``d > 3`` the tokens are projected on the top three principal directions of the final
state (the eigenvectors of ``Σ_i x_i x_iᵀ`` at the last saved time, completed from the whole trajectory when the
final state spans fewer than three), as each panel's title says. Tokens that are not on the unit sphere (the flat
flows) are drawn in axes fitted to the data. The time and the observables given are written in each panel's
corner. Several trajectories are drawn side by side."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from jaxattn.errors import ConfigError, integer, path_arg
from jaxattn.io.results import atomic_write_bytes
from jaxattn.io.trajectory import panels
from jaxattn.plotting._encode import FORMATS, NO_ENCODER, encoder_available, gif, mp4

#: Default size of one panel, pixels (width, height); even, as MP4 (yuv420p) needs.
PANEL = (320, 340)


def principal_directions(traj: np.ndarray, k: int = 3) -> np.ndarray:
    """``[d, k]`` orthonormal directions: the top eigenvectors of ``Σ_i x_i x_iᵀ`` at the last saved time of
    ``traj: [T, n, d]``, completed (when the final state spans fewer than ``k``) by those of the whole
    trajectory's second moment in the orthogonal complement."""
    final = traj[-1]
    w, v = np.linalg.eigh(final.T @ final)
    keep = v[:, ::-1][:, : int(np.sum(w > 1e-9 * max(w.max(), 1e-300)))][:, :k]
    if keep.shape[1] < k:
        rest = np.eye(traj.shape[-1]) - keep @ keep.T
        flat = traj.reshape(-1, traj.shape[-1]) @ rest
        _, v2 = np.linalg.eigh(flat.T @ flat)
        extra = rest @ v2[:, ::-1]
        for col in extra.T:  # Gram–Schmidt against what is kept (rounding)
            col = col - keep @ (keep.T @ col)
            if np.linalg.norm(col) > 1e-6:
                keep = np.concatenate([keep, (col / np.linalg.norm(col))[:, None]], axis=1)
            if keep.shape[1] == k:
                break
    return keep


def _layout(traj: np.ndarray) -> tuple[np.ndarray, str, bool]:
    """The coordinates drawn ``[T, n, c]`` (c = 1, 2 or 3), a note for the title, whether on the unit sphere."""
    d = traj.shape[-1]
    on_sphere = d >= 2 and bool(np.max(np.abs(np.linalg.norm(traj, axis=-1) - 1.0)) < 1e-3)
    if d <= 3:
        return traj, "", on_sphere
    P = principal_directions(traj, 3)
    return traj @ P, f"d = {d}: top 3 principal directions of the final state", on_sphere


def _colours(coords: np.ndarray, color) -> np.ndarray | str:
    if color is not None:
        return color
    import matplotlib

    first = coords[0]
    angle = np.arctan2(first[:, 1], first[:, 0]) if first.shape[1] >= 2 else first[:, 0]
    rank = np.argsort(np.argsort(angle))  # tokens coloured by where they start: a cluster gathers one hue range
    return matplotlib.colormaps["hsv"](rank / max(len(rank), 1) * 0.9)


def _fmt(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else str(v)


def _render(trajs: list[np.ndarray], ts: np.ndarray, obs: Mapping[str, np.ndarray], titles: Sequence[str],
            time_label: str, panel: tuple[int, int], dpi: int, color, progress: bool,
            indices: np.ndarray) -> Iterator[np.ndarray]:
    try:  # the object-oriented API: no pyplot, no global backend, nothing left open
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Circle
    except ImportError:  # pragma: no cover - matplotlib is the [plot] extra
        raise ConfigError("movies need matplotlib (pip install 'jaxattn[plot]')") from None
    from tqdm.auto import tqdm  # widgets in a notebook, text in a terminal

    K = len(trajs)
    W, H = panel
    fig = Figure(figsize=(K * W / dpi, H / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    artists = []
    for k in range(K):
        coords, note, on_sphere = _layout(trajs[k])
        c = coords.shape[-1]
        title = titles[k] if k < len(titles) else ""
        title = "\n".join(s for s in (title, note) if s)
        if c == 3:
            ax = fig.add_subplot(1, K, k + 1, projection="3d")
            if on_sphere:
                u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
                ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.75", lw=0.4)
                lim = np.array([-1.0, 1.0])
            else:
                m = float(np.max(np.abs(coords))) or 1.0
                lim = np.array([-m, m])
            ax.set(xlim=lim, ylim=lim, zlim=lim)
            ax.set_box_aspect((1, 1, 1), zoom=1.25)
            ax.view_init(elev=20, azim=35)
            ax.set_axis_off()
            sc = ax.scatter(*coords[0].T, s=14, c=_colours(coords, color), depthshade=False)
            label = ax.text2D(0.02, 0.02, "", transform=ax.transAxes, fontsize=8, family="monospace")
        else:
            ax = fig.add_subplot(1, K, k + 1)
            xy = coords if c == 2 else np.stack([coords[..., 0], np.broadcast_to(np.arange(coords.shape[1]),
                                                                                 coords.shape[:2])], axis=-1)
            if on_sphere and c == 2:
                ax.add_patch(Circle((0, 0), 1.0, fill=False, color="0.7", lw=0.8))
                ax.set(xlim=(-1.15, 1.15), ylim=(-1.15, 1.15))
            else:
                lo, hi = xy.reshape(-1, 2).min(0), xy.reshape(-1, 2).max(0)
                pad = 0.08 * np.maximum(hi - lo, 1e-9)
                ax.set(xlim=(lo[0] - pad[0], hi[0] + pad[0]), ylim=(lo[1] - pad[1], hi[1] + pad[1]))
            ax.set_aspect("equal" if c == 2 else "auto")
            ax.set_xticks([])
            ax.set_yticks([])
            for s in ax.spines.values():
                s.set_visible(c == 1)
            sc = ax.scatter(xy[0, :, 0], xy[0, :, 1], s=14, c=_colours(coords, color))
            coords = xy
            label = ax.text(0.02, 0.02, "", transform=ax.transAxes, fontsize=8, family="monospace")
        ax.set_title(title, fontsize=9)
        artists.append((sc, label, coords, c == 3))
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.86, wspace=0.05)
    for f in tqdm(indices, desc="movie", unit="frame", disable=not progress, file=sys.stderr, leave=False):
        for k, (sc, label, coords, three) in enumerate(artists):
            sc.set_offsets(coords[f][:, :2])
            if three:  # the heights of a 3-D scatter, from the offsets just set
                sc.set_3d_properties(coords[f][:, 2], "z")
            lines = [f"{time_label} = {_fmt(float(ts[f]))}"]
            lines += [f"{name} = {_fmt(float(v[k, f]))}" for name, v in obs.items()]
            label.set_text("\n".join(lines))
        canvas.draw()
        yield np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _inputs(trajectory, ts, observables, titles, panel, fps, max_frames):
    trajs = panels(trajectory)
    K, T = len(trajs), trajs[0].shape[0]
    ts = np.arange(T, dtype=np.float64) if ts is None else np.asarray(ts, np.float64).reshape(-1)
    if ts.shape != (T,):
        raise ConfigError(f"ts must hold one time per saved state ({T}), got {ts.shape[0]}")
    obs = {}
    for name, v in (observables or {}).items():
        a = np.asarray(v, np.float64)
        a = np.broadcast_to(a, (K, T)) if a.shape in ((T,), (1, T)) else a
        if a.shape != (K, T):
            raise ConfigError(f"observable {name!r} must be [T] or [K, T] = [{K}, {T}], got {a.shape}")
        obs[str(name)] = a
    titles = [str(t) for t in (titles or [])]
    if len(titles) > K:
        raise ConfigError(f"{len(titles)} titles for {K} trajectories")
    W, H = (int(v) for v in panel)
    if W < 64 or H < 64 or W % 2 or H % 2:
        raise ConfigError(f"panel must be (width, height) in even pixels >= 64, got {tuple(panel)}")
    if not (isinstance(fps, (int, float)) and 0 < fps <= 100):
        raise ConfigError(f"fps must be a number in (0, 100], got {fps!r}")
    integer("max_frames", max_frames, minimum=2)
    # at most max_frames frames, evenly spread over the saved states, the first and the last among them
    idx = np.unique(np.round(np.linspace(0, T - 1, min(T, max_frames))).astype(int))
    return trajs, ts, obs, titles, (W, H), idx


def frames(trajectory, *, ts=None, observables: Mapping | None = None, titles: Sequence[str] | None = None,
           time_label: str = "t", panel: tuple[int, int] = PANEL, dpi: int = 80, color=None,
           max_frames: int = 400, progress: bool = False) -> np.ndarray:
    """The frames of :func:`movie` as ``[F, H, W, 3]`` uint8 RGB (``W`` = panels × the panel width)."""
    trajs, ts, obs, titles, panel, idx = _inputs(trajectory, ts, observables, titles, panel, 10, max_frames)
    return np.stack(list(_render(trajs, ts, obs, titles, time_label, panel, dpi, color, progress, idx)))


def movie(trajectory, path, *, ts=None, observables: Mapping | None = None, titles: Sequence[str] | None = None,
          time_label: str = "t", fps: float = 12, panel: tuple[int, int] = PANEL, dpi: int = 80, color=None,
          max_frames: int = 400, progress: bool = False) -> Path:
    """Render ``trajectory`` (``[T, n, d]``; ``[K, T, n, d]`` or a list of K ``[T, n_k, d_k]``: K panels side by
    side) into ``path``, an animated
    GIF or (with an encoder, see :func:`encoder_available`) an MP4, by its suffix; written atomically. An existing
    file at ``path`` is replaced, as NumPy's, PyTorch's and safetensors' savers replace theirs (``jaxattn movie``
    refuses one without ``--overwrite``); a path ending in anything but ``.gif`` or ``.mp4`` (a ``.txt``) is refused,
    never replaced by a movie.

    Args:
        ts: the saved times ``[T]`` (default: the frame index, ``time_label`` then naming it).
        observables: ``{name: [T] or [K, T]}`` written in each panel's corner with the time.
        titles: one per panel.
        time_label: what the time is called in the corner (``'t'``, ``'step'``).
        fps: frames per second. panel: (width, height) of one panel in pixels (even).
        color: one colour for every token (a Matplotlib colour); default: tokens coloured by where they start.
        max_frames: most frames; a longer trajectory is sampled evenly (first and last saved states kept).
        progress: a progress bar on stderr while the frames render.

    Returns:
        ``path``. One frame per saved state (up to ``max_frames``), each ``K × width`` by ``height`` pixels (in a
        GIF, a frame identical to the one before is merged into it, shown as long as both).

    Examples:
        >>> import numpy as np, tempfile, os, jaxattn as ja
        >>> theta = np.linspace(0, 1, 5)[:, None] * np.linspace(0.0, 3.0, 7)[None, :]    # 5 saved states, 7 tokens
        >>> X = np.stack([np.cos(theta), np.sin(theta)], axis=-1)                        # [T, n, 2] on the circle
        >>> path = ja.plots.movie(X, os.path.join(tempfile.mkdtemp(), "m.gif"), ts=np.linspace(0, 2, 5))
        >>> from PIL import Image
        >>> im = Image.open(path); (im.n_frames, im.size)
        (5, (320, 340))
    """
    path = path_arg("movie: path", path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ConfigError(f"a movie is a .gif or an .mp4 file, got {path.name!r}")
    if fmt == "mp4" and not encoder_available():
        raise ConfigError(NO_ENCODER)
    trajs, ts, obs, titles, panel, idx = _inputs(trajectory, ts, observables, titles, panel, fps, max_frames)
    rendered = _render(trajs, ts, obs, titles, time_label, panel, dpi, color, progress, idx)
    data = gif(rendered, fps) if fmt == "gif" else mp4(rendered, fps)
    return atomic_write_bytes(path, data)


__all__ = ["PANEL", "frames", "movie", "principal_directions"]
