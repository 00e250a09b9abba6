"""Drawing shared by the studies and the command line: movies of token trajectories, an animated GIF (Pillow, no
external program) or an MP4 (where an encoder is installed: the ``imageio-ffmpeg`` package, which ships its own
``ffmpeg``; the ``jaxattn[movie]`` extra).

:func:`movie` renders a trajectory ``[T, n, d]``, or several side by side (``[K, T, n, d]`` or a list of
``[T, n_k, d_k]``), to a file; :func:`frames` returns the frames as arrays instead. A trajectory saved to disk
(:mod:`jaxattn.io.trajectory`) is drawn by ``jaxattn movie RUN_DIR`` (:mod:`jaxattn.cli.movie`). Users reach
these as ``jaxattn.plots.movie`` and ``jaxattn.plots.frames``.
"""

from jaxattn.plotting._encode import FORMATS as FORMATS
from jaxattn.plotting._encode import NO_ENCODER as NO_ENCODER
from jaxattn.plotting._encode import encoder_available as encoder_available
from jaxattn.plotting._movie import PANEL as PANEL
from jaxattn.plotting._movie import frames as frames
from jaxattn.plotting._movie import movie as movie
from jaxattn.plotting._movie import principal_directions as principal_directions

__all__ = ["FORMATS", "NO_ENCODER", "PANEL", "encoder_available", "frames", "movie", "principal_directions"]
