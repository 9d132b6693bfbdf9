"""The import graph of a Python package, read with ``ast`` (nothing is imported).

Every import counts, wherever it is written: module level, inside functions
(a lazy import hides a loop from the interpreter, not from the design), under
``TYPE_CHECKING``, and ``importlib.import_module`` / ``__import__`` calls whose
module name is a string literal.

Edges point from a module to the modules of the package it imports:

* ``import a.b.c`` and ``from a.b.c import name`` -> ``a.b.c``;
* ``from a.b import c`` -> ``a.b.c`` when ``c`` is a module, else ``a.b``
  (the package's ``__init__``, which defines ``c``).

A module's parent packages are not edges: Python initialises them before the
module, and counting them would make every package whose ``__init__``
re-exports a submodule a loop.

    >>> import_cycles(Path("minedraft/kit"))
    []
"""

from __future__ import annotations

import ast
from pathlib import Path

IMPORT_FUNCTIONS = {"import_module", "__import__"}


def package_name(package_dir: Path) -> str:
    """Dotted name of ``package_dir``: its folder and every parent that is a package too."""
    package_dir = package_dir.resolve()
    parts = [package_dir.name]
    parent = package_dir.parent
    while (parent / "__init__.py").is_file():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def modules(package_dir: Path) -> dict[str, Path]:
    """Every module of the package (subpackages included) by dotted name."""
    package_dir = package_dir.resolve()
    root = package_name(package_dir)
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir).with_suffix("").parts
        if rel[-1] == "__init__":
            rel = rel[:-1]
        found[".".join((root, *rel))] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(module: str | None, level: int, importer: str, importer_is_package: bool) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in ``importer``."""
    if level == 0:
        return module or ""
    package = importer.split(".")
    if not importer_is_package:
        package = package[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _literal_import_call(node: ast.Call) -> str | None:
    """``importlib.import_module("x")``, ``import_module("x")``, ``__import__("x")``: ``"x"``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in IMPORT_FUNCTIONS or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def imported_modules(tree: ast.AST, importer: str, importer_is_package: bool, known: set[str]) -> set[str]:
    """The modules in ``known`` that ``tree`` imports, by the rules in the module doc."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, importer, importer_is_package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
        elif isinstance(node, ast.Call):
            found.add(_literal_import_call(node) or "")
    return found & known


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` for every module of the package."""
    known = modules(package_dir)
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = imported_modules(tree, name, _is_package(path), set(known))
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def import_cycles(package_dir: Path) -> list[list[str]]:
    """The import loops of the package: groups of modules that import each other, sorted.

    A module importing itself counts as a loop of one.
    """
    graph = import_graph(package_dir)
    loops = [c for c in strongly_connected(graph) if len(c) > 1 or c[0] in graph[c[0]]]
    return sorted(loops)
