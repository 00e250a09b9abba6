"""Plateaus of a signal sampled in time, and the statistics of how long they last (dynamic metastability).

* :func:`plateaus`: the flat stretches of a signal ``y(t)`` — maximal runs of saved times between which
  ``y`` changes by at most ``tol``, lasting at least a factor ``min_ratio`` in time (a plateau of a
  staircase drawn against ``log t``: the time grid is usually logarithmic). Each plateau has a level, a
  start, an end and whether it was still going at the last saved time (censored).
* :func:`kaplan_meier_median`: the median of durations some of which are censored (still running when
  the observation stopped): the Kaplan–Meier estimate, ``inf`` when more than half may outlast the
  observation.
* :func:`rate_fit`: ``log(median duration) = a + c x`` fitted over groups (e.g. ``x = β``), with a
  bootstrap confidence interval for ``c`` (conditions resampled within each group), and the residuals of
  the competing power law ``log(median) = a + p log x``.

Host NumPy throughout: these run once per condition on saved observables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxattn.errors import ConfigError


class Plateau(NamedTuple):
    """One flat stretch of a signal: saved-time indices ``start..stop`` (inclusive)."""

    start: int
    stop: int
    t_start: float
    t_end: float
    level: float  # mean of the signal over the plateau
    censored: bool  # the plateau reaches the last saved time: its end is not observed

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


def _times_and_signal(ts, y) -> tuple[np.ndarray, np.ndarray]:
    ts, y = np.asarray(ts, np.float64), np.asarray(y, np.float64)
    if ts.ndim != 1 or y.shape != ts.shape or ts.size < 2:
        raise ConfigError(f"ts and y must be 1-D of one length >= 2, got shapes {ts.shape} and {y.shape}")
    if not (np.all(np.isfinite(ts)) and np.all(np.diff(ts) > 0) and ts[0] >= 0):
        raise ConfigError("ts must be finite, increasing times >= 0")
    return ts, y


def plateaus(ts, y, *, tol: float, min_ratio: float = 2.0) -> list[Plateau]:
    """The plateaus of ``y`` sampled at times ``ts`` (increasing, ``>= 0``).

    A plateau is a maximal run of saved times ``i..j`` over which ``max y − min y <= tol`` (so its
    level is defined to within ``tol``) and whose times span at least a factor ``min_ratio``
    (``t_j >= min_ratio · t_i``; a run starting at ``t = 0`` always does). Runs are taken greedily from
    the left: each starts at the first saved time not in an earlier plateau that begins one, and
    extends as far as it can. A non-finite value ends a run. ``censored``: the run reaches the last
    saved time.

    Examples:
        >>> import numpy as np
        >>> ts = np.geomspace(1.0, 1e4, 41)
        >>> y = np.where(ts < 100.0, 0.25, 0.5)                    # one step at t = 100
        >>> [(p.level, round(p.t_start), round(p.t_end), p.censored) for p in plateaus(ts, y, tol=1e-3)]
        [(0.25, 1, 79, False), (0.5, 100, 10000, True)]
    """
    ts, y = _times_and_signal(ts, y)
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise ConfigError(f"tol must be a finite number >= 0, got {tol!r}")
    if not (isinstance(min_ratio, (int, float)) and math.isfinite(min_ratio) and min_ratio >= 1):
        raise ConfigError(f"min_ratio must be a finite number >= 1, got {min_ratio!r}")
    T = len(ts)
    out: list[Plateau] = []
    i = 0
    while i < T:
        if not np.isfinite(y[i]):
            i += 1
            continue
        lo = hi = y[i]
        j = i
        while j + 1 < T and np.isfinite(y[j + 1]) and max(hi, y[j + 1]) - min(lo, y[j + 1]) <= tol:
            j += 1
            lo, hi = min(lo, y[j]), max(hi, y[j])
        if j > i and (ts[i] == 0 or ts[j] >= min_ratio * ts[i]):
            out.append(Plateau(i, j, float(ts[i]), float(ts[j]), float(np.mean(y[i:j + 1])), j == T - 1))
            i = j + 1
        else:
            i += 1
    return out


def kaplan_meier_median(durations, censored) -> float:
    """The Kaplan–Meier median of ``durations``, of which those flagged ``censored`` are lower bounds (the
    observation ended first): the first duration at which the estimated survival falls to 1/2 or below;
    ``inf`` if it never does (more than half may last longer than observed); ``nan`` without data.

    Examples:
        >>> kaplan_meier_median([1.0, 2.0, 3.0], [False, False, False])
        2.0
        >>> kaplan_meier_median([1.0, 5.0, 5.0, 5.0], [False, True, True, True])
        inf
    """
    d = np.asarray(durations, np.float64).reshape(-1)
    c = np.asarray(censored, bool).reshape(-1)
    if d.shape != c.shape:
        raise ConfigError(f"durations and censored must have one length, got {d.shape} and {c.shape}")
    if d.size == 0:
        return float("nan")
    order = np.lexsort((c, d))  # by duration; an event before a censoring at the same duration
    d, c = d[order], c[order]
    surv, at_risk = 1.0, d.size
    for x, cens in zip(d, c, strict=True):
        if not cens:
            surv *= 1.0 - 1.0 / at_risk
            if surv <= 0.5 + 1e-12:
                return float(x)
        at_risk -= 1
    return float("inf")


class RateFit(NamedTuple):
    """``log(median) = intercept + rate · x`` over the groups whose median is finite (see :func:`rate_fit`)."""

    rate: float
    lo: float  # bootstrap confidence interval of the rate (nan when fewer than 3 groups)
    hi: float
    intercept: float
    xs: tuple  # the x of the groups used
    medians: tuple  # their medians
    rss_exponential: float  # residual sum of squares of log(median) against x
    rss_power: float  # ... against log x (a power law); nan when an x is <= 0


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    A = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(coef[1]), float(coef[0]), float(np.sum((A @ coef - y) ** 2))


def rate_fit(groups: Sequence[tuple[float, np.ndarray, np.ndarray]], *, boot: int = 400, confidence: float = 0.95,
             seed: int = 0) -> RateFit | None:
    """Fit the exponential growth of a median duration against ``x``: ``groups`` are ``(x, durations,
    censored)``; each group's median is :func:`kaplan_meier_median`; the groups with a finite median are
    fitted by least squares on ``log(median)``. The confidence interval of the rate is the bootstrap
    percentile interval (``boot`` resamples of the durations within each group, the same groups). ``None``
    when fewer than two groups have a finite median."""
    pts = [(float(x), np.asarray(d, np.float64), np.asarray(c, bool)) for x, d, c in groups]
    med = [(x, kaplan_meier_median(d, c), d, c) for x, d, c in pts]
    used = [(x, m, d, c) for x, m, d, c in med if np.isfinite(m) and m > 0]
    if len(used) < 2:
        return None
    x = np.asarray([u[0] for u in used])
    y = np.log([u[1] for u in used])
    rate, intercept, rss = _line(x, y)
    rss_pow = _line(np.log(x), y)[2] if np.all(x > 0) else float("nan")
    lo = hi = float("nan")
    if len(used) >= 3 and boot > 0:
        rng = np.random.default_rng(seed)
        rates = []
        for _ in range(boot):
            ys = []
            for _, _, d, c in used:
                k = rng.integers(0, len(d), len(d))
                ys.append(kaplan_meier_median(d[k], c[k]))
            ys_a = np.asarray(ys)
            if np.all(np.isfinite(ys_a) & (ys_a > 0)):
                rates.append(_line(x, np.log(ys_a))[0])
        if len(rates) >= boot // 2:  # most resamples have every median observed
            q = (1 - confidence) / 2
            lo, hi = (float(v) for v in np.quantile(rates, [q, 1 - q]))
    return RateFit(rate, lo, hi, intercept, tuple(x.tolist()), tuple(float(u[1]) for u in used), rss, rss_pow)


class PowerFit(NamedTuple):
    """``log(mean value) = intercept + exponent · log x`` (see :func:`power_fit`)."""

    exponent: float
    lo: float
    hi: float
    intercept: float


def power_fit(groups: Sequence[tuple[float, np.ndarray]], *, boot: int = 400, confidence: float = 0.95,
              seed: int = 0) -> PowerFit | None:
    """Fit ``mean ∝ x^p`` over ``groups`` ``(x, values)`` (values > 0) by least squares on logs, with a bootstrap
    percentile interval for ``p`` (values resampled within each group). ``None`` with fewer than two groups."""
    pts = [(float(x), np.asarray(v, np.float64)) for x, v in groups if len(v) and float(x) > 0]
    pts = [(x, v[v > 0]) for x, v in pts if np.any(v > 0)]
    if len(pts) < 2:
        return None
    lx = np.log([p[0] for p in pts])
    p, a, _ = _line(lx, np.log([v.mean() for _, v in pts]))
    rng = np.random.default_rng(seed)
    ps = [_line(lx, np.log([v[rng.integers(0, len(v), len(v))].mean() for _, v in pts]))[0] for _ in range(boot)]
    q = (1 - confidence) / 2
    lo, hi = (float(v) for v in np.quantile(ps, [q, 1 - q])) if ps else (float("nan"), float("nan"))
    return PowerFit(p, lo, hi, a)


__all__ = ["Plateau", "PowerFit", "RateFit", "kaplan_meier_median", "plateaus", "power_fit", "rate_fit"]
