"""minedraft/contract.py: what crosses between MineDraft's scheduler and its worker, typed."""

from __future__ import annotations

from scheduler_harness import prefilled
from vllm.v1.outputs import DraftTokenIds

from minedraft.contract import MineDraftDraftTokenIds, merge_drafts
from minedraft.scheduling.scheduler import MineDraftScheduler


def test_vllm_drafts_are_minedraft_drafts_with_none_late():
    plain = DraftTokenIds(["a"], [[1, 2]])
    assert MineDraftDraftTokenIds.of(plain) == MineDraftDraftTokenIds(["a"], [[1, 2]], [])
    ours = MineDraftDraftTokenIds(["a"], [[]], ["a"])
    assert MineDraftDraftTokenIds.of(ours) is ours


def test_merged_drafts_keep_the_rows_in_order_and_every_late_request():
    lane = MineDraftDraftTokenIds(["a", "b"], [[1], []], ["b"])
    inline = DraftTokenIds(["c"], [[3]])
    assert merge_drafts(lane, inline) == MineDraftDraftTokenIds(["a", "b", "c"], [[1], [], [3]], ["b"])
    assert merge_drafts(None, inline) == MineDraftDraftTokenIds(["c"], [[3]])
    assert merge_drafts(lane, None) is lane and merge_drafts(None, None) is None
    assert lane.without_drafts() == MineDraftDraftTokenIds([], [], ["b"])


def test_the_scheduler_counts_the_late_requests_the_worker_reports(model_dir):
    sched, _ = prefilled(model_dir, MineDraftScheduler, 2, 20, 30)
    sched.update_draft_token_ids(MineDraftDraftTokenIds(["r0", "r1"], [[2, 2, 2], []], ["r1"]))
    sched.update_draft_token_ids(DraftTokenIds(["r0"], [[2, 2, 2]]))  # vLLM's own: none late
    assert sched.minedraft_stats.late_drafts == sched.minedraft_totals.late_drafts == 1
