"""The process drafter's engine with faults injected, for the e2e tests (never shipped).

Started instead of ``minedraft.process_drafter.draft_engine.engine`` by fault_injection.py's
worker: ``python -m tests.e2e.fault_draft_engine SPEC_JSON``. It is the draft
engine, with ``handle`` wrapped: MINEDRAFT_INJECT_FAULT (comma-separated)
names the faults, ``drafter_stall`` sleeps MINEDRAFT_FAULT_STALL_S (default 5)
in the engine's 3rd job, ``drafter_exit`` exits in its 12th. One is no fault but what a
clock cannot set: ``drafter_roomy`` gives ``draft_ahead: auto`` room for every step it
wants, so every job of several requests is answered at once with the drafts made ahead
(where timing allows, in a user's engine: draft_ahead.py).
"""

from __future__ import annotations

import os
import time

from minedraft.config import environment
from minedraft.process_drafter.draft_engine.draft_ahead import DraftAhead
from minedraft.process_drafter.draft_engine.engine import DraftEngine, main

DRAFTER_FAULTS = frozenset({"drafter_stall", "drafter_exit", "drafter_roomy"})
STALL_JOB, EXIT_JOB = 3, 12


def injected_faults() -> frozenset[str]:
    return frozenset((environment.get("MINEDRAFT_INJECT_FAULT") or "").split(",")) - {""}


def stall_s() -> float:
    return float(environment.get("MINEDRAFT_FAULT_STALL_S") or 5)


class RoomyDraftAhead(DraftAhead):
    def _room(self) -> int:
        return 1 << 20  # any gap holds every step: the job's depth and the guess


class FaultyDraftEngine(DraftEngine):
    def __init__(self, llm, k: int, ahead: str) -> None:
        super().__init__(llm, k, ahead)
        self.faults = injected_faults()
        self.jobs = 0
        if "drafter_roomy" in self.faults:
            self.ahead = RoomyDraftAhead(self.sessions.draft, ahead, self.max_model_len)

    def handle(self, job: dict) -> dict:
        self.jobs += 1
        if "drafter_stall" in self.faults and self.jobs == STALL_JOB:
            time.sleep(stall_s())  # the fault itself: a drafter late beyond the target's bound
        if "drafter_exit" in self.faults and self.jobs == EXIT_JOB:
            os._exit(3)
        return super().handle(job)


if __name__ == "__main__":
    main(FaultyDraftEngine)
