"""minedraft/worker/gpu_worker.py: vLLM's GPU worker building MineDraft's V1 runner."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from vllm.v1.worker.gpu_worker import Worker

from minedraft.worker.gpu_model_runner import MineDraftGPUModelRunner
from minedraft.worker.gpu_worker import MineDraftGPUWorker


def test_gpu_worker_refuses_the_v2_runner():
    stub = SimpleNamespace(use_v2_model_runner=True)
    with pytest.raises(RuntimeError, match="V1 model runner"):
        MineDraftGPUWorker._make_model_runner(stub)


def test_shutdown_ends_the_draft_source_then_the_worker(monkeypatch):
    log = []
    monkeypatch.setattr(Worker, "shutdown", lambda self: log.append("worker"))
    runner = MineDraftGPUModelRunner.__new__(MineDraftGPUModelRunner)
    runner.draft_source = SimpleNamespace(shutdown=lambda: log.append("draft source"))
    worker = MineDraftGPUWorker.__new__(MineDraftGPUWorker)  # only its shutdown
    worker.model_runner = runner
    worker.shutdown()
    assert log == ["draft source", "worker"]
