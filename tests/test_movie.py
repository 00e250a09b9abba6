"""Movies of trajectories (issue 33): frame count and size, the tokens of the first and last frames where the
trajectory puts them, the GIF Pillow writes, MP4 where an encoder is installed (one line where not), trajectory
files, ``jaxattn movie RUN_DIR`` and ``--movie`` of ``simulate`` and ``solve``."""

from __future__ import annotations

import json
import shutil
import sys

import jax
import numpy as np
import pytest
from PIL import Image

import jaxattn as ja
from jaxattn import plotting
from jaxattn.cli import main
from jaxattn.errors import ConfigError
from jaxattn.io.trajectory import load_trajectory, save_trajectory


def _circle(T=6, n=3):
    """``[T, n, 2]`` tokens on the unit circle, far apart, each turning by a different angle."""
    start = np.array([0.3, 2.4, 4.4])[:n]
    turn = np.array([0.8, -0.5, 1.2])[:n]
    theta = start[None] + np.linspace(0, 1, T)[:, None] * turn[None]
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def _blobs(mask):
    """Centroids ``(row, col)`` of the connected components of a boolean image (4-neighbour flood fill)."""
    seen = np.zeros_like(mask)
    out = []
    for r0, c0 in zip(*np.nonzero(mask), strict=True):
        if seen[r0, c0]:
            continue
        stack, pix = [(r0, c0)], []
        seen[r0, c0] = True
        while stack:
            r, c = stack.pop()
            pix.append((r, c))
            for rr, cc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if 0 <= rr < mask.shape[0] and 0 <= cc < mask.shape[1] and mask[rr, cc] and not seen[rr, cc]:
                    seen[rr, cc] = True
                    stack.append((rr, cc))
        if len(pix) >= 5:
            out.append(np.mean(pix, axis=0))
    return out


def _tokens_in(frame: np.ndarray) -> np.ndarray:
    """Where the red tokens of a frame are, in the coordinates of the unit circle drawn in it (its centre and
    radius found from its grey pixels)."""
    f = frame.astype(int)
    rows, cols = np.nonzero(np.abs(f - 179).max(-1) <= 12)  # the circle, colour 0.7 grey (and grey text edges)
    keep = np.ones(rows.size, bool)
    for _ in range(3):  # least-squares circle, the pixels far from it (the text of the corner) dropped
        A = np.stack([cols[keep], rows[keep], np.ones(keep.sum())], axis=1)
        (a, b, c), *_ = np.linalg.lstsq(A, cols[keep] ** 2 + rows[keep] ** 2, rcond=None)
        cx, cy = a / 2, b / 2
        radius = np.sqrt(c + cx * cx + cy * cy)
        keep = np.abs(np.hypot(cols - cx, rows - cy) - radius) < 3
    red = (f[..., 0] > 200) & (f[..., 1] < 80) & (f[..., 2] < 80)
    return np.array([[(c - cx) / radius, (cy - r) / radius] for r, c in _blobs(red)])


def _match(found: np.ndarray, want: np.ndarray, tol: float) -> None:
    assert len(found) == len(want), (found, want)
    for w in want:
        assert np.min(np.linalg.norm(found - w, axis=1)) < tol, (found, want)


def test_gif_frames_size_and_tokens(tmp_path):
    X = _circle()
    path = ja.plots.movie(X, tmp_path / "m.gif", ts=np.linspace(0.0, 1.0, 6), color="red")
    with Image.open(path) as im:
        assert im.n_frames == 6 and im.size == plotting.PANEL
        frames = []
        for k in range(im.n_frames):
            im.seek(k)
            frames.append(np.asarray(im.convert("RGB")))
    _match(_tokens_in(frames[0]), X[0], 0.04)
    _match(_tokens_in(frames[-1]), X[-1], 0.04)
    # the frames of the file are those of frames() (up to the GIF's 255 colours)
    direct = ja.plots.frames(X, ts=np.linspace(0.0, 1.0, 6), color="red")
    assert direct.shape == (6, plotting.PANEL[1], plotting.PANEL[0], 3)
    assert np.mean(np.abs(direct[-1].astype(int) - frames[-1].astype(int))) < 2.0


