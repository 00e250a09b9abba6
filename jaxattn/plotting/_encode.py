"""Frames to a movie file's bytes: an animated GIF (Pillow, no external program) or an MP4 (the ``imageio-ffmpeg``
package, which ships its own ``ffmpeg``: the ``jaxattn[movie]`` extra)."""

from __future__ import annotations

import io
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

#: Formats a movie is written in, by file suffix.
FORMATS = ("gif", "mp4")
#: The one line said where an MP4 is asked for and no encoder is installed.
NO_ENCODER = ("MP4 needs an encoder: pip install imageio-ffmpeg (the jaxattn[movie] extra, which ships its own "
              "ffmpeg); GIF needs none")


def encoder_available() -> bool:
    """Whether MP4 can be written (the ``imageio-ffmpeg`` package and its ``ffmpeg`` are installed)."""
    try:
        import imageio_ffmpeg

        return Path(imageio_ffmpeg.get_ffmpeg_exe()).is_file()
    except (ImportError, RuntimeError, OSError):
        return False


def gif(rendered: Iterator[np.ndarray], fps: float) -> bytes:
    """The RGB frames ``[H, W, 3]`` (uint8) as an animated GIF, looping, ``fps`` frames per second (at most 50:
    browsers slow a GIF with shorter frame delays than 20 ms down). A frame identical to the one before is merged
    into it (shown for both durations)."""
    from PIL import Image

    # Each frame takes its own 255 colours (median cut: a frame of tokens, circles and text has few colours, so
    # they come through all but exactly); Pillow's mapping onto one fixed palette goes through a coarse colour cache
    # (it turned the white background 252 grey). The 256th index is left free: with optimize, Pillow crops each
    # frame to what moved and makes that index transparent where a pixel did not change (small files).
    quantised = [Image.fromarray(f).quantize(colors=255, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
                 for f in rendered]
    buf = io.BytesIO()
    quantised[0].save(buf, format="GIF", save_all=True, append_images=quantised[1:],
                      duration=max(round(1000 / fps), 20), loop=0, disposal=1, optimize=True)
    return buf.getvalue()


def mp4(rendered: Iterator[np.ndarray], fps: float) -> bytes:
    """The RGB frames ``[H, W, 3]`` (uint8, even sizes) as an H.264 MP4 (yuv420p), ``fps`` frames per second."""
    import imageio_ffmpeg

    first = next(rendered)
    H, W = first.shape[:2]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # ffmpeg runs as a child process; Python warns about any fork under JAX's threads, but the child
        # execs ffmpeg at once (subprocess), which is safe
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        out = os.path.join(tmp, "movie.mp4")
        writer = imageio_ffmpeg.write_frames(out, (W, H), fps=fps, codec="libx264", pix_fmt_in="rgb24",
                                             pix_fmt_out="yuv420p", macro_block_size=2, ffmpeg_log_level="error")
        writer.send(None)
        writer.send(np.ascontiguousarray(first).tobytes())
        for f in rendered:
            writer.send(np.ascontiguousarray(f).tobytes())
        writer.close()
        return Path(out).read_bytes()
