"""The environment of a process a test starts: one CPU device as on a user's machine (the test process has eight),
the suite's quick-compile XLA flags (tests/conftest.py), the checkout importable."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_device_env(*, drop: tuple[str, ...] = (), xla_flags: str = "", quick: bool = True) -> dict[str, str]:
    """``os.environ`` with ``XLA_FLAGS`` set to the suite's quick flags (none with ``quick=False``: XLA's settings
    in a user's process) and ``xla_flags``, ``PYTHONPATH`` the checkout, and the variables ``drop`` removed."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    suite = os.environ.get("JAXATTN_TEST_XLA_FLAGS", "") if quick else ""
    env["XLA_FLAGS"] = " ".join(f for f in (suite, xla_flags) if f)
    if not env["XLA_FLAGS"]:
        del env["XLA_FLAGS"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env
