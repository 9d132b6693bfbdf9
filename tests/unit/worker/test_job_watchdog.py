"""minedraft/worker/in_process/job_watchdog.py: a draft job past its bound ends the worker with one line."""

from __future__ import annotations

import threading
import time

from minedraft.worker.in_process.job_watchdog import JobWatchdog

BOUND_S = 10  # what a test waits at most for something that must happen at once


def test_a_job_past_its_bound_ends_the_worker_with_one_line_naming_it():
    said: list[str] = []
    ended = threading.Event()
    watchdog = JobWatchdog(0.05, "rank 1", end=lambda line: (said.append(line), ended.set()))

    def stuck() -> str:  # returns only once the watchdog has acted (or after BOUND_S: the test fails)
        ended.wait(BOUND_S)
        return "late"

    assert watchdog.watched(stuck)() == "late"
    assert ended.is_set() and len(said) == 1
    assert said[0].startswith("minedraft: a draft job on rank 1 has run for more than lane_timeout_s=0.05 s")


def test_a_job_that_returns_disarms_the_bound_and_keeps_its_result_and_errors():
    watchdog = JobWatchdog(60, "rank 0", end=lambda line: None)
    assert watchdog.watched(lambda: 7)() == 7
    assert watchdog._deadline is None

    def fails() -> None:
        raise ValueError("drafter error")

    try:
        watchdog.watched(fails)()
    except ValueError as e:
        assert str(e) == "drafter error"
    assert watchdog._deadline is None


def test_the_bound_is_never_cut_short_and_arming_wakes_no_thread():
    """Arming only writes the deadline (a notify each arming took the GIL from the drafting thread): the
    watchdog's thread finds each deadline on its own, and acts no earlier than it."""
    ended_at: list[float] = []
    ended = threading.Event()
    watchdog = JobWatchdog(0.2, "rank 0", end=lambda line: (ended_at.append(time.monotonic()), ended.set()))
    assert not hasattr(watchdog, "_cond")
    for _ in range(50):  # armed and disarmed many times: never acted on
        assert watchdog.watched(lambda: 1)() == 1
    armed_at = time.monotonic()

    def stuck() -> None:
        ended.wait(BOUND_S)

    watchdog.watched(stuck)()
    assert ended.is_set() and len(ended_at) == 1
    assert ended_at[0] >= armed_at + 0.2
