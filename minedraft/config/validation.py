"""What MineDraft refuses, checked in the front-end process before any model loads.

Every rejection is a :class:`MineDraftConfigError` whose message is one line
that says what is wrong and what to do instead. A speculative configuration
that vLLM runs is not refused here: where MineDraft's overlap does not cover it
yet, it runs on MineDraft's stock path (overlap_coverage.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.config import VllmConfig

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.methods import method_of
from minedraft.config.settings import MineDraftSettings
from minedraft.log import get_logger

__all__ = ["MineDraftConfigError", "validate_engine_args", "validate_overlap_config", "validate_vllm_config"]

logger = get_logger(__name__)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def validate_engine_args(engine_args: Any) -> MineDraftSettings:
    """Cheap checks on raw ``EngineArgs`` fields, before vLLM builds its config;
    returns MineDraft's own settings, parsed once (see settings.py)."""
    settings = MineDraftSettings.parse(engine_args.additional_config)
    spec = engine_args.speculative_config
    if not spec:
        raise MineDraftConfigError(
            "--scheduler-cls minedraft needs speculative decoding: pass "
            "--speculative-config '{\"method\": \"draft_model\", \"model\": DRAFT, "
            "\"num_speculative_tokens\": K}' (or method \"eagle3\", \"eagle\" or \"ngram\")."
        )
    k = _get(spec, "num_speculative_tokens")
    if k is not None:
        _check_num_spec_tokens(k)
    return settings


def validate_vllm_config(vllm_config: VllmConfig) -> None:
    """Checks that need vLLM's resolved config, on MineDraft's path and its stock path alike."""
    spec = vllm_config.speculative_config
    if spec is None:
        raise MineDraftConfigError(
            "--scheduler-cls minedraft needs --speculative-config; none was given."
        )
    _check_num_spec_tokens(spec.num_speculative_tokens)
    if vllm_config.parallel_config.pipeline_parallel_size > 1:
        # vLLM builds the drafter on the last stage only, and every stage's runner reads it when its KV
        # cache is set up (GPUModelRunner.initialize_kv_cache_tensors, for every method): stock vLLM 0.32
        # with PP 2 and a draft model or n-gram dies at start-up (measured on CPU).
        raise MineDraftConfigError(
            "pipeline parallelism with speculative decoding: vLLM 0.32 fails at start-up there too (its runners "
            "before the last stage have no drafter); use tensor parallelism.")
    if vllm_config.model_config.runner_type != "generate":
        raise MineDraftConfigError(
            f"only generative models are supported, not runner {vllm_config.model_config.runner_type!r}."
        )
    if MineDraftSettings.of(vllm_config).hybrid is not None:
        _check_hybrid(spec)


def validate_overlap_config(vllm_config: VllmConfig) -> None:
    """Checks and settings of MineDraft's own path (not its stock path, which is vLLM's)."""
    if vllm_config.speculative_config.num_speculative_tokens_per_batch_size:
        _check_depth_table(vllm_config)
    if vllm_config.device_config.device_type == "cuda":
        _keep_gpu_drafter_eager(vllm_config)


def _keep_gpu_drafter_eager(vllm_config: VllmConfig) -> None:
    """vLLM captures the drafter's CUDA graphs into the target's graph pool and on the target's
    capture stream (so with its cuBLAS workspace), which assumes graphs replay one at a time; on
    the side stream they replay during the target's. Until the drafter has a pool of its own and
    is captured on the side stream, it runs eager (RFC.md §2.2, Lanes)."""
    spec = vllm_config.speculative_config
    method = method_of(spec)
    if method.overlaps and method.runs_model and not spec.enforce_eager:
        logger.info("MineDraft: the in-process drafter runs eager on GPU (speculative enforce_eager=True).")
        spec.enforce_eager = True


def _check_depth_table(vllm_config: VllmConfig) -> None:
    """vLLM's ``num_speculative_tokens_per_batch_size`` runs as in vLLM (its scheduler looks the
    depth up per step; a deferred call keeps the depth of its step), except with what chooses the
    depth otherwise."""
    settings = MineDraftSettings.of(vllm_config)
    if settings.speculation_depth in ("auto", "step"):
        raise MineDraftConfigError(
            f"num_speculative_tokens_per_batch_size and speculation_depth={settings.speculation_depth} both "
            "choose the depth of each step: drop one of them.")


def _check_hybrid(spec: Any) -> None:
    """The second draft source (config/hybrid.py) beside a model drafter whose drafts are verified as
    one-hot, as a lookup source's are: a request's drafts come from either, one rejection sampler for both."""
    method = method_of(spec)
    if not method.runs_model:
        raise MineDraftConfigError(
            f"hybrid drafts beside a model drafter; method {spec.method!r} runs none: use a lookup method "
            "(suffix, ngram) alone, or a draft model, EAGLE or MTP with hybrid.")
    sampling = (getattr(spec, "draft_sample_method", "greedy"), getattr(spec, "rejection_sample_method", "standard"))
    if sampling != ("greedy", "standard"):
        raise MineDraftConfigError(
            f"hybrid with draft_sample_method={sampling[0]!r} and rejection_sample_method={sampling[1]!r}: "
            "lookup drafts have no draft probabilities to verify with; use the defaults (greedy, standard).")


def _check_num_spec_tokens(k: Any) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise MineDraftConfigError(f"num_speculative_tokens must be a positive integer, got {k!r}.")

