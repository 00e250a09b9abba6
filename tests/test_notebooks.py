"""The notebooks of ``examples/``: each runs top to bottom, offline, in a user's session, within
:data:`BUDGET_S` on the project's 2-core machine, and every number its text quotes is one that its cells printed.

The notebooks are kept as text (jupytext's percent format: ``# %%`` code cells, ``# %% [markdown]`` text cells)
and rendered with their outputs in the documentation site by mkdocs-jupyter, which executes them during the
build (mkdocs.yml). Here each is executed with nbclient in a kernel of this interpreter, in a working directory of
its own, as a user would run it (XLA's default settings, one CPU device, ``jax_enable_x64`` off unless the notebook
turns it on, JAX's default dtype promotion).

**Quoted numbers.** A number that a text cell quotes from an output is written in bold, ``**0.326**``, exactly as
the cells above it printed it (:func:`quote_problems`): the test fails when a bold number is not found among the
outputs of the code cells above that text cell (as a whole number: ``0.326`` is not found in ``0.3261``). A number
with a decimal point anywhere else in the text (outside code spans, math and links) fails too: it is either a
quoted result, to be written in bold and checked, or an input, to be written as code (``α = 0.1`` as
```` `alpha=0.1` ````) or in words. Integers in plain text (ten tokens, 1000 conditions, 12 layers) are left alone.

The slower tier (``make test-all``) executes the notebooks. Fast: the site lists every notebook with the page it goes
with, the quote checker's own cases, and the migration page (docs/from-scripts.md) against its notebook (the same
code) and against the run whose times it shows (benchmarks/results_from_scripts.json).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .subprocess_env import ROOT, one_device_env

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
#: wall-clock seconds a notebook may take, kernel start to last cell, on the 2-core machine
BUDGET_S = 120.0

#: Executes one notebook (argv: the .py, the executed .ipynb to write, the working directory) in a kernel of this
#: interpreter and prints the seconds it took, kernel start included.
_EXECUTE = r"""
import json, sys, time
import jupytext, nbclient, nbformat
src, out, cwd = sys.argv[1:4]
nb = jupytext.read(src)
client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}})
t = time.perf_counter()
try:
    client.execute()
finally:
    seconds = time.perf_counter() - t
    nbformat.write(nb, out)
    print(json.dumps({"seconds": seconds}))
"""

_NUMBER = r"[+−-]?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?"
_BOLD_NUMBER = re.compile(rf"\*\*({_NUMBER})\*\*")
_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?:[eE][+-]?\d+)?(?!\w)")
#: what is not prose: fenced and inline code, math, link targets, HTML comments
_NOT_PROSE = [re.compile(p, re.S) for p in (r"```.*?```", r"`[^`]*`", r"\$[^$]*\$", r"\]\([^)]*\)", r"<!--.*?-->")]


def _normalise(number: str) -> str:
    return number.replace("−", "-")


def outputs_text(cell) -> str:
    """The text a code cell printed: its streams, results and displayed values (``text/plain``), and errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
        elif out.get("output_type") == "error":
            parts.append("\n".join(out.get("traceback", [])))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def quoted(markdown: str) -> tuple[list[str], list[str]]:
    """The numbers a text cell quotes in bold (to be checked), and those with a decimal point it writes elsewhere in
    its prose (not allowed: bold them, or write them as code)."""
    prose = markdown
    for pattern in _NOT_PROSE:
        prose = pattern.sub(" ", prose)
    bold = _BOLD_NUMBER.findall(prose)
    loose = _DECIMAL.findall(_BOLD_NUMBER.sub(" ", prose))
    return bold, loose


def printed_number(number: str, text: str) -> bool:
    """Whether ``number`` occurs in ``text`` as a whole number (not as a part of a longer one)."""
    num = _normalise(number)
    return re.search(rf"(?<![\d.]){re.escape(num)}(?![\d])", _normalise(text)) is not None


