"""The front end's part of the process drafter: the target engine gets a proposer, the drafter its engine.

The user's ``--speculative-config`` names the draft model as for vLLM's
``draft_model`` method. With ``MINEDRAFT_DRAFTER=process`` the target engine
is given vLLM's ``custom_class`` method instead, with
:class:`~minedraft.process_drafter.target.proposer.ProcessDrafterProposer` as the class: the
target's worker then loads no draft model and allocates no KV cache for one.
The draft model's own arguments become the draft engine's (``LLM`` keyword
arguments, carried to the worker in ``additional_config``).
"""

from __future__ import annotations

from typing import Any

from minedraft.config.environment import inherited
from minedraft.config.errors import MineDraftConfigError
from minedraft.config.methods import DEFAULT_METHOD, method_named
from minedraft.config.drafter_device import DrafterDevice, named_cores
from minedraft.log import get_logger
from minedraft.registry import DRAFT_ENGINE_KEY, DRAFT_SCHEDULER_QUALNAME, PROPOSER_QUALNAME

logger = get_logger(__name__)

# Keys of the speculative config that describe the draft model: they go to the draft engine.
DRAFT_MODEL_KEYS = ("model", "method", "revision", "code_revision", "quantization", "max_model_len",
                    "draft_tensor_parallel_size", "tensor_parallel_size", "enforce_eager", "kv_cache_dtype",
                    "attention_backend", "moe_backend")


def select_process_drafter(engine_args: Any, settings: Any) -> None:
    """Rewrite ``engine_args.speculative_config`` for a process drafter; store the draft engine's arguments."""
    spec = dict(engine_args.speculative_config)
    device = DrafterDevice.parse(settings.drafter_device)
    refuse_before_config(spec, engine_args, device)
    if device.kind == "cpu":
        _warn_if_target_uses_drafter_cores(device)
    k = spec["num_speculative_tokens"]
    if spec.pop("parallel_drafting", False):
        logger.info("MineDraft process drafter: %s drafts one token per forward in its engine, k forwards beside "
                    "the target's (parallel_drafting, k drafts from one forward with mask tokens, is vLLM's "
                    "in-worker drafter's way); a PARD model drafts either way.", spec["model"])
    engine_args.additional_config = {**(engine_args.additional_config or {}),
                                     DRAFT_ENGINE_KEY: draft_engine_kwargs(engine_args, spec, device)}
    target_spec = {key: value for key, value in spec.items() if key not in DRAFT_MODEL_KEYS}
    engine_args.speculative_config = {**target_spec, "method": "custom_class", "model": PROPOSER_QUALNAME,
                                      "num_speculative_tokens": k}
    logger.info("MineDraft process drafter: %s on %s, k=%d (the target engine loads no draft model)",
                spec["model"], device, k)


# The process drafter's refusals, all here: what the user's arguments show (refuse_before_config), and
# what only vLLM's resolved config shows (refuse_on_stock_path).


def refuse_before_config(spec: dict[str, Any], engine_args: Any, device: DrafterDevice) -> None:
    """One line for a speculative config or layout that the process drafter cannot serve, before any model loads."""
    name = spec.get("method") or DEFAULT_METHOD
    method = method_named(name)
    if not method.own_engine or not spec.get("model"):
        raise MineDraftConfigError(
            f"MINEDRAFT_DRAFTER=process runs a draft model in its own engine: the speculative method must be "
            f"'draft_model' (PARD included) or 'dflash', with a 'model', got method {name!r}, which "
            f"{method.stays_in_process}; use the in-process drafter (the default).")
    if method.sends_context and device.tensor_parallel_size > 1:
        raise MineDraftConfigError(
            f"MINEDRAFT_DRAFTER=process with a DFlash draft runs it on one device, got {device}: its engine "
            "is driven in the drafter's process (dflash_engine.py); give it one GPU or a set of cores.")
    if method.sends_context and (engine_args.tensor_parallel_size or 1) > 1:
        # Only rank 0 talks to the drafter and would capture the hidden states; the other ranks' models
        # would differ from its (compiled all-reduce fusions see the extra outputs), which must not be.
        raise MineDraftConfigError(
            "MINEDRAFT_DRAFTER=process with a DFlash draft and a tensor-parallel target is not supported: "
            "use the in-process drafter (the default) with --tensor-parallel-size.")
    if spec.get("draft_sample_method") not in (None, "greedy"):
        # Its drafts would be verified one-hot: exact, but a sampled token is accepted far less often.
        raise MineDraftConfigError(
            f"MINEDRAFT_DRAFTER=process returns draft tokens, not the probabilities that draft_sample_method "
            f"{spec['draft_sample_method']!r} needs: drop the process drafter or use 'greedy'.")
    if (engine_args.data_parallel_size or 1) > 1:
        raise MineDraftConfigError(
            "MINEDRAFT_DRAFTER=process with data parallelism: every rank would start a draft engine on the one "
            "drafter_device; use the in-process drafter (the default) with --data-parallel-size.")
    if device.kind == "cuda" and 0 in device.indices:
        raise MineDraftConfigError(
            f"MINEDRAFT_DRAFTER_DEVICE={device} shares GPU 0 with the target; give the drafter a GPU of its own.")


