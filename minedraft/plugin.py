"""vLLM general-plugin entry point (``vllm.general_plugins: minedraft``).

vLLM calls :func:`register` in every process it starts (front end, engine
core, workers), possibly more than once. On vLLM 0.32.0 it installs the
plugin-stage patches, which do nothing unless ``scheduler_cls`` selects
MineDraft. On any other vLLM (or none) it logs one line and patches nothing:
MineDraft's patches are written against 0.32.0's private functions.
"""

from __future__ import annotations

import logging

from minedraft._version import vllm_version_problem

# vLLM configures handlers for its "vllm" logger tree before it loads plugins;
# a child of it prints in vLLM's format without importing vLLM here.
_logger = logging.getLogger("vllm.minedraft.plugin")
_disabled_reported = False


def register() -> None:
    problem = vllm_version_problem()
    if problem is not None:
        _report_disabled_once(problem)
        return
    from minedraft.monkeypatch import apply_plugin_patches

    apply_plugin_patches()


def _report_disabled_once(problem: str) -> None:
    global _disabled_reported
    if not _disabled_reported:
        _disabled_reported = True
        _logger.warning("%s; MineDraft is disabled and vLLM is left unpatched", problem)
