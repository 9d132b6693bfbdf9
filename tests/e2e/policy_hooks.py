"""Hooks into a real engine's speculation policy, for tests: the engine core runs in the test's process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before vLLM is imported), and its scheduler's policy is at hand.

* :func:`state_costs`: a step-cost model the test states, instead of the measured one. The kit's target alone
  is the fastest choice at almost every load (its steps are milliseconds of overhead), so MineDraft's
  default, which measures step costs, drafts there too seldom for a test to see what it does with drafts.
  Stated here: a memory-bound target, a step a fixed 40 ms and 1 ms per token it verifies, a draft forward
  0.5 ms. Everything else stays real: the engine, the scheduler, the drafter, the rejection sampler, the
  measured acceptance, the per-request cut.
* :class:`PlanRecord`: per request, its steps with drafts, those the plan cut, and the drafts verified.
"""

from __future__ import annotations

from minedraft.policy.step_costs import StepCosts

FIXED_S, TOKEN_S, DRAFT_FORWARD_S, CATCH_UP_TOKEN_S = 0.040, 0.001, 0.0005, 0.0001


def speculation_of(llm):
    """The speculation policy of an in-process ``LLM``'s MineDraft scheduler."""
    return llm.llm_engine.engine_core.engine_core.scheduler.speculation


class StatedStepCosts(StepCosts):
    """Predicts what the module says whatever steps are observed."""

    def observe(self, *step, **more) -> None:
        pass

    @property
    def known(self) -> bool:
        return True

    def measured_near(self, num_reqs: int, depth: int) -> bool:
        return True

    def seconds(self, num_reqs: int, max_depth: int) -> list[float]:
        return [FIXED_S + TOKEN_S * num_reqs * (1 + depth) + DRAFT_FORWARD_S * depth for depth in range(max_depth + 1)]

    def token_seconds(self, num_reqs: int) -> float:
        return TOKEN_S

    def catch_up_seconds(self, num_reqs: int, tokens: int) -> float:
        return CATCH_UP_TOKEN_S * tokens


def state_costs(llm) -> None:
    """The stated model on an in-process ``LLM``'s policy (one whose depth is chosen: speculation_depth auto)."""
    depths = speculation_of(llm).depths
    depths.costs = StatedStepCosts(draft_cost=depths.costs.draft_cost, tuning=depths.tuning)


class PlanRecord:
    """Per engine request id: [steps it held drafts in, steps the plan cut them, drafts verified, the most
    verified in one step], recorded from the policy's ``plan`` and ``observe``."""

    def __init__(self, llm) -> None:
        self.requests: dict[str, list[int]] = {}
        speculation = speculation_of(llm)
        plan, observe = speculation.plan, speculation.observe

        def recorded_plan(view):
            planned = plan(view)
            for request in view.requests:
                if request.req_id in planned.num_drafts and request.num_drafts:
                    row = self._row(request.req_id)
                    row[0] += 1
                    row[1] += planned.num_drafts[request.req_id] < request.num_drafts
            return planned

        def recorded_observe(result):
            for verified in result.verified:
                row = self._row(verified.req_id)
                row[2] += verified.drafts
                row[3] = max(row[3], verified.drafts)
            return observe(result)

        speculation.plan, speculation.observe = recorded_plan, recorded_observe

    def _row(self, req_id: str) -> list[int]:
        return self.requests.setdefault(req_id, [0, 0, 0, 0])

    def of(self, front_end_id: str) -> list[int]:
        """The row of a request by the id its ``RequestOutput`` carries, its n samples' rows summed (the engine's
        ids add a suffix, and samples of n > 1 a prefix: vLLM's ``ParentRequest.get_child_info``)."""
        rows = [row for rid, row in self.requests.items() if _front_end_id(rid) == front_end_id]
        return [sum(column) for column in zip(*rows)] if rows else [0, 0, 0, 0]


def _front_end_id(engine_id: str) -> str:
    base = engine_id.rsplit("-", 1)[0]
    index, sample, parent = base.partition("_")
    return parent if sample and index.isdigit() else base
