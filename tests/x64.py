"""Running a piece of a test as a user's session does, with ``jax_enable_x64`` off."""

from __future__ import annotations

import contextlib

import jax


@contextlib.contextmanager
def x64_off():
    """The user's default, ``jax_enable_x64`` off (the tests' conftest turns it on), restored afterwards; the code
    run inside must leave it off (it may enable float64 in a scope, never for the rest of the process)."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
        assert jax.config.jax_enable_x64 is False, "jax_enable_x64 was switched on for the whole process"
    finally:
        jax.config.update("jax_enable_x64", True)
