"""N-gram matching as a second source: vLLM's own matcher (``method: ngram``) on a request's tokens.

vLLM's ``NgramProposer`` drafts for a whole batch from the runner's token table; beside a model drafter
only some requests are asked, in the scheduler, which holds each request's tokens. So each request asked
runs vLLM's matcher itself (``_find_longest_matched_ngram_and_propose_tokens``): the tokens that followed
the earliest occurrence of the longest n-gram (``prompt_lookup_min`` .. ``prompt_lookup_max`` tokens) that
ends the request's text. It keeps no state: nothing to feed, nothing to release.

It has no counts to estimate its drafts with. Its j-th token is given ``SURVIVAL ** j``: high enough that a
match is tried against the model's drafts, so that the calibration (policy/draft_sources.py) measures
what the target accepts of it, per request; text where copying fails brings that request's estimate down
within a few verified drafts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from minedraft.config.hybrid import NgramLimits
from minedraft.hybrid.draft import NO_DRAFT, LookupDraft, room

SURVIVAL = 0.9  # the prior chance that each next copied token holds, before the calibration measures it


class NgramDrafts:
    def __init__(self, limits: NgramLimits, max_model_len: int) -> None:
        from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

        self.limits = limits
        self.max_model_len = max_model_len
        self._match = _find_longest_matched_ngram_and_propose_tokens
        self.draft("warm-up", list(range(8)) * 2, 1)  # compiled (numba) at start-up, not in the first step

    def draft(self, req_id: str, token_ids: Sequence[int], num_prompt_tokens: int,
              limit: int | None = None) -> LookupDraft:
        """The draft for the request whose tokens so far (prompt and output, none speculative) are
        ``token_ids``; ``limit``: at most this many tokens (else the source's depth)."""
        depth = room(len(token_ids), num_prompt_tokens, self.max_model_len, self.limits.max_depth, limit)
        if depth == 0:
            return NO_DRAFT
        # A slice first: vLLM's Request.all_token_ids is a ConstantList, which numpy would read item by item.
        draft = self._match(np.asarray(token_ids[:], dtype=np.int32), self.limits.prompt_lookup_min,
                            self.limits.prompt_lookup_max, self.max_model_len, depth)
        if not len(draft):
            return NO_DRAFT
        probs = tuple(SURVIVAL ** j for j in range(1, len(draft) + 1))
        # match_len: at least the shortest n-gram (vLLM's matcher does not return the length it matched).
        return LookupDraft(tuple(int(t) for t in draft), sum(probs), self.limits.prompt_lookup_min, probs)

    def release(self, req_ids: Iterable[str]) -> None:
        """Nothing kept per request."""
