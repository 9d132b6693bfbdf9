"""The ``cpu_worker_runner`` patch (minedraft/monkeypatch/patch_cpu_worker_runner.py): vLLM's CPU
worker builds MineDraft's runner class."""

from __future__ import annotations

import pytest

from minedraft.monkeypatch import make_patches, scoped_patch


def test_patch_cpu_worker_runner_swaps_the_runner_class_for_one_block_only(fake_runner_cls):
    import vllm.v1.worker.cpu_worker as cpu_worker

    stock = cpu_worker.CPUModelRunner
    with scoped_patch("cpu_worker_runner", fake_runner_cls):
        assert cpu_worker.CPUModelRunner is fake_runner_cls
    assert cpu_worker.CPUModelRunner is stock
    with pytest.raises(TypeError, match="must subclass vLLM's CPUModelRunner"):
        make_patches("cpu_worker_runner", dict)