def test_panels_side_by_side_of_any_dimension(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 6, 8))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    panels = [_circle(5), X[:, :, :3] / np.linalg.norm(X[:, :, :3], axis=-1, keepdims=True), X, 3.0 * X[..., :2]]
    path = ja.plots.movie(panels, tmp_path / "p.gif", observables={"E": np.ones((4, 5))}, titles=["a", "b", "c", "d"],
                          panel=(200, 220), max_frames=3)
    with Image.open(path) as im:
        assert im.n_frames == 3 and im.size == (4 * 200, 220)  # 3 of 5 saved states, evenly: 0, 2, 4


def test_principal_directions_span_the_final_state():
    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(8, 3)))[0]
    traj = rng.normal(size=(4, 10, 8))
    traj[-1] = rng.normal(size=(10, 3)) @ basis.T  # the final state lies in a 3-D subspace
    P = plotting.principal_directions(traj)
    np.testing.assert_allclose(P @ (P.T @ traj[-1].T), traj[-1].T, atol=1e-10)
    # a final state of one point: completed from the whole trajectory, orthonormal
    traj[-1] = np.tile(basis[:, 0], (10, 1))
    P = plotting.principal_directions(traj)
    np.testing.assert_allclose(P.T @ P, np.eye(3), atol=1e-10)
    assert abs(abs(P[:, 0] @ basis[:, 0]) - 1) < 1e-10


@pytest.mark.skipif(not plotting.encoder_available(), reason="no MP4 encoder (pip install imageio-ffmpeg)")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # the reader's ffmpeg child process
def test_mp4_frames_and_size(tmp_path):
    import imageio_ffmpeg

    path = ja.plots.movie(_circle(7), tmp_path / "m.mp4", fps=5)
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    assert tuple(meta["size"]) == plotting.PANEL
    assert sum(1 for _ in reader) == 7


def test_mp4_without_an_encoder_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if not installed: its import fails
    assert not plotting.encoder_available()
    with pytest.raises(ConfigError, match="MP4 needs an encoder: pip install imageio-ffmpeg"):
        plotting.movie(_circle(), tmp_path / "m.mp4")
    assert not (tmp_path / "m.mp4").exists()


@pytest.mark.parametrize("bad,match", [
    (dict(trajectory=np.full((3, 2, 2), np.nan)), "non-finite"),
    (dict(trajectory=np.zeros((3, 2))), r"\[T, n, d\]"),
    (dict(path="m.avi"), "a .gif or an .mp4"),
    (dict(ts=[0.0, 1.0]), "one time per saved state"),
    (dict(panel=(101, 200)), "even pixels"),
    (dict(trajectory=[_circle(4), _circle(5)]), "one number of saved states"),
])
def test_refusals(tmp_path, bad, match):
    args = dict(trajectory=_circle(), path="m.gif") | bad
    with pytest.raises(ConfigError, match=match):
        plotting.movie(args.pop("trajectory"), tmp_path / args.pop("path"), **args)


def test_trajectory_files_round_trip(tmp_path):
    X = _circle()
    E = np.stack([np.linspace(1.0, 0.0, 6), np.linspace(2.0, 1.0, 6)])
    save_trajectory(tmp_path / "t.safetensors", [X, X[:, :2]], np.arange(6.0) / 2, observables={"E": E, "one": 1.0},
                    titles=["x", "y"], time_label="step", note="n")
    tr = load_trajectory(tmp_path / "t.safetensors")
    np.testing.assert_array_equal(tr["trajectory"][0], X)
    np.testing.assert_array_equal(tr["trajectory"][1], X[:, :2])
    np.testing.assert_array_equal(tr["ts"], np.arange(6.0) / 2)
    np.testing.assert_array_equal(tr["observables"]["E"], E)
    np.testing.assert_array_equal(tr["observables"]["one"], np.ones((2, 6)))  # a scalar, broadcast to [K, T]
    assert (tr["titles"], tr["time_label"], tr["note"]) == (["x", "y"], "step", "n")
    (tmp_path / "bad.safetensors").write_bytes(b"not a file")
    with pytest.raises(ConfigError, match="not a readable trajectory"):
        load_trajectory(tmp_path / "bad.safetensors")
    ja.save_checkpoint(ja.random_model(jax.random.key(0), 4, 1, 1), tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match="is not a jaxattn trajectory file"):  # safetensors, but not a trajectory
        load_trajectory(tmp_path / "model.safetensors")


