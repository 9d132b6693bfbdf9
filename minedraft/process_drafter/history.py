"""Token histories kept on both sides of the process drafter, sent incrementally.

The target's side (:class:`SentHistories`) remembers how many tokens of each
request the drafter has; a job carries, per request, only the tokens after
that point (``start``, ``tokens``). The drafter's side (:class:`Histories`)
appends them, after checking that ``start`` is where its copy ends: a
mismatch (a job lost with its process, a request re-admitted) asks for a
resync, and the next job sends the whole history again. Finished and
preempted requests are released on both sides.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# One request's update: (request id, history length it extends, new tokens).
Update = tuple[str, int, list[int]]


@dataclass
class SentHistories:
    """The target side: how far each request's history has been sent."""

    sent: dict[str, int] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)

    def update(self, req_id: str, tokens: Sequence[int], length: int) -> Update:
        """The update that brings the drafter's copy to ``tokens[:length]``."""
        start = self.sent.get(req_id, 0)
        if start > length:  # cannot happen in vLLM's flow; resend rather than guess
            start = 0
        self.sent[req_id] = length
        return req_id, start, [int(t) for t in tokens[start:length]]

    def release(self, req_ids: Iterable[str]) -> None:
        for req_id in req_ids:
            if self.sent.pop(req_id, None) is not None:
                self.released.append(req_id)

    def forget(self, req_ids: Iterable[str]) -> None:
        """The drafter lost these (resync): the next update starts from 0."""
        for req_id in req_ids:
            self.sent.pop(req_id, None)

    def take_released(self) -> list[str]:
        released, self.released = self.released, []
        return released


@dataclass
class Histories:
    """The drafter side: each request's full token history."""

    tokens: dict[str, list[int]] = field(default_factory=dict)

    def apply(self, released: Iterable[str], updates: Iterable[Update]) -> list[str]:
        """Release, then append each update; the request ids that need a resync."""
        for req_id in released:
            self.tokens.pop(req_id, None)
        resync = []
        for req_id, start, new in updates:
            history = self.tokens.setdefault(req_id, [])
            if start != len(history):
                del self.tokens[req_id]
                resync.append(req_id)
                continue
            history.extend(new)
        return resync
