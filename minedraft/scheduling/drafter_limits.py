"""Where vLLM's drafter drafts: the depth it is asked for, and the lengths within which it drafts at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minedraft.config.methods import method_of


class ChosenDepth:
    """vLLM's per-step depth lookup (``Scheduler.dynamic_sd_lookup``), answering the policy's depth.

    vLLM's scheduler reads ``dynamic_sd_lookup[number of scheduled requests]`` into
    ``SchedulerOutput.num_spec_tokens_to_schedule``, which its runner passes to the drafter as the depth of
    the drafts it makes at the end of the step. Being set (not None) also stops vLLM from padding a resumed
    request's first decode with K placeholder drafts, which the target would verify and reject at any depth
    below K.
    """

    def __init__(self, depth: Callable[[], int]) -> None:
        self._depth = depth

    def __getitem__(self, num_scheduled_requests: int) -> int:
        return self._depth()


def speculative_max_len(vllm_config: Any) -> int | None:
    """The speculative config's max_model_len where it is below the target's (vLLM sets it no higher)."""
    spec = vllm_config.speculative_config
    length = getattr(spec, "max_model_len", None) if spec is not None else None
    if length is None or length >= vllm_config.model_config.max_model_len:
        return None
    return length


def drafter_room(vllm_config: Any) -> int:
    """The longest sequence after which vLLM's runner still drafts: the drafter's max_model_len (the
    speculative max_model_len where set, else the target's) less the tokens its query adds (K, and DFlash's
    bonus token), as ``GPUModelRunner._input_fits_in_drafter`` reads them."""
    spec = vllm_config.speculative_config
    draft = spec.draft_model_config
    length = (draft.max_model_len if draft is not None and draft.max_model_len is not None
              else vllm_config.model_config.max_model_len)
    return length - spec.num_speculative_tokens - method_of(spec).query_extra
