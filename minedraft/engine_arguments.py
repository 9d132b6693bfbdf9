"""What selecting MineDraft (``--scheduler-cls minedraft``) changes in vLLM's engine arguments.

Called by the ``engine_config`` patch (minedraft/monkeypatch/patch_engine_config.py)
in the front-end process, before vLLM builds its config, so a bad
configuration is refused before any model loads.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from minedraft import registry
from minedraft.config.environment import inherited
from minedraft.config.overlap_coverage import is_process_drafter, not_overlapped_reason
from minedraft.config.settings import CONFIG_KEY, MineDraftSettings
from minedraft.config.validation import (
    MineDraftConfigError,
    validate_engine_args,
    validate_overlap_config,
    validate_vllm_config,
)
from minedraft.log import get_logger
from minedraft.process_drafter.frontend import refuse_on_stock_path, select_process_drafter

logger = get_logger(__name__)


def select_minedraft_engine_args(engine_args: Any) -> None:
    """Point ``engine_args`` at MineDraft's scheduler, after checking them (the worker is
    chosen once vLLM has resolved the speculative config: ``settle_selected_config``)."""
    settings = validate_engine_args(engine_args)
    if settings.drafter == "process":
        select_process_drafter(engine_args, settings)
    # vLLM ships additional_config to the engine core and the workers: the
    # settings travel with the config, parsed once (settled after vLLM's config is built).
    engine_args.additional_config = {**(engine_args.additional_config or {}), CONFIG_KEY: settings.to_config()}
    engine_args.scheduler_cls = registry.SCHEDULER_QUALNAME
    # MineDraft's scheduler is synchronous: it needs each step's drafts back
    # before it schedules the next one.
    engine_args.async_scheduling = False
    force_v1_model_runner()


def settle_selected_config(vllm_config: Any, worker_cls_given: str) -> None:
    """MineDraft's path or its stock path, decided on vLLM's resolved config (the method vLLM
    inferred, its defaults), then the worker and the final settings.

    On the stock path (config/overlap_coverage.py) the worker stays vLLM's and the scheduler runs in mode
    ``stock``: exact as vLLM, one INFO line saying why. ``worker_cls_given``: the user's
    ``--worker-cls`` ("auto" unless they named one; then it is theirs on either path)."""
    validate_selected_config(vllm_config)
    settings = MineDraftSettings.of(vllm_config)
    reason = not_overlapped_reason(vllm_config)
    if reason is not None and is_process_drafter(vllm_config.speculative_config):
        refuse_on_stock_path(reason)
    if reason is not None:
        logger.info("MineDraft runs its stock path (vLLM's worker and drafter, every step plain speculative "
                    "decoding): %s.", reason)
        settings = dataclasses.replace(settings, mode="stock")
    else:
        validate_overlap_config(vllm_config)
        settings = lane_for_tensor_parallelism(settings, vllm_config.parallel_config.tensor_parallel_size)
        if worker_cls_given == "auto":
            vllm_config.parallel_config.worker_cls = _default_worker_qualname()
    vllm_config.additional_config[CONFIG_KEY] = settings.to_config()
    logger.info("MineDraft settings: %s", settings.describe())


def lane_for_tensor_parallelism(settings: MineDraftSettings, tensor_parallel_size: int) -> MineDraftSettings:
    """The in-process drafter of a tensor-parallel target drafts on the serial lane.

    vLLM shards the draft model (or EAGLE head) over the target's tensor-parallel group, so every
    draft forward issues collectives on that group. A lane thread or stream beside the target's
    forward would interleave them with the target's in an order of its own on each rank: measured
    at TP 2 on CPU, ranks that met different collectives (gloo aborts a rank on a size mismatch;
    equal sizes would add up the wrong tensors, or wait for each other for ever). Inline, every rank
    issues the draft's collectives at the same point of its step. Parallel steps still alternate the
    groups; the draft work no longer overlaps the target's."""
    if tensor_parallel_size == 1 or settings.drafter != "in-process" or settings.lane == "serial":
        return settings
    logger.info("MineDraft: tensor parallelism %d: the in-process drafter runs on the serial lane (its "
                "collectives in the target's order on every rank; a lane beside the target would interleave "
                "them differently per rank).", tensor_parallel_size)
    return dataclasses.replace(settings, lane="serial")


def validate_selected_config(vllm_config: Any) -> None:
    validate_vllm_config(vllm_config)
    if vllm_config.use_v2_model_runner:  # hisparse or watermark configs force V2 past the variable
        raise MineDraftConfigError(
            "this configuration needs vLLM's V2 model runner (hisparse or watermarking); MineDraft runs on "
            "the V1 runner: drop those options or --scheduler-cls minedraft.")


V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def force_v1_model_runner() -> None:
    """MineDraft subclasses vLLM's V1 model runner (MRV1): select it in this process and, through
    the environment they inherit, in the engine core and the workers started after this."""
    value = inherited(V2_RUNNER_ENV)
    if value not in (None, "", "0"):
        raise MineDraftConfigError(
            f"{V2_RUNNER_ENV}={value!r}: MineDraft runs on vLLM's V1 model runner; unset it.")
    if value != "0":
        os.environ[V2_RUNNER_ENV] = "0"
        logger.info("MineDraft: vLLM's V1 model runner selected (%s=0)", V2_RUNNER_ENV)
    import vllm.envs as envs

    if envs._is_envs_cache_enabled():  # an in-process engine after a first one reads cached values
        envs.__getattr__.cache_clear()


def _default_worker_qualname() -> str:
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return registry.CPU_WORKER_QUALNAME
    if current_platform.is_cuda():
        logger.warning(
            "MineDraft on CUDA: the side-stream lane is tested against a fake of torch.cuda only, and MineDraft's "
            "tests have not yet run inside vLLM on a GPU; check outputs against stock SD before relying on it.")
        return registry.GPU_WORKER_QUALNAME
    raise MineDraftConfigError(
        f"platform {current_platform.device_name!r} is not supported: MineDraft runs on CPU and CUDA.")
