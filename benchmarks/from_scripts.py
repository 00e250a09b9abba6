"""The times of docs/from-scripts.md: the papers' loops beside jaxattn, measured in one run.

Runs the page's notebook version, ``examples/from_scripts.py``, as a script (its three comparisons: the clustering
papers' torch step, GPT-Consensus's repeated passes through Hugging Face, a NumPy Euler loop for the flow C2;
each checked to agree with jaxattn, then timed in three interleaved rounds, best of 3, compiled), in a directory of
its own, and writes what it measured to ``benchmarks/results_from_scripts.json``: the times, the load average of the
machine before and after the timing, the date and the versions; then rewrites the page's table of times from them
(between the page's ``<!-- times: ... -->`` and ``<!-- /times -->`` lines, :func:`render`), which
``tests/test_notebooks.py`` checks against the file.

Run: ``.venv/bin/python benchmarks/from_scripts.py`` (a minute on two CPU cores); on a shared machine, when it is
quiet: torch's threads slow down several times over when the cores are oversubscribed. ``--page-only`` rewrites the
page's table from the recorded file without measuring.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import runpy
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "from_scripts.py"
PAGE = ROOT / "docs" / "from-scripts.md"
RESULTS = ROOT / "benchmarks" / "results_from_scripts.json"
START, END = "<!-- times: benchmarks/results_from_scripts.json -->", "<!-- /times -->"


def measure() -> dict:
    """One run of the notebook as a script: its ``TIMES`` and the circumstances."""
    os.environ.setdefault("MPLBACKEND", "Agg")  # the figure is drawn, not shown
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # plt.show() on a non-interactive backend
                ns = runpy.run_path(str(NOTEBOOK), run_name="__main__")
        finally:
            os.chdir(here)
    import jax
    import torch

    return {"date": datetime.date.today().isoformat(),
            "command": ".venv/bin/python benchmarks/from_scripts.py",
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
            "versions": {"jax": jax.__version__, "torch": torch.__version__, "torch_threads": torch.get_num_threads()},
            "load_average_before": round(ns["load"], 2), "load_average_after": round(os.getloadavg()[0], 2),
            "rows": ns["TIMES"]}


def render(res: dict) -> str:
    """The page's table of times (the lines between :data:`START` and :data:`END`) from a recorded run."""
    v = res["versions"]
    lines = ["| the same work | the papers' loop | jaxattn | the loop's time / jaxattn's |", "|---|---|---|---|"]
    lines += [f"| {r['comparison']} | {r['script_s']:.3f} s | {r['jaxattn_s']:.3f} s | {r['speedup']:.2f}× |"
              for r in res["rows"]]
    lines += ["", f"Measured on {res['date']} ({res['machine']}; jax {v['jax']}, torch {v['torch']} with "
                  f"{v['torch_threads']} threads; load average {res['load_average_before']:.2f} before the timing and "
                  f"{res['load_average_after']:.2f} after), best of 3 seconds."]
    return "\n".join(lines)


def page_block(text: str) -> str:
    """What the page holds between its markers."""
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def write_page(res: dict) -> None:
    text = PAGE.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    PAGE.write_text(f"{head}{START}\n\n{render(res)}\n\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(RESULTS), help="the recorded run (the page's table reads the default)")
    p.add_argument("--page-only", action="store_true", help="rewrite the page's table from the recorded run")
    a = p.parse_args(argv)
    if a.page_only:
        res = json.loads(RESULTS.read_text())
    else:
        res = measure()
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(res, indent=1))
    if Path(a.out).resolve() == RESULTS.resolve():
        write_page(res)
    return res


if __name__ == "__main__":
    main()
