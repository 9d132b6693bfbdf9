"""The target's side of a DFlash drafter's context: hidden-state rows captured, not yet sent.

Each step the target's runner captures, per request, the rows of its
auxiliary hidden states that are now context (the prompt tokens it computed,
and in a decode the token it was given and the drafts it accepted) and adds
them here (``add``). The next job sent carries all of them, in order, with the
releases before them (``take``). Unlike token histories they cannot be sent
again later: a request whose context the drafter lost (``forget``, from a
reply's ``resync``) gets no more drafts and sends no more rows until it is
released (finished, or preempted: it then starts again from its first token).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

# One request's rows in a job (process_drafter/target/step_context.py).
Entry = list  # [request id, first position, rows, their tokens, the prefix or None]


@dataclass
class ContextQueue:
    entries: list[Entry] = field(default_factory=list)
    rows: list[torch.Tensor] = field(default_factory=list)  # one tensor per entry
    at_drafter: set[str] = field(default_factory=set)  # requests whose context the drafter has (or will)
    lost: set[str] = field(default_factory=set)
    released: list[str] = field(default_factory=list)

    def add(self, entries: Iterable[Entry], rows: Iterable[torch.Tensor]) -> None:
        for entry, part in zip(entries, rows):
            if entry[0] in self.lost or entry[2] == 0:
                continue
            self.entries.append(entry)
            self.rows.append(part)
            self.at_drafter.add(entry[0])

    def take(self) -> tuple[list[str], list[Entry], torch.Tensor | None]:
        """The releases, then the entries and their rows (None: none), for the next job."""
        released, self.released = self.released, []
        entries, rows, self.entries, self.rows = self.entries, self.rows, [], []
        return released, entries, (torch.cat(rows) if rows else None)

    def release(self, req_ids: Iterable[str]) -> None:
        gone = set(req_ids)
        self._drop(gone)
        self.lost -= gone
        self.released += sorted(gone & self.at_drafter)
        self.at_drafter -= gone

    def forget(self, req_ids: Iterable[str]) -> None:
        """The drafter dropped these: no drafts and no rows for them until they are released."""
        lost = set(req_ids)
        self._drop(lost)
        self.lost |= lost
        self.at_drafter -= lost

    def _drop(self, req_ids: set[str]) -> None:
        kept = [(e, r) for e, r in zip(self.entries, self.rows) if e[0] not in req_ids]
        self.entries, self.rows = [e for e, _ in kept], [r for _, r in kept]