def quote_problems(nb) -> list[str]:
    """Every quoted number of the executed notebook ``nb`` that the code cells above its text cell did not print,
    and every number with a decimal point its prose writes without quoting it."""
    problems, above = [], []
    for i, cell in enumerate(nb["cells"]):
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "code":
            above.append(outputs_text(cell))
        elif cell["cell_type"] == "markdown":
            bold, loose = quoted(source)
            text = "\n".join(above)
            problems += [f"cell {i}: **{n}** is not printed by the cells above it" for n in bold
                         if not printed_number(n, text)]
            problems += [f"cell {i}: {n} is written as prose (quote a printed number in bold, or write an input as "
                         f"code)" for n in loose]
    return problems


def execute(path: Path, workdir: Path) -> tuple[dict, float, str]:
    """Runs the notebook ``path`` in ``workdir``: the executed notebook (JSON), its seconds, and the runner's log."""
    out = workdir / f"{path.stem}.ipynb"
    # a user's session: XLA's defaults, one device, no compilation cache shared with the suite's processes (the
    # budget is a cold run's); MPLBACKEND left to the kernel (its inline figures). NumPy's OpenBLAS and torch's
    # OpenMP on one thread: on two cores shared with other jobs their threads' waits make LAPACK's eig and torch's
    # small products many times slower (MiniLM's six layer matrices: 0.34 s on one thread, 5.3 s on two with the load
    # average at 4; the clustering papers' torch step, 0.7 s against 5.4 s), which would make the budget measure the
    # neighbours' load. On a quiet machine the notebooks take as long either way (the times they print differ).
    env = one_device_env(quick=False, drop=("MPLBACKEND", "JAX_COMPILATION_CACHE_DIR"))
    env |= {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", _EXECUTE, str(path), str(out), str(workdir)], cwd=workdir, env=env,
                       capture_output=True, text=True, timeout=1800)
    log = r.stdout[-3000:] + r.stderr[-12000:]
    nb = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {"cells": []}
    if r.returncode:
        errors = [outputs_text(c) for c in nb["cells"] if any(o.get("output_type") == "error"
                                                              for o in c.get("outputs", []))]
        pytest.fail(f"{path.name} failed:\n" + ("\n".join(errors)[-8000:] or log))
    seconds = json.loads(r.stdout.strip().splitlines()[-1])["seconds"]
    return nb, seconds, log


@pytest.mark.e2e
@pytest.mark.parametrize("name", [p.stem for p in EXAMPLES])
def test_notebook_runs_and_prints_what_it_quotes(name, tmp_path):
    """The notebook runs without an error within the budget, shows its figures, and every quoted number is printed
    by the cells above the text that quotes it."""
    import importlib.util

    missing = [m for m in ("jupytext", "nbclient", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        if os.environ.get("JAXATTN_TEST_ALL"):  # make test-all installs the test extra: missing there is a failure
            pytest.fail(f"{', '.join(missing)} not installed: pip install -e '.[test]'")
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[test]', or make test-all)")
    path = ROOT / "examples" / f"{name}.py"
    nb, seconds, _ = execute(path, tmp_path)
    problems = quote_problems(nb)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)
    images = sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))
    assert images > 0, f"{path.name} shows no figure"
    assert seconds < BUDGET_S, f"{path.name} took {seconds:.0f} s (budget {BUDGET_S:.0f} s on 2 cores)"


# ------------------------------------------------------------------------------------------- fast checks
def _nav_notebooks() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?(examples/[\w-]+\.py)\s*$", text, flags=re.M)


