"""minedraft/worker/cpu_worker.py: vLLM's CPU worker with MineDraft's runner."""

from __future__ import annotations

from types import SimpleNamespace

from vllm.v1.worker.cpu_worker import CPUWorker

from minedraft.worker.cpu_model_runner import MineDraftCPUModelRunner
from minedraft.worker.cpu_worker import MineDraftCPUWorker


def test_shutdown_ends_the_draft_source_then_the_worker(monkeypatch):
    log = []
    monkeypatch.setattr(CPUWorker, "shutdown", lambda self: log.append("worker"))
    runner = MineDraftCPUModelRunner.__new__(MineDraftCPUModelRunner)
    runner.draft_source = SimpleNamespace(shutdown=lambda: log.append("draft source"))
    worker = MineDraftCPUWorker.__new__(MineDraftCPUWorker)  # only its shutdown
    worker.model_runner = runner
    worker.shutdown()
    assert log == ["draft source", "worker"]
