"""The set-up's commands (Makefile): what ``make test`` and ``make test-all`` run, read with ``make -n``."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _recipe(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("TIER_BUDGET", "TIER_BUDGET_STRICT", "MAKEFLAGS")}
    r = subprocess.run(["make", "-n", "-o", ".venv/.jaxattn-installed", "-o", ".venv/.jaxattn-docs-installed",
                        "-o", ".venv-gpu/.jaxattn-gpu-installed", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _pytest_lines(recipe: str) -> list[str]:
    return [line for line in recipe.replace("\\\n", " ").splitlines() if "-m pytest" in line]


def test_make_test_reports_its_budget_and_fails_only_on_a_failing_test():
    """A researcher's busy laptop is reported, not failed: ``make test`` reports the summed durations against the
    budget; the project's own check enforces it with TIER_BUDGET_STRICT=1."""
    (line,) = _pytest_lines(_recipe("test"))
    assert "--tier-budget=600" in line and "--tier-report-only" in line
    (strict,) = _pytest_lines(_recipe("test", "TIER_BUDGET_STRICT=1"))
    assert "--tier-budget=600" in strict and "--tier-report-only" not in strict
    assert '-m "not e2e and not compile"' in line


def test_make_test_all_runs_both_tiers_and_the_compile_tier():
    lines = _pytest_lines(_recipe("test-all"))
    assert len(lines) == 3
    assert "--tier-report-only" in lines[0] and "-m e2e" in lines[1]
    assert "-m compile" in lines[2] and ".venv-gpu/bin/python" in lines[2] and "JAX_PLATFORMS=cpu" in lines[2]
    assert "ALLOW_MULTIPLE_LIBTPU_LOAD=1" in lines[2]  # the workers and the report's process each load libtpu
