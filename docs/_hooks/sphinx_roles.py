"""griffe extension: Sphinx cross-reference roles in docstrings become Markdown code spans.

The package's docstrings write ``:func:`simulate` `` and ``:data:`jaxattn.C2` `` as Sphinx would;
mkdocstrings renders Markdown, where the role would appear literally. ``~`` (short name) is honoured.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|data|mod|meth|attr|obj|exc|const):`(~?)([^`]+)`")


def _code(match: re.Match) -> str:
    target = match.group(2)
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = ROLE.sub(_code, obj.docstring.value)
