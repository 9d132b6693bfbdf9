"""Deterministic prompt sets shared by tests and benchmarks.

Prompts are cut from standard-library files the tokenizer was *not* trained
on, at token boundaries, and kept only when they round-trip: the returned text
re-encodes to exactly the requested number of tokens (``windows``). That makes
"prompt length" mean the same thing to the caller, to vLLM and to the metrics.
Without a ``tokenizer_dir`` the cached kit's tokenizer is used, built if
needed; the kit's own build therefore uses ``windows`` directly.
"""

from __future__ import annotations

import math
import random

from modelkit import windows
from modelkit.build import build_kit
from modelkit.windows import MAX_TRIES, encode, exact_window, kit_tokenizer


def _resolve(tokenizer_dir: str | None) -> str:
    """The given tokenizer directory, or the cached kit's (built if needed)."""
    if tokenizer_dir is not None:
        return tokenizer_dir
    return build_kit().tokenizer


def token_windows(
    n: int, n_tokens: int, seed: int, tokenizer_dir: str | None = None
) -> list[list[int]]:
    """``n`` token-id windows of one length (batched model work needs no padding)."""
    return windows.token_windows(n, n_tokens, seed, _resolve(tokenizer_dir))


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
    return [exact_window(rng, tokenizer_dir, length) for length in lengths]


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
    prefixes = [exact_window(rng, tokenizer_dir, prefix_tokens) for _ in range(n_prefixes)]
    return [
        _join_exactly(rng, tokenizer_dir, prefixes[i % n_prefixes], suffix_tokens)
        for i in range(n)
    ]


def _join_exactly(
    rng: random.Random, tokenizer_dir: str, prefix: str, suffix_tokens: int
) -> str:
    """``prefix`` + a suffix whose tokens do not merge across the junction."""
    tok = kit_tokenizer(tokenizer_dir)
    head = encode(tok, prefix)
    for _ in range(MAX_TRIES):
        text = prefix + exact_window(rng, tokenizer_dir, suffix_tokens)
        ids = encode(tok, text)
        if ids[: len(head)] == head and len(ids) == len(head) + suffix_tokens:
            return text
    raise RuntimeError("no suffix joins the prefix cleanly")
