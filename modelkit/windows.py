"""Token windows cut from the held-out corpus, for a given tokenizer directory.

The layer under ``prompts``: the kit's own build (distillation data and the
agreement recorded in each marker) needs windows of the tokenizer it is
building with, so this module must not reach for the built kit. Windows are
cut from standard-library files the tokenizer was *not* trained on, at token
boundaries, and kept only when they round-trip: the text re-encodes to
exactly the requested number of tokens.
"""

from __future__ import annotations

import os
import random
from functools import lru_cache

from modelkit.corpus import N_TOKENIZER_DOCS, read_text, stdlib_files

MAX_TRIES = 200

# Held-out files prompts are cut from: plenty of text, quick to encode.
PROMPT_FILES = slice(N_TOKENIZER_DOCS, N_TOKENIZER_DOCS + 30)


@lru_cache(maxsize=4)
def kit_tokenizer(tokenizer_dir: str):
    """The raw ``tokenizers`` object: same ids as the HF wrapper, less overhead."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))


@lru_cache(maxsize=4)
def _token_stream(tokenizer_dir: str) -> tuple[int, ...]:
    """The held-out prompt files, encoded and concatenated."""
    tok = kit_tokenizer(tokenizer_dir)
    texts = [read_text(p) for p in stdlib_files()[PROMPT_FILES]]
    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
    return tuple(ids)


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def exact_window(rng: random.Random, tokenizer_dir: str, n_tokens: int) -> str:
    """Text of a random corpus window that re-encodes to exactly ``n_tokens``."""
    tok = kit_tokenizer(tokenizer_dir)
    stream = _token_stream(tokenizer_dir)
    for _ in range(MAX_TRIES):
        start = rng.randrange(len(stream) - n_tokens)
        text = tok.decode(list(stream[start : start + n_tokens]), skip_special_tokens=False)
        if text.strip() and len(encode(tok, text)) == n_tokens:
            return text
    raise RuntimeError(f"no window of {n_tokens} tokens round-trips")


def token_windows(n: int, n_tokens: int, seed: int, tokenizer_dir: str) -> list[list[int]]:
    """``n`` token-id windows of one length (batched model work needs no padding)."""
    tok = kit_tokenizer(tokenizer_dir)
    rng = random.Random(seed)
    return [encode(tok, exact_window(rng, tokenizer_dir, n_tokens)) for _ in range(n)]
