"""What MineDraft relies on in vLLM 0.32.0, and its own scheduler -> worker contract.

Each vLLM test fails when vLLM stops providing a hook MineDraft uses, instead
of MineDraft silently changing behaviour on an upgrade.
"""

from __future__ import annotations

import inspect
import queue
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from scheduler_harness import prefilled
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import DraftTokenIds

from minedraft.contract import MineDraftSchedulerOutput
from minedraft.worker import runner_mixin as model_runner

# ------------------------------------------------------------------ vLLM's hooks


def test_vllm_skips_a_decode_request_until_its_next_decode_eligible_step(model_dir):
    """MineDraft holds a request out of a step through this field alone."""
    sched, worker = prefilled(model_dir, Scheduler, 2, 20, 30)
    held = sched.requests["r0"]
    held.next_decode_eligible_step = sched.current_step + 2  # skip the next schedule() only
    out = sched.schedule()
    assert "r0" not in out.num_scheduled_tokens and "r1" in out.num_scheduled_tokens
    worker.step(sched, out)
    assert "r0" in sched.schedule().num_scheduled_tokens


class _Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.append(name)
            return self.results.get(name)

        return record


def test_engine_core_joins_drafts_after_update_from_output():
    """MineDraft times a step to the next schedule() because vLLM takes the drafts
    (take_draft_token_ids, where a parallel step joins its lane) in the post-step,
    after update_from_output."""
    from vllm.v1.engine.core import EngineCoreProc

    log = _Recorder()
    log.results = {"has_requests": True, "schedule": SimpleNamespace(total_num_scheduled_tokens=1),
                   "update_from_output": {}, "take_draft_token_ids": DraftTokenIds(["r"], [[1]])}
    future = Future()
    future.set_result(None)  # no output yet: vLLM calls sample_tokens
    log.results["execute_model"] = future
    core = object.__new__(EngineCoreProc)
    core.scheduler = core.model_executor = log
    core.vllm_config = SimpleNamespace(observability_config=SimpleNamespace(enable_logging_iteration_details=False))
    core.log_stats, core._weight_version = False, None
    core.aborts_queue, core.output_queue = queue.Queue(), queue.Queue()
    core.check_for_draft_tokens, core.async_scheduling = True, False
    core.step_fn = core.step
    core._process_engine_step()
    order = [c for c in log.calls if c in ("schedule", "execute_model", "sample_tokens", "update_from_output",
                                           "take_draft_token_ids", "update_draft_token_ids")]
    assert order == ["schedule", "execute_model", "sample_tokens", "update_from_output",
                     "take_draft_token_ids", "update_draft_token_ids"]


def test_runner_drafts_through_drafter_propose():
    """The deferred path captures ``self.drafter.propose``: vLLM's runner must call it
    from its sampling step for the methods MineDraft supports."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    propose_source = inspect.getsource(GPUModelRunner.propose_draft_token_ids)
    assert propose_source.count("self.drafter.propose(") >= 2  # ngram and draft_model paths
    assert "propose_draft_token_ids(" in inspect.getsource(GPUModelRunner.sample_tokens)
    assert "def take_draft_token_ids" in inspect.getsource(GPUModelRunner)


# ------------------------------------------------------------------ scheduler -> worker


def _empty_output() -> SchedulerOutput:
    return SchedulerOutput.make_empty()


def test_worker_refuses_a_step_without_minedraft_plan():
    out = _empty_output()
    assert model_runner._lane_plan(out).defer_drafts is False  # vLLM's empty steps pass
    out.total_num_scheduled_tokens = 4
    with pytest.raises(model_runner.LanePlanError, match="needs MineDraft's scheduler"):
        model_runner._lane_plan(out)
    planned = MineDraftSchedulerOutput.extend(out, ["r1"], True)
    assert model_runner._lane_plan(planned) is planned


def test_a_step_that_verified_no_drafts_hands_eagle_the_first_rows_of_the_hidden_states():
    """The runner's depth-0 EAGLE path (``runner_mixin._skip_kwargs``) selects the target's
    hidden states as vLLM's runner does for a step without spec-decode metadata, and reads the
    step's arguments by these names."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    source = inspect.getsource(GPUModelRunner.propose_draft_token_ids)
    assert "num_scheduled_tokens = scheduler_output.total_num_scheduled_tokens" in source
    assert "[h[:num_scheduled_tokens] for h in aux_hidden_states], dim=-1" in source
    assert "target_hidden_states = hidden_states[:num_scheduled_tokens]" in source
    names = inspect.signature(GPUModelRunner.propose_draft_token_ids).parameters
    assert {"hidden_states", "aux_hidden_states", "spec_decode_metadata", "common_attn_metadata"} <= set(names)
