"""mkdocs hook: the command-line reference of docs/cli.md, generated from the argparse parsers.

The line ``<!-- cli-reference -->`` in ``cli.md`` is replaced by the ``--help`` text of every
subcommand of ``jaxattn``, so the page always matches the installed command line.
"""

from __future__ import annotations

import os

MARKER = "<!-- cli-reference -->"


def _reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal width: a fixed width for the page
    from jaxattn.cli import build_parser

    parser = build_parser()
    parts = ["### jaxattn", "", "```text", parser.format_help().rstrip(), "```", ""]
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subs.choices.items():
        parts += [f"### jaxattn {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "cli.md" and MARKER in markdown:
        return markdown.replace(MARKER, _reference())
    return markdown
