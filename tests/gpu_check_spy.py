"""A pytest plugin (``-p tests.gpu_check_spy``) for issue 30: what the tests that start ``scripts/gpu_check.py`` would
start on a machine where JAX sees a GPU, found without one.

It collects only the test files that name the script (``"gpu_check.py"``, ``"gpu-check"``, quoted, as a test that
runs it must); when one of their tests starts the script (directly, or through ``make``, whose recipe ``make -n``
prints), the script is not run: its own :func:`settle` decides the form under the test's command line and environment,
with JAX's backend the one a GPU machine would report, and the decision is appended to the JSON-lines file named by
``$JAXATTN_GPU_CHECK_SPY_OUT``; the test is then skipped.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUT_ENV = "JAXATTN_GPU_CHECK_SPY_OUT"
NAMES_THE_CHECK = re.compile(r"""["'](?:gpu_check\.py|gpu-check)["']""")
GPU_PLATFORMS = {"gpu", "cuda", "rocm"}
_Popen = subprocess.Popen


def backend_on_a_gpu_machine(env: Mapping[str, str]) -> str:
    """``jax.default_backend()`` on a machine with a GPU: the GPU, unless ``JAX_PLATFORMS`` names no GPU platform
    (then its first platform, as JAX picks)."""
    platforms = [p.strip() for p in env.get("JAX_PLATFORMS", "").split(",") if p.strip()]
    if platforms and not GPU_PLATFORMS & set(platforms):
        return platforms[0]
    return "gpu"


def script_command(argv: list[str], env: Mapping[str, str], cwd) -> tuple[list[str], dict[str, str]] | None:
    """``(options, environment)`` of the gpu_check.py that ``argv`` starts, or None when it starts none."""
    env = dict(env)
    if argv and Path(argv[0]).name == "make" and "gpu-check" in argv:
        p = _Popen([argv[0], "-n", *argv[1:]], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True)
        out, err = p.communicate(timeout=60)
        lines = [line for line in out.replace("\\\n", " ").splitlines() if "gpu_check.py" in line]
        assert p.returncode == 0 and len(lines) == 1, f"make -n {argv[1:]}: {out}{err}"
        argv = shlex.split(lines[0])
        while argv and re.match(r"[A-Za-z_]\w*=", argv[0]):  # the recipe's own VAR=value prefixes
            k, _, v = argv.pop(0).partition("=")
            env[k] = v
    i = next((i for i, a in enumerate(argv) if a.endswith("gpu_check.py")), None)
    return None if i is None else (argv[i + 1:], env)


def decide(options: list[str], env: Mapping[str, str]) -> dict:
    """The script's own decision for ``options`` under ``env`` on a GPU machine."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from scripts import gpu_check

    real = gpu_check._backend
    gpu_check._backend = backend_on_a_gpu_machine
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            plan = gpu_check.settle(options, env)
    except SystemExit as e:
        message = err.getvalue().strip().splitlines()[-1:]
        return {"form": "refused" if gpu_check.IN_SUITE in "".join(message) else "usage error", "exit": e.code,
                "message": "".join(message)}
    finally:
        gpu_check._backend = real
    return {"form": "reduced" if plan.reduced else "full", "gpu_seen": plan.gpu}


class _Spy(_Popen):
    def __init__(self, args, *a, **kw):
        argv = shlex.split(args) if isinstance(args, str) else [os.fspath(x) for x in args]
        found = script_command(argv, kw.get("env") or os.environ, kw.get("cwd"))
        if found is not None:
            options, env = found
            rec = {"test": os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0], "options": options,
                   **decide(options, env)}
            with open(os.environ[OUT_ENV], "a") as f:
                f.write(json.dumps(rec) + "\n")
            pytest.skip(f"gpu-check spy: the script would take the {rec['form']} form here")
        super().__init__(args, *a, **kw)


def pytest_configure(config):
    assert os.environ.get(OUT_ENV), f"-p tests.gpu_check_spy needs ${OUT_ENV}"
    subprocess.Popen = _Spy  # type: ignore[misc]
    config.add_cleanup(lambda: setattr(subprocess, "Popen", _Popen))


def pytest_ignore_collect(collection_path: Path, config):
    """Test files that do not name the script cannot start it: not even imported."""
    if collection_path.is_file() and collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        return NAMES_THE_CHECK.search(collection_path.read_text()) is None
    return None
