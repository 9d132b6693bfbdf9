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
