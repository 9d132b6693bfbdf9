"""minedraft/worker/cpu_model_runner.py: the CPU runner's lane parts for the in-process drafter."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from vllm.config import CompilationMode

from minedraft.worker.cpu_model_runner import MineDraftCPUModelRunner
from minedraft.worker.in_process.lanes import InlineLane, ThreadLane


def test_the_kernel_lock_follows_the_thread_lane_job(monkeypatch):
    calls = []
    monkeypatch.setattr("minedraft.worker.cpu_model_runner.serialise_cpu_kernels", calls.append)
    runner = MineDraftCPUModelRunner.__new__(MineDraftCPUModelRunner)  # only its hooks
    lane = ThreadLane(lane_threads=None)
    try:
        runner._before_submit(lane, True)  # a job runs beside the target this step
        runner._before_submit(lane, False)
    finally:
        lane.shutdown()
    runner._before_submit(InlineLane(), True)  # nothing runs beside the target: no lock
    assert calls == [True, False]


@pytest.mark.parametrize(("lane", "mode", "kind"), [
    ("overlap", CompilationMode.NONE, "overlap"),
    ("serial", CompilationMode.NONE, "serial"),
    ("overlap", CompilationMode.VLLM_COMPILE, "serial"),  # compiled kernels would pass the lock
])
def test_the_cpu_lane_kind(lane, mode, kind):
    stub = SimpleNamespace(settings=SimpleNamespace(lane=lane), compilation_config=SimpleNamespace(mode=mode))
    assert MineDraftCPUModelRunner._lane_kind(stub) == kind
