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
#: the sweep store, trajectory files) is above the pure-JAX layers, which never write files; ``plotting`` (movies)
#: draws what ``io`` reads and writes its files, for the studies and the command line alike; a study composes the
#: layers below it; the package face (``jaxattn/__init__.py``) re-exports them all, so only the command line (and
#: users) import it.
ORDER = ("errors", "config", "model", "dynamics", "analysis", "io", "plotting", "sweeps", "aot", "studies",
         "jaxattn", "cli")

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


#: The private-module rule covers the package and the scripts and benchmarks that use it from outside.
REPO = ROOT.parent
CHECKED = ("jaxattn", "scripts", "benchmarks")


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))  # __init__, __future__


def _found(name: str) -> Path | None:
    """The file of module ``name`` in this repository (``None``: outside it, e.g. the standard library's
    ``_thread``)."""
    path = REPO.joinpath(*name.split("."))
    return next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)


def _private_imports(path: Path, source: str | None = None) -> list[str]:
    """``file:line what`` for every import, in ``path`` (its text, or ``source`` as if it were its text), of a
    private module of this repository (a dotted component ``_x``) or of a private name ``_x`` of one of its
    modules, from outside the folder that holds the private thing. At module level or in a function, absolute
    or relative, and ``import_module``/``__import__`` of a constant string."""
    rel = path.relative_to(REPO)
    package = ".".join(rel.parent.parts)  # what a relative import starts from (a module's or __init__'s folder)
    bad: dict[str, int] = {}  # what, by line: once per statement, in the order of the file

    def check(module: str, line: int, name: str | None = None) -> None:
        if _found(module) is None:
            return
        parts = module.split(".")
        private = next((i for i, part in enumerate(parts) if _private(part)), None)
        if private is not None:  # the folder that holds the private module (or package)
            folder, what = REPO.joinpath(*parts[:private]), module
        elif name is not None and _private(name):  # a private name: the folder of the module defining it
            found = _found(module)
            assert found is not None
            folder, what = found.parent, f"{module}.{name}"
        else:
            return
        if not path.is_relative_to(folder):
            bad[f"{rel}:{line} imports {what}"] = line

    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                check(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            for a in node.names:  # `from jaxattn.io import _atomic` imports the module jaxattn.io._atomic
                sub = f"{base}.{a.name}"
                if _found(sub):
                    check(sub, node.lineno)
                else:
                    check(base, node.lineno, a.name)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            check(node.args[0].value, node.lineno)
    return sorted(bad, key=bad.__getitem__)


def test_private_means_private():
    """A ``_private`` module (or name) is used only in its folder: the layers above, the scripts and the
    benchmarks import what its folder's face (``__init__.py`` or a public module) re-exports."""
    files = sorted(p for top in CHECKED for p in (REPO / top).rglob("*.py"))
    assert len(files) > 100 and any(p.parent.name == "scripts" for p in files)
    bad = [b for p in files for b in _private_imports(p)]
    assert not bad, "private modules or names imported from outside their folder:\n" + "\n".join(bad)


def test_the_private_check_sees_what_it_checks():
    """Absolute, relative, multi-line, function-local and string imports of another folder's private module or
    name are found; the folder's own private names and modules, the standard library's ``_thread`` and dunder
    modules are not."""
    source = ("import _thread\nfrom __future__ import annotations\nfrom jaxattn.dynamics import _runner\n"
              "from ..analysis._hulls import polytope\nfrom jaxattn.cli._config import (\n    where,\n)\n"
              "def f():\n    from jaxattn.sweeps._point import point_of\n"
              "    importlib.import_module('jaxattn.io._atomic')\n"
              "from jaxattn.studies.cluster_checks import _x\nfrom jaxattn.cli import __main__\n"
              "from jaxattn.analysis.steering import _unit\n")
    got = _private_imports(ROOT / "studies" / "x.py", source)
    assert got == ["jaxattn/studies/x.py:3 imports jaxattn.dynamics._runner",
                   "jaxattn/studies/x.py:4 imports jaxattn.analysis._hulls",
                   "jaxattn/studies/x.py:5 imports jaxattn.cli._config",
                   "jaxattn/studies/x.py:9 imports jaxattn.sweeps._point",
                   "jaxattn/studies/x.py:10 imports jaxattn.io._atomic",
                   "jaxattn/studies/x.py:13 imports jaxattn.analysis.steering._unit"], got
    inside = "from jaxattn.io.checkpoints._common import stack\nfrom jaxattn.io._atomic import replace_bytes\n"
    assert _private_imports(ROOT / "io" / "checkpoints" / "x.py", inside) == []
    assert _private_imports(REPO / "scripts" / "x.py", "from jaxattn.dynamics._runner import run\n") \
        == ["scripts/x.py:1 imports jaxattn.dynamics._runner"]


#: The public modules whose functions are on the typed surface, with every callable of ``jaxattn.__all__``.
TYPED_MODULES = tuple(f"jaxattn.{m}" for m in (
    "analysis.metrics", "analysis.observables", "analysis.spectral", "analysis.steering", "analysis.gradients",
    "analysis.alignment", "analysis.directions", "analysis.clusters", "analysis.stability", "dynamics.discrete",
    "dynamics.fields", "dynamics.continuous", "dynamics.passes", "dynamics.faithful", "dynamics.observables",
    "dynamics.geometry", "model.attention", "model.nn", "model.sampling", "model.forms", "model.rope"))


def _typed_surface() -> dict[str, object]:
    """``module.function`` -> the function (unwrapped), once per function: the callables of ``jaxattn.__all__``
    and the public functions of :data:`TYPED_MODULES` (their ``__all__``, else the functions they define)."""
    import importlib
    import inspect

    import jaxattn as ja

    found: dict[int, tuple[str, object]] = {}

    def add(label: str, obj: object) -> None:
        fn = inspect.unwrap(obj) if callable(obj) else obj
        if inspect.isfunction(fn):
            found.setdefault(id(fn), (label, fn))

    for name in ja.__all__:
        add(f"jaxattn.{name}", getattr(ja, name))
    for modname in TYPED_MODULES:
        mod = importlib.import_module(modname)
        names = getattr(mod, "__all__", None)
        if names is None:
            names = [n for n, v in vars(mod).items() if inspect.isfunction(inspect.unwrap(v)) if callable(v)
                     and inspect.unwrap(v).__module__ == modname]
        for name in names:
            if not name.startswith("_"):
                add(f"{modname}.{name}", getattr(mod, name))
    return dict(found.values())


def _bare_arrays(hint) -> bool:
    """Whether ``hint`` holds an array type without a jaxtyping shape (``jax.Array``, ``np.ndarray``, a bare
    ``ArrayLike``), looking inside unions, tuples, sequences and callables; a dict of arrays is a pytree and
    keeps its plain type."""
    import collections.abc
    import typing

    import jax
    import jaxtyping
    import numpy as np

    if isinstance(hint, type) and issubclass(hint, jaxtyping.AbstractArray):
        return False
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _bare_arrays(typing.get_args(hint)[0])
    if origin in (dict, collections.abc.Mapping):
        return False
    if origin is not None:  # a callable's parameters come as a list
        args = [x for a in typing.get_args(hint) for x in (a if isinstance(a, list) else [a])]
        return any(_bare_arrays(a) for a in args if a is not Ellipsis)
    return isinstance(hint, type) and issubclass(hint, (jax.Array, np.ndarray))


def test_public_surface_declares_its_array_shapes():
    """Issue 32 (typed surface): every annotation of every public function resolves (``get_type_hints``: a name
    imported only for a type checker, or a typo in a shape string, fails here although the linter, whose F722
    check is off for jaxtyping, passes it), and every array parameter or return is a jaxtyping shaped type."""
    import inspect
    import typing

    surface = _typed_surface()
    assert len(surface) > 140, len(surface)
    unresolved, bare = [], []
    for label, fn in surface.items():
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as e:  # every failure is reported, with its function
            unresolved.append(f"{label}: {e!r}")
            continue
        for arg in (*inspect.signature(fn).parameters, "return"):
            if arg in hints and _bare_arrays(hints[arg]):
                bare.append(f"{label}({arg}): {hints[arg]}")
    assert not unresolved, "\n".join(unresolved)
    assert not bare, f"{len(bare)} array annotations without a shape:\n" + "\n".join(bare)


def test_public_drivers_declare_their_array_shapes():
    """The exact dimensions of the drivers' arrays (the names the package uses: B conditions, n tokens, d model
    width, H heads, G weight sets)."""
    import typing

    import jaxtyping

    import jaxattn as ja

    want = {ja.simulate: ("X0", "*B n d"), ja.simulate_one: ("X0", "n d"), ja.solve: ("X0", "*B n d"),
            ja.repeated_passes: ("X0", "B n d"), ja.dynamics.discrete.step: ("X", "n d"), ja.velocity: ("X", "n d"),
            ja.metrics.diameter: ("X", "n d"), ja.init_tokens: ("return", "batch n d"),
            ja.layer_matrices: ("return", "G d d"), ja.model.attention.probabilities: ("return", "H n n"),
            ja.model.nn.l2: ("y", "*B d"), ja.dynamics.discrete.simulate: ("S", "d d")}
    for fn, (arg, dims) in want.items():
        fn = getattr(fn, "__wrapped__", fn)
        hint = typing.get_type_hints(fn, include_extras=True)[arg]
        shaped = [h for h in typing.get_args(hint) or (hint,) if isinstance(h, type)
                  and issubclass(h, jaxtyping.AbstractArray)]
        assert shaped and shaped[0].dim_str == dims, (fn.__name__, hint)


# ----------------------------------------------------------------------------- one home per rule
#: Option rules with one helper each in ``jaxattn/errors.py`` (and ``named_dtype`` in the runner), and the inline
#: idiom that restated each of them before (8 integer checks, 3 integer-or-'last', 3 seed ranges, 6 dtypes by name).
RULES = {
    "integer": "an inline integer check (isinstance(v, (int, np.integer)) with a comparison): errors.integer / "
               "errors.is_integer",
    "every": "an inline 'integer or last' check: errors.every / errors.is_every",
    "seed": "the seed range written out (2**63): errors.seed / errors.SEEDS",
    "dtype": "a dtype chosen by its name inline (jnp.float64 if name == 'float64' else ...): "
             "jaxattn.dynamics.named_dtype",
}
#: The helpers' own module: the one place each rule is written out.
RULE_HOME = ROOT / "errors.py"


def _is_integer_types(node: ast.AST) -> bool:
    """``int`` or ``(int, np.integer)``: the types of an integer check (not of a number check: no ``float``)."""
    elts = node.elts if isinstance(node, ast.Tuple) else [node]
    names = {e.id if isinstance(e, ast.Name) else e.attr if isinstance(e, ast.Attribute) else None for e in elts}
    return "int" in names and not names & {"float", "floating"}


def _inline_rules(tree: ast.AST) -> list[tuple[int, str]]:
    """The (line, rule) of every inline restatement of a rule of :data:`RULES` in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp):
            parts = list(ast.walk(node))
            checks_int = any(isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "isinstance"
                             and len(p.args) == 2 and _is_integer_types(p.args[1]) for p in parts)
            compares = any(isinstance(p, ast.Compare) for p in parts)
            last = any(isinstance(p, ast.Constant) and p.value == "last" for p in parts)
            any_isinstance = any(isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "isinstance"
                                 for p in parts)
            if last and any_isinstance:
                found.append((node.lineno, "every"))
            elif checks_int and compares:
                found.append((node.lineno, "integer"))
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.left, ast.Constant)
              and node.left.value == 2 and isinstance(node.right, ast.Constant) and node.right.value == 63):
            found.append((node.lineno, "seed"))
        elif isinstance(node, ast.IfExp):
            branches = [b.attr for b in (node.body, node.orelse) if isinstance(b, ast.Attribute)]
            names = [c.value for c in ast.walk(node.test) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if any(b.startswith("float") for b in branches) and any(n.startswith("float") for n in names):
                found.append((node.lineno, "dtype"))
    return sorted(set(found))


def test_each_option_rule_has_one_home():
    """An integer option, a saving period ('last' or a positive integer), a seed and a dtype by name are each
    checked by one helper; writing the rule out again elsewhere fails here, naming the file, the line and the
    helper to call instead."""
    found = [f"{p.relative_to(ROOT.parent)}:{line}: {RULES[rule]}"
             for p in sorted(ROOT.rglob("*.py")) if p != RULE_HOME
             for line, rule in _inline_rules(ast.parse(p.read_text()))]
    assert not found, "\n".join(found)


def test_the_rule_check_sees_what_it_checks():
    """Each idiom the test above looks for is found in a sample of it, and the helpers' calls are not."""
    samples = {
        "integer": "if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:\n    raise E\n"
                   "if not (isinstance(k, int) and k >= 2):\n    raise E",
        "every": "ok = v is None or v == 'last' or (isinstance(v, int) and v >= 1)",
        "seed": "ok = 0 <= s < 2**63",
        "dtype": "dt = jnp.float64 if cfg.dtype == 'float64' else jnp.float32",
    }
    for rule, src in samples.items():
        assert rule in {r for _, r in _inline_rules(ast.parse(src))}, rule
    helpers = ("n = integer('n', n, minimum=0)\nok = is_every(v) and not is_integer(d) or d != 1\n"
               "s = seed('seed', s)\ndt = named_dtype(cfg.dtype)\nv = int(v) if isinstance(v, np.integer) else v")
    assert _inline_rules(ast.parse(helpers)) == []
    assert RULE_HOME.is_file() and _inline_rules(ast.parse(RULE_HOME.read_text()))  # the rules are written there
