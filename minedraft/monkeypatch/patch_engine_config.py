"""Patches on vLLM's config construction: the ``minedraft`` short name.

Upstream diff: ``patches/0001-scheduler-short-name-registry.patch``.
"""

from __future__ import annotations

import functools

from minedraft import registry
from minedraft.engine_arguments import select_minedraft_engine_args, settle_selected_config
from minedraft.monkeypatch.patching import Patch, takes


def _wrap_create_engine_config(original):
    @functools.wraps(original)
    def create_engine_config(self, *args, **kwargs):
        if not registry.is_minedraft(self.scheduler_cls):
            return original(self, *args, **kwargs)
        select_minedraft_engine_args(self)
        vllm_config = original(self, *args, **kwargs)
        settle_selected_config(vllm_config, self.worker_cls)
        return vllm_config

    return create_engine_config


def _wrap_get_scheduler_cls(original):
    @functools.wraps(original)
    def get_scheduler_cls(self):
        self.scheduler_cls = registry.resolve_short_name(self.scheduler_cls)
        return original(self)

    return get_scheduler_cls


def make_patches() -> list[Patch]:
    from vllm.config.scheduler import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs

    return [
        Patch(EngineArgs, {"create_engine_config": _wrap_create_engine_config},
              guards={"create_engine_config": takes("self", "usage_context", "headless")}),
        Patch(SchedulerConfig, {"get_scheduler_cls": _wrap_get_scheduler_cls},
              guards={"get_scheduler_cls": takes("self")}),
    ]
