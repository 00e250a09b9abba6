"""pytest plugin of ``make gpu-check``'s suite stage: each test's outcome, appended as it is known.

The stage stops pytest at its time budget; JUnit's file and pytest's own summary are written only at the very end,
so a stopped suite used to leave the names of its failures nowhere (the first GPU run: a row of ``F`` and nothing
else). This plugin writes one JSON line per failed, errored or skipped phase and per passed test, from the
controlling process (under xdist it receives every worker's reports), flushed line by line."""

from __future__ import annotations

import json
import os

import pytest

#: the JSON-lines file the reports go to; nothing is written without it
PATH_ENV = "JAXATTN_GPU_CHECK_REPORTS"


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):  # (file, line, "Skipped: reason")
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr or "")[-4000:]  # the end of the traceback holds the assertion


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(PATH_ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's report reaches the controller too
        return
    if report.passed and report.when != "call":
        return
    rec = {"test": report.nodeid, "when": report.when, "outcome": report.outcome,
           "seconds": round(report.duration, 3)}
    if not report.passed:
        rec["message"] = _message(report)
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
