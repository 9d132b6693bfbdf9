"""What crosses between the scheduler and the speculation policy: a step's view, its plan, its result.

The scheduler builds a :class:`StepView` from vLLM's state before vLLM schedules the step, applies the
:class:`StepPlan` the policy returns (the depth vLLM drafts at, the group held back for the lane, each
request's drafts cut), and hands the :class:`StepResult` back once the step is timed. Plain data: no vLLM
types, so the policy runs, and is replayed (analysis/depth_replay.py), without an engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from minedraft.policy.load import Load


@dataclass(frozen=True)
class RequestView:
    """A request the step is planned for: one that decodes now, or one whose prompt starts."""

    req_id: str
    decoding: bool  # its prompt is computed; False: its prompt is computed now, or it waits with room to start
    tokens_left: int  # the output tokens it may still make (max_tokens less those made)
    num_tokens: int = 0  # its prompt and output tokens so far (vLLM's Request.num_tokens)
    prompt_left: int = 0  # prompt tokens not computed yet (the drafter's prefill of them, once)
    num_drafts: int = 0  # the drafts it holds for this step's verification
    on_lane: bool = False  # the lane drafts for it during this step: it sits the step out
    held_if_parallel: bool = False  # held back for the lane next step if this step runs in parallel
    # The second source's draft for it now (a lookup source, hybrid/): per token, the chance its source
    # estimates that the token and those before it are accepted. Empty: no such draft.
    lookup_probs: tuple[float, ...] = ()


@dataclass(frozen=True)
class StepKey:
    """What a step is planned for, in short: enough to tell whether a depth 0 chosen last stands for it
    (depth.py's ``holds_zero``), and whether its plan then needs each request's view (``plain``)."""

    decoding: tuple[str, ...]  # the decoding requests' ids, in the view's order
    num_requests: int  # they and those whose prompts start
    closed: bool
    even: bool  # the batch is not closed, or every decoding request has as many tokens left
    longest: int  # the most tokens of any of the requests (the speculative max_model_len's)
    plain: bool  # no request holds drafts, has a second source's draft, or sits the step out on the lane


@dataclass(frozen=True)
class StepView:
    requests: Sequence[RequestView]  # those that decode first, then those that start
    closed: bool = False  # no request is left waiting beyond these: the batch ends with its last request
    drafter_has_room: bool = True  # every running request leaves vLLM's drafter room to draft after the step

    def key(self) -> StepKey:
        decoding = [r for r in self.requests if r.decoding]
        return StepKey(tuple(r.req_id for r in decoding), len(self.requests), self.closed,
                       even=not self.closed or len({r.tokens_left for r in decoding}) <= 1,
                       longest=max((r.num_tokens for r in self.requests), default=0),
                       plain=not any(r.num_drafts or r.lookup_probs or r.on_lane for r in self.requests))


@dataclass(frozen=True)
class PlanCounts:
    """What the plan did, for the counters (metrics/stats.py)."""

    drafts_cut: int = 0  # past their request's limit
    past_spec_max_len: int = 0  # requests that passed the speculative max_model_len now
    drafts_trimmed: int = 0  # their acceptance did not pay for their verification
    requests_trimmed: int = 0  # requests verified now that had drafts trimmed
    requests_by_drafts: Mapping[int, int] = field(default_factory=dict)  # drafts kept -> requests, where weighed
    rechecks: int = 0  # depth re-checks begun
    first_measurements: int = 0  # new requests measured first
    lookup_only: int = 0  # 1: every decoding request verified lookup drafts, the others start: depth 0
    undrafted: int = 0  # requests whose rows the model drafter skips after a step it drafts others in


@dataclass(frozen=True)
class StepPlan:
    depth: int  # the drafts vLLM's drafter makes this step (K where the depth is not chosen)
    parallel: bool  # the step may verify one group while the lane drafts for the other
    num_drafts: Mapping[str, int]  # per request, its drafts cut to this many (absent: all it holds)
    load: Load  # the load the plan was made at (parallel steps are measured per load)
    counts: PlanCounts = PlanCounts()
    # Per request verified with the second source's drafts instead of the model drafter's: how many of them
    # (its model drafts are dropped; such a request is not in num_drafts).
    lookup_drafts: Mapping[str, int] = field(default_factory=dict)
    # Requests the model drafter skips after the step while it drafts the others: their drafts would go
    # unused (they verify the second source's now, or their prompts start beside such requests).
    undrafted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class VerifiedDrafts:
    req_id: str
    drafts: int  # drafts verified
    accepted: int  # of them, accepted


@dataclass(frozen=True)
class StepResult:
    """A step as it ran, handed back with its plan."""

    plan: StepPlan
    num_decoding: int  # the requests the step computed a decode for (verified drafts or not)
    tokens: int  # every token the target computed: prompt, decode and verified drafts
    prefill_tokens: int = 0  # of them, those in prompt chunks (such a step is not fitted in the step costs)
    scheduled: Mapping[str, int] = field(default_factory=dict)  # per request scheduled: its tokens
    prompt_tokens: int = 0  # of them, prompt tokens the drafter runs over (its prefill; not an undrafted row's)
    measured: bool = True  # False: it verified and drafted nothing (a step of prompts alone)
    output_tokens: int = 0  # the tokens it sampled
    verified: Sequence[VerifiedDrafts] = ()
    seconds: float | None = None  # None: not timed (its drafting skipped, or the engine idled after it)
    # At a depth > 0, none of its requests got the drafts asked for after it (a process drafter answering at
    # once before it holds them, draft_ahead.py): what it cost is the drafter's start, not the depth's.
    unanswered: bool = False
