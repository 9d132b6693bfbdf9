"""The package's layers, read from the source with ``ast`` (the import graph of test_import_graph.py).

``minedraft/`` is what runs inside vLLM. A module imports only its own layer
or lower ones, and never the tooling beside the package (``harness/``,
``modelkit/``, ``analysis/``, ``benchmarks/``, ``tests/``), which is not installed.
The tooling imports itself as packages from the checkout's root (``python -m benchmarks.sweep``,
pytest's ``pythonpath``), so no file edits ``sys.path``.
"""

from __future__ import annotations

import ast
import subprocess

import pytest
from test_import_graph import PACKAGE_DIR, import_graph, module_files

ROOT = PACKAGE_DIR.parent

# Lowest first. Within a layer, modules may import each other (test_import_graph forbids loops).
LAYERS = (
    ("config", ("minedraft", "minedraft._version", "minedraft.log", "minedraft.registry", "minedraft.lifetime",
                "minedraft.rank", "minedraft.config", "minedraft.contract")),
    ("models", ("minedraft.policy", "minedraft.metrics", "minedraft.hybrid")),
    ("engine parts", ("minedraft.scheduling", "minedraft.process_drafter")),
    ("front end", ("minedraft.engine_arguments",)),
    ("patches", ("minedraft.monkeypatch",)),
    ("worker", ("minedraft.worker",)),
    ("entry points", ("minedraft.plugin", "minedraft.cli")),
)
TOOLING = ("harness", "modelkit", "analysis", "benchmarks", "tests")


def layer_of(module: str) -> int:
    best, level = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), index
    assert level is not None, f"{module} is in no layer: add it to LAYERS"
    return level


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
                  for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m))


def tooling_imports() -> list[str]:
    found = []
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{module} imports {n}" for n in names if n.split(".")[0] in TOOLING]
    return found


def test_every_module_has_a_layer():
    for module in import_graph():
        layer_of(module)


def test_lower_layers_never_import_higher_ones():
    assert not upward_imports(import_graph())


def test_an_upward_import_is_caught():
    lanes = "minedraft.worker.in_process.lanes"
    graph = {"minedraft.config.settings": {lanes}, lanes: set()}
    assert upward_imports(graph) == [
        "minedraft.config.settings (config) imports minedraft.worker.in_process.lanes (worker)"]


def test_the_runtime_never_imports_the_tooling():
    assert PACKAGE_DIR.name == "minedraft"
    assert not tooling_imports()


def sys_path_edits(source: str) -> list[int]:
    """Lines of ``source`` that call a method of ``sys.path`` (insert, append, ...)."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and isinstance(path := node.func.value, ast.Attribute)
            and path.attr == "path" and isinstance(path.value, ast.Name) and path.value.id == "sys"]


def test_a_sys_path_edit_is_caught():
    assert sys_path_edits("import sys\nsys.path.insert(0, 'x')\nsys.path.append('y')\nprint(sys.path)\n") == [2, 3]


def test_no_tracked_file_edits_sys_path():
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode:
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in listed.stdout.split()]
    assert files
    found = [f"{path.relative_to(ROOT)}:{line}" for path in files if path.exists()
             for line in sys_path_edits(path.read_text())]
    assert not found, "run tooling as modules from the checkout's root instead (python -m benchmarks.sweep)"
