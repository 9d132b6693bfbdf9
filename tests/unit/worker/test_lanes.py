"""minedraft/worker/in_process/lanes.py: the execution lanes of the in-process drafter (thread, CUDA stream, inline).

The CUDA-stream lane runs against a recording fake of ``torch.cuda`` (fake_cuda.py); tests/gpu runs it
on a real GPU.
"""

from __future__ import annotations

import threading

import pytest
import torch
from fake_cuda import fake_cuda_lane

from minedraft.worker.in_process.lanes import InlineLane, ThreadLane, make_lane


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


def test_make_lane_by_kind_and_device():
    assert isinstance(make_lane("serial", torch.device("cpu")), InlineLane)
    lane = make_lane("overlap", torch.device("cpu"), lane_threads=None)
    assert isinstance(lane, ThreadLane)
    lane.shutdown()
    with pytest.raises(ValueError, match="unknown MINEDRAFT_LANE 'fast'"):
        make_lane("fast", torch.device("cpu"))


# ------------------------------------------------------------------ the CUDA-stream lane's contract


def test_cuda_lane_waits_for_the_capture_event_not_the_target():
    cuda, lane = fake_cuda_lane()
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

    cuda, lane = fake_cuda_lane()

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
    cuda, lane = fake_cuda_lane()

    def failing():
        raise ValueError("drafter failed")

    lane.submit(failing)
    assert cuda.log[0].endswith(".record(M)") and cuda.log[1].startswith("S.wait(")
    with pytest.raises(ValueError, match="drafter failed"):
        lane.wait()
    assert not lane.busy
