"""The scheduler output MineDraft's worker reads: vLLM's plus the lane plan."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    # A fallback step that computes prompt tokens (first tokens, prefill chunks): the worker
    # drafts for its batch after the engine core has queued the step's outputs (in
    # take_draft_token_ids) instead of inside sampling, so a first token never waits for
    # its request's draft work. The drafts still reach the scheduler before the next step.
    drafts_after_output: bool = False

    @classmethod
    def extend(
        cls,
        base: SchedulerOutput,
        draft_only_req_ids: list[str],
        defer_drafts: bool,
        drafts_after_output: bool = False,
    ) -> MineDraftSchedulerOutput:
        # vLLM's fields as they are (a shallow copy, as building the dataclass from them would be, at a
        # fraction of its cost: this runs every step), then the plan.
        extended = cls.__new__(cls)
        extended.__dict__.update(base.__dict__)
        extended.draft_only_req_ids = draft_only_req_ids
        extended.defer_drafts = defer_drafts
        extended.drafts_after_output = drafts_after_output
        return extended


@dataclass
class MineDraftDraftTokenIds(DraftTokenIds):
    """The worker's drafts and the requests left without them: what a draft source returns
    (minedraft/worker/draft_source.py) and the scheduler counts."""

    # Requests the draft source owed drafts that came back without them (a
    # process drafter late beyond its bound, or gone): they are verified
    # without drafts, which stays exact. [num_late]
    late_req_ids: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, drafts: DraftTokenIds) -> MineDraftDraftTokenIds:
        """``drafts`` as MineDraft's: vLLM's own (its runner's inline drafts, its tests') have none late."""
        if isinstance(drafts, cls):
            return drafts
        return cls(drafts.req_ids, drafts.draft_token_ids)

    def without_drafts(self) -> MineDraftDraftTokenIds:
        """Only the late requests (drafts dropped as stale: their requests still went without)."""
        return MineDraftDraftTokenIds([], [], list(self.late_req_ids))


def merge_drafts(first: DraftTokenIds | None, then: DraftTokenIds | None) -> MineDraftDraftTokenIds | None:
    """``first``'s rows, then ``then``'s, and the late requests of both (None: neither has any)."""
    parts = [MineDraftDraftTokenIds.of(d) for d in (first, then) if d is not None]
    if len(parts) < 2:
        return parts[0] if parts else None
    a, b = parts
    return MineDraftDraftTokenIds(a.req_ids + b.req_ids, a.draft_token_ids + b.draft_token_ids,
                                  a.late_req_ids + b.late_req_ids)
