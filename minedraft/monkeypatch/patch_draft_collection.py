"""The engine core collects drafts only after a step that can have made some.

vLLM's ``EngineCore.post_step`` calls the executor's ``take_draft_token_ids``
after every step of a speculative engine. A step at speculation depth 0 with no
deferred draft job drafted nothing, and vLLM's scheduler cleared every scheduled
request's drafts when it scheduled the step, so the collection (a round trip to
the worker process) can only deliver empty lists. MineDraft's scheduler says
which steps those are (``MineDraftScheduler.expects_draft_tokens``).

Upstream diff: ``patches/0009-engine-core-skip-empty-draft-collection.patch``.
"""

from __future__ import annotations

import functools

from minedraft.monkeypatch.patching import Patch, takes


def _wrap_post_step(original):
    @functools.wraps(original)
    def post_step(self, model_executed: bool) -> None:
        expects = getattr(type(self.scheduler), "expects_draft_tokens", None)  # MineDraft's scheduler only
        if model_executed and expects is not None and not expects(self.scheduler):
            return
        return original(self, model_executed)

    return post_step


def make_patches() -> list[Patch]:
    from vllm.v1.engine.core import EngineCore

    return [Patch(EngineCore, {"post_step": _wrap_post_step}, guards={"post_step": takes("self", "model_executed")})]
