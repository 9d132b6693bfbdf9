"""minedraft/worker/in_process/in_process_source.py: vLLM's proposer in the worker, deferred calls replayed on a lane."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from minedraft.contract import DraftLaneError, MineDraftDraftTokenIds, ProposeCall
from minedraft.worker.in_process.draft_probs import DraftProbs
from minedraft.worker.in_process.job_watchdog import JobWatchdog
from minedraft.worker.in_process.lanes import InlineLane, Lane
from minedraft.worker.in_process.in_process_source import InProcessDraftSource


class RecordingLane(Lane):
    """Runs the job at submission, as the inline lane does, and logs submissions and joins."""

    def __init__(self, log: list[str]):
        self.log, self._outcome = log, (None, None)

    def submit(self, job):
        self.log.append("lane: submit")
        self._pending, self._outcome = True, (job(), None)

    def _join(self):
        self.log.append("lane: join")
        return self._outcome


class Drafter:
    """Drafts the last token + 1 and + 2 of each row of ``tokens`` (a [rows, n] tensor)."""

    def __init__(self, log: list[str]):
        self.log = log

    def propose(self, tokens: torch.Tensor, fail: bool = False) -> torch.Tensor:
        self.log.append(f"propose {tokens[:, -1].tolist()}")
        if fail:
            raise RuntimeError("drafter failed")
        return torch.stack([tokens[:, -1] + 1, tokens[:, -1] + 2], dim=1)


def _source(log, lane=None, capture_max_mib=64.0, profiler=None, watchdog=None) -> InProcessDraftSource:
    lane = lane if lane is not None else RecordingLane(log)
    return InProcessDraftSource(
        Drafter(log).propose, lane, capture_max_mib=capture_max_mib, profiler=profiler, watchdog=watchdog,
        before_run=lambda lane, job_this_step: log.append(f"hook: before_run {job_this_step}"),
        on_captured=lambda lane: log.append("hook: captured"))


def _call(req_ids, tokens, **kwargs) -> ProposeCall:
    return ProposeCall(list(req_ids), (tokens,), kwargs, depth=2)


def test_a_deferred_call_is_captured_then_replayed_when_run():
    log: list[str] = []
    source = _source(log)
    buffer = torch.tensor([[1, 5], [2, 7]])
    source.defer(_call(["a", "b"], buffer))
    buffer.zero_()  # vLLM's runner reuses its buffers: the job holds copies
    assert log == ["hook: captured"]
    source.start(["a", "b"])
    assert log[1:] == ["hook: before_run True", "lane: submit", "propose [5, 7]"]
    assert source.collect() == MineDraftDraftTokenIds(["a", "b"], [[6, 7], [8, 9]])
    assert source.collect() is None and not source.lane.busy


def test_a_step_without_a_job_still_calls_the_platform_hook():
    log: list[str] = []
    source = _source(log)
    source.start([])
    assert log == ["hook: before_run False"]
    assert source.collect() is None


def test_drafting_now_joins_the_running_job_first_and_keeps_its_drafts():
    log: list[str] = []
    source = _source(log)
    source.defer(_call(["a"], torch.tensor([[4]])))
    source.start([])
    del log[:]
    drafts = source.draft_now(_call(["b"], torch.tensor([[10]])))
    assert log == ["lane: join", "propose [10]"]  # the drafter's buffers belong to one call at a time
    assert drafts.tolist() == [[11, 12]]  # what vLLM's runner gets back from propose
    assert source.collect() == MineDraftDraftTokenIds(["a"], [[5, 6]])


def test_a_call_too_large_to_copy_drafts_at_capture(caplog):
    log: list[str] = []
    source = _source(log, capture_max_mib=8 / 2**20)  # 8 bytes: one int64
    source.defer(_call(["a"], torch.tensor([[4]])))  # 8 bytes: captured
    source.start(["a"])
    del log[:]
    with caplog.at_level(logging.INFO, logger="vllm.minedraft.worker.in_process.in_process_source"):
        source.defer(_call(["b", "c"], torch.tensor([[10], [20]])))  # 16 bytes: drafted now
    assert log[:3] == ["lane: join", "propose [10, 20]", "hook: captured"]
    source.collect()  # "a"'s job, joined while drafting now
    del log[:]
    source.start(["b", "c"])
    assert "propose" not in " ".join(log)  # the job only hands the drafts over
    assert source.collect() == MineDraftDraftTokenIds(["b", "c"], [[11, 12], [21, 22]])
    with caplog.at_level(logging.INFO, logger="vllm.minedraft.worker.in_process.in_process_source"):
        source.defer(_call(["d", "e"], torch.tensor([[1], [2]])))
    lines = [r.getMessage() for r in caplog.records if "would copy" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith("steps like it draft inline.")  # once, not per step
    assert source.inline_drafts == 2


class TimingProfiler:
    def __init__(self):
        self.timed_jobs = 0

    def timed(self, job):
        def run():
            self.timed_jobs += 1
            return job()

        return run


def test_the_step_profiler_times_the_job_on_the_lane():
    profiler = TimingProfiler()
    source = _source([], lane=InlineLane(), profiler=profiler)
    source.defer(_call(["a"], torch.tensor([[1]])))
    source.start([])
    assert profiler.timed_jobs == 1 and source.collect().req_ids == ["a"]


def test_a_failing_job_is_a_draft_lane_error_at_collect():
    source = _source([], lane=InlineLane())
    source.defer(_call(["a"], torch.tensor([[1]]), fail=True))
    source.start([])
    with pytest.raises(DraftLaneError, match="drafter failed"):
        source.collect()
    assert not source.lane.busy


def test_shutdown_ends_the_lane():
    ended = []
    lane = InlineLane()
    lane.shutdown = lambda: ended.append(True)
    _source([], lane=lane).shutdown()
    assert ended == [True]


class EnqueueOnlyLane(Lane):
    """As the CUDA lane: the job returns once enqueued, and the join waits for the device, here
    for ``device_done``."""

    def __init__(self, device_done: threading.Event):
        self.device_done = device_done

    def submit(self, job):
        self._pending, self._outcome = True, (job(), None)

    def _join(self):
        assert self.device_done.wait(10), "the watchdog never acted on the stuck join"
        return self._outcome


def test_the_watchdog_bounds_the_join_where_the_device_work_is_seen():
    device_done, said = threading.Event(), []
    watchdog = JobWatchdog(0.05, "rank 0", end=lambda line: (said.append(line), device_done.set()))
    source = _source([], lane=EnqueueOnlyLane(device_done), watchdog=watchdog)
    source.defer(_call(["a"], torch.tensor([[1]])))
    source.start([])
    assert said == []  # the job itself returned at once
    assert source.collect().req_ids == ["a"]
    assert len(said) == 1 and "a draft job on rank 0 has run for more than lane_timeout_s=0.05 s" in said[0]


def test_a_deferred_call_keeps_its_draft_probabilities_for_its_requests_until_released():
    drafter = Drafter([])
    last = {}

    def propose(tokens):
        last["probs"] = torch.softmax(tokens.float().unsqueeze(-1).expand(-1, 2, 4), dim=-1)
        return drafter.propose(tokens)

    store = DraftProbs(lambda: last.get("probs"))
    source = InProcessDraftSource(propose, InlineLane(), capture_max_mib=64.0, before_run=lambda *a: None,
                                  on_captured=lambda lane: None, draft_probs=store)
    source.defer(_call(["a", "b"], torch.tensor([[1], [2]])))
    source.start([])
    assert source.collect().req_ids == ["a", "b"]
    got = store.for_verification(["b"], [2], torch.tensor([0, 0]))
    assert torch.equal(got, last["probs"][1])
    source.begin_step(["b"])
    assert store.for_verification(["b"], [2], torch.tensor([0, 0])) is None


def test_a_stateless_drafter_is_not_called_at_depth_0_deferred_or_now():
    """The n-gram drafter's depth-0 calls: answered empty without the drafter, a deferred one as a job
    that covers its requests (the scheduler planned drafts for them), and depth 2 calls it again."""
    log: list[str] = []
    source = InProcessDraftSource(
        Drafter(log).propose, RecordingLane(log), capture_max_mib=64.0, stateless_drafter=True,
        before_run=lambda lane, job_this_step: None, on_captured=lambda lane: None)
    depth_0 = ProposeCall(["a", "b"], (), {}, depth=0)
    assert source.draft_now(depth_0) == [[], []]
    source.defer(depth_0)
    source.start([])
    assert source.collect() == MineDraftDraftTokenIds(["a", "b"], [[], []])
    assert not any(line.startswith("propose") for line in log), log
    assert source.draft_now(_call(["a"], torch.tensor([[3]]))).tolist() == [[4, 5]]


class FakeCatchUp:
    """What the source asks of a DraftCatchUp: a skip (None: over its hidden-state budget), the passes
    that feed what was skipped (one, with the call's tokens minus 1), and releases."""

    def __init__(self, log: list[str], fits: bool = True):
        self.log, self.fits = log, fits
        self.skipped_calls = self.caught_up_tokens = 0

    def skip(self, call, rows=None):
        self.log.append(f"catch-up: skip {call.req_ids}")
        return [[] for _ in call.req_ids] if self.fits else None

    def calls_before(self, call, rows=None):
        self.log.append(f"catch-up: feed {call.req_ids}")
        yield ProposeCall(call.req_ids, (call.args[0] - 1,), {}, depth=0)

    def release(self, req_ids):
        pass


def _catching_up_source(log, fits: bool = True) -> InProcessDraftSource:
    return InProcessDraftSource(
        Drafter(log).propose, RecordingLane(log), capture_max_mib=64.0, catch_up=FakeCatchUp(log, fits),
        before_run=lambda lane, job_this_step: None, on_captured=lambda lane: log.append("hook: captured"))


def test_a_held_call_is_caught_up_and_drafted_after_the_outputs_not_at_hold():
    log: list[str] = []
    source = _catching_up_source(log)
    buffer = torch.tensor([[1, 5], [2, 7]])
    source.hold(_call(["a", "b"], buffer))
    assert log == []  # nothing fed, drafted or announced to the lane before the step's outputs
    # Drafted before the runner's next step rewrites its buffers: the call is held as it is, not copied.
    buffer[:, -1] += 1
    assert source.collect() == MineDraftDraftTokenIds(["a", "b"], [[7, 8], [9, 10]])
    assert log == ["catch-up: feed ['a', 'b']", "propose [5, 7]", "propose [6, 8]"]
    assert source.collect() is None  # drafted once


@pytest.mark.parametrize("fits", [True, False])
def test_a_held_call_the_engine_core_took_no_drafts_of_is_skipped_for_the_catch_up(fits):
    """A request arrived while the held call's step ran (the next step begins without a collect): the
    call is recorded as skipped; where its hidden states would exceed the catch-up's budget it is
    drafted (its drafts dropped)."""
    log: list[str] = []
    source = _catching_up_source(log, fits)
    source.hold(_call(["a"], torch.tensor([[3]])))
    source.begin_step([])
    drafted = ["catch-up: feed ['a']", "propose [2]", "propose [3]"]
    assert log == ["catch-up: skip ['a']"] + ([] if fits else drafted)
    assert source.arrival_skips == 1 and source.collect() is None


def test_without_a_catch_up_a_held_call_is_drafted_after_the_outputs_or_dropped():
    log: list[str] = []
    source = _source(log)
    source.hold(_call(["a"], torch.tensor([[3]])))
    source.begin_step([])
    assert log == [] and source.arrival_skips == 0 and source.collect() is None
    source.hold(_call(["a"], torch.tensor([[3]])))
    assert log == []  # not captured: drafted on this thread after the outputs
    assert source.collect() == MineDraftDraftTokenIds(["a"], [[4, 5]])
    assert log == ["propose [3]"]
