"""Confidence intervals of the proportions the studies report (basin fractions, good-triple rates)."""

from __future__ import annotations

import math
from statistics import NormalDist

from jaxattn.errors import ConfigError


def wilson(count: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``count / total`` at ``confidence``.

    Unlike the normal approximation it stays inside ``[0, 1]`` and is not empty at ``count = 0`` or
    ``count = total``; its width shrinks as ``1/sqrt(total)``.

    Examples:
        >>> lo, hi = wilson(50, 100)
        >>> round(lo, 4), round(hi, 4)
        (0.4038, 0.5962)
    """
    if total < 1:
        raise ConfigError(f"the number of samples must be >= 1, got {total}")
    if not 0 <= count <= total:
        raise ConfigError(f"count must be in [0, {total}], got {count}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence!r}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = count / total
    den = 1 + z * z / total
    mid = (p + z * z / (2 * total)) / den
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / den
    # the interval always holds p (rounding could put an end of it a hair inside when p is 0 or 1)
    return max(0.0, min(mid - half, p)), min(1.0, max(mid + half, p))
