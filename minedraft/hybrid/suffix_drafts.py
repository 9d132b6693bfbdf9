"""Suffix decoding as a second draft source: each request's draft and what it expects accepted.

vLLM's ``SuffixDecodingProposer`` keeps only a draft's tokens and drops what a choice between sources
needs: arctic-inference's ``score`` (the sum of the draft tokens' estimated probabilities, a count-based
estimate of the tokens accepted) and the match length it came from. It also feeds each request's tree
with the sampled tokens of the call it is in, so it must be called once per verification, in order, for
every request (``worker/suffix_batch.py`` keeps that for ``method: suffix``). A source drafted beside a
model drafter is asked only for some requests in some steps, so here each request's tree is fed from its
token table: whatever its tokens gained since it was last asked, once and in order, whichever source
drafted it meanwhile.

Host code, no model: about 10 us a token speculated or fed (arctic-inference PR #212).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from minedraft.config.hybrid import SuffixLimits
from minedraft.hybrid.draft import NO_DRAFT, LookupDraft, room

__all__ = ["NO_DRAFT", "LookupDraft", "SuffixDrafts", "SuffixLimits"]


class SuffixDrafts:
    """Each request's suffix tree, fed from its tokens, and its drafts on demand."""

    def __init__(self, limits: SuffixLimits, max_model_len: int) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache  # the `suffix` extra

        self.limits = limits
        self.max_model_len = max_model_len
        self.cache = SuffixDecodingCache(max_tree_depth=limits.max_tree_depth,
                                         max_cached_requests=limits.max_cached_requests)
        self._fed: dict[str, int] = {}  # per request, its tokens its tree holds (prompt and output)

    def draft(self, req_id: str, token_ids: Sequence[int], num_prompt_tokens: int,
              limit: int | None = None) -> LookupDraft:
        """The draft for request ``req_id`` whose tokens so far (prompt and output, none speculative) are
        ``token_ids``; ``limit``: at most this many tokens (else the source's depth)."""
        num_tokens = len(token_ids)
        if num_prompt_tokens < num_tokens < self.max_model_len:  # fed, drafting or not: its whole output
            self._feed(req_id, token_ids, num_prompt_tokens)  # joins the tree of finished outputs
        depth = room(num_tokens, num_prompt_tokens, self.max_model_len, self.limits.max_depth, limit)
        if depth == 0:
            return NO_DRAFT
        pattern = _int32(token_ids[max(0, num_tokens - self.limits.max_tree_depth):])
        draft = self.cache.speculate(req_id, pattern, max_spec_tokens=depth,
                                     max_spec_factor=self.limits.max_spec_factor,
                                     min_token_prob=self.limits.min_token_prob)
        return LookupDraft(tuple(draft.token_ids), float(draft.score), int(draft.match_len), tuple(draft.probs))

    def _feed(self, req_id: str, token_ids: Sequence[int], num_prompt_tokens: int) -> None:
        fed = self._fed.get(req_id)
        if fed is None:  # the request's first draft: its tree starts from its prompt
            if req_id in self.cache.cached_requests:  # an id used again: its old output is not this one's
                self.cache.evict_cached_response(req_id)
            self.cache.start_request(req_id, _int32(token_ids[:num_prompt_tokens]))
            fed = num_prompt_tokens
        if len(token_ids) > fed:
            self.cache.add_active_response(req_id, [int(t) for t in token_ids[fed:]])
        self._fed[req_id] = len(token_ids)

    def release(self, req_ids: Iterable[str]) -> None:
        """Requests that finished (or were aborted or preempted): their output joins the global tree."""
        for req_id in req_ids:
            if self._fed.pop(req_id, None) is not None:
                self.cache.stop_request(req_id)


def _int32(token_ids: Sequence[int]) -> np.ndarray:
    return np.asarray(token_ids, dtype=np.int32)
