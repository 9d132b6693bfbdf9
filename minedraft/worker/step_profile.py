"""Per-step timing of the two lanes, written as JSON lines (measurements only).

Enabled by ``MINEDRAFT_STEP_PROFILE=PATH`` in the worker process. One line per
step that had work on either lane:

* ``main_s``: the main lane's work (target forward, rejection sampling,
  bookkeeping, inline drafting in fallback steps) until it joins the lane;
* ``draft_s``: the deferred draft job's own duration on the draft lane;
* ``step_s``: ``execute_model`` start to drafts returned (lane joined);
* ``num_verified`` / ``num_draft_only``: requests on each lane;
* ``target_at`` / ``target_s`` and ``draft_at``: when the runner's own ``execute_model`` (the target's
  forward, sampling and inline drafting) and the deferred draft job started, in seconds after the step
  began, and how long the first lasted: the two lanes' intervals, which overlap in time where the lane
  runs beside the target (tests/e2e/test_overlap_in_time.py).

A step at speculation depth 0 with no draft job is not written: the engine
core does not collect drafts after it (monkeypatch/patch_draft_collection.py),
and the row ends there.

With the serial lane the job runs before the main lane's work, so
``main_s - draft_s`` is T_verify alone and ``draft_s`` is T_draft alone; with
the overlap lane ``step_s`` is the overlapped step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any


class StepProfiler:
    def __init__(self, path: str):
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._row: dict[str, Any] = {}

    def begin(self, num_verified: int, num_draft_only: int, parallel: bool) -> None:
        self._row = {"start": time.perf_counter(), "num_verified": num_verified,
                     "num_draft_only": num_draft_only, "parallel": parallel, "draft_s": 0.0}

    def timed(self, job: Callable[[], Any]) -> Callable[[], Any]:
        """``job`` that records when it ran (it runs on the draft lane)."""
        row = self._row

        def run():
            started = time.perf_counter()
            row["draft_at"] = started - row["start"]
            try:
                return job()
            finally:
                row["draft_s"] = time.perf_counter() - started

        return run

    def target(self, execute: Callable[[], Any]) -> Any:
        """Runs the target's part of the step (vLLM's ``execute_model``), recording when it ran."""
        started = time.perf_counter()
        try:
            return execute()
        finally:
            if self._row:
                self._row["target_at"] = started - self._row["start"]
                self._row["target_s"] = time.perf_counter() - started

    def main_lane_done(self) -> None:
        if self._row and "main_s" not in self._row:
            self._row["main_s"] = time.perf_counter() - self._row["start"]

    def end(self) -> None:
        row, self._row = self._row, {}
        if not row:
            return
        row["step_s"] = time.perf_counter() - row.pop("start")
        row.setdefault("main_s", row["step_s"])
        self._file.write(json.dumps(row) + "\n")

    def close(self) -> None:
        self._file.close()
