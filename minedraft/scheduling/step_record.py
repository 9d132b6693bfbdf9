"""A step as the scheduler records it for the policy: what it scheduled (at ``schedule``) and what the target
verified (at ``update_from_output``), read from vLLM's own outputs."""

from __future__ import annotations

from typing import Any, NamedTuple

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request

from minedraft.policy import StepPlan, StepResult, VerifiedDrafts


class RanStep(NamedTuple):
    """A step that ran, waiting for the next ``schedule`` to time it (started None: not timed)."""

    result: StepResult
    started: float | None


def scheduled_step(plan: StepPlan, output: SchedulerOutput, requests: dict[str, Request],
                   drafts_on_lane: bool) -> StepResult:
    """The step ``output`` schedules under ``plan`` (``drafts_on_lane``: the lane drafts beside it)."""
    scheduled = output.num_scheduled_tokens
    spec = output.scheduled_spec_decode_tokens
    decode_tokens = _decode_tokens(output)
    return StepResult(
        plan, num_decoding=sum(1 for rid in scheduled if not requests[rid].is_prefill_chunk),
        tokens=output.total_num_scheduled_tokens, prefill_tokens=output.total_num_scheduled_tokens - decode_tokens,
        scheduled=dict(scheduled),
        prompt_tokens=sum(_prompt_tokens_scheduled(requests[rid], n) for rid, n in scheduled.items()
                          if rid not in plan.undrafted),
        # A step that verifies or drafts nothing tells the parallel-step choice nothing; at depth 0 a decode step
        # verifies nothing by design, and is what the depth's choice measures there.
        measured=bool(drafts_on_lane or spec) or (plan.depth == 0 and decode_tokens > 0))


def drafts_unanswered(result: StepResult, requests: dict[str, Request]) -> bool:
    """Whether a step of plain SD at a depth > 0 got no drafts for any request it ran that decodes on: read at
    the next ``schedule``, when the drafts made after it are the requests' own."""
    plan = result.plan
    if plan.depth == 0 or plan.parallel:
        return False
    running = [request for rid in result.scheduled if rid not in plan.undrafted
               and (request := requests.get(rid)) is not None and not request.is_finished()
               and not request.is_prefill_chunk]
    return bool(running) and not any(request.spec_token_ids for request in running)


def _decode_tokens(output: SchedulerOutput) -> int:
    """The step's tokens that decode: each decoding request's one token and its drafts."""
    spec = output.scheduled_spec_decode_tokens
    return sum(n for rid, n in output.num_scheduled_tokens.items() if n == 1 + len(spec.get(rid, ())))


def verified_drafts(scheduler_output: SchedulerOutput, runner_output: Any) -> list[VerifiedDrafts]:
    """Each request that had drafts verified in the step: its drafts verified and accepted."""
    index, sampled = runner_output.req_id_to_index, runner_output.sampled_token_ids
    verified = []
    for rid, drafts in scheduler_output.scheduled_spec_decode_tokens.items():
        row = index.get(rid)
        if drafts and row is not None and row < len(sampled) and len(sampled[row]):
            verified.append(VerifiedDrafts(rid, len(drafts), min(len(sampled[row]) - 1, len(drafts))))
    return verified


def _prompt_tokens_scheduled(request: Request, scheduled: int) -> int:
    """Of the ``scheduled`` tokens of ``request``'s step (already counted in its computed tokens), its prompt's."""
    return max(0, min(scheduled, request.num_prompt_tokens - (request.num_computed_tokens - scheduled)))
