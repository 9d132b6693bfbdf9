"""The plugin (minedraft/plugin.py): discovered from the installed distribution, the short name on
every path; on another vLLM one line and no patch."""

from __future__ import annotations

import importlib.metadata
import logging

import pytest
from vllm.config.scheduler import SchedulerConfig

import minedraft.plugin
from minedraft import _version
from minedraft.monkeypatch import LEDGER, applied_patches
from minedraft.scheduling.scheduler import MineDraftScheduler

pytestmark = pytest.mark.usefixtures("plugins_loaded")


def test_entry_point_is_discovered_from_the_installed_distribution():
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    ep = next(e for e in eps if e.name == "minedraft")
    assert ep.value == "minedraft.plugin:register"
    assert ep.dist is not None and ep.dist.name == "minedraft"
    assert {"engine_config", "metrics"} <= set(applied_patches())
    assert set(applied_patches()) <= set(LEDGER)


def test_scheduler_config_short_name_resolves():
    assert SchedulerConfig(scheduler_cls="minedraft", max_model_len=512,
                           is_encoder_decoder=False).get_scheduler_cls() is MineDraftScheduler


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_register_on_another_vllm_logs_one_line_and_patches_nothing(monkeypatch):
    import minedraft.monkeypatch

    monkeypatch.setattr(_version, "installed_vllm", lambda: ("vllm", "0.33.1"))
    monkeypatch.setattr(minedraft.plugin, "_disabled_reported", False)
    monkeypatch.setattr(minedraft.monkeypatch, "apply_plugin_patches",
                        lambda: pytest.fail("patched a mismatched vLLM"))
    lines = _Lines()
    minedraft.plugin._logger.addHandler(lines)
    try:
        minedraft.plugin.register()
        minedraft.plugin.register()  # vLLM may load plugins more than once per process
    finally:
        minedraft.plugin._logger.removeHandler(lines)
    assert lines.lines == [
        "minedraft: needs vLLM 0.32.0, found vllm 0.33.1; MineDraft is disabled and vLLM is left unpatched"
    ]
