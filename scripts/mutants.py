"""One-line mutants of jaxattn's core, each run against the fast tier's tests of the file that owns the code: how
many the suite kills (its mutation score).

    python scripts/mutants.py                    # every mutant (about 15 minutes on 2 cores)
    python scripts/mutants.py --only A1 M3       # some of them
    python scripts/mutants.py --json out.json    # also the results as JSON

Each mutant is one line of the core changed the way a plausible bug would change it (a dropped shift, an
off-by-one, a sign, a missing case): the attention (its softmax, masks and scales, the online softmax of the
key-chunked form), the map core (its segments, the final norm between passes, the saved steps), the runner's blocks
(padding), the save logic and the flows' field. The checkout is copied to a temporary folder (its tracked and
untracked files, as ``git ls-files`` lists them), the mutant applied there, and the owning test files' fast tier run
there (``pytest -m "not e2e" -x``); the checkout itself is never touched, so the script can run beside other work.
A mutant is *killed* when a test fails (or the tests cannot be collected, or they hang past ``--timeout``), *survives*
when they all pass. The unmutated copy is run first: it must pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    id: str
    path: str  # relative to the checkout
    before: str  # the exact text replaced (it must occur once)
    after: str
    tests: tuple[str, ...]  # the owning test files
    what: str


ATTENTION = "jaxattn/model/attention.py"
DISCRETE = "jaxattn/dynamics/discrete.py"
RUNNER = "jaxattn/dynamics/_runner.py"
GEOMETRY = "jaxattn/dynamics/geometry.py"
FIELDS = "jaxattn/dynamics/fields.py"
OPTIONS = "jaxattn/dynamics/options.py"
ATTN_TESTS = ("tests/test_forms.py",)
MAP_TESTS = ("tests/test_discrete.py",)
FLOW_TESTS = ("tests/test_continuous.py",)

MUTANTS: tuple[Mutant, ...] = (
    Mutant("A1", ATTENTION, "e = jnp.exp(scores - jax.lax.stop_gradient(scores.max(-1, keepdims=True)))",
           "e = jnp.exp(scores)", ATTN_TESTS, "the deferred division's softmax without its max shift"),
    Mutant("A2", ATTENTION, "return _output(heads / e.sum(-1).reshape(*heads.shape[:-1], 1), lw, biases=biases, "
           "form=form)", "return _output(heads / e.max(-1).reshape(*heads.shape[:-1], 1), lw, biases=biases, "
           "form=form)", ATTN_TESTS, "the deferred division by the largest weight instead of their sum"),
    Mutant("A3", ATTENTION, "ok = jnp.where(causal, j <= i, True)", "ok = jnp.where(causal, j < i, True)",
           ATTN_TESTS, "a causal mask without the diagonal"),
    Mutant("A4", ATTENTION, "return ok & jnp.where(window > 0, jnp.abs(i - j) < window, True)",
           "return ok & jnp.where(window > 0, jnp.abs(i - j) <= window, True)", ATTN_TESTS,
           "a local window one token wider"),
    Mutant("A5", ATTENTION, "return (jnp.exp(scores) if ok is None else jnp.where(ok, jnp.exp(scores), 0.0)) / n",
           "return (jnp.exp(scores) if ok is None else jnp.where(ok, jnp.exp(scores), 0.0))", ATTN_TESTS,
           "the unnormalised kernel without its 1/n"),
    Mutant("A6", ATTENTION, 'return _contract("hik,hjk->hij", q, k, form) * (beta * lw.scale), None if ok is None '
           "else ok[None]", 'return _contract("hik,hjk->hij", q, k, form) * beta, None if ok is None else ok[None]',
           ATTN_TESTS, "the scores of several heads without the layer's scale"),
    Mutant("A7", ATTENTION, "corr = jnp.exp(m - base)", "corr = jnp.exp(base - m)", ATTN_TESTS,
           "the online softmax rescaling its running sums the wrong way"),
    Mutant("A8", ATTENTION, "base = jnp.where(jnp.isfinite(m_new), m_new, 0.0)", "base = m_new", ATTN_TESTS,
           "the online softmax without its guard for a row with no allowed key yet"),
    Mutant("M1", DISCRETE, "    if m and r:  # a last, shorter segment",
           "    if m and r > 1:  # a last, shorter segment", MAP_TESTS,
           "a one-step remainder of Save(every=m) treated as none"),
    Mutant("M2", DISCRETE, "            k0 = start + j * m\n", "            k0 = start + j * m + 1\n", MAP_TESTS,
           "segments that run the layers of the next step"),
    Mutant("M3", DISCRETE, "Y = jnp.where((k + 1) % depth == 0, ln_f, Y)", "Y = jnp.where(k % depth == 0, ln_f, Y)",
           ("tests/test_passes.py",), "the final norm after the first block of a pass instead of the last"),
    Mutant("M4", DISCRETE, "return np.asarray(sorted(set(range(0, steps, int(every))) | {steps}))",
           "return np.asarray(sorted(set(range(0, steps, int(every)))))", MAP_TESTS,
           "Save(every=m) without the last step"),
    Mutant("M5", DISCRETE, "    obs, traj = keep(kept, X, jnp.int32(steps))\n",
           "    obs, traj = kept\n", MAP_TESTS, "Save(steps=...) never records the last step"),
    Mutant("M6", DISCRETE, "        return (advance(X, start + j), keep(kept, X, j)), None",
           "        return (advance(X, start + j), keep(kept, advance(X, start + j), j)), None", MAP_TESTS,
           "Save(steps=...) records the state after the step instead of before"),
    Mutant("R1", RUNNER, "X0 = jnp.concatenate([X0, jnp.broadcast_to(X0[:1], (pad, *X0.shape[1:]))])",
           "X0 = jnp.concatenate([jnp.broadcast_to(X0[:1], (pad, *X0.shape[1:])), X0])",
           ("tests/test_batch_width.py", "tests/test_options.py"), "the padding put before the batch, not after"),
    Mutant("R2", RUNNER, "return jax.tree_util.tree_map(lambda a: a[:B], out) if pad else out",
           "return jax.tree_util.tree_map(lambda a: a[-B:], out) if pad else out",
           ("tests/test_batch_width.py", "tests/test_options.py"), "the padded lanes kept instead of the batch's"),
    Mutant("S1", OPTIONS, "    return tuple(sorted({int(k) for k in items}))",
           "    return tuple(int(k) for k in items)", MAP_TESTS, "Save(steps=...) kept in the order given, not sorted"),
    Mutant("F1", GEOMETRY, "return V - (self._metric(X, V) / self._metric(X, X))[..., None] * X",
           "return V - self._metric(X, V)[..., None] * X", FLOW_TESTS,
           "the tangent projection assuming unit tokens"),
    Mutant("F2", GEOMETRY, "return jnp.where(m < jnp.inf, Y / jnp.sqrt(m), jnp.nan)",
           "return jnp.where(m < jnp.inf, Y / m, jnp.nan)", MAP_TESTS,
           "the sphere's normalisation by the squared norm"),
    Mutant("F3", FIELDS, "    U = attend(X, lw, beta, biases=flow.biases, attention=flow.attention, form=form)\n"
           "    return geom.project(X, U)",
           "    U = attend(X, lw, beta, biases=flow.biases, attention=flow.attention, form=form)\n    return U",
           FLOW_TESTS, "the flow's field without its tangent projection"),
)


def _copy(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def _pytest(where: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, float, str]:
    env = {**os.environ, "PYTHONPATH": str(where)}
    started = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not e2e",
                            *tests], cwd=where, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        rc, out = -1, "timed out"
    # the first failure (what killed the mutant), else pytest's count line
    lines = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    lines += [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed)", ln)][-1:]
    return rc, time.perf_counter() - started, (lines or out.strip().splitlines()[-1:] or [""])[0][:160]


def run(mutants: tuple[Mutant, ...], timeout: float, say=print) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="jaxattn-mutants-") as tmp:
        where = Path(tmp)
        _copy(where)
        found = subprocess.run([sys.executable, "-c", "import jaxattn; print(jaxattn.__file__)"], cwd=where,
                               env={**os.environ, "PYTHONPATH": str(where)}, capture_output=True, text=True)
        if not found.stdout.strip().startswith(str(where)):
            raise SystemExit(f"the copy's jaxattn is not the one imported there: {found.stdout or found.stderr}")
        for path in sorted({m.path for m in mutants}):
            text = (where / path).read_text()
            for m in (m for m in mutants if m.path == path):
                if text.count(m.before) != 1:
                    raise SystemExit(f"{m.id}: the text to mutate occurs {text.count(m.before)} times in {path}")
        tests = tuple(sorted({t for m in mutants for t in m.tests}))
        rc, seconds, line = _pytest(where, tests, timeout * len(tests))
        if rc != 0:
            raise SystemExit(f"the unmutated tests fail ({line}): fix them first")
        say(f"unmutated: {line} ({seconds:.0f} s)")
        for m in mutants:
            f = where / m.path
            original = f.read_text()
            f.write_text(original.replace(m.before, m.after))
            try:
                rc, seconds, line = _pytest(where, m.tests, timeout)
            finally:
                f.write_text(original)
            # 1: a test failed; 2: collection failed (the mutant broke an import); a hang is caught too; any other
            # status (no tests run, a usage error) says nothing about the mutant and is left out of the score
            verdict = {0: "survived", 1: "killed", 2: "killed", -1: "timed out"}.get(rc, f"error (pytest {rc})")
            rows.append({**asdict(m), "verdict": verdict, "seconds": round(seconds, 1), "by": line})
            say(f"{m.id:>3} {verdict:<9} {seconds:5.0f} s  {m.what}  [{line}]")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", metavar="ID", help="run these mutants only")
    p.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    known = {m.id: m for m in MUTANTS}
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        p.error(f"unknown mutants: {', '.join(unknown)} (known: {', '.join(known)})")
    chosen = tuple(known[i] for i in args.only) if args.only else MUTANTS
    rows = run(chosen, args.timeout)
    killed = sum(r["verdict"] in ("killed", "timed out") for r in rows)
    judged = sum(not r["verdict"].startswith("error") for r in rows)
    print(f"mutation score: {killed} of {judged} killed by the fast tier's owning tests"
          + (f" ({len(rows) - judged} could not be judged)" if judged < len(rows) else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
