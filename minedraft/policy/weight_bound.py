"""The depths no acceptance can make pay, from the draft's weights: what the policy knows before it measures.

A step at depth d verifies d + 1 tokens per request and, with a draft model on the target's hardware, runs
d draft forwards before it. Each draft forward costs at least ``c`` target forwards, ``c`` the ratio of the
weights a token multiplies through in the draft and in the target (the decoder layers and the LM head; the
input embedding is a lookup), and verifying d + 1 tokens costs at least one target forward. So even with every
draft accepted a step at depth d gives at most

    (d + 1) / (1 + d * c)

times the tokens per second of depth 0. A same-shaped draft (c = 1) can never pay; a draft of a tenth of the
target's weights is bounded only at 3.2x for d = 3. The bound is optimistic for speculation (per-forward
overheads, a smaller model's lower efficiency only lower the gain), so what it rules out is safe to rule out;
``c`` is also the step-cost model's prior for a draft forward until steps measure one.

No bound (nothing ruled out) where it does not hold or is not known: methods without a draft model of their
own (n-gram and suffix run on the CPU, almost free; EAGLE and MTP heads are small), a drafter on hardware of
its own, mode ``parallel`` (its steps overlap the draft's forwards with verification), a draft in another
dtype or quantization, or a config that is not a dense decoder (mixture-of-experts: measure).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minedraft.config.methods import method_of

# Keys of Hugging Face configs that mark a mixture of experts (the active weights per token would need the
# routing): no count, no bound.
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")


def layer_weights(config: Mapping[str, Any]) -> int:
    """The weights of one Llama/Qwen-style decoder layer from its Hugging Face config: attention (q, k, v, o)
    and gated MLP (gate, up, down); norms left out."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * int(config["intermediate_size"])


def weights_per_token(config: Mapping[str, Any]) -> int | None:
    """The weights a decode token multiplies through (the layers and the LM head), or None: a mixture of
    experts, or a config that does not say its shape."""
    if any(config.get(key) for key in _EXPERT_KEYS):
        return None
    try:
        weights = (int(config["num_hidden_layers"]) * layer_weights(config)
                   + int(config["hidden_size"]) * int(config["vocab_size"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return weights if weights > 0 else None


def draft_cost(target_config: Any, draft_config: Any) -> float | None:
    """``c``: a draft forward's weights over the target's (vLLM ``ModelConfig``s), or None."""
    if target_config.dtype != draft_config.dtype or target_config.quantization != draft_config.quantization:
        return None
    target = weights_per_token(target_config.hf_text_config.to_dict())
    draft = weights_per_token(draft_config.hf_text_config.to_dict())
    return draft / target if target and draft else None


def max_gain(depth: int, cost: float) -> float:
    """The most ``depth`` can give over depth 0, every draft accepted: ``(d + 1) / (1 + d c)``."""
    return (depth + 1) / (1 + depth * cost)


def ruled_out_depths(max_depth: int, cost: float | None, margin: float) -> frozenset[int]:
    """Depths 1..``max_depth`` that cannot beat depth 0 by ``margin`` at any acceptance."""
    if cost is None:
        return frozenset()
    return frozenset(d for d in range(1, max_depth + 1) if max_gain(d, cost) <= 1 + margin)


def engine_draft_cost(vllm_config: Any, dedicated: bool) -> float | None:
    """``c`` for an engine's speculative config where the bound holds (see the module), else None."""
    spec = vllm_config.speculative_config
    if not method_of(spec).weight_bound or dedicated:
        return None
    return draft_cost(vllm_config.model_config, spec.draft_model_config)
