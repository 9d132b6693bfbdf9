"""The ledger (minedraft/monkeypatch/ledger.py): one entry per patch module, its upstream diff,
and the table of patches/README.md generated from it (``python -m minedraft.monkeypatch --markdown``).

Each patch module ``minedraft/monkeypatch/patch_<name>.py`` has its test module here,
``test_patch_<name>.py``, with behaviour tests named ``test_patch_<name>_...``; a test
below checks that every ledger entry has at least one.
"""

from __future__ import annotations

import re
from pathlib import Path

from minedraft.monkeypatch import LEDGER
from minedraft.monkeypatch.__main__ import main as monkeypatch_main
from minedraft.monkeypatch.ledger import MARKDOWN_BEGIN, MARKDOWN_END, render_markdown, section_in

ROOT = Path(__file__).resolve().parents[3]
PATCH_DIR = ROOT / "minedraft" / "monkeypatch"
TEST_DIR = Path(__file__).resolve().parent


def test_every_patch_module_is_in_the_ledger_and_every_entry_has_one():
    modules = {p.stem.removeprefix("patch_") for p in PATCH_DIR.glob("patch_*.py")}
    assert modules == set(LEDGER)


def test_every_ledger_entry_has_a_behaviour_test():
    """The test modules mirror the patch modules one to one, each with a behaviour test."""
    test_modules = {p.stem.removeprefix("test_patch_"): p for p in TEST_DIR.glob("test_patch_*.py")}
    assert set(test_modules) == set(LEDGER)
    missing = [name for name, path in test_modules.items()
               if not re.search(rf"^def test_patch_{name}_", path.read_text(), re.MULTILINE)]
    assert not missing


def test_every_upstream_diff_exists_and_is_listed_in_patches_readme():
    listed = (ROOT / "patches" / "README.md").read_text()
    for name, entry in LEDGER.items():
        assert entry.related_pr and entry.future_plan, name
        if entry.upstream_diff is not None:
            assert (ROOT / "patches" / entry.upstream_diff).is_file(), entry.upstream_diff
            assert entry.upstream_diff in listed, entry.upstream_diff


def test_the_patch_table_is_the_one_generated_from_the_ledger():
    listed = (ROOT / "patches" / "README.md").read_text()
    assert listed.count(MARKDOWN_BEGIN) == 1 and listed.count(MARKDOWN_END) == 1
    assert section_in(listed) == render_markdown(), (
        "patches/README.md's patch table differs from the ledger: paste `python -m minedraft.monkeypatch "
        "--markdown` between the patches:begin/end markers"
    )
    assert "patches/README.md#patches-of-vllm" in (ROOT / "README.md").read_text()


def test_markdown_command_prints_the_generated_section(capsys):
    monkeypatch_main(["--markdown"])
    out = capsys.readouterr().out
    assert out == render_markdown()
    for name in LEDGER:
        assert f"| `{name}` |" in out
