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


@pytest.mark.fast_cases('jaxattn.analysis.plateaus', 'jaxattn.analysis.spectral', 'jaxattn.analysis.stats',
                        'jaxattn.analysis.steering', 'jaxattn.dynamics._runner', 'jaxattn.dynamics.options',
                        'jaxattn.io.trajectory', 'jaxattn.model.forms', 'jaxattn.model.params',
                        'jaxattn.model.precision', 'jaxattn.plotting._movie', 'jaxattn.studies.architectures',
                        'jaxattn.studies.metastability._tables')
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


#: Pages whose examples are written as doctests (``>>>`` in a fenced block): they run like the docstrings', with
#: the outputs they print on the page (the numbers a page quotes from its own code are these outputs).
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md") if ">>> " in p.read_text())

#: Pages whose examples take more than about ten seconds on two CPU cores: the slower tier runs them.
SLOW_PAGES = {
    "docs/gradients.md": "MiniLM's gradients through six blocks, two steering searches, Newton, a sweep store",
    "docs/index.md": "10,000 conditions, 1,000 adaptive solves, MiniLM's spectra and alignment",
    "docs/power_method.md": "MiniLM's alignment over 1,000 conditions",
    "docs/metastability.md": "the metastability study",
    "docs/stability.md": "basins of 2,000 conditions over 400 steps",
    "docs/consensus.md": "100 prompts of 200 tokens through 20 passes of a GPT-2",
    "docs/gallery.md": "an adaptive solve saving 60 states and a movie of them",
    "docs/transformations.md": "gradients through maps and an adaptive solve, a Jacobian",
    "docs/sweeps.md": "a grid of four points, a map and an adaptive solve as labelled arrays",
    "docs/from-scripts.md": "the papers' torch and NumPy loops and a GPT-2's passes beside jaxattn, checked to agree",
}

#: The ``` python blocks that stay plain code (not run): a page, and why.
NOT_RUN: dict[str, str] = {}


def test_pages_with_examples():
    assert "docs/extending.md" in PAGES


def test_every_code_block_of_the_docs_runs():
    """Every Python block of docs/*.md is a doctest (```pycon, with its outputs), run below, except those of
    :data:`NOT_RUN`; every page with examples is in a tier."""
    plain = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")
                   if re.search(r"(?m)^```python\s*$", p.read_text(encoding="utf-8")))
    assert plain == sorted(NOT_RUN), f"```python blocks that are not run (make them ```pycon doctests): {plain}"
    assert set(SLOW_PAGES) <= set(PAGES), sorted(set(SLOW_PAGES) - set(PAGES))


#: Runs one page's examples as a doctest, in a process of its own: a user's session (XLA's default settings, one CPU
#: device, ``jax_enable_x64`` off unless the page turns it on, JAX's default promotion), whose numbers the page prints.
#: The suite's own process compiles with quicker settings, which move some numbers by an ulp.
_RUN_PAGE = r"""
import doctest, re, sys
page, path = sys.argv[1], sys.argv[2]
text = re.sub(r"(?m)^[ \t]*```.*$", "", open(path, encoding="utf-8").read())  # a fence ends an expected output
test = doctest.DocTestParser().get_doctest(text, {}, page, path, 0)
assert test.examples, f"{page} has no examples"
runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
runner.run(test)
sys.exit(1 if runner.summarize(verbose=False).failed else 0)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.e2e) if p in SLOW_PAGES else p for p in PAGES])
def test_page_examples(page, tmp_path):
    """The examples of a documentation page run as written, in one namespace from top to bottom, in a user's
    session (:data:`_RUN_PAGE`) and a working directory of their own (what a page writes, ``runs/...``, a movie,
    lands there; ``path/to/gpt2`` is a tiny random GPT-2 built there), and print what the page shows
    (ELLIPSIS and NORMALIZE_WHITESPACE; the pages round the numbers they print)."""
    import subprocess
    import sys

    from .subprocess_env import one_device_env

    if "path/to/gpt2" in (ROOT / page).read_text(encoding="utf-8"):  # long enough for the page's prompts
        from . import hf_models

        hf_models.build("gpt2", tmp_path / "path" / "to" / "gpt2", n_positions=256)
    r = subprocess.run([sys.executable, "-c", _RUN_PAGE, page, str(ROOT / page)], cwd=tmp_path,
                       env=one_device_env(quick=False), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-20000:] + r.stderr[-5000:]


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


#: Runs the ```python blocks of README.md one after the other in one namespace, as a reader pastes them.
_RUN_README = r"""
import re, sys
blocks = re.findall(r"(?ms)^```python\n(.*?)^```", open(sys.argv[1], encoding="utf-8").read())
assert len(blocks) >= 2, blocks
namespace = {}
for i, block in enumerate(blocks):
    exec(compile(block, f"README.md, python block {i + 1}", "exec"), namespace)
print("ran", len(blocks), "blocks")
"""


@pytest.mark.e2e
def test_the_readmes_python_blocks_run_as_written(tmp_path):
    """README.md's Python blocks run as written, in a process and a working directory of their own (a user's session);
    ``path/to/gpt2`` is a tiny random GPT-2 built there, as for the docs pages."""
    import subprocess
    import sys

    from . import hf_models
    from .subprocess_env import one_device_env

    assert "path/to/gpt2" in (ROOT / "README.md").read_text(encoding="utf-8")
    hf_models.build("gpt2", tmp_path / "path" / "to" / "gpt2", n_positions=64)
    r = subprocess.run([sys.executable, "-c", _RUN_README, str(ROOT / "README.md")], cwd=tmp_path,
                       env=one_device_env(quick=False), capture_output=True, text=True)
    assert r.returncode == 0 and "ran 2 blocks" in r.stdout, r.stdout[-5000:] + r.stderr[-5000:]
