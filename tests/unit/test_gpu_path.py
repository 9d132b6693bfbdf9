"""The GPU path's parts a CPU can check (issue #15), outside the worker: the V1 runner forced, the GPU
worker picked with its WARNING line, the configurations the side-stream lane does not cover refused in
one line, the in-process drafter kept eager. The worker's parts (the runners' lanes and hooks, the CUDA
lane's ordering against a recording fake of torch.cuda) are in tests/unit/worker/; on a GPU, tests/gpu."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from minedraft import registry, selection
from minedraft.config.validation import _check_gpu_config, _keep_gpu_drafter_eager
from minedraft.config.errors import MineDraftConfigError


def test_v1_model_runner_is_forced_and_a_v2_request_refused(monkeypatch):
    monkeypatch.delenv(selection.V2_RUNNER_ENV, raising=False)
    selection.force_v1_model_runner()
    import os

    import vllm.envs as envs

    assert os.environ[selection.V2_RUNNER_ENV] == "0" and envs.VLLM_USE_V2_MODEL_RUNNER is False
    monkeypatch.setenv(selection.V2_RUNNER_ENV, "1")
    with pytest.raises(MineDraftConfigError, match="VLLM_USE_V2_MODEL_RUNNER='1'"):
        selection.force_v1_model_runner()


def test_cuda_gets_the_gpu_worker_and_one_warning(monkeypatch, caplog):
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: False)
    monkeypatch.setattr(type(current_platform), "is_cuda", lambda self: True)
    with caplog.at_level(logging.WARNING):
        assert selection._default_worker_qualname() == registry.GPU_WORKER_QUALNAME
    warnings = [r for r in caplog.records if "MineDraft on CUDA" in r.getMessage()]
    assert len(warnings) == 1 and "not yet run inside vLLM on a GPU" in warnings[0].getMessage()


def _gpu_config(**changes) -> SimpleNamespace:
    config = SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=1, enable_dbo=False),
        kv_transfer_config=None, attention_config=SimpleNamespace(backend=None),
        model_config=SimpleNamespace(is_hybrid=False))
    for path, value in changes.items():
        holder, name = path.split(".") if "." in path else (None, path)
        setattr(getattr(config, holder) if holder else config, name, value)
    return config


@pytest.mark.parametrize(("change", "message"), [
    ({"parallel_config.tensor_parallel_size": 2}, "tensor parallelism > 1"),
    ({"parallel_config.enable_dbo": True}, "dual-batch overlap"),
    ({"kv_transfer_config": SimpleNamespace(kv_connector="NixlConnector")}, "KV connectors"),
    ({"attention_config.backend": "FLASHINFER"}, "FlashInfer"),
    ({"model_config.is_hybrid": True}, "hybrid"),
])
def test_what_the_gpu_lane_does_not_cover_is_refused_in_one_line(change, message):
    _check_gpu_config(_gpu_config())  # the covered configuration passes
    with pytest.raises(MineDraftConfigError, match=message) as err:
        _check_gpu_config(_gpu_config(**change))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("method", "eager_after"), [
    ("draft_model", True), ("eagle", True), ("eagle3", True), ("ngram", False)])
def test_the_in_process_drafter_runs_eager_on_gpu(method, eager_after):
    """Its CUDA graphs would share the target's graph pool while both lanes replay."""
    config = SimpleNamespace(speculative_config=SimpleNamespace(method=method, enforce_eager=None))
    _keep_gpu_drafter_eager(config)
    assert bool(config.speculative_config.enforce_eager) is eager_after
