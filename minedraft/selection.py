"""What selecting MineDraft (``--scheduler-cls minedraft``) changes in vLLM's engine arguments.

Called by the ``engine_config`` patch (minedraft/monkeypatch/patch_engine_config.py)
in the front-end process, before vLLM builds its config, so a bad
configuration is refused before any model loads.
"""

from __future__ import annotations

from typing import Any

from minedraft import registry
from minedraft.config import MineDraftConfigError, validate_engine_args, validate_vllm_config
from minedraft.drafter.frontend import select_process_drafter
from minedraft.log import get_logger
from minedraft.settings import CONFIG_KEY

logger = get_logger(__name__)


def select_minedraft_engine_args(engine_args: Any) -> None:
    """Point ``engine_args`` at MineDraft's classes, after checking them."""
    settings = validate_engine_args(engine_args)
    if settings.drafter == "process":
        select_process_drafter(engine_args, settings)
    # vLLM ships additional_config to the engine core and the workers: the
    # settings travel with the config, parsed once, here.
    engine_args.additional_config = {**(engine_args.additional_config or {}), CONFIG_KEY: settings.to_config()}
    logger.info("MineDraft settings: %s", settings.describe())
    engine_args.scheduler_cls = registry.SCHEDULER_QUALNAME
    # MineDraft's scheduler is synchronous: it needs each step's drafts back
    # before it schedules the next one.
    engine_args.async_scheduling = False
    if engine_args.worker_cls == "auto":
        engine_args.worker_cls = _default_worker_qualname()


def validate_selected_config(vllm_config: Any) -> None:
    validate_vllm_config(vllm_config)


def _default_worker_qualname() -> str:
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return registry.CPU_WORKER_QUALNAME
    raise MineDraftConfigError(
        f"platform {current_platform.device_name!r} is not supported yet: the "
        "overlapped draft lane runs on the CPU backend (a CUDA-stream lane exists "
        "but has not been validated on a GPU)."
    )