def test_trajectory_files_keep_their_layout(tmp_path):
    """The names and metadata of the file are its format: files written before (``metastability`` runs, ``--movie``)
    load as they are."""
    from safetensors import safe_open

    save_trajectory(tmp_path / "t.safetensors", np.stack([_circle(), _circle()]), np.arange(6.0),
                    observables={"E": np.ones(6)}, titles=["a", "b"], note="n")
    with safe_open(str(tmp_path / "t.safetensors"), framework="numpy") as f:
        assert sorted(f.keys()) == ["observables.E", "trajectory.0", "trajectory.1", "ts"]
        assert f.metadata() == {"format": "jaxattn-trajectory", "titles": '["a", "b"]', "time_label": "t",
                                "note": "n"}
        assert f.get_tensor("trajectory.0").dtype == np.float64 and f.get_tensor("observables.E").shape == (2, 6)


def test_the_gif_is_looping_frames_of_the_rendered_colours(tmp_path):
    """Pillow writes the GIF: every saved state a frame of the panel's size, each shown 1/fps s, looping forever, in
    the colours rendered (the white background stays white); a frame identical to the one before is merged into
    it."""
    X = _circle(5)
    path = plotting.movie(X, tmp_path / "m.gif", fps=5, ts=np.arange(5.0))
    direct = plotting.frames(X, ts=np.arange(5.0))
    with Image.open(path) as im:
        assert (im.format, im.n_frames, im.size, im.info["loop"]) == ("GIF", 5, plotting.PANEL, 0)
        for k in range(im.n_frames):
            im.seek(k)
            assert im.info["duration"] == 200
            shown = np.asarray(im.convert("RGB"), int)
            assert np.mean(np.abs(shown - direct[k])) < 0.5 and np.all(shown[0, 0] == 255), k
    still = np.stack([X[0], X[0], X[1]])  # two identical frames (the same time in the corner), then one that moved
    with Image.open(plotting.movie(still, tmp_path / "s.gif", fps=10, ts=[0.0, 0.0, 1.0])) as im:
        assert im.n_frames == 2 and im.info["duration"] == 200


