"""A step that verifies no drafts samples as the target alone does.

With a speculative config, vLLM 0.32.0's runner sends every step through its
rejection sampler, also one where no request has a draft token (depth 0, chosen by
the depth controller or by ``num_speculative_tokens_per_batch_size``). There the
rejection sampler only samples each request's bonus token with vLLM's ``Sampler``,
over a copy of the same logits, and wraps it in bookkeeping: about 0.3 ms a step
on the 2-core CPU, 4-5 % of the kit's target step. Calling the ``Sampler`` directly
gives the same tokens (greedy: the same argmax; random: the same sampler on the same
logits), in the same ``[num_reqs, 1]`` int32 layout that vLLM's bookkeeping parses.

Kept on vLLM's path where the two differ beyond that: logprobs (the rejection
sampler computes them from processed or raw target logits in its own layout) and
the thinking-budget logits processor (told whether it predicts a bonus token).
"""

from __future__ import annotations

from typing import Any


def samples_as_target_alone(spec_decode_metadata: Any, sampling_metadata: Any) -> bool:
    """Whether a step with this spec-decode metadata may skip the rejection sampler."""
    if spec_decode_metadata is None or spec_decode_metadata.max_spec_len != 0:
        return False
    if sampling_metadata.max_num_logprobs is not None or sampling_metadata.logprob_token_ids:
        return False
    holder = getattr(sampling_metadata, "thinking_budget_state_holder", None)
    return holder is None or not holder.has_tracked_requests()
