"""The ``draft_collection`` patch (minedraft/monkeypatch/patch_draft_collection.py): the engine
core collects drafts after every step, except a step MineDraft's scheduler says drafted nothing, and
a step whose held drafting the scheduler skips because a new request is in the input queue."""

from __future__ import annotations

import queue

import pytest
from vllm.v1.engine import EngineCoreRequestType
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

    def __init__(self, expects: bool, skips: bool = False) -> None:
        super().__init__()
        self.expects, self.skips, self.asked_to_skip = expects, skips, False

    def expects_draft_tokens(self) -> bool:
        return self.expects

    def skips_held_drafts(self) -> bool:
        self.asked_to_skip = True
        return self.skips


def _post_step(scheduler, model_executed: bool = True, waiting=None) -> _Executor:
    core = object.__new__(EngineCore)
    core.check_for_draft_tokens, core.async_scheduling = True, False
    core.model_executor, core.scheduler = _Executor(), scheduler
    if waiting is not None:  # a busy-loop engine core's input queue (EngineCoreProc)
        core.input_queue = queue.Queue()
        for kind in waiting:
            core.input_queue.put_nowait((kind, None))
    _wrap_post_step(EngineCore.post_step)(core, model_executed)
    return core.model_executor


@pytest.mark.parametrize("expects", [True, False])
def test_patch_draft_collection_skips_only_a_step_that_drafted_nothing(expects):
    scheduler = _Scheduler(expects)
    executor = _post_step(scheduler)
    assert executor.taken == int(expects) and len(scheduler.updates) == int(expects)


ADD, ABORT = EngineCoreRequestType.ADD, EngineCoreRequestType.ABORT


@pytest.mark.parametrize(("waiting", "skips", "asked", "taken"), [
    ([ADD], True, True, 0),  # a new request waits: the held round is skipped, nothing collected
    ([ABORT, ADD], False, True, 1),  # the scheduler holds no round (or not from its held call alone)
    ([ABORT], True, False, 1),  # an abort is no arrival
    ([], True, False, 1),
    (None, True, False, 1),  # the in-process engine core has no input queue: requests come between steps
])
def test_patch_draft_collection_skips_a_held_round_only_for_a_waiting_request(waiting, skips, asked, taken):
    scheduler = _Scheduler(True, skips)
    assert _post_step(scheduler, waiting=waiting).taken == taken and scheduler.asked_to_skip is asked


def test_patch_draft_collection_leaves_other_schedulers_and_empty_steps_as_vllm_has_them():
    assert _post_step(_VllmScheduler()).taken == 1
    assert _post_step(_Scheduler(True), model_executed=False).taken == 0  # vLLM's own rule, unchanged


def test_patch_draft_collection_is_applied_by_the_plugin_stage():
    from minedraft.monkeypatch import LEDGER, make_patches

    (patch,) = make_patches("draft_collection")
    assert patch.target is EngineCore and set(patch.replacements) == {"post_step"}
    assert "plugin entry point" in LEDGER["draft_collection"].applied
    patch.check()  # vLLM 0.32.0's post_step still takes (self, model_executed)
