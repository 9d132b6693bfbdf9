"""minedraft/worker/runner_mixin.py: the deferral logic both runners share, on a fake of vLLM's runner.

The fake plays vLLM's runner: ``execute_model`` runs the target's forward, ``sample_tokens`` calls
``drafter.propose`` and ``take_draft_token_ids`` returns what that call gave. Both draft sources run
behind it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from process_drafter_fakes import FakeClient, batch, fake_proposer
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from vllm.v1.outputs import DraftTokenIds

from minedraft.config.settings import CONFIG_KEY, MineDraftSettings
from minedraft.contract import MineDraftDraftTokenIds, MineDraftSchedulerOutput
from minedraft.process_drafter.target.process_source import NoDraftSource, ProcessDrafterSource
from minedraft.worker.cpu_model_runner import MineDraftCPUModelRunner
from minedraft.worker.gpu_model_runner import MineDraftGPUModelRunner
from minedraft.worker.in_process.draft_job import DraftJob, as_lists
from minedraft.worker.in_process.lanes import InlineLane
from minedraft.worker.in_process.in_process_source import InProcessDraftSource
from minedraft.worker.runner_mixin import LanePlanError, MineDraftRunnerMixin


class Drafter:
    """An in-process drafter with the process drafter's arguments: each row's last sampled token + 1, + 2."""

    def propose(self, sampled, num_tokens_no_spec, token_ids_cpu, **_):
        return torch.tensor([[s[-1] + 1, s[-1] + 2] if s else [0, 0] for s in sampled])


class FakeVllmRunner:
    """What the mixin uses of vLLM's runner. ``histories``: the batch of the next ``execute_model``."""

    def __init__(self, drafter, method: str = "draft_model") -> None:
        # Its propose takes no vLLM proposer arguments: no depth, so no catch-up (draft_catch_up.py).
        settings = MineDraftSettings.parse({CONFIG_KEY: {"idle_drafter": "run"}}, environ={})
        self.vllm_config = SimpleNamespace(additional_config={CONFIG_KEY: settings.to_config()})
        self.speculative_config = SimpleNamespace(method=method, num_speculative_tokens=2, parallel_drafting=False)
        self.device = torch.device("cpu")
        self.uses_mrope = False
        self.drafter = drafter
        self.histories: dict[str, list[int]] = {}
        self.log: list[str] = []

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        self.log.append("target forward")
        return None  # vLLM's runner samples in sample_tokens

    def sample_tokens(self, grammar_output=None):
        req_ids, lengths, token_ids = batch(self.histories)
        self.input_batch = SimpleNamespace(req_ids=req_ids, num_reqs=len(req_ids))
        sampled = [[h[-1]] for h in self.histories.values()]
        self.proposed = req_ids, self.drafter.propose(sampled, lengths, token_ids, slot_mappings=None)
        return "output"

    def take_draft_token_ids(self):
        req_ids, drafts = self.proposed
        return DraftTokenIds(req_ids, as_lists(drafts))

    def _sample(self, logits, spec_decode_metadata):
        return "rejection sampler" if spec_decode_metadata is not None else "plain sampler"

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        return "with spec-decode metadata" if self.speculative_config is not None else "as the target alone"


class Runner(MineDraftRunnerMixin, FakeVllmRunner):
    def _make_draft_lane(self):
        return InlineLane()


def _step(runner: Runner, histories: dict[str, list[int]], draft_only: list[str], defer: bool,
          finished: frozenset[str] = frozenset(), after_output: bool = False):
    """One engine step as vLLM's engine core makes it: execute_model, sample_tokens, take_draft_token_ids."""
    runner.histories = histories
    plan = MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), draft_only, defer, after_output)
    plan.num_scheduled_tokens = {r: 1 for r in histories}
    plan.total_num_scheduled_tokens = len(histories)
    plan.num_spec_tokens_to_schedule = 2
    plan.finished_req_ids = set(finished)
    runner.execute_model(plan)
    assert runner.sample_tokens() == "output"
    return runner.take_draft_token_ids()


