"""Per request, the most drafts the target verifies: what the request asks, and the speculative max_model_len.

A request caps its own speculation through vLLM's field for per-request extensions,
``SamplingParams.extra_args`` (offline ``SamplingParams(extra_args=...)``; served, the OpenAI API's
``extra_body={"vllm_xargs": {...}}``):

* ``{"num_speculative_tokens": 0}``: no drafts are verified for the request;
* ``{"num_speculative_tokens": n}``: at most n a step (above the engine's k: k).

A bad value is refused in the front end with one line for that request (the ``request_validation``
patch); an engine core that gets one anyway (built without the front end) verifies the request's
drafts as if it had asked nothing, with one WARNING line naming it.

The speculative config's ``max_model_len``, which vLLM's V1 engine accepts and does not act on
(vLLM #52258), is honoured as vLLM's V0 documented it: a request whose length plus k passes it
verifies no drafts from then on.

The scheduler cuts each running request's drafts to its limit before vLLM schedules the step, as
vLLM's own scheduler cuts them to a short token budget: rejection sampling verifies the drafts
scheduled, and the drafter's next call starts from the tokens accepted, as after a rejection. The
drafter still drafts for the request: its forward is the batch's, the request's drafts cost only
their verification.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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
    """The limits of the running requests; ``cut`` applies them to their drafts."""

    k: int  # the engine's num_speculative_tokens
    max_model_len: int | None = None  # the speculative config's: past it (k included) no drafts
    _limits: dict[str, int] = field(default_factory=dict)  # request id -> its limit, where it has one below k

    @property
    def active(self) -> bool:
        """Whether any request can have its drafts cut: one asked, or a length limit is set."""
        return bool(self._limits) or self.max_model_len is not None

    @property
    def request_ids(self) -> list[str]:
        """The requests with a limit of their own."""
        return list(self._limits)

    def add(self, request_id: str, limit: int | None) -> None:
        if limit is not None and limit < self.k:
            self._limits[request_id] = limit

    def release(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            self._limits.pop(rid, None)

    def limit(self, request: Any) -> int:
        """The most drafts ``request`` verifies now: its own limit, 0 past ``max_model_len``, else k."""
        return 0 if self._past(request) else self._limits.get(request.request_id, self.k)

    def _past(self, request: Any) -> bool:
        return self.max_model_len is not None and request.num_tokens + self.k > self.max_model_len

    def cut(self, requests: Iterable[Any]) -> tuple[int, int]:
        """Each request's drafts (``spec_token_ids``) cut to its limit: the drafts cut, and the requests
        that passed ``max_model_len`` now (each counted once: its limit is 0 from then on)."""
        cut = past = 0
        for request in requests:
            limit = self._limits.get(request.request_id, self.k)
            if limit and self._past(request):  # counted whether or not it has drafts now (vLLM's runner made none)
                self._limits[request.request_id] = limit = 0
                past += 1
            if len(request.spec_token_ids) > limit:
                cut += len(request.spec_token_ids) - limit
                request.spec_token_ids = request.spec_token_ids[:limit]
        return cut, past
