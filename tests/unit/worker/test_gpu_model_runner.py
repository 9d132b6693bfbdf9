"""minedraft/worker/gpu_model_runner.py: the GPU runner's lane parts for the in-process drafter.

Its CUDA-stream lane runs against a recording fake of ``torch.cuda`` (fake_cuda.py); no GPU is needed.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from fake_cuda import fake_cuda_lane

from minedraft.contract import ProposeCall
from minedraft.worker.gpu_model_runner import MineDraftGPUModelRunner
from minedraft.worker.in_process.lanes import InlineLane
from minedraft.worker.in_process.in_process_source import InProcessDraftSource


def test_gpu_runner_lanes(monkeypatch):
    made = []
    monkeypatch.setattr("minedraft.worker.gpu_model_runner.CudaStreamLane",
                        lambda device: made.append(device) or "cuda lane")

    def lane(lane_setting, method):
        stub = SimpleNamespace(settings=SimpleNamespace(lane=lane_setting), device="cuda:0",
                               speculative_config=SimpleNamespace(method=method, parallel_drafting=False))
        return MineDraftGPUModelRunner._make_draft_lane(stub)

    assert lane("overlap", "draft_model") == "cuda lane" and made == ["cuda:0"]
    assert isinstance(lane("serial", "draft_model"), InlineLane)
    assert isinstance(lane("overlap", "ngram"), InlineLane)  # host code: inline after the target's launch


def test_the_side_stream_waits_for_the_capture_event_the_runner_records():
    """The in-process source with the GPU runner's hook: the capture's event, recorded on the main stream
    right after the copy, is all the side stream waits for; the target's forward comes in between."""
    runner = MineDraftGPUModelRunner.__new__(MineDraftGPUModelRunner)  # only its hooks
    cuda, lane = fake_cuda_lane()
    source = InProcessDraftSource(lambda x: x + 1, lane, capture_max_mib=64, before_run=runner._before_submit,
                                  on_captured=runner._on_captured)
    source.defer(ProposeCall(["a"], (torch.tensor([[1, 2]]),), {}, depth=2))
    ready = cuda.log[-1].split(".")[0]
    assert cuda.log[-1] == f"{ready}.record(M)"
    cuda.log.append("M: target forward enqueued")
    source.start(["a"])
    assert cuda.log[cuda.log.index("M: target forward enqueued") + 1] == f"S.wait({ready})"
    assert source.collect().draft_token_ids == [[2, 3]]


def test_an_inline_lane_gets_no_capture_event():
    runner = MineDraftGPUModelRunner.__new__(MineDraftGPUModelRunner)
    runner._on_captured(InlineLane())  # nothing to announce: no CUDA call
