"""A drafter call captured in one step and replayed on the draft lane in the next.

vLLM's model runner reuses its input buffers every step (input ids, positions,
block tables, slot mappings), so the arguments of a deferred ``propose`` call
are copied when it is captured. The drafter's own buffers are only touched by
the replay, which runs on one lane at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def snapshot(value: Any) -> Any:
    """A copy of ``value`` that later writes to the runner's buffers cannot change."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: snapshot(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snapshot(v) for v in value]
    if isinstance(value, tuple):
        return tuple(snapshot(v) for v in value)
    return value


def snapshot_nbytes(value: Any) -> int:
    """What :func:`snapshot` of ``value`` would copy, in bytes."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(snapshot_nbytes(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init)
    if isinstance(value, dict):
        return sum(snapshot_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(snapshot_nbytes(v) for v in value)
    return 0


@dataclass
class DraftJob:
    """``propose(*args, **kwargs)`` for the requests ``req_ids`` (batch order)."""

    req_ids: list[str]
    propose: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]

    @classmethod
    def capture(cls, req_ids: list[str], propose: Callable[..., Any], args: tuple, kwargs: dict) -> DraftJob:
        return cls(list(req_ids), propose, snapshot(args), snapshot(kwargs))

    @classmethod
    def completed(cls, req_ids: list[str], drafts: Any) -> DraftJob:
        """A job whose drafts were made at capture (inline): the lane only hands them over."""
        return cls(list(req_ids), _return, (drafts,), {})

    def run(self) -> tuple[list[str], Any]:
        """The drafts as the drafter returns them (a device tensor stays on
        the device: copying it to the host here would wait for the lane)."""
        return self.req_ids, self.propose(*self.args, **self.kwargs)


def _return(drafts: Any) -> Any:
    return drafts


def as_lists(drafts: Any) -> list[list[int]]:
    """Drafts (a tensor or a list of lists) as host lists, one per request."""
    if isinstance(drafts, torch.Tensor):
        drafts = drafts.tolist()
    return [list(d) for d in drafts]


def placeholder_drafts(num_reqs: int, num_spec_tokens: int, device: torch.device) -> torch.Tensor:
    """What the runner sees from a deferred ``propose``: never sent to the scheduler."""
    return torch.zeros(num_reqs, num_spec_tokens, dtype=torch.int64, device=device)
