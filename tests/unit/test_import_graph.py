"""No import loops in the model kit, lazy imports included (``import_graph.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_graph import import_cycles, import_graph

import minedraft.kit

KIT_DIR = Path(minedraft.kit.__file__).parent


def test_model_kit_has_no_import_cycle():
    assert import_cycles(KIT_DIR) == []


def test_kit_graph_counts_imports_inside_functions():
    # build imports models only inside functions (its fast path must not import torch).
    assert "minedraft.kit.models" in import_graph(KIT_DIR)["minedraft.kit.build"]


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``root`` with the given module sources."""
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(files.pop("__init__", ""))
    for name, source in files.items():
        (pkg / f"{name}.py").write_text(source)
    return pkg


@pytest.mark.parametrize(
    "a_source",
    [
        "import pkg.b\n",
        "def f():\n    from pkg import b\n",
        "from . import b\n",
        "import importlib\n\ndef f():\n    return importlib.import_module('pkg.b')\n",
        "if False:\n    from pkg.b import thing\n",
    ],
    ids=["module-level", "in-function", "relative", "importlib", "unreachable-branch"],
)
def test_every_kind_of_import_closes_a_loop(tmp_path, a_source):
    pkg = write_package(tmp_path, {"a": a_source, "b": "def g():\n    import pkg.a\n"})
    assert import_cycles(pkg) == [["pkg.a", "pkg.b"]]


def test_reexporting_init_and_sibling_imports_are_no_loop(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__": "from pkg.a import f\n",
        "a": "from pkg import b\n\ndef f():\n    return b.g()\n",
        "b": "def g():\n    return 1\n",
    })
    assert import_graph(pkg) == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
    assert import_cycles(pkg) == []


def test_a_name_from_the_package_init_is_an_edge_to_it(tmp_path):
    pkg = write_package(tmp_path, {"__init__": "from pkg.a import f\n", "a": "def f():\n    from pkg import g\n"})
    assert import_cycles(pkg) == [["pkg", "pkg.a"]]
