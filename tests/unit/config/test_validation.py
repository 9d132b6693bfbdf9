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
