"""A drafter call captured in one step and replayed on the draft lane in the next.

vLLM's model runner reuses its input buffers every step (input ids, positions,
block tables, slot mappings), so the arguments of a deferred ``propose`` call
are copied when it is captured. The drafter's own buffers are only touched by
the replay, which runs on one lane at a time.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
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
    if isinstance(value, list):
        if _atoms_only(value):
            return value[:]
        return [row[:] for row in value] if _rows_of_atoms(value) else [snapshot(v) for v in value]
    if isinstance(value, tuple):
        return value if _atoms_only(value) else tuple(snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {name: snapshot(getattr(value, name)) for name in _init_fields(type(value))}
        return dataclasses.replace(value, **changes)
    return value


def snapshot_nbytes(value: Any) -> int:
    """What :func:`snapshot` of ``value`` would copy, in bytes."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return 0 if _atoms_only(value) or _rows_of_atoms(value) else sum(snapshot_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(snapshot_nbytes(v) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(snapshot_nbytes(getattr(value, name)) for name in _init_fields(type(value)))
    return 0


# Immutable scalars: a list of them, or a list of such lists, is copied without a call per element
# (the sampling metadata's token ids: a list per request as long as its output, and a list per
# slot of the persistent batch, max_num_seqs of them).
_ATOMS = frozenset((int, float, bool, str, bytes, type(None)))


def _atoms_only(items: list | tuple) -> bool:
    return set(map(type, items)) <= _ATOMS


def _rows_of_atoms(items: list | tuple) -> bool:
    return set(map(type, items)) == {list} and set(map(type, itertools.chain.from_iterable(items))) <= _ATOMS


@functools.cache
def _init_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


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
