"""minedraft/config/overlap_coverage.py: what runs on MineDraft's stock path, and the reason given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minedraft.config.methods import names_where
from minedraft.config.overlap_coverage import not_overlapped_reason
from minedraft.registry import PROPOSER_QUALNAME


def _config(device: str = "cpu", **changes) -> SimpleNamespace:
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(method="draft_model", model="draft", parallel_drafting=False,
                                           disable_padded_drafter_batch=False, draft_sample_method="greedy"),
        parallel_config=SimpleNamespace(enable_dbo=False, data_parallel_size=1),
        device_config=SimpleNamespace(device_type=device), attention_config=SimpleNamespace(backend=None),
        model_config=SimpleNamespace(is_hybrid=False, is_moe=False), kv_transfer_config=None)
    for path, value in changes.items():
        holder, name = path.split(".")
        setattr(getattr(config, holder), name, value)
    return config


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("method", names_where("overlaps"))
def test_the_methods_the_deferred_call_covers_overlap(method, device):
    assert not_overlapped_reason(_config(device, **{"speculative_config.method": method})) is None


def test_data_parallelism_overlaps_on_a_dense_model_and_runs_stock_on_a_moe_one():
    # A dense model's ranks are independent engines, each with MineDraft's scheduler and worker.
    assert not_overlapped_reason(_config(**{"parallel_config.data_parallel_size": 2})) is None
    said = not_overlapped_reason(_config(**{"parallel_config.data_parallel_size": 2, "model_config.is_moe": True}))
    assert said is not None and said.startswith("data parallelism with a mixture-of-experts model")
    assert not_overlapped_reason(_config(**{"model_config.is_moe": True})) is None


def test_parallel_drafting_overlaps():  # PARD, P-EAGLE
    assert not_overlapped_reason(_config(**{"speculative_config.parallel_drafting": True})) is None


def test_probabilistic_drafts_overlap():  # the process drafter refuses them (process_drafter/frontend.py)
    assert not_overlapped_reason(_config(**{"speculative_config.draft_sample_method": "probabilistic"})) is None


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_kv_connector_runs_stock(device):
    """A store-in-the-prefill-step connector would save a request's draft layers before a deferred
    draft pass wrote them."""
    config = _config(device)
    config.kv_transfer_config = SimpleNamespace(kv_connector="ExampleConnector")
    said = not_overlapped_reason(config)
    assert said is not None and said.startswith("KV connector ExampleConnector") and "\n" not in said
    config.kv_transfer_config = SimpleNamespace(kv_connector=None)  # vLLM's config without a connector
    assert not_overlapped_reason(config) is None


def test_suffix_decoding_overlaps():  # through a view of its step's batch (worker/suffix_batch.py)
    assert not_overlapped_reason(_config(**{"speculative_config.method": "suffix"})) is None


def test_the_process_drafter_overlaps():
    config = _config(**{"speculative_config.method": "custom_class", "speculative_config.model": PROPOSER_QUALNAME})
    assert not_overlapped_reason(config) is None


@pytest.mark.parametrize(("change", "reason"), [
    ({"speculative_config.method": "custom_class", "speculative_config.model": "my.Proposer"},
     "speculative method 'custom_class'"),
    ({"speculative_config.disable_padded_drafter_batch": True}, "disable_padded_drafter_batch"),
])
def test_what_the_deferred_call_does_not_carry_runs_stock(change, reason):
    said = not_overlapped_reason(_config(**change))
    assert said is not None and said.startswith(reason) and "\n" not in said


@pytest.mark.parametrize(("change", "reason"), [
    ({"parallel_config.enable_dbo": True}, "dual-batch overlap"),
    ({"attention_config.backend": "FLASHINFER"}, "FlashInfer"),
    ({"model_config.is_hybrid": True}, "hybrid"),
])
def test_what_the_gpu_lane_does_not_cover_runs_stock_on_gpu_only(change, reason):
    assert not_overlapped_reason(_config("cpu", **change)) is None
    said = not_overlapped_reason(_config("cuda", **change))
    assert said is not None and reason in said