def test_the_drafter_vllm_built_chooses_the_source_once():
    assert isinstance(Runner(Drafter()).draft_source, InProcessDraftSource)
    assert isinstance(Runner(fake_proposer(FakeClient()), "custom_class").draft_source, ProcessDrafterSource)


def test_a_tensor_parallel_rank_other_than_0_drafts_nothing_beside_the_process_drafter():
    """vLLM's executor reads drafts from rank 0 only; the other ranks follow the plan with empty jobs."""
    client = FakeClient()
    runner = Runner(fake_proposer(client, drives_engine=False), "custom_class")
    assert isinstance(runner.draft_source, NoDraftSource)
    batch_ab = {"a": [1, 2], "b": [3, 4]}
    assert _step(runner, batch_ab, [], defer=True) is None  # a parallel step: its job held
    assert _step(runner, {"c": [5, 6]}, ["a", "b"], defer=False) == MineDraftDraftTokenIds(["c"], [[]])  # inline: none
    assert _step(runner, batch_ab, [], defer=False, after_output=True) is None
    assert client.sent == []


def test_in_process_drafts_of_a_parallel_step_arrive_with_the_next_step():
    runner = Runner(Drafter())
    assert _step(runner, {"a": [1, 5], "b": [2, 7]}, [], defer=True) is None
    assert runner.proposed[1].tolist() == [[0, 0], [0, 0]]  # vLLM's runner saw placeholders
    # Next step (a fallback step): a and b's job runs beside the target, c drafts inline.
    drafts = _step(runner, {"c": [3, 9]}, ["a", "b"], defer=False)
    assert drafts == MineDraftDraftTokenIds(["a", "b", "c"], [[6, 7], [8, 9], [10, 11]])


class CountingDrafter(Drafter):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def propose(self, *args, **kwargs):
        self.calls.append("propose")
        return super().propose(*args, **kwargs)


@pytest.mark.parametrize("process", [False, True])
def test_a_step_with_prompt_tokens_drafts_after_its_outputs(process):
    """drafts_after_output: vLLM's sampling gets placeholders and the drafter is called only in
    take_draft_token_ids, which vLLM's engine core calls after queuing the step's outputs."""
    client = FakeClient()
    runner = Runner(fake_proposer(client), "custom_class") if process else Runner(CountingDrafter())
    runner.histories = {"new": [1, 5], "old": [2, 7]}
    plan = MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), [], False, drafts_after_output=True)
    plan.num_scheduled_tokens, plan.total_num_scheduled_tokens, plan.num_spec_tokens_to_schedule = (
        {"new": 2, "old": 1}, 3, 2)
    runner.execute_model(plan)
    runner.sample_tokens()
    placeholders = [[], []] if process else [[0, 0], [0, 0]]
    assert (runner.proposed[1] if process else runner.proposed[1].tolist()) == placeholders
    assert (client.sent if process else runner.drafter.calls) == []  # nothing drafted before the outputs
    drafts = runner.take_draft_token_ids()
    expected = [[6, 7, 8], [8, 9, 10]] if process else [[6, 7], [8, 9]]
    assert drafts == MineDraftDraftTokenIds(["new", "old"], expected)
    # The next step (decodes only) drafts inline again, as vLLM.
    assert _step(runner, {"new": [1, 5, 6]}, [], defer=False).req_ids == ["new"]
    assert (len(client.sent) if process else runner.drafter.calls) == (2 if process else ["propose"] * 2)


def test_a_held_call_no_step_took_is_dropped():
    runner = Runner(CountingDrafter())
    runner.histories = {"new": [1, 5]}
    plan = MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), [], False, drafts_after_output=True)
    plan.num_scheduled_tokens, plan.total_num_scheduled_tokens, plan.num_spec_tokens_to_schedule = {"new": 2}, 2, 2
    runner.execute_model(plan)
    runner.sample_tokens()
    runner.execute_model(MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), [], False))
    assert runner.draft_source.collect() is None and runner.drafter.calls == []


