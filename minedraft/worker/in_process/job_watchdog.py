"""A bound on one draft job: past ``lane_timeout_s`` the worker ends with one error line.

A draft job that never returns (a collective another rank never joins, a drafter stuck in a
kernel) would otherwise hold its step until vLLM's execute timeout (300 s by default), and a
thread stuck inside a collective cannot be interrupted. The watchdog is one daemon thread per
worker, armed while a job runs: when a deadline passes it writes one line naming the worker and
SIGKILLs its process, so vLLM's executor sees a worker die and stops the engine at once ("Worker
proc ... died unexpectedly"), and nothing is left behind.

Arming writes the deadline and wakes nothing. Every deadline is set ``timeout_s`` after its
arming and the thread never sleeps longer than ``timeout_s``, so it wakes before any deadline it
has not seen and then sleeps until it: a deadline passed is seen at its time. Waking the thread at
each arming (a lock round trip and a notify, twice a job) cost about 0.15 ms a step of the kit's
5-6 ms steps (2026-12-05): the woken thread takes the GIL from the drafting one.

The draft source arms it twice: around the job (on the lane's thread) and around the join (on the
worker's). On the CUDA lane the job returns once its kernels are enqueued, so a side stream that
never finishes is seen only at the join; on the thread lane the join's arming replaces the job's
with a later deadline, which still bounds the wait.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from minedraft.lifetime import end_now

T = TypeVar("T")


class JobWatchdog:
    def __init__(self, timeout_s: float, worker: str, end: Callable[[str], Any] | None = None) -> None:
        self.timeout_s = timeout_s
        self.worker = worker  # named in the line: "rank 1", "the worker"
        self._end = end or end_now
        self._deadline: float | None = None
        self._thread = threading.Thread(target=self._watch, name="minedraft-job-watchdog", daemon=True)
        self._thread.start()

    def watched(self, job: Callable[[], T]) -> Callable[[], T]:
        """``job``, bounded while it runs (on whichever thread runs it)."""

        @functools.wraps(job)
        def run() -> T:
            self._arm(time.monotonic() + self.timeout_s)
            try:
                return job()
            finally:
                self._arm(None)

        return run

    def _arm(self, deadline: float | None) -> None:
        self._deadline = deadline  # one attribute write: read by _watch when it wakes

    def _watch(self) -> None:
        while True:
            deadline = self._deadline
            left = self.timeout_s if deadline is None else deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, self.timeout_s))
        self._end(f"minedraft: a draft job on {self.worker} has run for more than lane_timeout_s={self.timeout_s:g} s "
             f"(a collective out of step, or a stuck drafter); ending worker pid {os.getpid()} so that the "
             f"engine stops")
