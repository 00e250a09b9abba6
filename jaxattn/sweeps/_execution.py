"""Running one grid point's chunk: the rows a chunk computes and the path (fused kernel or plain) its chunks take.
What a point runs is its :class:`jaxattn.sweeps._point.Point` (model, dynamics, ``Save``, ``Batch``)."""

from __future__ import annotations

from jaxattn.dynamics import choose_path, lanes_for
from jaxattn.sweeps._point import MapRun, Point


def _rows(chunk: int, num_init: int, batch) -> int:
    """Conditions computed per chunk of a point: the chunk, or fewer when the whole point is smaller,
    rounded up to whole blocks of the runner (``batch.size`` lanes per device)."""
    width = lanes_for(batch.size) * (1 if batch.devices is None else len(batch.devices))
    return min(chunk, -(-num_init // width) * width)


def _kernel_choice(pt: Point, model) -> str:
    """The path a point's chunks take: 'fused' (Pallas kernel), 'plain' or 'diffrax' (flows)."""
    if not isinstance(pt.run, MapRun):
        return "diffrax"
    return choose_path(pt.batch.path, model, pt.run.dynamics, pt.save.observe, pt.save.trajectory, pt.save.every,
                       pt.n)
