"""What MineDraft can run, checked in the front-end process before any model loads.

Every rejection is a :class:`MineDraftConfigError` whose message is one line
that says what is wrong and what to do instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.config import VllmConfig

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.settings import MineDraftSettings
from minedraft.log import get_logger
from minedraft.registry import PROPOSER_QUALNAME

__all__ = ["MineDraftConfigError", "validate_engine_args", "validate_vllm_config"]

logger = get_logger(__name__)

MODEL_METHODS = ("draft_model", "eagle", "eagle3")  # the drafter is a model in the target's worker
SUPPORTED_METHODS = (*MODEL_METHODS, "ngram")
MAX_SPEC_TOKENS = 16


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
    method = _get(spec, "method")
    if method is not None and method not in SUPPORTED_METHODS:
        raise MineDraftConfigError(
            f"speculative method {method!r} is not supported yet; supported: "
            f"{', '.join(SUPPORTED_METHODS)}."
        )
    k = _get(spec, "num_speculative_tokens")
    if k is not None:
        _check_num_spec_tokens(k)
    _check_draft_sampling(_get(spec, "draft_sample_method", "greedy"))
    _check_drafting_path(_get(spec, "parallel_drafting"), _get(spec, "disable_padded_drafter_batch"))
    if (engine_args.pipeline_parallel_size or 1) > 1:
        raise MineDraftConfigError(
            "pipeline parallelism (pipeline_parallel_size > 1) is not supported; "
            "use tensor parallelism or drop --scheduler-cls minedraft."
        )
    if (engine_args.data_parallel_size or 1) > 1:
        raise MineDraftConfigError(
            "data parallelism (data_parallel_size > 1) is not supported yet; "
            "run one MineDraft engine per replica."
        )
    return settings


def validate_vllm_config(vllm_config: VllmConfig) -> None:
    """Checks that need vLLM's resolved config (the inferred spec method, ...)."""
    spec = vllm_config.speculative_config
    if spec is None:
        raise MineDraftConfigError(
            "--scheduler-cls minedraft needs --speculative-config; none was given."
        )
    if spec.method == "custom_class" and spec.model == PROPOSER_QUALNAME:
        pass  # MINEDRAFT_DRAFTER=process: the draft model runs in its own engine (minedraft/process_drafter/)
    elif spec.method not in SUPPORTED_METHODS:
        raise MineDraftConfigError(
            f"speculative method {spec.method!r} is not supported yet; supported: "
            f"{', '.join(SUPPORTED_METHODS)}."
        )
    _check_num_spec_tokens(spec.num_speculative_tokens)
    _check_draft_sampling(spec.draft_sample_method)
    _check_drafting_path(spec.parallel_drafting, spec.disable_padded_drafter_batch)
    if spec.num_speculative_tokens_per_batch_size:
        _check_depth_table(vllm_config)
    if vllm_config.parallel_config.pipeline_parallel_size > 1:
        raise MineDraftConfigError("pipeline parallelism (pipeline_parallel_size > 1) is not supported.")
    if vllm_config.parallel_config.data_parallel_size > 1:
        raise MineDraftConfigError("data parallelism (data_parallel_size > 1) is not supported yet.")
    if vllm_config.model_config.runner_type != "generate":
        raise MineDraftConfigError(
            f"only generative models are supported, not runner {vllm_config.model_config.runner_type!r}."
        )
    if vllm_config.device_config.device_type == "cuda":
        _check_gpu_config(vllm_config)
        _keep_gpu_drafter_eager(vllm_config)


def _keep_gpu_drafter_eager(vllm_config: VllmConfig) -> None:
    """vLLM captures the drafter's CUDA graphs into the target's graph pool and on the target's
    capture stream (so with its cuBLAS workspace), which assumes graphs replay one at a time; on
    the side stream they replay during the target's. Until the drafter has a pool of its own and
    is captured on the side stream, it runs eager (RFC.md §2.2, Lanes)."""
    spec = vllm_config.speculative_config
    if spec.method in MODEL_METHODS and not spec.enforce_eager:
        logger.info("MineDraft: the in-process drafter runs eager on GPU (speculative enforce_eager=True).")
        spec.enforce_eager = True


def _check_gpu_config(vllm_config: VllmConfig) -> None:
    """What the GPU side-stream lane's design does not cover yet (RFC.md §2.2 and §7)."""
    # Tensor parallelism is not here: its in-process drafter drafts on the serial lane, as on CPU
    # (selection.lane_for_tensor_parallelism), and the process drafter talks to rank 0 alone.
    parallel = vllm_config.parallel_config
    if parallel.enable_dbo:
        raise MineDraftConfigError("dual-batch overlap (--enable-dbo) is not supported with MineDraft.")
    kv_transfer = vllm_config.kv_transfer_config
    if kv_transfer is not None and getattr(kv_transfer, "kv_connector", None):
        raise MineDraftConfigError("KV connectors (--kv-transfer-config) are not supported with MineDraft yet.")
    backend = vllm_config.attention_config.backend
    if backend is not None and "FLASHINFER" in str(backend).upper():
        raise MineDraftConfigError(
            "the FlashInfer attention backend synchronises the host in every draft metadata build, which "
            "serialises the lanes: use FLASH_ATTN or TRITON_ATTN with MineDraft.")
    if vllm_config.model_config.is_hybrid:
        raise MineDraftConfigError("hybrid (attention + Mamba) models are not supported with MineDraft yet.")


def _check_depth_table(vllm_config: VllmConfig) -> None:
    """vLLM's ``num_speculative_tokens_per_batch_size`` runs as in vLLM (its scheduler looks the
    depth up per step; a deferred call keeps the depth of its step), except with what chooses the
    depth otherwise."""
    settings = MineDraftSettings.of(vllm_config)
    if settings.speculation_depth == "auto":
        raise MineDraftConfigError(
            "num_speculative_tokens_per_batch_size and speculation_depth=auto both choose the depth of each "
            "step: drop one of them.")


def _check_num_spec_tokens(k: Any) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPEC_TOKENS:
        raise MineDraftConfigError(
            f"num_speculative_tokens must be an integer in 1..{MAX_SPEC_TOKENS}, got {k!r}."
        )


def _check_drafting_path(parallel_drafting: Any, disable_padded_drafter_batch: Any) -> None:
    """The deferred propose call is the padded-batch, one-draft-per-step path of vLLM's
    EAGLE/draft-model proposer; the two variants below take other inputs from the runner."""
    if parallel_drafting:
        raise MineDraftConfigError(
            "parallel_drafting (P-EAGLE) is not supported with MineDraft; drop it from --speculative-config.")
    if disable_padded_drafter_batch:
        raise MineDraftConfigError(
            "disable_padded_drafter_batch is not supported with MineDraft (its drafter reads the runner's "
            "host-side sampled tokens); drop it from --speculative-config.")


def _check_draft_sampling(method: Any) -> None:
    # Probabilistic drafts hand their probabilities to the rejection sampler
    # through the runner's per-step cache, which a deferred draft bypasses:
    # verifying them as one-hot drafts would bias the output distribution.
    if method not in (None, "greedy"):
        raise MineDraftConfigError(
            f"draft_sample_method {method!r} is not supported yet; use 'greedy' (the default)."
        )