def test_process_drafter_late_rows_reach_the_scheduler_typed():
    client = FakeClient(late={1})
    runner = Runner(fake_proposer(client), "custom_class")
    _step(runner, {"a": [1, 5], "b": [2, 7]}, [], defer=True)
    assert runner.proposed[1] == [[], []]  # custom_class: vLLM's runner takes lists
    drafts = _step(runner, {"c": [3, 9]}, ["a", "b"], defer=False)
    assert drafts == MineDraftDraftTokenIds(["a", "b", "c"], [[], [], [10, 11, 12]], ["a", "b"])
    _step(runner, {"c": [3, 9, 10]}, [], defer=False, finished=frozenset({"a"}))
    assert client.sent[-1]["release"] == ["a"]


def test_a_job_nobody_took_is_dropped_but_its_late_rows_count():
    runner = Runner(fake_proposer(FakeClient(late={1})), "custom_class")
    _step(runner, {"a": [1, 5]}, [], defer=True)
    # An empty step: vLLM's runner returns early (no sampling) and the engine takes no drafts.
    runner.execute_model(MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), ["a"], False))
    # The next step drops a's drafts (stale) and still counts a late.
    assert _step(runner, {"b": [2, 7]}, [], defer=False) == MineDraftDraftTokenIds(["b"], [[8, 9, 10]], ["a"])


def test_the_job_must_cover_every_planned_request():
    runner = Runner(Drafter())
    _step(runner, {"r1": [1], "r2": [2], "prefilling": [3]}, [], defer=True)
    drafts = _step(runner, {"x": [4]}, ["r1", "r2"], defer=True)  # a job may cover more rows than planned
    assert drafts.req_ids == ["r1", "r2", "prefilling"]
    with pytest.raises(LanePlanError, match=r"\['r3'\]"):
        _step(runner, {"y": [5]}, ["x", "r3"], defer=False)
    with pytest.raises(LanePlanError, match=r"\['r1'\]"):  # no job at all
        _step(Runner(Drafter()), {"x": [4]}, ["r1"], defer=False)


def test_runners_share_the_mixin_and_differ_in_submission_order():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    for runner, base in ((MineDraftCPUModelRunner, CPUModelRunner), (MineDraftGPUModelRunner, GPUModelRunner)):
        mro = runner.__mro__
        assert mro.index(MineDraftRunnerMixin) < mro.index(base)
    assert MineDraftCPUModelRunner.SUBMIT_BEFORE_TARGET and not MineDraftGPUModelRunner.SUBMIT_BEFORE_TARGET


class RecordingSource(InProcessDraftSource):
    def __init__(self, log: list[str]):
        super().__init__(None, InlineLane(), capture_max_mib=64, before_run=lambda *a: None,
                         on_captured=lambda lane: None)
        self.log = log

    def _run(self, job):
        self.log.append(f"run {job.req_ids}")

    def _join(self):
        self.log.append("drop stale drafts")


@pytest.mark.parametrize(("before", "order"), [
    # CPU: the lane thread runs beside the forward.
    (True, ["drop stale drafts", "run ['a']", "target forward"]),
    # GPU: the target's launch first.
    (False, ["drop stale drafts", "target forward", "run ['a']"]),
])
def test_where_the_job_is_run(before, order):
    runner = Runner(Drafter())
    runner.SUBMIT_BEFORE_TARGET = before
    runner.draft_source = RecordingSource(runner.log)
    runner.draft_source._deferred = DraftJob(["a"], lambda: None, (), {})
    runner.histories = {"b": [1]}
    plan = MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), ["a"], True)
    runner.execute_model(plan)
    assert runner.log == order


