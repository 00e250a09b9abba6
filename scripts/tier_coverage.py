"""What the fast test tier covers of what both tiers cover: package lines executed by the tests and by the processes
they start (``make coverage`` writes one coverage file per tier). Prints the figure the README quotes.

    python scripts/tier_coverage.py FAST_DATA E2E_DATA
"""

from __future__ import annotations

import argparse
import os

from coverage import CoverageData


def lines(path: str) -> dict[str, set[int]]:
    """Executed lines per package file in the coverage data file ``path`` (already combined by pytest-cov)."""
    data = CoverageData(basename=path)
    data.read()
    out = {}
    for f in data.measured_files():
        rel = os.path.relpath(f)
        if rel.startswith("jaxattn" + os.sep):
            out[rel] = set(data.lines(f) or ())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("fast")
    p.add_argument("e2e")
    args = p.parse_args()
    fast, e2e = lines(args.fast), lines(args.e2e)
    union = {f: fast.get(f, set()) | e2e.get(f, set()) for f in fast.keys() | e2e.keys()}
    n_fast, n_all = sum(len(v) for v in fast.values()), sum(len(v) for v in union.values())
    print(f"fast tier: {n_fast} package lines executed of the {n_all} both tiers execute: {100 * n_fast / n_all:.1f}%")
    missed = sorted(((len(union[f] - fast.get(f, set())), f) for f in union), reverse=True)[:10]
    print("only the slower tier reaches (lines, file): " + ", ".join(f"{n} {f}" for n, f in missed if n))


if __name__ == "__main__":
    main()
