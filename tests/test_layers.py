"""The folders of ``jaxattn/`` are layers: imports flow one way (README.md, "Layout").

Every ``jaxattn/**/*.py`` is parsed with ``ast`` (nothing is imported): each import of a jaxattn module, at
module level or inside a function, must point to the same layer or one below, the graph of those imports has
no cycle, and a function-local import of a jaxattn module is allowed only where a reason is listed here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jaxattn

ROOT = Path(jaxattn.__file__).parent

#: Lowest first. ``errors`` is below everything, then ``config`` (how options are declared, checked and turned
#: into command-line options: every layer declares its options with it); ``io`` (checkpoints, run directories,
#: the sweep store) is above the pure-JAX layers, which never write files; a study composes the layers below it;
#: the package face (``jaxattn/__init__.py``) re-exports them all, so only the command line (and users) import it.
ORDER = ("errors", "config", "model", "dynamics", "analysis", "io", "sweeps", "studies", "jaxattn", "cli")

#: Function-local imports of jaxattn modules that have a reason, by importing module (a folder prefix ends with
#: a dot): none. The command line once imported a subcommand's machinery when it ran, which saved nothing:
#: importing any ``jaxattn.*`` module runs the package face, which imports every layer (about 1.2 s).
LOCAL_ALLOWED: dict[str, str] = {}


def _module_name(path: Path) -> str:
    parts = ("jaxattn", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()


def _layer(name: str) -> str:
    parts = name.split(".")
    return "jaxattn" if len(parts) == 1 else parts[1]


def _imports(path: Path, source: str | None = None) -> list[tuple[str, int, bool]]:
    """``(target module, line, function-local)`` for every import of a jaxattn module in ``path`` (its text, or
    ``source`` as if it were its text)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, local) for a in child.names if a.name.split(".")[0] == "jaxattn")
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*up, base] if base else up)
                if base.split(".")[0] != "jaxattn":
                    continue
                for a in child.names:  # `from jaxattn.io import rundir` imports the module jaxattn.io.rundir
                    sub = f"{base}.{a.name}"
                    found.append((sub if _is_module(sub) else base, child.lineno, local))
            else:
                visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text() if source is None else source, str(path)), False)
    return found


def _graph() -> dict[str, list[tuple[str, int, bool]]]:
    return {_module_name(p): _imports(p) for p in sorted(ROOT.rglob("*.py"))}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_every_layer_is_known():
    graph = _graph()
    assert {_layer(m) for m in graph} == set(ORDER)
    assert sum(len(v) for v in graph.values()) > 100  # the walk sees the imports (a broken walk passes nothing)


def test_no_import_against_the_layers():
    bad = sorted({f"{src}:{line} imports {dst} ({_layer(src)} is below {_layer(dst)})"
                  for src, imports in _graph().items() for dst, line, _ in imports
                  if ORDER.index(_layer(src)) < ORDER.index(_layer(dst))})
    assert not bad, "imports against the layers " + " < ".join(ORDER) + ":\n" + "\n".join(bad)


def test_no_import_cycle():
    edges = {src: {dst for dst, _, _ in imports if dst != src} for src, imports in _graph().items()}
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_function_local_imports_have_a_reason():
    bad = sorted({f"{src}:{line} imports {dst} inside a function"
                  for src, imports in _graph().items() for dst, line, local in imports
                  if local and not any(f"{src}.".startswith(prefix) for prefix in LOCAL_ALLOWED)})
    assert not bad, "function-local jaxattn imports with no listed reason:\n" + "\n".join(bad)


def test_the_checks_see_what_they_check():
    """The walk finds a function-local relative import and an upward one, and Tarjan finds a two-cycle."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert not _cycles({"a": {"b"}, "b": set()})
    cli = _imports(ROOT / "cli" / "_config.py", "from jaxattn.errors import ConfigError\n"
                   "def f():\n    from ..io import rundir\n    return lambda: __import__('x')\n")
    assert cli == [("jaxattn.errors", 1, False), ("jaxattn.io.rundir", 3, True)]
    assert any(not local and dst == "jaxattn.errors" for dst, _, local in _imports(ROOT / "cli" / "_config.py"))
    assert ORDER.index(_layer("jaxattn.dynamics.discrete")) < ORDER.index(_layer("jaxattn.analysis.metrics"))


def test_public_drivers_declare_their_array_shapes():
    """The shapes in the public signatures are jaxtyping annotations that resolve (a typo in a shape string would
    pass the linter, whose F722 check is off for jaxtyping, but not this)."""
    import typing

    import jaxtyping

    import jaxattn as ja

    want = {ja.simulate: ("X0", "*B n d"), ja.simulate_one: ("X0", "n d"), ja.solve: ("X0", "*B n d"),
            ja.repeated_passes: ("X0", "B n d"), ja.step: ("X", "n d"), ja.velocity: ("X", "n d"),
            ja.metrics.diameter: ("X", "n d"), ja.init_tokens: ("return", "batch n d"),
            ja.layer_matrices: ("return", "G d d")}
    for fn, (arg, dims) in want.items():
        fn = getattr(fn, "__wrapped__", fn)
        hint = typing.get_type_hints(fn, include_extras=True)[arg]
        shaped = [h for h in typing.get_args(hint) or (hint,) if isinstance(h, type)
                  and issubclass(h, jaxtyping.AbstractArray)]
        assert shaped and shaped[0].dim_str == dims, (fn.__name__, hint)
