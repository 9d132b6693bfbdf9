"""The scheduler output MineDraft's worker reads: vLLM's plus the lane plan."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import DraftTokenIds


@dataclass
class MineDraftSchedulerOutput(SchedulerOutput):
    # Requests verified in the previous step whose drafting was deferred to
    # this step, still running now: the draft lane proposes for them while the
    # target verifies this step's batch. Never overlaps num_scheduled_tokens'
    # decode requests.
    draft_only_req_ids: list[str] = field(default_factory=list)
    # Whether the worker defers drafting for this step's batch to the next
    # step (a parallel step) instead of drafting inline (a fallback step).
    defer_drafts: bool = False

    @classmethod
    def extend(
        cls,
        base: SchedulerOutput,
        draft_only_req_ids: list[str],
        defer_drafts: bool,
    ) -> MineDraftSchedulerOutput:
        values = {f.name: getattr(base, f.name) for f in fields(SchedulerOutput)}
        return cls(
            **values, draft_only_req_ids=draft_only_req_ids, defer_drafts=defer_drafts
        )


@dataclass
class MineDraftDraftTokenIds(DraftTokenIds):
    # Requests the draft lane owed drafts this step that came back without
    # them (a process drafter late beyond its bound, or gone): they are
    # verified without drafts, which stays exact.
    late_req_ids: list[str] = field(default_factory=list)
