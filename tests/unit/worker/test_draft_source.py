"""minedraft/contract.py: what every draft source shares (collect, a step's start, the lane plan, failures)."""

from __future__ import annotations

import pytest

from minedraft.contract import DraftLaneError, DraftSource, LanePlanError, MineDraftDraftTokenIds, ProposeCall


class ScriptedSource(DraftSource):
    """Joins return what the test queued; drafting now joins first, as both real sources do."""

    def __init__(self):
        super().__init__()
        self.joins: list[MineDraftDraftTokenIds | Exception | None] = []

        self.log: list[str] = []

    def _prepare(self, call):
        return call  # a call is its own job here

    def _run(self, job):
        self.log.append(f"run {job.req_ids if job is not None else None}")

    def _release(self, req_ids):
        self.log.append(f"release {sorted(req_ids)}")

    def draft_now(self, call):
        self._keep_joined()
        return [[9]]

    def _join(self):
        joined = self.joins.pop(0) if self.joins else None
        if isinstance(joined, Exception):
            raise joined
        return joined


def test_collect_returns_what_drafting_now_joined_with_the_running_job():
    source = ScriptedSource()
    source.joins = [MineDraftDraftTokenIds(["a"], [[1]]),
                    MineDraftDraftTokenIds(["b"], [[]], ["b"])]
    assert source.draft_now(None) == [[9]]  # joined a's job first: kept for collect
    assert source.collect() == MineDraftDraftTokenIds(["a", "b"], [[1], []], ["b"])
    assert source.collect() is None


def test_a_step_begins_by_releasing_and_dropping_stale_drafts_but_keeps_their_late_requests():
    source = ScriptedSource()
    source.joins = [MineDraftDraftTokenIds(["a", "b"], [[1], []], ["b"])]
    source.begin_step({"c"})
    assert source.log == ["release ['c']"]
    assert source.collect() == MineDraftDraftTokenIds([], [], ["b"])


def test_start_runs_the_deferred_job_once_and_checks_the_lane_plan():
    source = ScriptedSource()
    source.defer(ProposeCall(["a", "b"], (), {}, depth=1))
    source.start(["a"])  # a job may cover more rows than planned
    source.start([])  # the next step: no job
    assert source.log == ["run ['a', 'b']", "run None"]
    with pytest.raises(LanePlanError, match=r"\['c'\]"):
        source.start(["c"])


def test_a_held_call_is_drafted_by_collect_or_dropped_when_the_next_step_begins():
    source = ScriptedSource()
    source.hold(ProposeCall(["a"], (), {}, depth=1))
    source.joins = [None, MineDraftDraftTokenIds(["a"], [[4]])]  # nothing running, then the held job
    assert source.collect() == MineDraftDraftTokenIds(["a"], [[4]])
    assert source.log == ["run ['a']"]
    source.hold(ProposeCall(["b"], (), {}, depth=1))
    source.begin_step(set())
    assert source.log == ["run ['a']", "release []"] and source.collect() is None


def test_a_failing_job_is_a_draft_lane_error():
    source = ScriptedSource()
    source.joins = [RuntimeError("drafter crashed")]
    with pytest.raises(DraftLaneError, match="draft lane failed: RuntimeError\\('drafter crashed'\\)"):
        source.collect()
