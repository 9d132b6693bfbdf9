"""A lookup source's draft for one request, and what it expects accepted (suffix_drafts.py, ngram_drafts.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LookupDraft:
    token_ids: tuple[int, ...]
    score: float  # the drafts' estimated probabilities summed: the tokens the source expects accepted
    match_len: int  # the context suffix the draft was matched on
    # Per token, the estimated chance that it and the tokens before it are accepted (its survival, so they
    # only fall); they sum to ``score``.
    probs: tuple[float, ...] = ()


NO_DRAFT = LookupDraft((), 0.0, 0)


def room(num_tokens: int, num_prompt_tokens: int, max_model_len: int, depth: int, limit: int | None) -> int:
    """How many tokens a request's lookup draft may hold now: none while its prompt computes, none past
    vLLM's room for drafts (``max_model_len - num_tokens - 1``), else the source's ``depth`` or ``limit``."""
    if num_tokens <= num_prompt_tokens or num_tokens >= max_model_len:
        return 0
    return max(min(depth if limit is None else limit, max_model_len - num_tokens - 1), 0)
