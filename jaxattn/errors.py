"""Exceptions raised on bad input. Each carries one line that says what is wrong."""


class JaxattnError(ValueError):
    """Base class: bad input that the user can fix."""


class ConfigError(JaxattnError):
    """An impossible or inconsistent configuration (shapes, options, non-finite weights)."""


class DiskFullError(JaxattnError):
    """A write found the disk (or the user's quota) full: one line naming what was being written and what was kept
    (nothing is ever left half-written: every file is written to a temporary name and renamed). Raised by every
    writer of jaxattn (:func:`jaxattn.io._atomic.full_disk`); the command line prints it as ``jaxattn: error: ...``
    with exit status 2, saying what its command keeps. ``path``: what was being written; ``then``: what to do."""

    def __init__(self, path, then: str, quota: bool = False):
        self.path, self.then, self.quota = path, then, quota
        full = "the disk quota is exceeded" if quota else "the disk is full"
        super().__init__(f"writing {path} failed: {full}; {then}")

    def __reduce__(self):  # pickled with what it was built from (a worker process's error re-raised in the parent)
        return type(self), (self.path, self.then, self.quota)


class NonFiniteWarning(RuntimeWarning):
    """Some conditions of a run reached NaN or inf (the dynamics overflowed); they are flagged, not dropped.
    Sweeps count and report them themselves, and silence this warning."""


class CheckpointError(JaxattnError):
    """A checkpoint or converted file that cannot be read or converted."""


#: The seeds every driver and command takes: non-negative 64-bit integers (a seed is recorded as an int64).
SEEDS = range(0, 2**63)
SEEDS_SHOWN = "[0, 2^63)"


def is_integer(value, minimum: int | None = None) -> bool:
    """Whether ``value`` is an integer (a Python or NumPy one; booleans and floats are not) ``>= minimum``."""
    import numpy as np

    ok = not isinstance(value, bool) and isinstance(value, (int, np.integer))
    return ok and (minimum is None or value >= minimum)


def is_every(value) -> bool:
    """Whether ``value`` is a saving period: ``None`` (every step), a positive integer or ``'last'``."""
    return value is None or (isinstance(value, str) and value == "last") or is_integer(value, 1)


def integer(name: str, value, *, minimum: int = 1, none: bool = False, error: type[JaxattnError] = ConfigError):
    """``value`` as an ``int`` if it is an integer ``>= minimum`` (booleans and floats refused; ``None`` kept with
    ``none``), else ``error`` naming ``name``: the one host-side check of an integer option."""
    if none and value is None:
        return None
    if not is_integer(value, minimum):
        kind = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        raise error(f"{name} must be {'None or ' if none else ''}{kind}, got {value!r}")
    return int(value)


def positive_int(name: str, value, error: type[JaxattnError] = ConfigError) -> int:
    """``value`` as an ``int`` if it is an integer >= 1 (booleans and floats refused), else ``error``."""
    return integer(name, value, error=error)


def every(name: str, value, error: type[JaxattnError] = ConfigError) -> int | str | None:
    """``value`` if it is a saving period (:func:`is_every`; a NumPy integer as a Python ``int``), else ``error``."""
    if not is_every(value):
        raise error(f"{name} must be None, a positive integer or 'last', got {value!r}")
    return int(value) if is_integer(value) else value


def seed(name: str, value, error: type[JaxattnError] = ConfigError) -> int:
    """``value`` as an ``int`` if it is an integer in :data:`SEEDS`, else ``error`` naming ``name``."""
    if not is_integer(value) or int(value) not in SEEDS:
        raise error(f"{name} must be an integer in {SEEDS_SHOWN}, got {value!r}")
    return int(value)


def real(name: str, value, *, positive: bool = False, error: type[JaxattnError] = ConfigError) -> float:
    """``value`` as a ``float`` if it is a finite real number (> 0 with ``positive``; booleans, arrays and
    strings refused), else ``error``: the one host-side check of a number option."""
    import numpy as np

    try:
        f = float(value) if not isinstance(value, (bool, str)) and np.ndim(value) == 0 else None
    except (TypeError, ValueError):
        f = None
    if f is None or not np.isfinite(f) or (positive and f <= 0):
        raise error(f"{name} must be a finite number{' > 0' if positive else ''}, got {value!r}")
    return f


def path_arg(name: str, value, error: type[JaxattnError] = ConfigError):
    """``value`` as a :class:`pathlib.Path` if it is a ``str`` or an ``os.PathLike`` naming a path, else ``error``
    naming the argument (``pathlib`` would say "expected str, bytes or os.PathLike object, not NoneType"); an empty
    string is refused too (``Path('')`` silently means the current directory)."""
    import os
    from pathlib import Path

    if not isinstance(value, (str, os.PathLike)) or str(value) == "":
        got = "an empty string" if value == "" else repr(value)
        raise error(f"{name} must name a path (a str or pathlib.Path), got {got}")
    return Path(value)
