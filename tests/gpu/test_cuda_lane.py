"""MineDraft's side-stream lane on a real GPU, torch only (``make test-gpu``; no vLLM needed).

What the lane promises (minedraft/worker/in_process/lanes.py, CudaStreamLane): the job runs on the side
stream after the capture event and beside work enqueued later on the main stream; inputs copied
at capture on the main stream stay valid until the join even when the main stream reuses memory
right after the submission; the join returns the drafts as host data and surfaces the job's
exception; and the two streams really overlap (CUDA-event timestamps).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from minedraft.worker.in_process.draft_job import DraftJob, as_lists
from minedraft.worker.in_process.job_watchdog import JobWatchdog
from minedraft.worker.in_process.lanes import CudaStreamLane

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")

SPIN_CYCLES = 50_000_000  # torch.cuda._sleep: tens of milliseconds on any current GPU


def _draft(x: torch.Tensor, k: int) -> torch.Tensor:
    """A stand-in drafter: k dependent steps, then integer drafts per row."""
    torch.cuda._sleep(SPIN_CYCLES)  # a slow lane: the main stream moves on meanwhile
    for _ in range(k):
        x = x * 2 + 1
    return x.long()


def test_job_reads_its_capture_not_later_writes_and_join_returns_host_drafts():
    device = torch.device("cuda")
    lane = CudaStreamLane(device)
    buffer = torch.arange(8, device=device, dtype=torch.float32).view(4, 2)  # the runner's reused buffer
    job = DraftJob.capture(["a", "b", "c", "d"], _draft, (buffer, 3), {})
    lane.captured()
    buffer.fill_(-100)  # next step's write on the main stream, before the submission
    lane.submit(job.run)
    buffer.fill_(-200)  # the target's work after the submission
    req_ids, drafts = lane.wait()
    expected = (torch.arange(8, dtype=torch.float32).view(4, 2) * 8 + 7).long().tolist()
    assert req_ids == ["a", "b", "c", "d"] and as_lists(drafts) == expected


def test_copied_inputs_survive_main_stream_reuse_until_the_join():
    """Without the lane keeping the job alive, the caching allocator would hand the capture's
    memory to the main stream's next allocation while the side stream still reads it."""
    device = torch.device("cuda")
    lane = CudaStreamLane(device)
    for step in range(20):
        source = torch.full((256, 64), float(step), device=device)
        job = DraftJob.capture([str(i) for i in range(256)], _draft, (source, 1), {})
        lane.captured()
        lane.submit(job.run)
        del job, source
        for _ in range(4):  # the main stream allocates and writes as the target would
            torch.full((256, 64), -1.0, device=device).mul_(3)
        _, drafts = lane.wait()
        assert as_lists(drafts)[0][0] == 2 * step + 1, f"step {step}: the lane read reused memory"


def test_a_failing_job_surfaces_at_the_join():
    lane = CudaStreamLane(torch.device("cuda"))

    def failing():
        raise RuntimeError("drafter failed on the side stream")

    lane.captured()
    lane.submit(failing)
    with pytest.raises(RuntimeError, match="drafter failed"):
        lane.wait()
    assert not lane.busy


def test_the_streams_overlap():
    """The side stream's job and later main-stream work run at the same time: the two
    spans measured with CUDA events intersect."""
    device = torch.device("cuda")
    lane = CudaStreamLane(device)
    origin = torch.cuda.Event(enable_timing=True)
    side_start, side_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    main_start, main_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    origin.record()  # on the main stream before everything else: every span starts after it

    def job():
        side_start.record()
        torch.cuda._sleep(SPIN_CYCLES)
        side_end.record()
        return ["a"], torch.zeros(1, 1, dtype=torch.long, device=device)

    lane.captured()
    lane.submit(job)
    main_start.record()
    torch.cuda._sleep(SPIN_CYCLES)
    main_end.record()
    lane.wait()
    torch.cuda.synchronize()
    spans = [(origin.elapsed_time(side_start), origin.elapsed_time(side_end)),
             (origin.elapsed_time(main_start), origin.elapsed_time(main_end))]
    overlap = min(spans[0][1], spans[1][1]) - max(spans[0][0], spans[1][0])
    assert overlap > 0.5 * min(b - a for a, b in spans), spans


def test_the_watchdog_sees_a_stuck_side_stream_at_the_join():
    """The job only enqueues its kernels and returns: a side stream that does not finish shows at
    the join, which the draft source bounds as it bounds the job (InProcessDraftSource._join). The
    join's host wait must let the watchdog's thread run (the GIL released in the event's wait)."""
    lane = CudaStreamLane(torch.device("cuda"))
    said: list[str] = []
    watchdog = JobWatchdog(0.2, "rank 0", end=said.append)  # records the line instead of ending the process

    def stuck_job():
        torch.cuda._sleep(100 * SPIN_CYCLES)  # seconds on the side stream
        return ["a"], torch.zeros(1, 1, dtype=torch.long, device="cuda")

    lane.captured()
    watchdog.watched(lambda: lane.submit(stuck_job))()
    assert said == [], "enqueueing the job took longer than the bound"
    start = time.monotonic()
    req_ids, _ = watchdog.watched(lane.wait)()
    waited = time.monotonic() - start
    assert req_ids == ["a"]
    assert len(said) == 1 and "lane_timeout_s=0.2 s" in said[0], (said, waited)
    assert waited > 0.2, waited  # the side stream was still busy when the bound passed


@pytest.mark.skipif(os.environ.get("TORCH_CUDA_SANITIZER") == "1", reason="already under the sanitizer")
def test_no_stream_race_under_the_cuda_sanitizer():
    """The two tests above again under PyTorch's CUDA sanitizer (CSAN), which reports any access
    by one stream to memory another stream may still use without an ordering between them."""
    env = {**os.environ, "TORCH_CUDA_SANITIZER": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                           "capture or survive"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "CSAN detected a possible data race" not in proc.stdout + proc.stderr
