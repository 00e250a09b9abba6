"""The documentation site builds with ``mkdocs build --strict`` (``make docs``): a broken link, a missing page in the
navigation or a reference-style bracket that autorefs cannot resolve fails here, not on a user's clean clone.
The slower tier (``make test-all``, which installs the docs' packages first)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from .subprocess_env import ROOT, one_device_env

pytestmark = pytest.mark.e2e


def test_the_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("JAXATTN_TEST_ALL"):  # make test-all installs them: missing there is a failure
            pytest.fail("mkdocs is not installed: make test-all installs the docs' packages ('.[docs]') first")
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]', or make test-all)")
    env = one_device_env() | {"NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    warnings = [line for line in r.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert r.returncode == 0 and not warnings, "\n".join(warnings) or r.stderr[-2000:]
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "reproductions" / "index.html").is_file()
    for notebook in sorted((ROOT / "examples").glob("*.py")):  # executed in the build: shown with their figures
        page = (site / "examples" / notebook.stem / "index.html").read_text(encoding="utf-8")
        assert page.count("data:image/png") >= 2, f"examples/{notebook.name} is rendered without its figures"
