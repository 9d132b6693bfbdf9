"""Faults injected by wrapping, for the e2e tests: MineDraft's CPU worker as ``worker_cls``.

MINEDRAFT_INJECT_FAULT (comma-separated) names the faults:

* ``draft_lane``: every deferred draft job fails on the draft lane;
* ``draft_lane_stall``: every deferred draft job first appends a line to
  MINEDRAFT_FAULT_MARKER, then sleeps MINEDRAFT_FAULT_STALL_S (default 5);
* ``draft_lane_hang_rank1``: under tensor parallelism, rank 1's first deferred draft job never
  returns; the other ranks wait for it inside their next collective;
* ``drafter_stall``, ``drafter_exit``: the process drafter's engine is late or
  exits (fault_draft_engine.py, which this worker starts in its place).

:data:`FAULT_WORKER` is the worker for engine arguments; :func:`run_with_faults`
runs harness.sidebyside's workload through it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from harness.sidebyside import run_mode
from minedraft.config import environment
from minedraft.process_drafter.target.proposer import ProcessDrafterProposer
from minedraft.worker.cpu_worker import MineDraftCPUWorker
from minedraft.worker.in_process.draft_job import DraftJob
from tests.e2e.fault_draft_engine import DRAFTER_FAULTS, injected_faults, stall_s

FAULT_WORKER = "tests.e2e.fault_injection.FaultInjectingCPUWorker"
FAULT_DRAFT_ENGINE = ("-m", "tests.e2e.fault_draft_engine")


def inject_job_faults(source: Any, faults: frozenset[str], rank: int = 0) -> None:
    """``source``'s deferred jobs fail (``draft_lane``) or stall first (``draft_lane_stall``): its
    ``_run``, which ``start`` calls, runs a faulty job in place of each."""
    run = source._run

    def run_faulty(job: DraftJob | None) -> None:
        run(job if job is None else _faulty(job, faults, rank))

    source._run = run_faulty


def _faulty(job: DraftJob, faults: frozenset[str], rank: int) -> DraftJob:
    if "draft_lane" in faults:
        return DraftJob(job.req_ids, _raise_injected_fault, (), {})
    if "draft_lane_hang_rank1" in faults and rank == 1:
        return DraftJob(job.req_ids, _hang, (), {})
    if "draft_lane_stall" in faults:
        return DraftJob(job.req_ids, _stalled(job.propose), job.args, job.kwargs)
    return job


def _raise_injected_fault():
    raise RuntimeError("injected draft-lane fault (MINEDRAFT_INJECT_FAULT=draft_lane)")


def _hang():
    threading.Event().wait()  # for ever: only the end of the process ends it


def _stalled(propose):
    def stalled(*args, **kwargs):
        marker = environment.get("MINEDRAFT_FAULT_MARKER")
        if marker:
            with open(marker, "a") as f:
                f.write("draft job started\n")
        time.sleep(stall_s())  # the fault itself: a job still running when the engine shuts down
        return propose(*args, **kwargs)

    return stalled


class FaultInjectingCPUWorker(MineDraftCPUWorker):
    def init_device(self) -> None:
        super().init_device()
        inject_job_faults(self.model_runner.draft_source, injected_faults(), self.rank)

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        drafter = self.model_runner.drafter
        if isinstance(drafter, ProcessDrafterProposer) and injected_faults() & DRAFTER_FAULTS:
            drafter.engine_entry = FAULT_DRAFT_ENGINE  # its faults happen in the draft engine's process
        super().load_model(*args, **kwargs)


def run_with_faults(faults: str, mode: str, target: str, draft: str, *, env: dict | None = None,
                    **kwargs: Any) -> dict:
    """harness.sidebyside's workload (``run_mode``'s keyword arguments) through this worker."""
    return run_mode(mode, target, draft, worker_cls=FAULT_WORKER,
                    env={**(env or {}), "MINEDRAFT_INJECT_FAULT": faults}, **kwargs)
