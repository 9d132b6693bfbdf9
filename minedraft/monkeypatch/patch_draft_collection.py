"""The engine core collects drafts only after a step that can have made some, and not when a new request waits.

vLLM's ``EngineCore.post_step`` calls the executor's ``take_draft_token_ids``
after every step of a speculative engine. Two cases where MineDraft's scheduler
says it should not:

* A step at speculation depth 0 with no deferred draft job drafted nothing, and
  vLLM's scheduler cleared every scheduled request's drafts when it scheduled the
  step, so the collection (a round trip to the worker process) can only deliver
  empty lists (``MineDraftScheduler.expects_draft_tokens``).
* A plain SD step whose drafting was held until after its outputs, when a new
  request is already in the engine core's input queue: vLLM's engine core reads
  that queue only between steps, so the request would wait for the drafting
  round too (most of a step where the draft is not much smaller than the target).
  The scheduler skips the round where the request can be admitted next step
  (``MineDraftScheduler.skips_held_drafts``): the step's requests are verified
  without drafts next time, and the worker records the skipped call for its
  drafter's catch-up. Outputs never depend on drafts.

Upstream diff: ``patches/0009-engine-core-skip-empty-draft-collection.patch``.
"""

from __future__ import annotations

import functools

from minedraft.monkeypatch.patching import Patch, takes


def request_waiting(engine_core) -> bool:
    """Whether a new request is in the engine core's input queue (a busy-loop engine core's; the
    in-process one has none: its client adds requests between steps)."""
    from vllm.v1.engine import EngineCoreRequestType

    queue = getattr(engine_core, "input_queue", None)
    if queue is None:
        return False
    with queue.mutex:
        return any(kind == EngineCoreRequestType.ADD for kind, _ in queue.queue)


def _wrap_post_step(original):
    @functools.wraps(original)
    def post_step(self, model_executed: bool) -> None:
        scheduler = self.scheduler
        expects = getattr(type(scheduler), "expects_draft_tokens", None)  # MineDraft's scheduler only
        if model_executed and expects is not None:
            if not expects(scheduler):
                return
            if request_waiting(self) and scheduler.skips_held_drafts():
                return
        return original(self, model_executed)

    return post_step


def make_patches() -> list[Patch]:
    from vllm.v1.engine.core import EngineCore

    return [Patch(EngineCore, {"post_step": _wrap_post_step}, guards={"post_step": takes("self", "model_executed")})]
