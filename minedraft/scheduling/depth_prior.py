"""What ``auto`` knows of speculation depth before it measures: the depths no acceptance can make pay.

A step at depth k' verifies k' + 1 tokens per request and, with a draft model
on the target's hardware, runs k' draft forwards before it. Each draft
forward costs at least ``c`` target forwards, ``c`` the ratio of the weights a
token multiplies through in the draft and in the target (the decoder layers
and the LM head; the input embedding is a lookup), and verifying k' + 1
tokens costs at least one target forward. So even with every draft accepted
a step at depth k' gives at most

    (k' + 1) / (1 + k' * c)

times the tokens per second of depth 0 (speculation off). A same-shaped draft
(c = 1) can never pay, whatever it predicts; a draft of a tenth of the
target's weights is bounded only at 3.2x for k' = 3. The bound is optimistic
for speculation (per-forward overheads, a less efficient smaller model, a
verification dearer than one forward all lower the real gain), so what it
rules out is safe to rule out: the depth controller starts at the deepest depth
it does not rule out (0 where it rules out every depth), and the ratio is its
step-cost model's prior for a draft forward until steps measure one.

No prior (nothing ruled out) where the bound does not hold or is not known:
methods without a draft model of their own (ngram and suffix draft on the
CPU, almost free; EAGLE and MTP heads are small), a drafter on hardware of its
own (its forwards leave the target's), mode ``parallel`` (its steps overlap the
draft forwards with verification; the scheduler asks only in ``auto``, whose
prior keeps steps plain on shared hardware), a draft in another dtype or
quantization, or a config whose shape is not a dense decoder the cost model's
``ModelShape`` can count (mixture-of-experts: measure).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minedraft.config.methods import method_of
from minedraft.cost_model.profile import ModelShape, draft_cost_ratio

# Keys of Hugging Face configs that mark a mixture of experts (the active weights per token
# would need the routing): no count, no prior.
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")


def dense_shape(config: Mapping[str, Any]) -> ModelShape | None:
    """The cost model's shape of a dense decoder from its Hugging Face config (its
    ``read_params_b``: the weights a token multiplies through, layers and LM head), or
    None: a mixture of experts, or a config that does not say its shape."""
    if any(config.get(key) for key in _EXPERT_KEYS):
        return None
    try:
        shape = ModelShape.from_config(str(config.get("model_type", "model")), config)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return shape if shape.read_params_b > 0 else None


def cost_ratio(target_config: Any, draft_config: Any) -> float | None:
    """``c``: a draft forward's weights over the target's (vLLM ``ModelConfig``s), or None."""
    if target_config.dtype != draft_config.dtype or target_config.quantization != draft_config.quantization:
        return None
    target = dense_shape(target_config.hf_text_config.to_dict())
    draft = dense_shape(draft_config.hf_text_config.to_dict())
    return draft_cost_ratio(draft, target) if target and draft else None


def max_gain(depth: int, cost_ratio: float) -> float:
    """The most depth ``depth`` can give over depth 0, every draft accepted: ``(k'+1) / (1 + k'c)``."""
    return (depth + 1) / (1 + depth * cost_ratio)


def ruled_out_depths(max_depth: int, cost_ratio: float | None, margin: float) -> frozenset[int]:
    """Depths 1..``max_depth`` that cannot beat depth 0 by ``margin`` at any acceptance."""
    if cost_ratio is None:
        return frozenset()
    return frozenset(d for d in range(1, max_depth + 1) if max_gain(d, cost_ratio) <= 1 + margin)


def speculative_cost_ratio(vllm_config: Any, placement: str) -> float | None:
    """``c`` for an engine's speculative config where the bound holds (see the module), else None."""
    spec = vllm_config.speculative_config
    if not method_of(spec).weight_bound or placement == "dedicated":
        return None
    return cost_ratio(vllm_config.model_config, spec.draft_model_config)
