"""The devices a run is compiled for, where they are not this process's default backend (ahead of time:
:mod:`jaxattn.aot`). Every choice the host makes for a run that depends on the backend (lane widths, memory budgets)
asks :func:`platform` here, never ``jax.default_backend()`` directly, so that a program compiled for an H100 on a
CPU is the one the H100 would run; the arithmetic's own arrangements are chosen when the program is lowered
(:mod:`jaxattn.model.backend`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax


class Target(NamedTuple):
    """The devices a program is compiled for when they are not this process's default backend (ahead of time,
    :mod:`jaxattn.aot`): their ``platform`` (``'gpu'``, ``'tpu'``, ``'cpu'``), which takes every choice that
    depends on the backend (lane width, memory budgets), the ``devices`` and the bytes each one holds."""

    platform: str
    devices: tuple
    memory: int


#: The target of the compilation under way (:func:`compiling_for`); ``None``: run here, on the default backend.
_TARGET: contextvars.ContextVar[Target | None] = contextvars.ContextVar("jaxattn_target", default=None)


class Compiled(Exception):
    """Raised by :func:`run` under :func:`compiling_for` with the compiled program, instead of running it: the
    driver's own checks and choices have all been made by then, and nothing after the program would mean anything
    without its results."""

    def __init__(self, compiled: Any, lanes: int):
        super().__init__("compiled ahead of time")
        self.compiled, self.lanes = compiled, lanes


@contextlib.contextmanager
def compiling_for(target: Target) -> Iterator[None]:
    """Within this block :func:`run` compiles its program for ``target`` and raises :class:`Compiled` with it."""
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)


def platform() -> str:
    """The backend that the choices of a run are taken for: the target's under :func:`compiling_for`, else
    JAX's default backend."""
    target = _TARGET.get()
    return jax.default_backend() if target is None else target.platform

