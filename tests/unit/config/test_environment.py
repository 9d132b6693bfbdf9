"""minedraft/config/environment.py: one table of MINEDRAFT_* variables, and the package's one reader."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from minedraft.config import environment
from minedraft.config.settings import MineDraftSettings

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "minedraft"
READER = PACKAGE / "config" / "environment.py"
NAME = re.compile(r"MINEDRAFT_[A-Z][A-Z0-9_]*[A-Z0-9]")


def _is_os_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ"
            and isinstance(node.value, ast.Name) and node.value.id == "os")


def environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read a variable: ``os.getenv``, ``os.environ.get``, ``os.environ[...]`` (not an
    assignment), ``... in os.environ``. Copying the whole environment for a child is not a read."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "getenv" or (node.func.attr == "get" and _is_os_environ(node.func.value)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value) and isinstance(node.ctx, ast.Load):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            lines.append(node.lineno)
    return lines


def test_no_module_but_the_table_reads_the_environment():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PACKAGE.rglob("*.py")) if path != READER
             for line in environment_reads(ast.parse(path.read_text()))]
    assert not found, "read the environment through minedraft/config/environment.py: " + ", ".join(found)


def test_the_scan_sees_each_kind_of_read():
    code = "import os\na = os.getenv('X')\nb = os.environ.get('Y')\nc = os.environ['Z']\nd = 'W' in os.environ\n" \
           "os.environ['V'] = '1'\nenv = {**os.environ}\n"
    assert environment_reads(ast.parse(code)) == [2, 3, 4, 5]


def _string_constants(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def test_every_variable_the_project_names_is_in_the_table():
    files = [p for folder in ("minedraft", "harness", "modelkit", "tests", "benchmarks", "analysis")
             for p in (ROOT / folder).rglob("*.py") if p != Path(__file__).resolve()]
    named = {m for path in files for text in _string_constants(path) for m in NAME.findall(text)}
    named |= set(NAME.findall((ROOT / "Makefile").read_text()))
    assert named - set(environment.BY_NAME) == set()


def test_every_setting_has_its_variable_and_parses_from_it():
    fields = set(MineDraftSettings.__dataclass_fields__)
    assert set(environment.ENGINE_SETTINGS) == fields
    settings = MineDraftSettings.parse({}, environ={"MINEDRAFT_MODE": "stock", "MINEDRAFT_LANE": "serial"})
    assert (settings.mode, settings.lane) == ("stock", "serial")


def test_unknown_names_are_refused():
    with pytest.raises(KeyError):
        environment.get("MINEDRAFT_NOT_A_VARIABLE")
    with pytest.raises(KeyError):
        environment.inherited("MINEDRAFT_MODE")
