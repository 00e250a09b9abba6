"""Compact summaries of the library's objects, as a terminal shows them (``__repr__``) and as a notebook does
(``_repr_html_``): shapes, dtypes, how many conditions ended non-finite, the key values of a configuration, the way
xarray shows a Dataset. A summary never fails: what cannot be read (a traced value under ``jit``, a leaf that is not
an array) is said so, and an object whose summary raised falls back to its plain form (:func:`safe`).
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Sequence
from typing import Any

import jax

#: The width of a row's label in the text form (as :meth:`jaxattn.model.params.Model.summary` aligns its rows).
LABEL = 13


@dataclasses.dataclass(frozen=True)
class Summary:
    """A titled list of ``(label, value)`` rows, written as text or as an HTML table."""

    title: str
    rows: Sequence[tuple[str, str]]

    def text(self) -> str:
        lines = [f"<{self.title}>"]
        for label, value in self.rows:
            head, *rest = str(value).split("\n")
            lines.append(f"{label:<{LABEL - 1}} {head}".rstrip())
            lines += [" " * LABEL + r for r in rest]
        return "\n".join(lines)

    def html(self) -> str:
        cell = "padding:1px 8px 1px 0;text-align:left;vertical-align:top;font-family:monospace"
        body = "".join(f"<tr><th style='{cell};font-weight:normal;opacity:0.7'>{html.escape(label)}</th>"
                       f"<td style='{cell};white-space:pre'>{html.escape(str(value))}</td></tr>"
                       for label, value in self.rows)
        return (f"<div class='jaxattn-repr'><div style='font-family:monospace;font-weight:bold'>"
                f"{html.escape(self.title)}</div><table style='border-collapse:collapse;margin:2px 0'>{body}"
                "</table></div>")


def traced(x: Any) -> bool:
    """Whether any leaf of ``x`` has no values to read: traced (under ``jit``, ``vmap``, ``grad``) or abstract
    (``jax.eval_shape``'s)."""
    return any(isinstance(leaf, (jax.core.Tracer, jax.ShapeDtypeStruct)) for leaf in jax.tree_util.tree_leaves(x))


def shape_of(x: Any) -> tuple[int, ...] | None:
    """The shape of an array-like leaf (also traced or abstract), ``None`` for anything else."""
    shape = getattr(x, "shape", None)
    return tuple(int(s) for s in shape) if isinstance(shape, tuple) else None


def shape(x: Any) -> tuple[int, ...]:
    """The shape of an array-like leaf; anything else raises (a summary then falls back, :func:`safe`)."""
    found = shape_of(x)
    if found is None:
        raise TypeError(f"not an array: {type(x).__name__}")
    return found


def array_line(x: Any) -> str:
    """``(4, 5, 8) float32`` for an array (traced ones too: their shape and dtype are known), ``none`` for
    ``None``, a short repr otherwise."""
    if x is None:
        return "none"
    shape, dtype = shape_of(x), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        text = repr(x)
        return text if len(text) <= 60 else text[:57] + "..."
    name = getattr(dtype, "name", None) or str(dtype)
    kind = " (traced)" if isinstance(x, jax.core.Tracer) else " (abstract)" if traced(x) else ""
    return f"{shape} {name}{kind}"


def count_line(bad: int | None, total: int, what: str = "conditions") -> str:
    """``0 of 4 conditions``; ``unknown (traced)`` when the values cannot be read."""
    if bad is None:
        return "unknown (traced or abstract values)"
    return f"{bad:,} of {total:,} {what if total != 1 else what.rstrip('s')}"


def short(value: Any) -> str:
    """A configuration value as a row shows it: ``4``, ``0.5``, ``causal``, ``[1, 2]``."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(short(v) for v in value[:8]) + (", ..." if len(value) > 8 else "")
        return f"[{inner}]"
    return str(value)


def safe(make: Callable[[], Summary], fallback: Callable[[], str]) -> Summary | str:
    """``make()``, or the plain text ``fallback()`` if making the summary raised: a repr must not fail (an object
    built by a transformation may hold leaves of any kind: ``None``, sentinels, abstract values)."""
    try:
        return make()
    except Exception:
        return fallback()


def text(summary: Summary | str) -> str:
    return summary.text() if isinstance(summary, Summary) else summary


def as_html(summary: Summary | str) -> str:
    if isinstance(summary, Summary):
        return summary.html()
    return f"<pre>{html.escape(summary)}</pre>"


def fields_repr(obj: Any, names: Sequence[str]) -> str:
    """``Name(a=..., b=...)``: the plain form of an object's fields (a summary's fallback)."""
    inner = ", ".join(f"{n}={getattr(obj, n, None)!r}" for n in names)
    return f"{type(obj).__name__}({inner})"
