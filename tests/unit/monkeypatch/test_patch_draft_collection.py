"""The ``draft_collection`` patch (minedraft/monkeypatch/patch_draft_collection.py): the engine
core collects drafts after every step, except a step MineDraft's scheduler says drafted nothing."""

from __future__ import annotations

import pytest
from vllm.v1.engine.core import EngineCore
from vllm.v1.outputs import DraftTokenIds

from minedraft.monkeypatch.patch_draft_collection import _wrap_post_step


class _Executor:
    def __init__(self) -> None:
        self.taken = 0

    def take_draft_token_ids(self) -> DraftTokenIds:
        self.taken += 1
        return DraftTokenIds(["r"], [[]])


class _VllmScheduler:
    """vLLM 0.32.0's side: no ``expects_draft_tokens``."""

    def __init__(self) -> None:
        self.updates = []

    def update_draft_token_ids(self, drafts) -> None:
        self.updates.append(drafts)


class _Scheduler(_VllmScheduler):
    """MineDraft's side of the contract: ``expects_draft_tokens`` on the class."""

    def __init__(self, expects: bool) -> None:
        super().__init__()
        self.expects = expects

    def expects_draft_tokens(self) -> bool:
        return self.expects


def _post_step(scheduler, model_executed: bool = True) -> _Executor:
    core = object.__new__(EngineCore)
    core.check_for_draft_tokens, core.async_scheduling = True, False
    core.model_executor, core.scheduler = _Executor(), scheduler
    _wrap_post_step(EngineCore.post_step)(core, model_executed)
    return core.model_executor


@pytest.mark.parametrize("expects", [True, False])
def test_patch_draft_collection_skips_only_a_step_that_drafted_nothing(expects):
    scheduler = _Scheduler(expects)
    executor = _post_step(scheduler)
    assert executor.taken == int(expects) and len(scheduler.updates) == int(expects)


def test_patch_draft_collection_leaves_other_schedulers_and_empty_steps_as_vllm_has_them():
    assert _post_step(_VllmScheduler()).taken == 1
    assert _post_step(_Scheduler(True), model_executed=False).taken == 0  # vLLM's own rule, unchanged


def test_patch_draft_collection_is_applied_by_the_plugin_stage():
    from minedraft.monkeypatch import LEDGER, make_patches

    (patch,) = make_patches("draft_collection")
    assert patch.target is EngineCore and set(patch.replacements) == {"post_step"}
    assert "plugin entry point" in LEDGER["draft_collection"].applied
    patch.check()  # vLLM 0.32.0's post_step still takes (self, model_executed)
