"""Per request, how many of its drafts pay for their verification, given the chance each is accepted.

A verified draft costs the target one token of compute, ``w`` seconds in the step-cost model
(step_costs.py): next to nothing in a memory-bound step, a token's share of a compute-bound one (a CPU; a
GPU at a large batch). The j-th draft of a request is accepted with its survival (the product of the
request's acceptance at positions 1..j, acceptance.py); verifying it adds that many expected tokens and
``w`` seconds, so it pays where its survival exceeds ``w * G``, G the step's expected tokens over its
predicted seconds. Each request's drafts are cut to the prefix above that threshold (survivals only fall
along a request's drafts). G is computed with every draft, then once more after the cut: a step without its
poor drafts makes more tokens per second, and its threshold rises. Exact by construction: the target
verifies a prefix of the drafts made, as when vLLM's token budget is short.
"""

from __future__ import annotations

from collections.abc import Sequence


def paying_drafts(survivals: Sequence[Sequence[float]], num_reqs: int, step_seconds: float,
                  token_seconds: float) -> list[int]:
    """How many of each request's drafts pay, given their ``survivals``, in a step of ``num_reqs`` requests
    predicted to take ``step_seconds`` verifying all of them."""
    if token_seconds <= 0 or step_seconds <= 0:
        return [len(s) for s in survivals]
    tokens = num_reqs + sum(sum(s) for s in survivals)
    kept = [_reaching(s, token_seconds * tokens / step_seconds) for s in survivals]
    dropped = sum(len(s) - k for s, k in zip(survivals, kept))
    if dropped:  # the step without them: more tokens per second, a higher threshold
        tokens = num_reqs + sum(sum(s[:k]) for s, k in zip(survivals, kept))
        threshold = token_seconds * tokens / max(step_seconds - token_seconds * dropped, 1e-9)
        kept = [_reaching(s, threshold) for s in survivals]
    return kept


def _reaching(survivals: Sequence[float], threshold: float) -> int:
    """How many leading survivals reach ``threshold``."""
    for j, survival in enumerate(survivals):
        if survival < threshold:
            return j
    return len(survivals)
