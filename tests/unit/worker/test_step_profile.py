"""minedraft/worker/step_profile.py: per-step timings of the two lanes, as JSON lines."""

from __future__ import annotations

import json
import threading

from minedraft.worker.in_process.lanes import ThreadLane
from minedraft.worker.step_profile import StepProfiler


def test_step_profiler_times_the_lane_job_and_the_step(tmp_path):
    path = tmp_path / "steps.jsonl"
    profiler = StepProfiler(str(path))
    lane = ThreadLane(lane_threads=None)
    try:
        release = threading.Event()
        profiler.begin(num_verified=3, num_draft_only=2, parallel=True)
        lane.submit(profiler.timed(lambda: release.wait(5) and "drafts"))
        profiler.main_lane_done()
        release.set()
        assert lane.wait() == "drafts"
        profiler.end()
    finally:
        lane.shutdown()
        profiler.close()
    (row,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert row["num_verified"] == 3 and row["num_draft_only"] == 2 and row["parallel"]
    assert 0 <= row["main_s"] <= row["step_s"] and 0 < row["draft_s"] <= row["step_s"]


def test_step_profiler_records_when_each_lane_ran(tmp_path):
    """The target's part and the lane's job as intervals from the step's start: here each waits until the
    other has begun, so the two intervals intersect (what tests/e2e/test_exactness.py checks on an engine)."""
    path = tmp_path / "steps.jsonl"
    profiler = StepProfiler(str(path))
    lane = ThreadLane(lane_threads=None)
    target_started, job_started = threading.Event(), threading.Event()
    try:
        profiler.begin(num_verified=2, num_draft_only=2, parallel=True)
        lane.submit(profiler.timed(lambda: job_started.set() or target_started.wait(5) and "drafts"))
        assert profiler.target(lambda: target_started.set() or job_started.wait(5) and "outputs") == "outputs"
        assert lane.wait() == "drafts"
        profiler.end()
    finally:
        lane.shutdown()
        profiler.close()
    (row,) = [json.loads(line) for line in path.read_text().splitlines()]
    target = (row["target_at"], row["target_at"] + row["target_s"])
    draft = (row["draft_at"], row["draft_at"] + row["draft_s"])
    assert 0 <= min(target[0], draft[0]) and max(target[1], draft[1]) <= row["step_s"]
    assert min(target[1], draft[1]) > max(target[0], draft[0])
