"""Per request and step, whose drafts the target verifies: the model drafter's or the lookup source's.

Both sources' drafts are there when a step is planned: the model drafter's from the step before (vLLM's
runner drafts for every request it ran), the lookup source's (suffix decoding or n-gram matching, hybrid/)
made now from the request's tokens. Each comes with the chance that its j-th draft survives: the model's
from the request's measured acceptance (acceptance.py), the lookup source's from its own estimate (suffix
decoding's tree counts, arctic-inference's per-token probabilities; n-gram matching's prior) scaled by how
well that estimate has predicted what the target accepted (:class:`LookupCalibration`). A verified draft
pays where its survival exceeds the step's threshold (paying_drafts.py), so a source is worth the sum of its
paying drafts' survivals above the threshold, and the request verifies the source worth more. Until the
step-cost model is known (threshold 0) that is the expected tokens accepted; where the policy measures no
acceptance (a fixed depth), the model's drafts count as accepted, ArcticInference's rule (suffix decoding
where its score reaches the speculator's length).

Exact either way: the target verifies whichever drafts it is given (greedy drafts from both sources; the
hybrid is refused with draft probabilities, config/validation.py).
"""

from __future__ import annotations

from collections.abc import Sequence

# The calibration's prior, in estimated tokens: until lookup drafts worth this many were verified, the
# source's estimate is taken at its word (arctic-inference's own use of its score); a request's own
# calibration starts from every request's.
PRIOR_TOKENS = 8.0


class LookupCalibration:
    """How many tokens the target accepted of lookup drafts per token their source estimated: over every
    request, and per request, starting from every request's (text that repeats itself and text that does
    not share a batch: the one's matches must not lend the other's their credit)."""

    def __init__(self) -> None:
        self.estimated = 0.0
        self.accepted = 0.0
        self._own: dict[str, tuple[float, float]] = {}  # per request: estimated, accepted

    @property
    def factor(self) -> float:
        """Every request's."""
        return (self.accepted + PRIOR_TOKENS) / (self.estimated + PRIOR_TOKENS)

    def factor_of(self, req_id: str) -> float:
        estimated, accepted = self._own.get(req_id, (0.0, 0.0))
        return (accepted + PRIOR_TOKENS * self.factor) / (estimated + PRIOR_TOKENS)

    def survivals(self, req_id: str, probs: Sequence[float]) -> list[float]:
        factor = self.factor_of(req_id)
        return [min(1.0, p * factor) for p in probs]

    def observe(self, req_id: str, estimated: float, accepted: int) -> None:
        self.estimated += estimated
        self.accepted += accepted
        own_estimated, own_accepted = self._own.get(req_id, (0.0, 0.0))
        self._own[req_id] = (own_estimated + estimated, own_accepted + accepted)

    def release(self, req_ids: Sequence[str]) -> None:
        for req_id in req_ids:
            self._own.pop(req_id, None)


def worth(survivals: Sequence[float], threshold: float) -> float:
    """What verifying a source's drafts adds: each leading draft whose survival reaches ``threshold``,
    its expected token less that threshold (survivals only fall along a draft)."""
    total = 0.0
    for survival in survivals:
        if survival < threshold:
            break
        total += survival - threshold
    return total
