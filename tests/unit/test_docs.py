"""The project's documents: short README, links and paths that exist, the generated environment table,
no working-notes wording. No engine, no vLLM import."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from minedraft.config.environment import markdown_table
from minedraft.policy import tuning

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ("README.md", "RFC.md", "benchmarks/README.md", "patches/README.md",
        "analysis/cost_model/calibration/README.md",
        *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
README_MAX_LINES = 200
README_MAX_LINE_CHARS = 400  # a table row longer than this is a story: benchmarks/README.md tells it
ENV_BEGIN, ENV_END = "<!-- environment:begin -->", "<!-- environment:end -->"

# The repository's top-level folders and files: a path starting with one of them is a repo path.
TOP = ("minedraft", "harness", "modelkit", "analysis", "benchmarks", "tests", "patches", "docs",
       "README.md", "RFC.md", "Makefile", "pyproject.toml")
# Paths that name vLLM's own files, not this repository's.
UPSTREAM_PATHS = ("tests/v1/",)
FILE_SUFFIXES = (".py", ".json", ".md", ".png", ".txt", ".patch", ".toml")
# Placeholders and globs: `results/<device>/`, `dist/minedraft-*.whl`, `patch_<area>.py`.
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", "node_modules", "dist", "build"}

# Wording of someone's working notes, not of a project's documents: say what is true of the code
# and when it was measured instead.
WORKING_NOTES = [
    r"\bthis stop\b",
    r"\bthis session\b",
    r"\bthis work\b",
    r"\bno GPU was (?:lent|available)\b",
    r"\bnot rerun\b",
    r"\bshared notes\b",
    r"shared/docs",
    r"\.\./shared",
]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _text(doc: str) -> str:
    return (ROOT / doc).read_text()


def _repo_file_names() -> set[str]:
    names = set()
    for _, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        names.update(files)
    return names


def _looks_like_repo_path(token: str, doc_dir: Path) -> Path | None:
    """Where ``token`` (an inline code span) points if it names a file or folder of this repository."""
    token = token.rstrip(".,:;")
    if " " in token or PLACEHOLDER.search(token) or token.startswith(("http", "/", "-")):
        return None
    if token.startswith(UPSTREAM_PATHS):
        return None
    first = token.split("/", 1)[0]
    if first in TOP and ("/" in token or first == token):
        return ROOT / token
    if "/" in token and doc_dir != ROOT and (doc_dir / first).exists():
        return doc_dir / token  # e.g. `results/cpu/summary.json` in benchmarks/README.md
    return None


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): details go to "
        "benchmarks/README.md (measurements) or RFC.md (design)")
    long = [f"line {i}: {len(line)} characters" for i, line in enumerate(lines, 1) if len(line) > README_MAX_LINE_CHARS]
    assert not long, f"README.md lines over {README_MAX_LINE_CHARS} characters: " + "; ".join(long)


@pytest.mark.parametrize("doc", DOCS)
def test_links_point_at_files_of_the_repository(doc):
    doc_dir = (ROOT / doc).parent
    bad = []
    for target in LINK.findall(_text(doc)):
        if target.startswith("#"):
            continue
        if re.match(r"[a-z]+:", target):
            bad.append(f"{target} (outside the repository)")
            continue
        path = (doc_dir / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT):
            bad.append(f"{target} (outside the repository)")
        elif not path.exists():
            bad.append(f"{target} (missing)")
    assert not bad, f"{doc}: {bad}"


@pytest.mark.parametrize("doc", DOCS)
def test_paths_named_in_docs_exist(doc):
    doc_dir = (ROOT / doc).parent
    text = FENCE.sub("", _text(doc))  # commands in code blocks may name files that a command creates
    names = _repo_file_names()
    missing = []
    for token in sorted(set(CODE_SPAN.findall(text))):
        path = _looks_like_repo_path(token, doc_dir)
        if path is not None:
            if not path.exists():
                missing.append(token)
        elif (re.fullmatch(r"[\w-][\w.-]*", token) and token.endswith(FILE_SUFFIXES)
              and not PLACEHOLDER.search(token) and token not in names):
            missing.append(token)  # a bare file name: some file of the repository has it
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_readme_environment_table_is_the_generated_one():
    text = README.read_text()
    assert text.count(ENV_BEGIN) == 1 and text.count(ENV_END) == 1, "README.md: environment markers"
    section = text.split(ENV_BEGIN, 1)[1].split(ENV_END, 1)[0].strip()
    assert section == markdown_table(), (
        "README's environment table differs from minedraft/config/environment.py: paste the output of "
        "`python -c \"from minedraft.config.environment import markdown_table; print(markdown_table())\"` "
        "between the environment:begin/end markers")


def test_the_policy_s_constants_table_is_the_generated_one():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    begin, end = "<!-- tuning:begin -->", "<!-- tuning:end -->"
    assert text.count(begin) == 1 and text.count(end) == 1, "benchmarks/README.md: tuning markers"
    section = text.split(begin, 1)[1].split(end, 1)[0].strip()
    assert section == tuning.markdown_table(), (
        "benchmarks/README.md's constants table differs from minedraft/policy/tuning.py: paste the output of "
        "`python -c \"from minedraft.policy.tuning import markdown_table; print(markdown_table())\"` "
        "between the tuning:begin/end markers")


@pytest.mark.parametrize("doc", DOCS)
def test_no_working_notes_wording(doc):
    text = _text(doc)
    found = [m.group(0) for pattern in WORKING_NOTES for m in re.finditer(pattern, text, re.IGNORECASE)]
    assert not found, f"{doc}: {found}"


def test_readme_installs_from_a_checkout_or_a_built_wheel():
    text = README.read_text()
    assert "make setup" in text and "make wheel" in text
    assert not re.search(r"pip install '?minedraft\[", text), "the package is not published"


def test_readme_names_the_scheduler_hooks_it_overrides():
    scheduler = (ROOT / "minedraft/scheduling/scheduler.py").read_text()
    hooks = ("schedule", "update_from_output", "update_draft_token_ids", "make_stats")
    overridden = {h for h in hooks if re.search(rf"^    def {h}\(", scheduler, re.MULTILINE)}
    readme = README.read_text()
    assert overridden == set(hooks)
    assert all(f"`{h}`" in readme for h in hooks)
