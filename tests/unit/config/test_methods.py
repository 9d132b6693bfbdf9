"""minedraft/config/methods.py: one table of what each speculative method can do, and no method-name
comparison anywhere else in the runtime."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from minedraft.config.methods import METHODS, UNKNOWN, method_named, method_of, method_of_engine, names_where

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "minedraft"
TABLE = PACKAGE / "config" / "methods.py"
# vLLM's own method tests (SpeculativeConfig.use_ngram(), use_eagle(), ...) ask the same question.
VLLM_METHOD_TESTS = ("use_ngram", "use_eagle", "use_dflash", "use_mtp", "use_medusa", "uses_draft_model")


def _names(node: ast.AST) -> set[str]:
    """The method names a comparison operand spells: a string, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & METHODS.keys()
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names(element) for element in node.elts)) if node.elts else set()
    return set()


def method_checks(source: str) -> list[int]:
    """Lines that compare with a method name or call one of vLLM's method tests."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names(operand) for operand in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in VLLM_METHOD_TESTS):
            lines.append(node.lineno)
    return lines


def test_the_scan_finds_each_form_of_method_check():
    source = ('a = spec.method == "ngram"\nb = m not in ("draft_model", "eagle")\nc = spec.use_eagle()\n'
              'd = spec.method == "other"\ne = {"method": "dflash"}\n')
    assert method_checks(source) == [1, 2, 3]


def test_no_method_name_is_compared_outside_the_table():
    found = {f"{path.relative_to(ROOT)}:{line}" for path in PACKAGE.rglob("*.py") if path != TABLE
             for line in method_checks(path.read_text())}
    assert not found, f"method-name checks outside config/methods.py (add a trait there): {sorted(found)}"


def test_a_method_without_a_row_runs_as_vllm_runs_it():
    """No overlap (the stock path), no catch-up, no prior bound, no process drafter."""
    assert method_named("dspark") is UNKNOWN and method_of(None) is UNKNOWN
    assert not (UNKNOWN.overlaps or UNKNOWN.catches_up or UNKNOWN.weight_bound or UNKNOWN.own_engine)


@pytest.mark.parametrize(("trait", "names"), [
    ("overlaps", ("draft_model", "eagle", "eagle3", "mtp", "medusa", "dflash", "ngram", "suffix")),
    ("catches_up", ("draft_model", "eagle", "eagle3")),
    ("reads_hidden_states", ("eagle", "eagle3")),
    ("own_engine", ("draft_model", "dflash")),
    ("weight_bound", ("draft_model",)),
    ("drafts_as_lists", ("ngram", "suffix", "custom_class")),
])
def test_the_table_says_what_the_runtime_was_built_for(trait, names):
    assert names_where(trait) == names


def test_a_user_dict_without_a_method_is_a_draft_model():
    assert method_named(None) is METHODS["draft_model"]


def test_an_engine_that_does_not_speculate_has_no_method():
    """The process drafter's draft engine: a draft model's runs no speculation, a DFlash draft's does."""
    assert method_of_engine({"model": "draft"}) is UNKNOWN
    assert method_of_engine({"speculative_config": {"method": "dflash"}}) is METHODS["dflash"]
    assert method_of_engine({"speculative_config": {"method": "dflash"}}).sends_context
    assert not method_of_engine({"speculative_config": None}).sends_context


def test_parallel_drafting_verifies_a_share_of_k_and_does_not_catch_up():
    """PARD and P-EAGLE: the speculative config's flag, read into the method's row by method_of."""
    for name in ("draft_model", "eagle"):
        plain = method_of(SimpleNamespace(method=name, parallel_drafting=False))
        parallel = method_of(SimpleNamespace(method=name, parallel_drafting=True))
        assert plain.catches_up and plain.drafts_only_k is None
        assert not parallel.catches_up and parallel.drafts_only_k == "parallel drafting"
        assert parallel.overlaps and parallel.reads_hidden_states == plain.reads_hidden_states
