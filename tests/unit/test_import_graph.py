"""No import loops in the minedraft package, read from the source with ``ast``.

Edges count every import that can run: module-level and function-level
``import`` / ``from ... import``, and ``importlib.import_module`` /
``__import__`` calls (a literal name, or an f-string whose constant prefix
names every module it may import). Imports under ``if TYPE_CHECKING:`` never
run and are left out. A package's ``__init__`` that Python runs before a
submodule is not an edge of its own: what loops is one module importing
another that imports it back, and an ``__init__`` that imports its own
submodules inside functions is the usual, safe shape.

The test fails on any cycle in the package (the offline ``analysis/`` is
outside it), naming one loop per strongly connected component.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "minedraft"



def module_files() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _ImportCollector(ast.NodeVisitor):
    """Names of the modules one source file may import, as written."""

    def __init__(self, module: str, is_package: bool, known: set[str]):
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.names: set[str] = set()
        self.prefixes: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            for child in node.body:
                self.visit(child)
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            self.names.add(submodule if submodule in self.known else base)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("import_module", "__import__") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self.names.add(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                self.prefixes.add(_constant_prefix(arg))
        self.generic_visit(node)


def _constant_prefix(node: ast.JoinedStr) -> str:
    prefix = ""
    for part in node.values:
        if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
            break
        prefix += part.value
    return prefix


def _owning_module(name: str, known: set[str]) -> str | None:
    """The longest known module that ``name`` is or lies in (``pkg.mod.attr`` -> ``pkg.mod``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    graph = {}
    for module, path in files.items():
        collector = _ImportCollector(module, path.name == "__init__.py", known)
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        targets = {_owning_module(name, known) for name in collector.names if name.startswith("minedraft")}
        for prefix in collector.prefixes:
            if prefix.startswith("minedraft"):
                targets.update(m for m in known if m.startswith(prefix))
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module: each holds at least one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, for the message."""
    start = component[0]
    members = set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    return paths[node] + [start]
                if succ not in paths:
                    paths[succ] = paths[node] + [succ]
                    next_frontier.append(succ)
        frontier = next_frontier
    raise AssertionError(f"no cycle through {start}")


def _describe(graph, components) -> Iterator[str]:
    for component in components:
        yield f"{' -> '.join(a_cycle(graph, component))} (component: {', '.join(component)})"


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "minedraft.monkeypatch.patching" in graph["minedraft.monkeypatch.patch_engine_config"]  # from-import
    assert "minedraft.monkeypatch" in graph["minedraft.plugin"]  # inside a function
    # importlib.import_module(f"minedraft.monkeypatch.patch_{name}"): every patch module
    assert {"minedraft.monkeypatch.patch_cli_vllm_version",
            "minedraft.monkeypatch.patch_forward_context"} <= graph["minedraft.monkeypatch"]
    assert "minedraft.registry" in graph["minedraft.engine_arguments"]  # from minedraft import registry


def test_strongly_connected_finds_a_planted_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_loops_in_the_package():
    graph = import_graph()
    components = strongly_connected(graph)
    assert not components, "import loops: " + "; ".join(_describe(graph, components))
