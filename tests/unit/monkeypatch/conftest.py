"""Fixtures of the monkeypatch tests (one test module per ``minedraft/monkeypatch/`` module)."""

from __future__ import annotations

import pytest

import minedraft.plugin


@pytest.fixture(scope="module", autouse=True)
def plugin_stage_applied():
    """As in every vLLM process: the plugin-stage patches are in place for good
    (vLLM loads the plugin itself, e.g. when EngineArgs are built)."""
    minedraft.plugin.register()


@pytest.fixture
def fake_runner_cls() -> type:
    """A subclass of vLLM's CPUModelRunner, as MineDraft's runner is (the ``cpu_worker_runner`` patch's argument)."""
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    return type("FakeRunner", (CPUModelRunner,), {})
