"""The plugin: discovery, short name on every path, one-line errors before model load."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from scheduler_harness import fake_model_dir
from vllm.config.scheduler import SchedulerConfig
from vllm.engine.arg_utils import EngineArgs

import minedraft.plugin
from minedraft import registry
from minedraft.config.validation import MineDraftConfigError
from minedraft.scheduling.scheduler import MineDraftScheduler
from minedraft.monkeypatch import LEDGER, applied_patches


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return fake_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module", autouse=True)
def plugins_loaded():
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    minedraft.plugin.register()  # idempotent: a second call changes nothing


def _args(model_dir, **kw):
    kw.setdefault("speculative_config", {"method": "ngram", "num_speculative_tokens": 3,
                                         "prompt_lookup_max": 3})
    return EngineArgs(model=model_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=512, **kw)


def test_entry_point_is_discovered_from_the_installed_distribution():
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    ep = next(e for e in eps if e.name == "minedraft")
    assert ep.value == "minedraft.plugin:register"
    assert ep.dist is not None and ep.dist.name == "minedraft"
    assert {"engine_config", "metrics"} <= set(applied_patches())
    assert set(applied_patches()) <= set(LEDGER)


@pytest.mark.parametrize("name", [registry.SHORT_NAME, registry.SCHEDULER_QUALNAME])
def test_engine_args_select_minedraft(model_dir, name):
    config = _args(model_dir, scheduler_cls=name).create_engine_config()
    assert config.scheduler_config.get_scheduler_cls() is MineDraftScheduler
    assert config.scheduler_config.async_scheduling is False
    assert config.parallel_config.worker_cls == registry.CPU_WORKER_QUALNAME


def test_scheduler_config_short_name_resolves():
    assert SchedulerConfig(scheduler_cls="minedraft", max_model_len=512,
                           is_encoder_decoder=False).get_scheduler_cls() is MineDraftScheduler


def test_other_users_are_unaffected(model_dir):
    config = _args(model_dir).create_engine_config()
    assert config.scheduler_config.scheduler_cls is None
    assert config.parallel_config.worker_cls != registry.CPU_WORKER_QUALNAME


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"speculative_config": None}, "needs speculative decoding"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 0}}, "num_speculative_tokens"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 1000}}, "num_speculative_tokens"),
        ({"speculative_config": {"method": "medusa", "model": "x", "num_speculative_tokens": 3}}, "not supported"),
        ({"speculative_config": {"method": "eagle3", "model": "x", "num_speculative_tokens": 3,
                                 "parallel_drafting": True}}, "parallel_drafting"),
        ({"speculative_config": {"method": "eagle3", "model": "x", "num_speculative_tokens": 3,
                                 "disable_padded_drafter_batch": True}}, "disable_padded_drafter_batch"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                 "draft_sample_method": "probabilistic"}}, "draft_sample_method"),
        ({"pipeline_parallel_size": 2}, "pipeline parallelism"),
        ({"data_parallel_size": 2}, "data parallelism"),
    ],
)
def test_bad_configs_get_one_line_before_model_load(model_dir, kwargs, message):
    with pytest.raises(MineDraftConfigError) as err:
        _args(model_dir, scheduler_cls="minedraft", **kwargs).create_engine_config()
    text = str(err.value)
    assert message in text and "\n" not in text and text.startswith("minedraft: ")


def test_cli_prints_one_line_and_exits_2(model_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "minedraft.cli", "serve", model_dir, "--scheduler-cls", "minedraft",
         "--skip-tokenizer-init"],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: minedraft: ")
    assert "Traceback" not in proc.stderr
