"""The text the kit is made from: Python standard-library sources.

There is no network at build time, so the only text we can count on is what
ships with the interpreter. A fixed, sorted slice of ``stdlib/*.py`` keeps the
tokenizer and prompt sets deterministic for a given Python installation; the
digest lets the cache notice when that installation (and so the text) changes.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from functools import lru_cache

# Files [0, 80) train the tokenizer; prompts are cut from all of them.
N_TOKENIZER_DOCS = 80


@lru_cache(maxsize=1)
def stdlib_files() -> tuple[str, ...]:
    """Sorted top-level ``.py`` files of the standard library."""
    root = sysconfig.get_paths()["stdlib"]
    names = sorted(n for n in os.listdir(root) if n.endswith(".py"))
    return tuple(os.path.join(root, n) for n in names)


def read_text(path: str) -> str:
    """File text; odd bytes are replaced so decoding never fails."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def tokenizer_corpus() -> list[str]:
    """The documents the BPE tokenizer is trained on."""
    return [read_text(p) for p in stdlib_files()[:N_TOKENIZER_DOCS]]


@lru_cache(maxsize=1)
def corpus_digest() -> str:
    """Short hash of the tokenizer corpus: a changed stdlib means a new kit."""
    h = hashlib.sha256()
    for path in stdlib_files()[:N_TOKENIZER_DOCS]:
        h.update(os.path.basename(path).encode())
        h.update(read_text(path).encode())
    return h.hexdigest()[:16]
