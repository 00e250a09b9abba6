"""The documentation's promises: the docstring examples run, the API reference lists every public
name, and nothing in the repository points outside it."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
import subprocess
from pathlib import Path

import jax
import pytest

import jaxattn

ROOT = Path(__file__).resolve().parents[1]
FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _modules() -> list[str]:
    names = ["jaxattn"]
    for info in pkgutil.walk_packages(jaxattn.__path__, prefix="jaxattn."):
        if not info.name.endswith(".__main__"):  # importing it runs the command line
            names.append(info.name)
    return sorted(names)


def _with_examples(names: list[str]) -> list[str]:
    finder = doctest.DocTestFinder()
    out = []
    for name in names:
        module = importlib.import_module(name)
        if any(t.examples for t in finder.find(module, name)):
            out.append(name)
    return out


MODULES = _with_examples(_modules())


def test_public_entry_points_have_examples():
    """The main entry points carry an ``Examples`` section (run below)."""
    finder = doctest.DocTestFinder()
    have = {t.name.rsplit(".", 1)[-1] for name in MODULES for t in finder.find(importlib.import_module(name), name)
            if t.examples}
    wanted = {"simulate", "solve", "random_model", "init_tokens", "spectrum", "layer_matrices", "alignment", "steer",
              "from_heads", "velocity", "repeated_passes", "sweep", "sweep_grid", "symmetric_with_spectrum",
              "cumulative_products"}
    assert wanted <= have, f"no Examples section: {sorted(wanted - have)}"


@pytest.mark.parametrize("module", MODULES)
def test_doctests(module):
    """Every example runs as written, under JAX's default (standard) dtype promotion as a user's
    session has it; the suite's strict promotion is for the library's own code paths."""
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    with jax.numpy_dtype_promotion("standard"):
        for test in finder.find(mod, module):
            if test.examples:
                runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)


#: Pages whose examples are written as doctests (``>>>`` in a fenced block): they run like the docstrings'.
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md") if ">>> " in p.read_text())


def _page_doctest(page: str) -> doctest.DocTest:
    """The page's examples as one doctest; a fence line ends the expected output before it, as a blank line
    would (it is replaced by one, so line numbers in a failure report are the page's)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    text = re.sub(r"(?m)^[ \t]*```.*$", "", text)
    return doctest.DocTestParser().get_doctest(text, {}, page, str(ROOT / page), 0)


def test_pages_with_examples():
    assert "docs/extending.md" in PAGES


@pytest.mark.parametrize("page", PAGES)
def test_page_examples(page):
    """The examples of a documentation page run as written, in one namespace from top to bottom, under the
    dtype and rank promotion of a user's session (standard, allowed): the suite's strict ones are for the
    library's own code paths."""
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    test = _page_doctest(page)
    assert test.examples, f"{page} has no examples"
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        runner.run(test, out=report.append)
    assert runner.summarize(verbose=False).failed == 0, "".join(report)


def test_api_reference_lists_every_public_name():
    """Every public name has its entry on one page of docs/api/ (by concept), and only one."""
    entries = [p for page in sorted((ROOT / "docs" / "api").glob("*.md"))
               for p in re.findall(r"^::: jaxattn\.([\w.]+)\s*$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)]
    names = {p.rsplit(".", 1)[-1] for p in entries}  # a public name may be documented under its module's path
    missing = [name for name in jaxattn.__all__ if name not in names]
    assert not missing, f"no page of docs/api/ has ::: jaxattn.<name> for {missing}"
    doubled = sorted({name for name in entries if entries.count(name) > 1})
    assert not doubled, f"docs/api/ documents these more than once: {doubled}"


def _repository_files() -> list[Path]:
    """Tracked files and untracked ones git does not ignore (build outputs, .venv, runs/ excluded)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
        files = [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk, skipping what is never ours
        skip = {".git", ".venv", "build", "runs", "__pycache__", ".pytest_cache"}
        files = [p for p in ROOT.rglob("*") if not (set(p.relative_to(ROOT).parts) & skip)
                 and not any(part.endswith(".egg-info") for part in p.parts)]
    return [p for p in files if p.is_file()]


def test_nothing_points_outside_the_repository():
    """The project explains itself: no file refers to notes kept outside the repository."""
    # spelled in pieces so that this file does not match itself
    needles = [("shared" + "/").encode(), ("MATH" + ".md").encode()]
    offenders = []
    for path in _repository_files():
        data = path.read_bytes()
        for needle in needles:
            if needle in data:
                offenders.append(f"{path.relative_to(ROOT)}: {needle.decode()}")
    assert not offenders, "files refer to paths outside the repository:\n" + "\n".join(offenders)
