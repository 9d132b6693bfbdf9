"""Speculative configurations that MineDraft runs on its stock path, and why.

MineDraft never refuses a speculative configuration that vLLM runs. Where its
overlap does not cover one yet, the engine takes MineDraft's stock path: its
scheduler in mode ``stock`` (every step is plain speculative decoding,
scheduled by vLLM's own code and counted in the ``minedraft:*`` metrics) and
vLLM's own worker, so the drafter runs exactly as in vLLM. The front end says
why in one INFO line (``engine_arguments.settle_selected_config``).

The overlap covers a drafter whose ``propose`` call the deferred job carries
one step later (``worker/runner_mixin.py``), checked on the kit's checkpoints:
exact and accepting as many drafts as stock SD (tests/e2e/test_overlapped_methods.py).
Those are vLLM's draft-model and EAGLE-family proposers on their padded path,
parallel drafting included (PARD, P-EAGLE), MTP (the same proposer as EAGLE),
Medusa, DFlash, the n-gram drafter, and suffix decoding (its call sees a view
of its step's batch: worker/suffix_batch.py). Any other method (a user's own
proposer, ``custom_class``; DSpark, not tried here) and the configurations
below stay here.
"""

from __future__ import annotations

from typing import Any

from minedraft.config.methods import method_of, names_where
from minedraft.registry import PROPOSER_QUALNAME

def is_process_drafter(spec: Any) -> bool:
    """The front end gave the target vLLM's ``custom_class`` method with MineDraft's proposer."""
    return method_of(spec).custom and spec.model == PROPOSER_QUALNAME


def not_overlapped_reason(vllm_config: Any) -> str | None:
    """Why this configuration cannot overlap yet (one clause), or None where it can."""
    spec = vllm_config.speculative_config
    if not is_process_drafter(spec) and not method_of(spec).overlaps:
        return (f"speculative method {spec.method!r}: MineDraft's deferred draft call is checked for "
                f"{', '.join(names_where('overlaps'))} so far")
    if vllm_config.parallel_config.data_parallel_size > 1 and vllm_config.model_config.is_moe:
        # A dense model's ranks are independent engines (vLLM's EngineCoreProc per rank), each with
        # MineDraft's scheduler and worker; a MoE model's step in lockstep (DPEngineCoreProc).
        return ("data parallelism with a mixture-of-experts model: its ranks step in lockstep, idle ones "
                "with dummy batches, which MineDraft's deferred drafts are not tested with")
    kv_transfer = vllm_config.kv_transfer_config
    if kv_transfer is not None and kv_transfer.kv_connector:
        # vLLM saves a step's draft-layer KV with the target's (its runner finalizes the save after the
        # drafter); a prefill step's draft pass deferred past that save would be missing from the store.
        return (f"KV connector {kv_transfer.kv_connector}: it stores a prefill step's draft-layer KV in that "
                "step, which MineDraft would draft later")
    if spec.disable_padded_drafter_batch:
        return "disable_padded_drafter_batch: that drafter path reads the runner's host-side sampled tokens of its step"
    if vllm_config.device_config.device_type == "cuda":
        return _gpu_stock_path_reason(vllm_config)
    return None


def _gpu_stock_path_reason(vllm_config: Any) -> str | None:
    """What the GPU side-stream lane's design does not cover yet (RFC.md §2.2 and §7)."""
    # Tensor parallelism is not here: its in-process drafter drafts on the serial lane, as on CPU
    # (engine_arguments.lane_for_tensor_parallelism), and the process drafter talks to rank 0 alone.
    if vllm_config.parallel_config.enable_dbo:
        return "dual-batch overlap (--enable-dbo) splits the batch that MineDraft's groups split"
    backend = vllm_config.attention_config.backend
    if backend is not None and "FLASHINFER" in str(backend).upper():
        return ("the FlashInfer attention backend synchronises the host in every draft metadata build, "
                "which would serialise the lanes (FLASH_ATTN or TRITON_ATTN overlap)")
    if vllm_config.model_config.is_hybrid:
        return "a hybrid (attention + Mamba) model: the lane does not carry its state yet"
    return None
