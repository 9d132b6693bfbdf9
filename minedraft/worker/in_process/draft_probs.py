"""Probabilistic drafts (``draft_sample_method: probabilistic``): each request's draft distribution,
kept until its drafts are verified.

vLLM's runner keeps the draft probabilities of one step (``_draft_probs``, rows in that step's batch
order) and hands them to the rejection sampler in the next, which verifies the same batch. Under
MineDraft a request's drafts are made in one step and verified one or two steps later, beside other
groups' calls; so the probabilities are kept per request instead, recorded by the call that made
the request's latest drafts (the drafts the scheduler holds) and looked up when they are verified.
Without them the sampler treats sampled drafts as one-hot: the output distribution stays the
target's (the residual distribution covers it), but a draft token x is accepted with probability
p(x) instead of min(1, p(x) / q(x)). On the kit's pair at temperature 1 (tests/e2e/test_features.py,
2026-11-27) 14.7 % of draft tokens were accepted one-hot and 56.6 % with their probabilities.

A call whose batch is all greedy samples no probabilities (vLLM's proposer returns none): its rows
are dropped, and a verified request without a row gets the one-hot distribution of its drafts,
which is what vLLM assumes when it has none (greedy requests ignore it: they are verified by argmax).

On the CUDA lane the rows are made on the side stream; the join orders the main stream after it
before any row is read, and a row is freed only once a later call replaces it, after the rejection
sampler that read it was enqueued.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class DraftProbs:
    """``take``: the drafter's ``take_last_draft_probs`` ([batch, depth, vocab] of its last call, or None)."""

    def __init__(self, take: Callable[[], torch.Tensor | None]) -> None:
        self.take = take
        self._rows: dict[str, torch.Tensor] = {}  # request id -> [depth, vocab]

    def recording(self, propose: Callable[..., Any], req_ids: list[str]) -> Callable[..., Any]:
        """``propose`` for the batch ``req_ids``, keeping each row's draft distribution once it returns
        (on whichever thread runs it: calls for one request never run at the same time)."""

        def propose_and_record(*args: Any, **kwargs: Any) -> Any:
            drafts = propose(*args, **kwargs)
            probs = self.take()
            if probs is None:
                for req_id in req_ids:
                    self._rows.pop(req_id, None)
            else:
                self._rows.update(zip(req_ids, probs, strict=True))
            return drafts

        return propose_and_record

    def release(self, req_ids: Iterable[str]) -> None:
        for req_id in req_ids:
            self._rows.pop(req_id, None)

    def for_verification(self, req_ids: list[str], num_draft_tokens: list[int],
                         draft_token_ids: torch.Tensor) -> torch.Tensor | None:
        """The rejection sampler's ``draft_probs`` ([drafts verified, vocab], in the step's batch order),
        or None where no verified request has a row (vLLM's one-hot case)."""
        kept = [self._rows.get(req_id) if n else None for req_id, n in zip(req_ids, num_draft_tokens, strict=True)]
        some = next((rows for rows in kept if rows is not None), None)
        if some is None:
            return None
        parts, offset = [], 0
        for req_id, n, rows in zip(req_ids, num_draft_tokens, kept, strict=True):
            if n == 0:
                continue
            if rows is None:
                drafts = draft_token_ids[offset:offset + n].to(some.device, torch.long)
                rows = torch.nn.functional.one_hot(drafts, some.shape[-1]).to(some.dtype)
            elif rows.shape[0] < n:
                raise RuntimeError(f"minedraft: request {req_id} is verified with {n} drafts but its draft "
                                   f"probabilities cover {rows.shape[0]}")
            parts.append(rows[:n])
            offset += n
        return torch.cat(parts, dim=0)
