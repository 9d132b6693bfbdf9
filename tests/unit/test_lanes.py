"""Lane balancing rules and the execution lanes (no model)."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import torch

from minedraft.scheduling.groups import choose_held, is_balanced
from minedraft.worker.draft_job import DraftJob, as_lists, snapshot, snapshot_nbytes
from minedraft.worker.lanes import InlineLane, ThreadLane


def test_split_from_all_free_is_even():
    held = choose_held([], [], [f"r{i}" for i in range(6)])
    assert len(held) == 3


def test_no_split_for_a_single_request():
    assert choose_held([], [], ["r0"]) == []
    assert not is_balanced(1, 0)


@pytest.mark.parametrize(
    ("drafting", "due", "free", "num_held"),
    [
        # Verified now: u0, u1 and one free; next step: d0 and the two held.
        (["d0"], ["u0", "u1"], ["f0", "f1", "f2"], 2),
        # Verified now: the four due; next step: the four free, all held.
        ([], ["u0", "u1", "u2", "u3"], ["f0", "f1", "f2", "f3"], 4),
    ],
)
def test_due_requests_are_never_held(drafting, due, free, num_held):
    held = choose_held(drafting, due, free)
    assert len(held) == num_held
    assert set(held) <= set(free) and not set(held) & set(due)
    assert is_balanced(len(due) + len(free) - num_held, len(drafting) + num_held)


def test_no_split_when_only_holding_a_due_request_would_balance():
    # Four due and one free: only holding due requests could balance the groups.
    assert choose_held([], ["u0", "u1", "u2", "u3"], ["f0"]) == []


def test_unbalanced_split_falls_back():
    assert choose_held(["d0", "d1", "d2", "d3", "d4"], ["u0"], []) == []
    assert not is_balanced(1, 5)
    assert is_balanced(4, 5)


def test_snapshot_is_isolated_from_buffer_reuse():
    buf = torch.arange(6)
    job = DraftJob.capture(["a", "b"], lambda x, scale: (x[:2] * scale).view(2, 1), (buf,), {"scale": 2})
    buf.zero_()  # the runner reuses its buffers next step
    req_ids, drafts = job.run()
    assert req_ids == ["a", "b"] and as_lists(drafts) == [[0], [2]]
    assert snapshot({"k": [buf]})["k"][0] is not buf


@dataclasses.dataclass
class CaptureMeta:  # a dataclass of tensors, like vLLM's CommonAttentionMetadata
    slots: torch.Tensor
    seq_lens: np.ndarray
    n: int


def test_snapshot_nbytes_counts_what_a_capture_copies():
    """EAGLE-3's target hidden states dominate: [T, 3H] next to ids and positions of [T]."""
    hidden, ids = torch.zeros(10, 3 * 8, dtype=torch.bfloat16), torch.zeros(10, dtype=torch.int64)
    meta = CaptureMeta(slots=torch.zeros(10, dtype=torch.int64), seq_lens=np.zeros(2, dtype=np.int32), n=2)
    args, kwargs = (ids,), {"target_hidden_states": hidden, "meta": meta, "k": 3, "extra": [ids, None]}
    assert snapshot_nbytes((args, kwargs)) == 10 * 24 * 2 + 3 * 10 * 8 + 2 * 4
    assert snapshot_nbytes((args, kwargs)) == snapshot_nbytes(snapshot((args, kwargs)))


def test_a_completed_job_hands_over_drafts_made_at_capture():
    drafts = torch.tensor([[5, 6], [7, 8]])
    req_ids, got = DraftJob.completed(["a", "b"], drafts).run()
    assert req_ids == ["a", "b"] and got is drafts


@pytest.mark.parametrize("lane_cls", [InlineLane, lambda: ThreadLane(lane_threads=None)])
def test_lane_returns_result_and_reraises_failures(lane_cls):
    lane = lane_cls()
    lane.submit(lambda: threading.current_thread().name)
    assert isinstance(lane.wait(), str) and not lane.busy
    assert lane.wait() is None

    def boom():
        raise ValueError("draft failed")

    lane.submit(boom)
    with pytest.raises(ValueError, match="draft failed"):
        lane.wait()
    lane.submit(lambda: 7)  # still usable after a failure
    assert lane.wait() == 7
    lane.shutdown()


def test_thread_lane_runs_in_inference_mode_off_the_main_thread():
    lane = ThreadLane(lane_threads=None)
    lane.submit(lambda: (threading.current_thread() is threading.main_thread(), torch.is_inference_mode_enabled()))
    assert lane.wait() == (False, True)
    lane.shutdown()


def test_cpu_kernel_lock_serialises_shared_scratchpad_kernels(monkeypatch):
    import vllm._custom_ops as ops

    from minedraft.monkeypatch import patch_cpu_kernel_lock as lock_patch

    seen = []
    for name in lock_patch.SHARED_SCRATCHPAD_KERNELS:
        monkeypatch.setattr(ops, name, lambda *a, _n=name, **k: seen.append((_n, lock_patch.KERNEL_LOCK.locked())))
    patches = lock_patch.make_patches()
    for p in patches:
        p.apply()
    try:
        for name in lock_patch.SHARED_SCRATCHPAD_KERNELS:
            getattr(ops, name)()
    finally:
        for p in patches:
            p.undo()
    assert seen == [(name, True) for name in lock_patch.SHARED_SCRATCHPAD_KERNELS]
    assert not lock_patch.KERNEL_LOCK.locked()


