"""The front end's rewrite of the speculative config (minedraft/process_drafter/frontend.py)."""

from __future__ import annotations

import pytest
from scheduler_harness import engine_args
from vllm.utils.import_utils import resolve_obj_by_qualname

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.settings import CONFIG_KEY, MineDraftSettings
from minedraft.process_drafter.draft_engine.session_scheduler import DraftSessionScheduler
from minedraft.registry import DRAFT_ENGINE_KEY, PROPOSER_QUALNAME

pytestmark = pytest.mark.usefixtures("plugins_loaded")


def _engine_args(model_dir, minedraft: dict, **spec):
    return engine_args(model_dir, scheduler_cls="minedraft", additional_config={CONFIG_KEY: minedraft},
                       speculative_config={"method": "draft_model", "model": model_dir,
                                           "num_speculative_tokens": 3, **spec})


def test_front_end_gives_the_target_a_proposer_and_the_drafter_its_engine(model_dir):
    args = _engine_args(model_dir, {"drafter": "process", "drafter_device": "cpu:1"}, max_model_len=256)
    vllm_config = args.create_engine_config()
    spec = vllm_config.speculative_config
    assert (spec.method, spec.model, spec.num_speculative_tokens) == ("custom_class", PROPOSER_QUALNAME, 3)
    # The target loads no draft model: vLLM's draft config for custom_class is the target's own.
    assert spec.draft_model_config is vllm_config.model_config
    engine = vllm_config.additional_config[DRAFT_ENGINE_KEY]
    assert engine["model"] == model_dir and engine["max_model_len"] == 256
    assert engine["skip_tokenizer_init"] and engine["dtype"] == "float32" and engine["load_format"] == "auto"
    # Draft sessions roll their KV back: no prefix cache, and the scheduler that rolls back.
    assert not engine["enable_prefix_caching"] and not engine["async_scheduling"]
    assert resolve_obj_by_qualname(engine["scheduler_cls"]) is DraftSessionScheduler
    assert engine["tensor_parallel_size"] == 1
    assert MineDraftSettings.of(vllm_config).drafter == "process"


def test_a_pard_draft_goes_to_the_draft_engine_which_drafts_it_one_token_per_forward(model_dir):
    args = _engine_args(model_dir, {"drafter": "process", "drafter_device": "cpu:1"}, parallel_drafting=True)
    vllm_config = args.create_engine_config()
    spec = vllm_config.speculative_config
    assert (spec.method, spec.num_speculative_tokens, spec.parallel_drafting) == ("custom_class", 3, False)
    assert vllm_config.additional_config[DRAFT_ENGINE_KEY]["model"] == model_dir


def test_a_dflash_draft_s_engine_is_the_target_s_config_with_the_draft_as_its_dflash_drafter(model_dir):
    args = _engine_args(model_dir, {"drafter": "process", "drafter_device": "cpu:1"}, method="dflash",
                        max_model_len=256)
    vllm_config = args.create_engine_config()
    assert vllm_config.speculative_config.method == "custom_class"
    engine = vllm_config.additional_config[DRAFT_ENGINE_KEY]
    assert engine["model"] == model_dir and engine["max_model_len"] == 256 and engine["dtype"] == "float32"
    assert engine["speculative_config"] == {"model": model_dir, "method": "dflash", "num_speculative_tokens": 3}
    assert not engine["enable_prefix_caching"] and engine["skip_tokenizer_init"]


@pytest.mark.parametrize(("minedraft", "spec", "message"), [
    ({"drafter": "process", "drafter_device": "cpu:1"}, {"method": "ngram", "model": None,
                                                         "prompt_lookup_max": 3},
     r"the speculative method must be 'draft_model' \(PARD included\) or 'dflash', with a 'model', got method "
     r"'ngram', which runs no model"),
    ({"drafter": "process", "drafter_device": "cpu:1"}, {"method": "eagle3"},
     r"got method 'eagle3', which drafts from the target's hidden states \(a head, not a model of its own\)"),
    ({"drafter": "process", "drafter_device": "cuda:1,2"}, {"method": "dflash"},
     "with a DFlash draft runs it on one device, got cuda:1,2"),
    ({"drafter": "process", "drafter_device": "cuda:0"}, {}, "shares GPU 0 with the target"),
    ({"drafter": "process", "drafter_device": "cpu:1"}, {"draft_sample_method": "probabilistic"},
     "not the probabilities that draft_sample_method 'probabilistic' needs"),
])
def test_front_end_refuses_what_a_process_drafter_cannot_run(model_dir, minedraft, spec, message):
    with pytest.raises(MineDraftConfigError, match=message):
        _engine_args(model_dir, minedraft, **spec).create_engine_config()


def test_front_end_refuses_a_dflash_process_drafter_beside_a_tensor_parallel_target(model_dir):
    args = _engine_args(model_dir, {"drafter": "process", "drafter_device": "cpu:1"}, method="dflash")
    args.tensor_parallel_size = 2
    with pytest.raises(MineDraftConfigError, match="with a DFlash draft and a tensor-parallel target"):
        args.create_engine_config()


def test_front_end_refuses_a_process_drafter_under_data_parallelism(model_dir):
    args = _engine_args(model_dir, {"drafter": "process", "drafter_device": "cpu:1"})
    args.data_parallel_size = 2
    with pytest.raises(MineDraftConfigError, match="with data parallelism: every rank would start a draft engine"):
        args.create_engine_config()


@pytest.mark.parametrize(("bind", "warned"), [
    (None, True), ("auto", True), ("1", True), ("0-1", True),  # unset, or a list holding the drafter's core
    ("0", False), ("0|1", False), ("nobind", False),  # cores of its own, per-rank lists, the user's placement
])
def test_one_warning_where_the_target_may_compute_on_the_drafter_s_cores(monkeypatch, caplog, bind, warned):
    import logging

    from minedraft.config.drafter_device import DrafterDevice
    from minedraft.process_drafter.frontend import _warn_if_target_uses_drafter_cores

    if bind is None:
        monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    else:
        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", bind)
    with caplog.at_level(logging.WARNING, logger="minedraft"):
        _warn_if_target_uses_drafter_cores(DrafterDevice.parse("cpu:1"))
    said = [r.getMessage() for r in caplog.records if "do not share cores" in r.getMessage()]
    assert len(said) == int(warned)
