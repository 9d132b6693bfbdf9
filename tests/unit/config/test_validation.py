"""Refusals and MineDraft-path settings in minedraft/config/validation.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.validation import _keep_gpu_drafter_eager, validate_vllm_config


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_kv_connectors_are_not_refused(device):
    """They run on MineDraft's stock path (overlap_coverage.py); MineDraft's counters beside a connector's
    statistics: tests/unit/metrics/test_stats.py."""
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=3),
        parallel_config=SimpleNamespace(pipeline_parallel_size=1, data_parallel_size=1),
        model_config=SimpleNamespace(runner_type="generate"), device_config=SimpleNamespace(device_type=device),
        kv_transfer_config=SimpleNamespace(kv_connector="NixlConnector"))
    validate_vllm_config(config)


@pytest.mark.parametrize(("method", "eager_after"), [
    ("draft_model", True), ("eagle", True), ("eagle3", True), ("mtp", True), ("ngram", False)])
def test_the_in_process_drafter_runs_eager_on_gpu(method, eager_after):
    """Its CUDA graphs would share the target's graph pool while both lanes replay."""
    config = SimpleNamespace(speculative_config=SimpleNamespace(method=method, enforce_eager=None))
    _keep_gpu_drafter_eager(config)
    assert bool(config.speculative_config.enforce_eager) is eager_after


TABLE = [[1, 4, 3], [5, 64, 1]]


def _with_table(model_dir, minedraft: dict):
    from scheduler_harness import engine_args

    from minedraft.config.settings import CONFIG_KEY

    spec = {"method": "draft_model", "model": model_dir, "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": TABLE}
    return engine_args(model_dir, scheduler_cls="minedraft", speculative_config=spec,
                       additional_config={CONFIG_KEY: minedraft}).create_engine_config()


@pytest.mark.usefixtures("plugins_loaded")
@pytest.mark.parametrize("minedraft", [{}, {"drafter": "process", "drafter_device": "cpu:1"}])
def test_vllm_s_depth_table_runs_as_in_vllm(model_dir, minedraft):
    config = _with_table(model_dir, minedraft)
    assert [list(r) for r in config.speculative_config.num_speculative_tokens_per_batch_size] == TABLE


@pytest.mark.usefixtures("plugins_loaded")
def test_the_depth_controller_asked_for_beside_the_table_is_refused(model_dir):
    with pytest.raises(MineDraftConfigError, match="both choose the depth"):
        _with_table(model_dir, {"speculation_depth": "auto"})
