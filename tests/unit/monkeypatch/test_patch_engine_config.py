"""The ``engine_config`` patch (minedraft/monkeypatch/patch_engine_config.py): the short name
``minedraft`` and MineDraft's checks before vLLM builds its config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minedraft.monkeypatch import make_patches
from minedraft.monkeypatch.patching import PatchGuardError


def test_guard_names_a_changed_signature():
    from vllm.engine.arg_utils import EngineArgs

    def create_engine_config(self, usage_context=None, headless=False, new_option=None):
        raise AssertionError("never called")

    (patch, _) = make_patches("engine_config")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EngineArgs, "create_engine_config", create_engine_config)
        with pytest.raises(PatchGuardError, match=r"takes \(self, usage_context, headless, new_option\), "
                                                  r"expected \(self, usage_context, headless\)"):
            patch.apply()


def test_patch_engine_config_resolves_the_short_name():
    from vllm.config.scheduler import SchedulerConfig

    from minedraft.scheduling.scheduler import MineDraftScheduler

    config = SchedulerConfig(scheduler_cls="minedraft", max_model_len=512, is_encoder_decoder=False)
    assert config.get_scheduler_cls() is MineDraftScheduler


def test_patch_engine_config_refuses_a_bad_config_before_vllm_builds_it(tmp_path):
    from scheduler_harness import fake_model_dir
    from vllm.engine.arg_utils import EngineArgs

    from minedraft.config.validation import MineDraftConfigError

    args = EngineArgs(model=fake_model_dir(tmp_path), skip_tokenizer_init=True, scheduler_cls="minedraft")
    with pytest.raises(MineDraftConfigError, match="needs speculative decoding"):
        args.create_engine_config()


def test_patch_engine_config_calls_through_when_minedraft_is_not_selected():
    from minedraft.monkeypatch.patch_engine_config import _wrap_create_engine_config

    calls = []
    create = _wrap_create_engine_config(lambda self, *a, **k: calls.append((self, a, k)) or "config")
    args = SimpleNamespace(scheduler_cls=None, async_scheduling=True, worker_cls="auto")
    assert create(args, "usage", headless=True) == "config"
    assert calls == [(args, ("usage",), {"headless": True})]
    assert args == SimpleNamespace(scheduler_cls=None, async_scheduling=True, worker_cls="auto")
