"""The GPU checks in minedraft/config/validation.py: what the side-stream lane does not cover, an eager drafter."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.validation import _check_gpu_config, _keep_gpu_drafter_eager


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
    ({"parallel_config.enable_dbo": True}, "dual-batch overlap"),
    ({"kv_transfer_config": SimpleNamespace(kv_connector="NixlConnector")}, "KV connectors"),
    ({"attention_config.backend": "FLASHINFER"}, "FlashInfer"),
    ({"model_config.is_hybrid": True}, "hybrid"),
])
def test_what_the_gpu_lane_does_not_cover_is_refused_in_one_line(change, message):
    _check_gpu_config(_gpu_config())  # the covered configuration passes
    _check_gpu_config(_gpu_config(**{"parallel_config.tensor_parallel_size": 4}))  # the paper's target
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
