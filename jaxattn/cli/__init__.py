"""The ``jaxattn`` command line.

Every subcommand prints one clear line and exits with status 2 on bad input; results go to a
run directory (resolved configuration with seed, versions and device, arrays, summary).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence

from jaxattn import __version__
from jaxattn.cli._config import resolve
from jaxattn.cli._interrupt import interrupts
from jaxattn.cli._study import formatter
from jaxattn.errors import DiskFullError, JaxattnError
from jaxattn.io import AGAIN, RESUME, STUDY

EXIT_BAD_INPUT = 2

#: Subcommands that live in their own module of this package: each exposes ``register(sub)``, which
#: adds its parser to the ``argparse`` sub-parsers and sets ``func=run`` (``run(args, cfg) -> int``).
COMMAND_MODULES = ("simulate", "analyze", "convert", "inspect", "spectrum", "solve", "sweep", "consensus",
                   "architectures", "clusters", "stability", "metastability", "movie")


#: What argparse must read as a value, not an option: every negative number Python writes (``-1e-3``, ``-.5``,
#: ``-inf``, ``-nan``), where argparse's own test takes only ``-1`` and ``-0.5`` (``--beta -inf`` was "expected one
#: argument"). No option of jaxattn's looks like one, so nothing is shadowed.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's own pattern, read by its parse_args

    def error(self, message):  # one line, non-zero exit
        self.exit(EXIT_BAD_INPUT, f"jaxattn: error: {message}\n")


# ---------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jaxattn", description="Transformers as dynamical systems, simulated fast in JAX.",
                     formatter_class=formatter)

    parser.add_argument("--version", action="version", version=f"jaxattn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _register_command_modules(sub)
    return parser


def _register_command_modules(sub) -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"jaxattn.cli.{name}").register(sub)
        p = sub.choices[name]
        if "--progress" not in p._option_string_actions:  # taken by every command, so scripts can pass it to any
            p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                           help="accepted by every command; this one shows no progress bar")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``jaxattn`` command: its exit status (0, 2 on bad input, 130 on Ctrl-C, 141 when the output pipe
    closed early, as in ``jaxattn spectrum FILE | head -2``)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        return _pipe_closed()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # --help, --version, a usage error: what argparse printed is flushed while we can catch it
        sys.stdout.flush()
        raise
    try:
        with interrupts():  # a Ctrl-C during a garbage collection is not lost
            cfg = resolve(args, args.defaults) if hasattr(args, "defaults") else {}
            status = int(args.func(args, cfg) or 0)
            sys.stdout.flush()  # a closed pipe is found here, not by the interpreter's last flush
            return status
    except DiskFullError as e:  # said with what this command keeps: its finished chunks, or its folder as found
        resumes = getattr(args, "resumes", None)  # not said by convert and movie, which write one file
        then = AGAIN if resumes is None else RESUME if resumes else STUDY
        print(f"jaxattn: error: {DiskFullError(e.path, then, e.quota)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except JaxattnError as e:
        print(f"jaxattn: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        print(f"jaxattn: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        if getattr(args, "resumes", True):
            print("jaxattn: interrupted; run the same command again to resume", file=sys.stderr)
        else:
            # a study removes what it wrote (jaxattn.studies.skeleton.run_into): an earlier run there is untouched
            kept = ("the earlier run in it is whole" if getattr(args, "overwrite", False)
                    else "nothing of this run was kept")
            print(f"jaxattn: interrupted; {cfg.get('out', 'the output directory')} is left as it was found ({kept}), "
                  "run the same command again to start over", file=sys.stderr)
        return _interrupted(as_program=argv is None)


#: The exit status of a command whose output pipe closed (``jaxattn spectrum FILE | head -2``): what a shell reports
#: for a program that SIGPIPE ended (128 + 13), without its traceback.
EXIT_PIPE_CLOSED = 141


def _pipe_closed() -> int:
    """The reader of the output went away: stop quietly (Python's recipe for SIGPIPE). Standard output is pointed at
    ``os.devnull``, so that the interpreter's last flush of what is still buffered does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind sys.stdout (a caller's StringIO): nothing to redirect
        pass
    return EXIT_PIPE_CLOSED


def _interrupted(as_program: bool) -> int:
    """Exit status 130 after Ctrl-C. As the program (``argv`` from the command line), leave at once: XLA's
    threads may still be running the interrupted computation, and finalising the interpreter under them
    segfaults (status 139 instead of 130)."""
    if as_program:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
