"""Facts about concrete JAX arrays (finite? the identity? a zero token?), computed once per array object.

Every driver checks its weights and initial states before it runs: finite values, the identity members that pick the
cheapest form, the masks. On a GPU each such check is a transfer from the device, and a run waits for every one of
them before it starts: on an H200 (2026-11-28) a :func:`jaxattn.simulate` call spent about 5 ms besides its program,
3 ms of it on those checks, against about 10 ms for 300 steps of the papers' sphere model over 2048 conditions. A
JAX array is immutable, so what is true of it stays true while it lives: the facts are kept here, keyed by the array
object (held weakly, dropped when the array is), and a model or a batch of initial states passed again is not read
again. Never kept: NumPy arrays (mutable), traced values (no value), deleted buffers, and arrays in host memory (a
CPU backend's): those may share their memory with a NumPy array that changes in place (``jax.device_put`` on a CPU
aliases an aligned buffer), and reading them costs no transfer. An accelerator's array shared with another library
through DLPack must not be changed in place while jaxattn may still see it (as for any JAX array).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax

T = TypeVar("T")

#: ``(kind, ids of the arrays) -> (weak references to the arrays, the fact)``
_FACTS: dict[tuple, tuple[tuple[weakref.ref, ...], Any]] = {}
_LOCK = threading.RLock()  # re-entrant: an array may die, and its entry be dropped, while the lock is held


def _in_host_memory(a: jax.Array) -> bool:
    # JAX may share such an array with the NumPy array it was made from (jax.device_put on a CPU aliases an aligned
    # buffer), which can change in place; reading it there costs no transfer anyway
    return all(dev.platform == "cpu" for dev in a.devices())


def _keepable(a: Any) -> bool:
    return (isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer) and not a.is_deleted()
            and not _in_host_memory(a))


def fact(kind: Any, arrays: Sequence[Any], compute: Callable[[], T]) -> T:
    """``compute()``, a fact about ``arrays`` named by ``kind`` (hashable: a name and whatever else it depends on),
    computed once while the same array objects live. Computed every time when any of them is not a concrete JAX
    array off the host (see the module docstring).

    Examples:
        >>> import jax.numpy as jnp
        >>> from jaxattn.model.concrete import fact
        >>> a = jnp.ones(3)
        >>> finite = lambda: bool(jnp.isfinite(a).all())
        >>> fact("finite", [a], finite), fact("finite", [a], finite)   # read once on a GPU, twice on a CPU
        (True, True)
    """
    arrays = tuple(arrays)
    if not arrays or not all(_keepable(a) for a in arrays):
        return compute()
    key = (kind, tuple(id(a) for a in arrays))
    with _LOCK:
        hit = _FACTS.get(key)
    if hit is not None and all(ref() is a for ref, a in zip(hit[0], arrays, strict=True)):
        return hit[1]
    value = compute()

    def drop(_ref, key=key) -> None:  # an array of the key died: its id may be reused by another
        with _LOCK:
            _FACTS.pop(key, None)

    refs = tuple(weakref.ref(a, drop) for a in arrays)
    with _LOCK:
        _FACTS[key] = (refs, value)
    return value


def known() -> int:
    """How many facts are kept (for the tests)."""
    with _LOCK:
        return len(_FACTS)
