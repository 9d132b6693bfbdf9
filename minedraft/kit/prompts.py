"""Deterministic prompt sets shared by tests and benchmarks.

Prompts are cut from standard-library files the tokenizer was *not* trained
on, at token boundaries, and kept only when they round-trip: the returned text
re-encodes to exactly the requested number of tokens. That makes "prompt
length" mean the same thing to the caller, to vLLM and to the metrics.
"""

from __future__ import annotations

import math
import os
import random
from functools import lru_cache

from minedraft.kit.corpus import N_TOKENIZER_DOCS, read_text, stdlib_files

MAX_TRIES = 200


# Held-out files prompts are cut from: plenty of text, quick to encode.
PROMPT_FILES = slice(N_TOKENIZER_DOCS, N_TOKENIZER_DOCS + 30)


def _resolve(tokenizer_dir: str | None) -> str:
    """The given tokenizer directory, or the cached kit's (built if needed)."""
    if tokenizer_dir is not None:
        return tokenizer_dir
    from minedraft.kit import build_kit

    return build_kit().tokenizer


@lru_cache(maxsize=4)
def _kit_tokenizer(tokenizer_dir: str):
    """The raw ``tokenizers`` object: same ids as the HF wrapper, less overhead."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))


@lru_cache(maxsize=4)
def _token_stream(tokenizer_dir: str) -> tuple[int, ...]:
    """The held-out prompt files, encoded and concatenated."""
    tok = _kit_tokenizer(tokenizer_dir)
    texts = [read_text(p) for p in stdlib_files()[PROMPT_FILES]]
    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
    return tuple(ids)


def _encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def _exact_window(rng: random.Random, tokenizer_dir: str, n_tokens: int) -> str:
    """Text of a random corpus window that re-encodes to exactly ``n_tokens``."""
    tok = _kit_tokenizer(tokenizer_dir)
    stream = _token_stream(tokenizer_dir)
    for _ in range(MAX_TRIES):
        start = rng.randrange(len(stream) - n_tokens)
        text = tok.decode(list(stream[start : start + n_tokens]), skip_special_tokens=False)
        if text.strip() and len(_encode(tok, text)) == n_tokens:
            return text
    raise RuntimeError(f"no window of {n_tokens} tokens round-trips")


def token_windows(
    n: int, n_tokens: int, seed: int, tokenizer_dir: str | None = None
) -> list[list[int]]:
    """``n`` token-id windows of one length (batched model work needs no padding)."""
    tokenizer_dir = _resolve(tokenizer_dir)
    tok = _kit_tokenizer(tokenizer_dir)
    rng = random.Random(seed)
    return [_encode(tok, _exact_window(rng, tokenizer_dir, n_tokens)) for _ in range(n)]


def spread_lengths(
    n: int, seed: int, min_tokens: int, max_tokens: int, spread: str = "log"
) -> list[int]:
    """``n`` lengths covering ``[min_tokens, max_tokens]``, in shuffled order.

    Stratified sampling guarantees both ends are represented even for small
    ``n``; ``log`` spacing favours short prompts the way real traffic does.
    """
    rng = random.Random(seed)
    lo, hi = min_tokens, max_tokens
    lengths = []
    for i in range(n):
        u = (i + rng.random()) / n if n > 1 else 0.5
        if spread == "log":
            x = math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))
        elif spread == "uniform":
            x = lo + u * (hi + 1 - lo)
        else:
            raise ValueError(f"spread must be 'log' or 'uniform', not {spread!r}")
        lengths.append(min(hi, max(lo, int(x))))
    rng.shuffle(lengths)
    return lengths


def mixed_prompts(
    n: int,
    seed: int = 0,
    min_tokens: int = 1,
    max_tokens: int = 500,
    tokenizer_dir: str | None = None,
    spread: str = "log",
) -> list[str]:
    """``n`` text prompts whose token lengths spread over ``[min_tokens, max_tokens]``.

    ``tokenizer_dir`` defaults to the cached kit's tokenizer (building it if
    needed). Same arguments, same prompts.
    """
    tokenizer_dir = _resolve(tokenizer_dir)
    rng = random.Random(f"mixed/{seed}")
    lengths = spread_lengths(n, seed, min_tokens, max_tokens, spread)
    return [_exact_window(rng, tokenizer_dir, length) for length in lengths]


def shared_prefix_prompts(
    n: int,
    seed: int = 0,
    prefix_tokens: int = 256,
    suffix_tokens: int = 32,
    n_prefixes: int = 1,
    tokenizer_dir: str | None = None,
) -> list[str]:
    """``n`` prompts in ``n_prefixes`` groups; prompts of a group share a prefix.

    Prompt ``i`` belongs to group ``i % n_prefixes``. The split is checked at
    the token level: every prompt encodes to its group's ``prefix_tokens``
    prefix ids followed by exactly ``suffix_tokens`` more, so prefix-cache hits
    are predictable.
    """
    tokenizer_dir = _resolve(tokenizer_dir)
    rng = random.Random(f"shared/{seed}")
    prefixes = [_exact_window(rng, tokenizer_dir, prefix_tokens) for _ in range(n_prefixes)]
    return [
        _join_exactly(rng, tokenizer_dir, prefixes[i % n_prefixes], suffix_tokens)
        for i in range(n)
    ]


def _join_exactly(
    rng: random.Random, tokenizer_dir: str, prefix: str, suffix_tokens: int
) -> str:
    """``prefix`` + a suffix whose tokens do not merge across the junction."""
    tok = _kit_tokenizer(tokenizer_dir)
    head = _encode(tok, prefix)
    for _ in range(MAX_TRIES):
        text = prefix + _exact_window(rng, tokenizer_dir, suffix_tokens)
        ids = _encode(tok, text)
        if ids[: len(head)] == head and len(ids) == len(head) + suffix_tokens:
            return text
    raise RuntimeError("no suffix joins the prefix cleanly")
