"""minedraft/contract.py: what every draft source shares (collect, discard, failures)."""

from __future__ import annotations

import pytest

from minedraft.contract import DraftLaneError, DraftSource, MineDraftDraftTokenIds


class ScriptedSource(DraftSource):
    """Joins return what the test queued; drafting now joins first, as both real sources do."""

    def __init__(self):
        super().__init__()
        self.joins: list[MineDraftDraftTokenIds | Exception | None] = []

    def prepare(self, call):
        raise NotImplementedError

    def run(self, job):
        raise NotImplementedError

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


def test_discard_drops_stale_drafts_but_keeps_their_late_requests():
    source = ScriptedSource()
    source.joins = [MineDraftDraftTokenIds(["a", "b"], [[1], []], ["b"])]
    source.discard()
    assert source.collect() == MineDraftDraftTokenIds([], [], ["b"])


def test_a_failing_job_is_a_draft_lane_error():
    source = ScriptedSource()
    source.joins = [RuntimeError("drafter crashed")]
    with pytest.raises(DraftLaneError, match="draft lane failed: RuntimeError\\('drafter crashed'\\)"):
        source.collect()