def refuse_on_stock_path(reason: str) -> None:
    """The process drafter has no stock path (vLLM's worker has no draft engine): where MineDraft's
    would run (``reason``: config/overlap_coverage.py), one line."""
    raise MineDraftConfigError(
        f"MINEDRAFT_DRAFTER=process cannot serve this configuration ({reason}): drop the process drafter.")


def draft_engine_kwargs(engine_args: Any, spec: dict[str, Any], device: DrafterDevice) -> dict[str, Any]:
    """``LLM`` keyword arguments of the draft engine: the draft model, the target's numerics. A DFlash
    draft's engine is the target's config without its layers, with the user's DFlash speculative
    config (dflash_engine.py)."""
    if method_named(spec.get("method")).sends_context:
        return _dflash_engine_kwargs(engine_args, spec, device)
    kwargs = {
        "model": spec["model"],
        "revision": spec.get("revision"),
        "code_revision": spec.get("code_revision"),
        "quantization": spec.get("quantization"),
        "max_model_len": spec.get("max_model_len") or engine_args.max_model_len,
        "dtype": engine_args.dtype,
        "seed": engine_args.seed if engine_args.seed is not None else 0,
        "trust_remote_code": engine_args.trust_remote_code,
        "load_format": engine_args.load_format,  # vLLM's in-worker drafter loads as the target does
        "enforce_eager": spec.get("enforce_eager", engine_args.enforce_eager),
        "block_size": engine_args.block_size,
        "max_num_seqs": engine_args.max_num_seqs,
        "tensor_parallel_size": device.tensor_parallel_size,
        # Each request is a draft session whose KV stays between jobs and rolls back to the
        # tokens the target accepted (sessions.py); rewritten KV must not sit in a prefix cache.
        "enable_prefix_caching": False,
        "scheduler_cls": DRAFT_SCHEDULER_QUALNAME,
        "async_scheduling": False,
        "skip_tokenizer_init": True,  # token ids in, token ids out
    }
    if device.kind == "cuda":
        kwargs["gpu_memory_utilization"] = engine_args.gpu_memory_utilization
    return {key: value for key, value in kwargs.items() if value is not None}


def _dflash_engine_kwargs(engine_args: Any, spec: dict[str, Any], device: DrafterDevice) -> dict[str, Any]:
    draft = {key: spec[key] for key in ("model", "revision", "code_revision", "quantization") if spec.get(key)}
    kwargs = {
        "model": engine_args.model,
        "revision": engine_args.revision,
        "tokenizer": engine_args.tokenizer,
        "speculative_config": {**draft, "method": "dflash", "num_speculative_tokens": spec["num_speculative_tokens"]},
        "max_model_len": spec.get("max_model_len") or engine_args.max_model_len,  # drafts reach no further
        "dtype": engine_args.dtype,
        "seed": engine_args.seed if engine_args.seed is not None else 0,
        "trust_remote_code": engine_args.trust_remote_code,
        "enforce_eager": spec.get("enforce_eager", engine_args.enforce_eager),
        "block_size": engine_args.block_size,
        "max_num_seqs": engine_args.max_num_seqs,
        "max_num_batched_tokens": engine_args.max_num_batched_tokens,
        "enable_prefix_caching": False,  # its scheduler never gets a request
        "async_scheduling": False,
        "skip_tokenizer_init": True,
    }
    if device.kind == "cuda":
        kwargs["gpu_memory_utilization"] = engine_args.gpu_memory_utilization
    return {key: value for key, value in kwargs.items() if value is not None}


def _warn_if_target_uses_drafter_cores(device: DrafterDevice) -> None:
    """One warning where the target may compute on the drafter's cores: its binding unset, or a list that holds
    them (the target's worker then stays unbound: worker/target_cores.py). Per-rank lists and ``nobind`` are
    the user's own placement."""
    bind = inherited("VLLM_CPU_OMP_THREADS_BIND") or "auto"
    cores = named_cores()
    if (cores is None and bind in ("auto", "all")) or (cores is not None and set(cores) & set(device.indices)):
        logger.warning(
            "MineDraft process drafter on %s, but the target's OpenMP threads may use its cores "
            "(VLLM_CPU_OMP_THREADS_BIND=%s): bind the target elsewhere (e.g. VLLM_CPU_OMP_THREADS_BIND=0) "
            "so the two do not share cores.", device, bind)
