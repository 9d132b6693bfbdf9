"""minedraft/process_drafter/target/process_source.py: the process drafter behind the draft source interface."""

from __future__ import annotations

import pytest
from process_drafter_fakes import FakeClient, batch, fake_proposer

from minedraft.contract import DraftLaneError, MineDraftDraftTokenIds, ProposeCall
from minedraft.process_drafter.target.process_source import ProcessDrafterSource


def _call(histories: dict[str, list[int]], sampled: list[list[int]], depth: int = 3) -> ProposeCall:
    """vLLM's ``custom_class`` propose call for the batch ``histories``."""
    req_ids, lengths, token_ids = batch(histories)
    return ProposeCall(req_ids, (sampled, lengths, token_ids), {"slot_mappings": None}, depth)


def test_a_deferred_job_is_sent_when_started_and_its_drafts_collected():
    client = FakeClient()
    source = ProcessDrafterSource(fake_proposer(client))
    source.defer(_call({"a": [5, 6, 7], "b": [8, 9]}, [[7], []]))  # b: a prefill chunk
    assert client.sent == []  # held until the next step
    source.start(["a", "b"])
    assert [m["draft"] for m in client.sent] == [["a"]]
    assert source.collect() == MineDraftDraftTokenIds(["a", "b"], [[8, 9, 10], []])
    assert source.collect() is None


def test_rows_a_late_drafter_leaves_without_drafts_are_late():
    source = ProcessDrafterSource(fake_proposer(FakeClient(late=True)))
    source.defer(_call({"a": [1, 2], "b": [3, 4]}, [[2], [4]]))
    source.start([])
    assert source.collect() == MineDraftDraftTokenIds(["a", "b"], [[], []], ["a", "b"])


def test_drafting_now_joins_the_running_job_and_keeps_late_requests_for_collect():
    source = ProcessDrafterSource(fake_proposer(FakeClient(late={2})))  # job 1 in time, job 2 late
    source.defer(_call({"a": [1, 2]}, [[2]]))
    source.start([])
    drafts = source.draft_now(_call({"b": [3, 4]}, [[4]]))
    assert drafts == [[]]  # what vLLM's runner gets back from propose: b's row, without drafts
    assert source.collect() == MineDraftDraftTokenIds(["a"], [[3, 4, 5]], ["b"])


def test_finished_requests_are_released_with_the_next_job():
    client = FakeClient()
    source = ProcessDrafterSource(fake_proposer(client))
    source.draft_now(_call({"a": [1, 2]}, [[2]]))
    source.begin_step(["a"])
    source.draft_now(_call({"b": [3]}, [[3]]))
    assert client.sent[-1]["release"] == ["a"]


def test_a_failing_reply_is_a_draft_lane_error():
    source = ProcessDrafterSource(fake_proposer(FakeClient(fail=ValueError("bad reply"))))
    source.defer(_call({"a": [1, 2]}, [[2]]))
    source.start([])
    with pytest.raises(DraftLaneError, match="bad reply"):
        source.collect()


def test_shutdown_stops_the_draft_engine():
    client = FakeClient()
    ProcessDrafterSource(fake_proposer(client)).shutdown()
    assert client.closed
