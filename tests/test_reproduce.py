"""`make reproduce REDUCED=1`: every run at a tiny scale, and the page filled from the runs' files only."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("reproduce_script", ROOT / "scripts" / "reproduce.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


rep = _module()


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    runs = tmp_path_factory.mktemp("reproduce")
    page = runs / "page" / "reproductions.md"
    assert rep.main(["--reduced", "--runs", str(runs), "--page", str(page)]) == 0
    return runs, page


def _table_rows(text: str) -> list[list[str]]:
    out = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            out.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return out


def test_every_claim_is_filled_from_a_run(reduced):
    runs, page = reduced
    cells = json.loads((runs / "cells.json").read_text())
    assert [c["id"] for c in cells] == [c.id for c in rep.CLAIMS]
    text = page.read_text()
    for c in cells:
        assert c["verdict"] in ("reproduced", "differs"), c
        for key in ("jaxattn", "scale", "command", "why"):
            assert c[key] and "?" not in c[key] and "None" not in c[key], (c["id"], key, c[key])
        # the number was read from files of this run directory, which exist
        assert c["sources"], c["id"]
        for s in c["sources"]:
            assert Path(s).is_file() and Path(s).is_relative_to(runs), s
        assert rep._cell(c["jaxattn"]) in text
    for row in _table_rows(text):
        assert all(cell for cell in row), row
    assert "Reduced mode" in text
    # every run was timed and its figures copied next to the page
    timings = json.loads((runs / "timings.json").read_text())
    assert set(timings) == set(rep.RUN_BY_NAME)
    for c in cells:
        if c["figure"]:
            assert (page.parent / c["figure"]).is_file()


def test_the_page_follows_the_csv_files(reduced, tmp_path):
    """Change a run's CSV and the page changes with it: no number on the page is written by hand."""
    runs, _ = reduced
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    path = copy / "clusters" / "good_triples.csv"
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    top = max((r for r in table if r["ensemble"] == "ginibre"), key=lambda r: int(r["d"]))
    top.update(fraction="0.1425", ci_low="0.1376", ci_high="0.1474")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    cells = rep.write_page(copy, tmp_path / "page.md")
    cl4 = next(c for c in cells if c["id"] == "CL4")
    assert "0.142 [0.138, 0.147]" in cl4["jaxattn"]
    assert cl4["verdict"] == ("reproduced" if top["d"] == "128" else "differs")
    assert "0.142 [0.138, 0.147]" in (tmp_path / "page.md").read_text()


def test_unknown_run_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        rep.main(["--only", "nope"])
    assert e.value.code == 2
    assert "unknown run(s) nope" in capsys.readouterr().err


@pytest.mark.parametrize("recorded", [[3, 4, 5], "3,4,5"])  # a list since list options are lists; text before
def test_scale_writes_a_list_option_as_the_command_line_does(tmp_path, recorded):
    (tmp_path / "config.json").write_text(json.dumps({"command": "stability", "config": {"d": 3, "tokens": recorded}}))
    assert rep.scale("stability", tmp_path).startswith("d 3, n ∈ {3,4,5}, ")
