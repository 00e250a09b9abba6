"""Ctrl-C that is never lost.

Python raises ``KeyboardInterrupt`` in whatever the main thread is running. Inside a garbage-collector
callback the exception is printed as "ignored" and dropped, and JAX registers one (it frees XLA's buffers
at every collection, which takes a while): a Ctrl-C that arrived then was lost and the command went on
to the end. While the collector or its callbacks run, the interrupt is sent again a moment later, until
it lands where it can be raised.
"""

from __future__ import annotations

import _thread
import contextlib
import gc
import signal
import threading
from collections.abc import Iterator

RETRY_S = 0.05  # how long a deferred interrupt waits before it is sent again


class _State:
    collecting = False


def _first(phase: str, info: dict) -> None:  # the first gc callback: the collection (and its callbacks) begins
    if phase == "start":
        _State.collecting = True


def _last(phase: str, info: dict) -> None:  # the last gc callback: they are over
    if phase == "stop":
        _State.collecting = False


def on_sigint(signum, frame) -> None:
    """Raise ``KeyboardInterrupt``, unless a collection is running: then send it again in :data:`RETRY_S`."""
    if _State.collecting:
        threading.Timer(RETRY_S, _thread.interrupt_main).start()
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """Install :func:`on_sigint` (and the collector bracketing it reads) for the duration; off the main thread,
    where no signal handler can be set, nothing changes."""
    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread
        yield
        return
    gc.callbacks.insert(0, _first)
    gc.callbacks.append(_last)
    try:
        yield
    finally:
        gc.callbacks.remove(_first)
        gc.callbacks.remove(_last)
        _State.collecting = False
        signal.signal(signal.SIGINT, previous)