def test_a_step_without_drafts_takes_vllm_s_plain_sampler():
    """worker/plain_sampling.py: the rejection sampler only where some request has drafts."""
    runner = Runner(Drafter())
    runner.input_batch = SimpleNamespace(sampling_metadata=SimpleNamespace(
        max_num_logprobs=None, logprob_token_ids=None, thinking_budget_state_holder=None))
    assert runner._sample("logits", SimpleNamespace(max_spec_len=0)) == "plain sampler"
    assert runner._sample("logits", SimpleNamespace(max_spec_len=2)) == "rejection sampler"
    assert runner._sample("logits", None) == "plain sampler"


@pytest.mark.parametrize("depth, drafts, catch_up, hybrid, expected", [
    (0, {}, True, False, "as the target alone"),  # the drafter skips and nothing is verified
    (0, {"a": [7]}, True, False, "with spec-decode metadata"),  # drafts made before depth 0 are verified
    (2, {}, True, False, "with spec-decode metadata"),  # the drafter runs: it reads the metadata
    (0, {}, False, False, "with spec-decode metadata"),  # no catch-up: the drafter's forward runs
    (0, {}, True, True, "with spec-decode metadata"),  # recurrent backends read zero-draft decodes
])
def test_a_step_the_drafter_skips_is_prepared_as_the_target_alone(depth, drafts, catch_up, hybrid, expected):
    runner = Runner(Drafter())
    runner.draft_catch_up = object() if catch_up else None
    runner.model_config = SimpleNamespace(is_hybrid=hybrid)
    step = SchedulerOutput.make_empty()
    step.num_spec_tokens_to_schedule, step.scheduled_spec_decode_tokens = depth, drafts
    speculative_config = runner.speculative_config
    assert runner._prepare_inputs(step, None) == expected
    assert runner.speculative_config is speculative_config  # restored



class JobsAtForward(FakeVllmRunner):
    """Notes how many jobs the process drafter had been sent when the target's forward ran."""

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        self.log.append(f"{len(self.drafter.client.sent)} jobs sent")
        return super().execute_model(scheduler_output, intermediate_tensors)


class ProcessRunner(MineDraftRunnerMixin, JobsAtForward):
    pass


def test_prompts_whose_last_chunks_a_step_computes_go_to_the_process_drafter_before_the_forward():
    client = FakeClient()
    runner = ProcessRunner(fake_proposer(client), "custom_class")
    runner.requests = {"chunked": SimpleNamespace(prompt_token_ids=[1, 2, 3, 4]),
                       "resumed": SimpleNamespace(prompt_token_ids=[5, 6]),
                       "decoding": SimpleNamespace(prompt_token_ids=[1, 2])}

    def new(req_id, prompt, computed=0):
        return NewRequestData(req_id, prompt, [], None, None, ([],), computed, None)

    plan = MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), [], False)
    plan.scheduled_new_reqs = [new("whole", [7, 8, 9]), new("cached_prefix", [1, 7, 7], computed=2),
                               new("first_chunk", [4, 4, 4, 4])]
    plan.scheduled_cached_reqs = CachedRequestData(
        req_ids=["chunked", "resumed", "decoding"], resumed_req_ids={"resumed"}, new_token_ids=[],
        all_token_ids={}, new_block_ids=[None] * 3, num_computed_tokens=[2, 0, 9], num_output_tokens=[0] * 3)
    plan.num_scheduled_tokens = {"whole": 3, "cached_prefix": 1, "first_chunk": 2, "chunked": 2, "resumed": 2,
                                 "decoding": 1}
    runner.execute_model(plan)
    assert runner.log[0] == "1 jobs sent"  # before the target's forward
    # Not the prompt whose first chunk runs now, nor the one resumed after preemption (its history is more).
    assert client.sent[0]["ahead"] == ["whole", "cached_prefix", "chunked"]
    assert client.sent[0]["updates"][-1] == ("chunked", 0, [1, 2, 3, 4])