def test_step_profiler_times_the_lane_job_and_the_step(tmp_path):
    import json

    from minedraft.worker.lanes import ThreadLane
    from minedraft.worker.step_profile import StepProfiler

    path = tmp_path / "steps.jsonl"
    profiler = StepProfiler(str(path))
    lane = ThreadLane(lane_threads=None)
    try:
        release = threading.Event()
        profiler.begin(num_verified=3, num_draft_only=2, parallel=True)
        lane.submit(profiler.timed(lambda: release.wait(5) and "drafts"))
        profiler.main_lane_done()
        release.set()
        assert lane.wait() == "drafts"
        profiler.end()
    finally:
        lane.shutdown()
        profiler.close()
    (row,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert row["num_verified"] == 3 and row["num_draft_only"] == 2 and row["parallel"]
    assert 0 <= row["main_s"] <= row["step_s"] and 0 < row["draft_s"] <= row["step_s"]


# ------------------------------------------------------------------ the CUDA-stream lane's contract
# A recording fake of torch.cuda: streams, events and the current stream, so the lane's ordering
# and memory-lifetime rules are checked here; tests/gpu runs the same lane on a real GPU.


class FakeCuda:
    def __init__(self):
        self.log: list[str] = []
        self.main = self.Stream(self, "M")
        self.current = self.main

    class Stream:
        def __init__(self, cuda, name="S", device=None):
            self.cuda, self.name = cuda, name

        def wait_event(self, event):
            self.cuda.log.append(f"{self.name}.wait({event.name})")

        def wait_stream(self, other):
            self.cuda.log.append(f"{self.name}.wait_stream({other.name})")

    class Event:
        count = 0

        def __init__(self, cuda, blocking=False):
            self.cuda, self.recorded_on = cuda, None
            FakeCuda.Event.count += 1
            self.name = f"e{FakeCuda.Event.count}"

        def record(self, stream):
            self.recorded_on = stream.name
            self.cuda.log.append(f"{self.name}.record({stream.name})")

        def synchronize(self):
            self.cuda.log.append(f"host.sync({self.name})")

    def current_stream(self):
        return self.current

    def stream(self, stream):
        cuda = self

        class Ctx:
            def __enter__(self):
                cuda.previous, cuda.current = cuda.current, stream

            def __exit__(self, *exc):
                cuda.current = cuda.previous

        return Ctx()


def _fake_cuda_lane():
    from minedraft.worker.lanes import CudaStreamLane

    cuda = FakeCuda()
    cuda.Stream = lambda device=None, _c=cuda: FakeCuda.Stream(_c, "S", device)
    cuda.Event = lambda blocking=False, _c=cuda: FakeCuda.Event(_c, blocking)
    return cuda, CudaStreamLane(torch.device("cpu"), cuda=cuda)


def test_cuda_lane_waits_for_the_capture_event_not_the_target():
    cuda, lane = _fake_cuda_lane()
    lane.captured()  # on M, right after the job's inputs were copied
    ready = cuda.log[-1].split(".")[0]
    cuda.log.append("M: target forward enqueued")

    def job():
        cuda.log.append(f"{cuda.current_stream().name}: draft kernels")
        return ["a"], [[1, 2]]

    lane.submit(job)
    done = [e for e in cuda.log if e.endswith(".record(S)")][0].split(".")[0]
    assert cuda.log[cuda.log.index("M: target forward enqueued") + 1:] == [
        f"S.wait({ready})", "S: draft kernels", f"{done}.record(S)"]
    assert "S.wait_stream(M)" not in cuda.log  # the target's forward must not serialise the lane
    assert lane.wait() == (["a"], [[1, 2]])
    assert cuda.log[-2:] == [f"host.sync({done})", f"M.wait({done})"]


def test_cuda_lane_keeps_the_job_alive_until_the_join():
    import gc
    import weakref

    cuda, lane = _fake_cuda_lane()

    class Job:  # its copied inputs were allocated on M: freed before the join, M could reuse them
        def __call__(self):
            return ["a"], [[3]]

    job = Job()
    alive = weakref.ref(job)
    lane.captured()
    lane.submit(job)
    del job
    gc.collect()
    assert alive() is not None
    lane.wait()
    gc.collect()
    assert alive() is None


def test_cuda_lane_without_capture_event_waits_for_main_so_far_and_reraises():
    cuda, lane = _fake_cuda_lane()

    def failing():
        raise ValueError("drafter failed")

    lane.submit(failing)
    assert cuda.log[0].endswith(".record(M)") and cuda.log[1].startswith("S.wait(")
    with pytest.raises(ValueError, match="drafter failed"):
        lane.wait()
    assert not lane.busy