def test_writers_replace_only_files_of_their_format(tmp_path):
    """The movie writer replaces an existing file as NumPy and safetensors do (and says so), but never a file of
    another format: a user's .txt stays as it was, for the movie and its trajectory file alike."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(ConfigError, match=r"a \.gif or an \.mp4 file, got 'notes\.txt'"):
        plotting.movie(_circle(), notes)
    with pytest.raises(ConfigError, match=r"^a trajectory file is a \.safetensors file, got 'notes.txt'$"):
        save_trajectory(notes, _circle(), np.arange(6.0))
    with pytest.raises(ConfigError, match=r"^movie: path must name a path"):
        plotting.movie(_circle(), None)
    assert notes.read_text() == "mine"
    gif = tmp_path / "m.gif"
    gif.write_bytes(b"an earlier movie")
    plotting.movie(_circle(), gif)
    with Image.open(gif) as im:
        assert im.n_frames == 6
    for fn in (plotting.movie, save_trajectory):
        assert "existing file" in " ".join(fn.__doc__.split()) and "replaced" in fn.__doc__


# ---------------------------------------------------------------- the command line
SIM = ["simulate", "--num-init", "6", "--n", "4", "--d", "3", "--heads", "1", "--depth", "2", "--steps", "5",
       "--chunk", "4", "--no-progress"]
SOLVE = ["solve", "--num-init", "4", "--n", "4", "--d", "5", "--heads", "1", "--t1", "2", "--saves", "5", "--chunk",
         "4", "--quiet"]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """A finished simulate run without a movie (copied by the tests that change it)."""
    out = tmp_path_factory.mktemp("runs") / "sim"
    assert main([*SIM, "--out", str(out)]) == 0
    return out


@pytest.mark.e2e
def test_movie_of_a_simulate_run_recomputes_its_conditions(simulated, tmp_path, capsys):
    out = tmp_path / "sim"
    shutil.copytree(simulated, out)
    assert main(["movie", str(out), "--no-progress", "--conditions", "2"]) == 0
    with Image.open(out / "movie.gif") as im:
        assert im.n_frames == 6 and im.size == (2 * plotting.PANEL[0], plotting.PANEL[1])  # steps 0..5, two conditions
    marker = json.loads((out / ".jaxattn-run.json").read_text())
    assert "movie.gif" in marker["files"] and marker["finished"]  # an --overwrite of the run removes it too
    assert "warning" not in capsys.readouterr().err  # the recomputed observables are the stored ones
    assert main(["movie", str(out), "--no-progress"]) == 2  # the movie exists
    assert "exists" in capsys.readouterr().err
    assert main(["movie", str(out), "--no-progress", "--overwrite", "--out", str(tmp_path / "x.gif")]) == 0


def test_a_run_whose_observables_differ_is_said(simulated, tmp_path, capsys):
    out = tmp_path / "sim"
    shutil.copytree(simulated, out)
    from jaxattn.io.results import load_arrays, save_arrays

    arrays = load_arrays(out / "observables.safetensors")
    arrays["observables.diameter"][0, 3] += 0.5
    save_arrays(out / "observables.safetensors", arrays)
    assert main(["movie", str(out), "--no-progress", "--out", str(tmp_path / "m.gif")]) == 0
    assert "differ from those" in capsys.readouterr().err


@pytest.mark.e2e
def test_simulate_and_solve_with_movie(tmp_path, capsys):
    assert main([*SIM, "--out", str(tmp_path / "s"), "--movie"]) == 0
    said = capsys.readouterr().out  # the files written after the run's report are said
    assert f"movie        {tmp_path / 's' / 'movie.gif'}" in said and "trajectory.safetensors" in said
    tr = load_trajectory(tmp_path / "s" / "trajectory.safetensors")
    assert len(tr["trajectory"]) == 3 and tr["trajectory"][0].shape == (6, 4, 3) and tr["time_label"] == "step"
    assert main([*SOLVE, "--out", str(tmp_path / "v"), "--movie"]) == 0
    tr = load_trajectory(tmp_path / "v" / "trajectory.safetensors")
    assert tr["trajectory"][0].shape == (101, 4, 5)  # 4 intervals of the run, 25 frames each
    stored = ja.open_sweep(tmp_path / "v").arrays(0)["observables.diameter"][:3]
    np.testing.assert_allclose(tr["observables"]["diameter"][:, ::25], stored, rtol=1e-5)
    with Image.open(tmp_path / "v" / "movie.gif") as im:
        assert im.n_frames == 101
    assert (tmp_path / "v" / "movie.mp4").exists() == plotting.encoder_available()


def test_movie_refuses_what_it_cannot_draw(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["movie", str(tmp_path / "empty"), "--no-progress"]) == 2
    assert "holds no saved trajectory" in capsys.readouterr().err
    assert main(["movie", str(tmp_path / "nowhere")]) == 2
    assert main(["movie", str(tmp_path / "empty"), "--fps", "0"]) == 2
    assert "--fps must be in (0, 100]" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_damaged_config_and_too_many_conditions_are_said(simulated, tmp_path, capsys):
    """A run whose config.json is corrupt was called "not a finished run"; --conditions beyond the run's conditions
    was capped silently."""
    out = tmp_path / "sim"
    shutil.copytree(simulated, out)
    assert main(["movie", str(out), "--no-progress", "--conditions", "100", "--out", str(tmp_path / "m.gif")]) == 0
    assert "jaxattn: warning: --conditions 100: the run has 6 condition(s), all drawn" in capsys.readouterr().err
    with Image.open(tmp_path / "m.gif") as im:
        assert im.size == (6 * plotting.PANEL[0], plotting.PANEL[1])
    (out / "config.json").write_text('{"command": "simulate", "conf')
    assert main(["movie", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'config.json'} is unreadable (not valid JSON" in err and "not a finished" not in err
    (out / "config.json").write_text('{"command": "analyze", "config": {}}')
    assert main(["movie", str(out), "--no-progress"]) == 2
    assert "its config.json records a `jaxattn analyze` run, not a finished simulate" in capsys.readouterr().err