def test_every_notebook_is_in_the_site():
    """Every ``examples/*.py`` is a page of the site's navigation and is listed, with the page it pairs with, on the
    notebooks' index (docs/examples.md); nothing else is."""
    names = [f"examples/{p.name}" for p in EXAMPLES]
    assert len(names) >= 6, names
    nav = _nav_notebooks()
    assert sorted(nav) == sorted(names), f"mkdocs.yml's nav lists {sorted(nav)}, examples/ has {names}"
    index = (ROOT / "docs" / "examples.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\|\s*\[[^\]]+\]\((examples/[\w-]+\.py)\)\s*\|[^|]*\|\s*(.+?)\s*\|\s*$", index, flags=re.M)
    assert sorted(p for p, _ in rows) == sorted(names), f"docs/examples.md lists {sorted(p for p, _ in rows)}"
    for path, pairs in rows:  # the docs page each notebook goes with exists, and mentions the notebook back
        pages = re.findall(r"\]\(([\w/-]+\.md)(?:#[\w-]+)?\)", pairs)
        assert pages, f"docs/examples.md: {path} names no page it pairs with"
        for page in pages:
            assert (ROOT / "docs" / page).is_file(), f"docs/examples.md: {path} pairs with a missing page {page}"
            assert path in (ROOT / "docs" / page).read_text(encoding="utf-8"), f"docs/{page} does not link {path}"
    for p in EXAMPLES:
        text = p.read_text(encoding="utf-8")
        assert "# %% [markdown]\n# # " in text, f"{p.name}: the first text cell is the page's title (# Title)"


def _code_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_migration_page_is_its_notebook():
    """docs/from-scripts.md and examples/from_scripts.py show the same code: every line of the page's examples is a
    line of the notebook (which adds the timing), so what the page checks by doctest is what the notebook runs."""
    page = (ROOT / "docs" / "from-scripts.md").read_text(encoding="utf-8")
    source = [line[4:] for line in page.splitlines() if line.startswith((">>> ", "... "))]
    notebook = set(_code_lines((ROOT / "examples" / "from_scripts.py").read_text(encoding="utf-8")))
    missing = [line for line in _code_lines("\n".join(source)) if line not in notebook]
    assert len(source) > 40 and not missing, f"lines of docs/from-scripts.md not in the notebook: {missing}"


def test_the_migration_page_times_are_the_recorded_run():
    """The page's table of times is benchmarks/results_from_scripts.json, the run benchmarks/from_scripts.py
    recorded (it rewrites the table when it measures), with the date, the machine and its load."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("from_scripts_bench", ROOT / "benchmarks" / "from_scripts.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = json.loads(bench.RESULTS.read_text(encoding="utf-8"))
    assert {r["comparison"] for r in res["rows"]} == {"clustering step (torch)", "GPT-Consensus passes (Hugging Face)",
                                                      "Euler loop (NumPy)"}
    assert bench.page_block(bench.PAGE.read_text(encoding="utf-8")) == bench.render(res), \
        "docs/from-scripts.md's table differs from the recorded run: .venv/bin/python benchmarks/from_scripts.py " \
        "--page-only rewrites it"


def test_the_quote_check():
    """The check fails on a quoted number that was not printed, on a part of a printed number, on a number that is
    printed only below its text, and on a decimal number left in prose; it accepts printed ones, in any cell
    above."""
    def nb(*cells):
        return {"cells": [{"cell_type": "code", "source": "", "outputs": [{"output_type": "stream", "text": c}]}
                          if kind == "out" else {"cell_type": "markdown", "source": c} for kind, c in cells]}

    ok = nb(("out", "mean 0.326, max -1.5e-03, change +0.0e+00\n"), ("out", "[(0, 0.0114)]"),
            ("md", "falls to **0.326** (**−1.5e-03**, **0.0114**, **+0.0e+00**); `alpha=0.1`, $x_1.5$, "
                   "[v2](a/b1.2.md), 10 tokens"))
    assert quote_problems(ok) == []
    bad = nb(("out", "0.3261 -2.0e-03\n"), ("md", "**0.326**, **0.33**, **+2.0e-03**"),
             ("md", "a plain 0.5 here, 3.0e-07 there, **7**"), ("out", "7\n"))
    problems = quote_problems(bad)
    named = ("**0.326**", "**0.33**", "**+2.0e-03**", " 0.5 ", " 3.0e-07 ", "**7**")
    assert len(problems) == 6 and all(any(n in p for n in named) for p in problems), problems
