"""Per request, the most drafts the target verifies: what the request asks, and the speculative max_model_len.

A request caps its own speculation through vLLM's field for per-request extensions,
``SamplingParams.extra_args`` (offline ``SamplingParams(extra_args=...)``; served, the OpenAI API's
``extra_body={"vllm_xargs": {...}}``):

* ``{"num_speculative_tokens": 0}``: no drafts are verified for the request;
* ``{"num_speculative_tokens": n}``: at most n a step (above the engine's K: K).

A bad value is refused in the front end with one line for that request (the ``request_validation``
patch); an engine core that gets one anyway (built without the front end) verifies the request's drafts as
if it had asked nothing, with one WARNING line naming it.

The speculative config's ``max_model_len``, which vLLM's V1 engine accepts and does not act on (vLLM
#52258), is honoured as vLLM's V0 documented it: a request whose length plus K passes it verifies no drafts
from then on. The drafter still drafts for a capped request: its forward is the batch's, the request's
drafts cost only their verification.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from minedraft.policy.plan import RequestView

EXTRA_ARGS_KEY = "num_speculative_tokens"


def requested_limit(sampling_params: Any) -> int | None:
    """The request's own limit on drafts verified a step (None: it asks none). A bad value raises
    ValueError, one line naming the key."""
    extra = getattr(sampling_params, "extra_args", None)
    if not extra or EXTRA_ARGS_KEY not in extra:
        return None
    value = extra[EXTRA_ARGS_KEY]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"minedraft: extra_args[{EXTRA_ARGS_KEY!r}] must be an integer >= 0 (0: no speculation "
                         f"for this request), got {value!r}")
    return value


@dataclass
class RequestLimits:
    max_depth: int  # the engine's num_speculative_tokens
    max_model_len: int | None = None  # the speculative config's: past it (K included) no drafts
    _limits: dict[str, int] = field(default_factory=dict)  # request id -> its limit, where it asked one

    def add(self, req_id: str, limit: int | None) -> None:
        if limit is not None:
            self._limits[req_id] = limit

    def release(self, req_ids: Iterable[str]) -> None:
        for rid in req_ids:
            self._limits.pop(rid, None)

    def limit(self, request: RequestView) -> int:
        """The most drafts ``request`` verifies now: its own limit, 0 past ``max_model_len``, else K."""
        return 0 if self._past(request) else min(self._limits.get(request.req_id, self.max_depth), self.max_depth)

    def own(self, request: RequestView) -> int | None:
        """The most drafts ``request`` verifies now from a source whose depth is its own (hybrid/): its own
        limit (even above K), 0 past ``max_model_len``, else None."""
        return 0 if self._past(request) else self._limits.get(request.req_id)

    def newly_past(self, requests: Iterable[RequestView]) -> int:
        """The requests that passed ``max_model_len`` now (each counted once: its limit is 0 from then on)."""
        past = 0
        for request in requests:
            if self._limits.get(request.req_id, self.max_depth) and self._past(request):
                self._limits[request.req_id] = 0
                past += 1
        return past

    def passes(self, num_tokens: int) -> bool:
        """Whether a request of ``num_tokens`` tokens is past ``max_model_len`` with its drafts."""
        return self.max_model_len is not None and num_tokens + self.max_depth > self.max_model_len

    def _past(self, request: RequestView) -> bool:
        return self.passes(request.num_tokens)
