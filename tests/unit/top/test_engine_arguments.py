"""Selecting MineDraft (minedraft/engine_arguments.py): what it changes in vLLM's engine arguments, nothing
for other users, and one-line errors before model load."""

from __future__ import annotations

import logging

import pytest
from scheduler_harness import engine_args

from minedraft import engine_arguments, registry
from minedraft.config.settings import MineDraftSettings
from minedraft.config.validation import MineDraftConfigError
from minedraft.scheduling.scheduler import MineDraftScheduler

pytestmark = pytest.mark.usefixtures("plugins_loaded")


@pytest.mark.parametrize("name", [registry.SHORT_NAME, registry.SCHEDULER_QUALNAME])
def test_engine_args_select_minedraft(model_dir, name):
    config = engine_args(model_dir, scheduler_cls=name).create_engine_config()
    assert config.scheduler_config.get_scheduler_cls() is MineDraftScheduler
    assert config.scheduler_config.async_scheduling is False
    assert config.parallel_config.worker_cls == registry.CPU_WORKER_QUALNAME


def test_other_users_are_unaffected(model_dir):
    config = engine_args(model_dir).create_engine_config()
    assert config.scheduler_config.scheduler_cls is None
    assert config.parallel_config.worker_cls != registry.CPU_WORKER_QUALNAME


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"speculative_config": None}, "needs speculative decoding"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 0}}, "num_speculative_tokens"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 2.5}}, "num_speculative_tokens"),
        # vLLM 0.32 dies at start-up with PP and any speculative method (measured: n-gram, draft model).
        ({"pipeline_parallel_size": 2}, "pipeline parallelism with speculative decoding: vLLM 0.32 fails"),
    ],
)
def test_bad_configs_get_one_line_before_model_load(model_dir, kwargs, message):
    with pytest.raises(MineDraftConfigError) as err:
        engine_args(model_dir, scheduler_cls="minedraft", **kwargs).create_engine_config()
    text = str(err.value)
    assert message in text and "\n" not in text and text.startswith("minedraft: ")


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"method": "draft_model", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"}, None),
        ({"method": "draft_model", "num_speculative_tokens": 3, "parallel_drafting": True}, None),  # PARD
        ({"method": "draft_model", "num_speculative_tokens": 3, "disable_padded_drafter_batch": True},
         "disable_padded_drafter_batch"),
        ({"method": "draft_model", "num_speculative_tokens": 20}, None),  # any depth vLLM takes
    ],
)
def test_what_cannot_overlap_yet_runs_on_the_stock_path(model_dir, caplog, spec, reason):
    """vLLM's worker (the drafter untouched), mode stock, one INFO line naming the reason."""
    if spec["method"] == "draft_model":
        spec = {**spec, "model": model_dir}
    with caplog.at_level(logging.INFO, logger="minedraft"):
        config = engine_args(model_dir, scheduler_cls="minedraft", speculative_config=spec).create_engine_config()
    settings = MineDraftSettings.of(config)
    said = [r.getMessage() for r in caplog.records if "stock path" in r.getMessage()]
    assert config.scheduler_config.get_scheduler_cls() is MineDraftScheduler
    if reason is None:
        assert said == [] and settings.mode != "stock"
        assert config.parallel_config.worker_cls == registry.CPU_WORKER_QUALNAME
    else:
        assert len(said) == 1 and reason in said[0], said
        assert settings.mode == "stock"
        assert config.parallel_config.worker_cls == "vllm.v1.worker.cpu_worker.CPUWorker"


def test_a_worker_the_user_names_is_kept(model_dir):
    worker = "vllm.v1.worker.cpu_worker.CPUWorker"
    config = engine_args(model_dir, scheduler_cls="minedraft", worker_cls=worker).create_engine_config()
    assert config.parallel_config.worker_cls == worker and MineDraftSettings.of(config).mode != "stock"


def test_the_process_drafter_refuses_what_would_take_the_stock_path(model_dir):
    """The process drafter has no stock path: what vLLM's resolved config sends there, it refuses."""
    spec = {"method": "draft_model", "model": model_dir, "num_speculative_tokens": 3}
    with pytest.raises(MineDraftConfigError, match=r"cannot serve this configuration \(KV connector") as err:
        engine_args(model_dir, scheduler_cls="minedraft", speculative_config=spec,
                    kv_transfer_config={"kv_connector": "ExampleConnector", "kv_role": "kv_both"},
                    additional_config={"minedraft": {"drafter": "process", "drafter_device": "cpu:1"}},
                    ).create_engine_config()
    assert "\n" not in str(err.value)


def test_v1_model_runner_is_forced_and_a_v2_request_refused(monkeypatch):
    monkeypatch.delenv(engine_arguments.V2_RUNNER_ENV, raising=False)
    engine_arguments.force_v1_model_runner()
    import os

    import vllm.envs as envs

    assert os.environ[engine_arguments.V2_RUNNER_ENV] == "0" and envs.VLLM_USE_V2_MODEL_RUNNER is False
    monkeypatch.setenv(engine_arguments.V2_RUNNER_ENV, "1")
    with pytest.raises(MineDraftConfigError, match="VLLM_USE_V2_MODEL_RUNNER='1'"):
        engine_arguments.force_v1_model_runner()


def test_cuda_gets_the_gpu_worker_and_one_warning(monkeypatch, caplog):
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: False)
    monkeypatch.setattr(type(current_platform), "is_cuda", lambda self: True)
    with caplog.at_level(logging.WARNING):
        assert engine_arguments._default_worker_qualname() == registry.GPU_WORKER_QUALNAME
    warnings = [r for r in caplog.records if "MineDraft on CUDA" in r.getMessage()]
    assert len(warnings) == 1 and "not yet run inside vLLM on a GPU" in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("given", "tp", "lane"),
    [
        ({}, 2, "serial"),  # the default overlap lane would interleave the ranks' collectives
        ({"lane": "overlap"}, 4, "serial"),  # asked for, still not safe
        ({"lane": "serial"}, 2, "serial"),
        ({}, 1, "overlap"),
        ({"drafter": "process", "drafter_device": "cpu:1"}, 2, "overlap"),  # no draft collectives here
    ],
)
def test_a_tensor_parallel_target_drafts_in_process_on_the_serial_lane(caplog, given, tp, lane):
    settings = MineDraftSettings.parse({"minedraft": given}, environ={})
    with caplog.at_level(logging.INFO, logger="minedraft"):
        chosen = engine_arguments.lane_for_tensor_parallelism(settings, tp)
    assert chosen.lane == lane and chosen.drafter == settings.drafter
    said = [r.getMessage() for r in caplog.records if "serial lane" in r.getMessage()]
    assert len(said) == (settings.lane != lane), said


def test_data_parallelism_of_a_dense_model_runs_minedraft_on_every_rank(model_dir):
    """vLLM runs a dense model's data-parallel ranks as independent engine cores: each gets the
    config with MineDraft's scheduler and worker (tests/e2e/test_served.py serves DP 2)."""
    config = engine_args(model_dir, scheduler_cls="minedraft", data_parallel_size=2).create_engine_config()
    assert config.parallel_config.data_parallel_size == 2
    assert config.scheduler_config.get_scheduler_cls() is MineDraftScheduler
    assert config.parallel_config.worker_cls == registry.CPU_WORKER_QUALNAME
    assert MineDraftSettings.of(config).mode != "stock"
