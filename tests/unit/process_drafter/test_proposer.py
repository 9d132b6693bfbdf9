"""minedraft/process_drafter/target/proposer.py: jobs holding only new tokens; the reply applied by the proposer."""

from __future__ import annotations

import dataclasses

import pytest
from process_drafter_fakes import FakeClient, batch, fake_proposer

from minedraft.contract import MineDraftDraftTokenIds
from minedraft.process_drafter.target.proposer import JobStats, ProcessDrafterJob


def test_proposer_jobs_draft_decodes_only_and_send_only_new_tokens():
    client = FakeClient()
    proposer = fake_proposer(client)
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7], "b": [8, 9], "c": list(range(1, 63))})
    sampled = [[7], [], [62]]  # b is a prefill chunk; c is too close to max_model_len for k more
    job = proposer.prepare(req_ids, 3, sampled, lengths, token_ids)
    assert job.drafted == ["a"]
    assert proposer.round_trip(job) == MineDraftDraftTokenIds(["a", "b", "c"], [[8, 9, 10], [], []])
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8, 11]})
    job = proposer.prepare(req_ids, 3, [[8, 11]], lengths, token_ids)
    assert job.updates == [("a", 3, [8, 11])]
    assert proposer.round_trip(job) == MineDraftDraftTokenIds(["a"], [[12, 13, 14]])
    stats = proposer.stats
    assert (stats.jobs, stats.inline_jobs, stats.late) == (2, 2, 0) and "inline jobs" in stats.summary()


def test_a_late_drafter_leaves_rows_without_drafts_late():
    proposer = fake_proposer(FakeClient(late=True))
    req_ids, lengths, token_ids = batch({"a": [1, 2], "b": [3, 4]})
    job = proposer.prepare(req_ids, 3, [[2], [4]], lengths, token_ids)
    assert proposer.receive(job, proposer.send(job)) == MineDraftDraftTokenIds(["a", "b"], [[], []], ["a", "b"])
    assert (proposer.stats.jobs, proposer.stats.late, proposer.stats.inline_jobs) == (1, 1, 0)


def test_the_proposer_applies_a_resync_the_job_stays_as_it_was():
    client = FakeClient()
    proposer = fake_proposer(client)
    req_ids, lengths, token_ids = batch({"a": [1, 2, 3]})
    proposer.round_trip(proposer.prepare(req_ids, 3, [[3]], lengths, token_ids))
    client.kept.tokens.clear()  # the drafter lost its copy: its next reply asks for a resync
    req_ids, lengths, token_ids = batch({"a": [1, 2, 3, 4]})
    job = proposer.prepare(req_ids, 3, [[4]], lengths, token_ids)
    before = dataclasses.replace(job)
    assert proposer.round_trip(job) == MineDraftDraftTokenIds(["a"], [[]])  # a: no drafts this time
    assert job == before  # the reply went to the proposer, not into the job
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.drafted = []
    job = proposer.prepare(req_ids, 3, [[4]], lengths, token_ids)
    assert job.updates == [("a", 0, [1, 2, 3, 4])]  # the whole history again


def test_a_job_without_rows_to_draft_is_not_awaited():
    client = FakeClient(late={2})
    proposer = fake_proposer(client)
    req_ids, lengths, token_ids = batch({"gone": [1, 2]})
    proposer.round_trip(proposer.prepare(req_ids, 3, [[2]], lengths, token_ids))
    proposer.release(["gone"])  # it finished
    req_ids, lengths, token_ids = batch({"b": [7]})
    job = proposer.prepare(req_ids, 3, [[]], lengths, token_ids)  # b: a prefill chunk
    assert job.message() == {"release": ["gone"], "updates": [], "draft": [], "k": 3}
    assert proposer.round_trip(job) == MineDraftDraftTokenIds(["b"], [[]])  # not late: nothing was owed
    assert proposer.stats.jobs == 1 and len(client.sent) == 2  # sent, its reply never awaited


def test_an_empty_job_is_not_sent():
    proposer = fake_proposer(FakeClient())
    assert ProcessDrafterJob(["b"], [], [], [], 3).message() is None
    assert proposer.send(ProcessDrafterJob(["b"], [], [], [], 3)) is None


def test_jobs_carry_the_steps_depth_and_depth_0_sends_nothing_until_the_next_draft():
    client = FakeClient()
    proposer = fake_proposer(client)
    proposer.draft_ahead = "off"
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7]})
    proposer.round_trip(proposer.prepare(req_ids, 3, [[7]], lengths, token_ids))
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8]})
    idle = proposer.prepare(req_ids, 0, [[8]], lengths, token_ids)
    assert idle.message() is None and proposer.round_trip(idle) == MineDraftDraftTokenIds(["a"], [[]])
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8, 9]})
    job = proposer.prepare(req_ids, 2, [[9]], lengths, token_ids)
    assert job.message() == {"release": [], "updates": [("a", 3, [8, 9])], "draft": ["a"], "k": 2}


def test_where_the_engine_drafts_ahead_a_depth_0_step_sends_its_tokens_to_draft_ahead_from_unawaited():
    client = FakeClient()
    proposer = fake_proposer(client)
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7]})
    proposer.round_trip(proposer.prepare(req_ids, 3, [[7]], lengths, token_ids))
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8]})
    idle = proposer.prepare(req_ids, 0, [[8]], lengths, token_ids)
    assert idle.message() == {"release": [], "updates": [("a", 3, [8])], "draft": [], "k": 0, "ahead": ["a"]}
    assert proposer.round_trip(idle) == MineDraftDraftTokenIds(["a"], [[]])  # not awaited: no drafts, none late
    assert proposer.stats.jobs == 1
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8, 9]})
    job = proposer.prepare(req_ids, 2, [[9]], lengths, token_ids)
    assert job.updates == [("a", 4, [9])]
    assert proposer.round_trip(job) == MineDraftDraftTokenIds(["a"], [[10, 11, 12]])


def test_undrafted_rows_are_left_out_and_their_tokens_go_with_the_next_job_that_drafts_them():
    """The hybrid's undrafted requests (contract.ProposeCall.undrafted): "a" verifies suffix drafts, so the
    job drafts "b" alone; when "a" is drafted again its update carries every token it gained meanwhile."""
    client = FakeClient()
    proposer = fake_proposer(client)
    req_ids, lengths, token_ids = batch({"a": [1, 2, 3], "b": [7, 8]})
    proposer.round_trip(proposer.prepare(req_ids, 3, [[3], [8]], lengths, token_ids))
    req_ids, lengths, token_ids = batch({"a": [1, 2, 3, 4, 5, 6], "b": [7, 8, 9]})
    job = proposer.prepare(req_ids, 3, [[4, 5, 6], [9]], lengths, token_ids, undrafted=frozenset({"a"}))
    assert job.message() == {"release": [], "updates": [("b", 2, [9])], "draft": ["b"], "k": 3}
    assert proposer.round_trip(job) == MineDraftDraftTokenIds(["a", "b"], [[], [10, 11, 12]])
    req_ids, lengths, token_ids = batch({"a": [1, 2, 3, 4, 5, 6, 7], "b": [7, 8, 9, 10]})
    job = proposer.prepare(req_ids, 3, [[7], [10]], lengths, token_ids)
    assert job.updates == [("a", 3, [4, 5, 6, 7]), ("b", 3, [10])]


class FakeDFlashClient:
    """A DFlash draft engine's replies: drafts are the next token + 1..3; ``lose``: reported lost."""

    def __init__(self, lose: set[str] = frozenset()):
        self.sent, self.lose, self.closed = [], set(lose), False

    def send(self, message):
        self.sent.append(message)
        return len(self.sent)

    def receive(self, job_id, timeout_s):
        message = self.sent[job_id - 1]
        lost = sorted(self.lose & {e[0] for e in message.get("context", {}).get("entries", ())})
        return {"job": job_id, "resync": lost, "draft_s": 0.001,
                "drafts": [[] if r in lost else [t + 1, t + 2, t + 3]
                           for r, t in zip(message["draft"], message["next"])]}

    def close(self):
        self.closed = True


def dflash_proposer(client):
    import torch

    from minedraft.process_drafter.context_channel import ContextWriter
    from minedraft.process_drafter.target.context_queue import ContextQueue

    proposer = fake_proposer(client)
    proposer.context_layers, proposer.context, proposer.writer = (1, 2), ContextQueue(), ContextWriter()
    return proposer, lambda req_id, start, n: ([[req_id, start, n, list(range(start, start + n)), None]],
                                               [torch.zeros(n, 4)])


def test_a_dflash_job_sends_the_step_s_context_and_drafts_after_each_row_s_sampled_token():
    client = FakeDFlashClient()
    proposer, context = dflash_proposer(client)
    try:
        proposer.add_context(*context("a", 0, 3))
        proposer.add_context(*context("b", 0, 2))  # a prompt chunk: context, no draft
        req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8], "b": [1, 2]})
        job = proposer.prepare(req_ids, 3, [[8], []], lengths, token_ids)
        drafts = proposer.round_trip(job)
        message = client.sent[-1]
        assert message["draft"] == ["a"] and message["next"] == [8] and message["updates"] == []
        assert [e[:3] for e in message["context"]["entries"]] == [["a", 0, 3], ["b", 0, 2]]
        assert message["context"]["shape"] == [5, 4]
        assert drafts.draft_token_ids == [[9, 10, 11], []]
        # Depth 0 drafts nothing, but the step's rows still go (they exist only now), unawaited.
        proposer.add_context(*context("a", 3, 1))
        idle = proposer.prepare(req_ids, 0, [[9], []], lengths, token_ids)
        proposer.round_trip(idle)
        assert client.sent[-1]["draft"] == [] and client.sent[-1]["context"]["entries"][0][:3] == ["a", 3, 1]
    finally:
        proposer.shutdown()


def test_a_request_whose_context_the_drafter_lost_is_not_drafted_until_released():
    client = FakeDFlashClient(lose={"a"})
    proposer, context = dflash_proposer(client)
    try:
        req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8]})
        proposer.add_context(*context("a", 0, 3))
        proposer.round_trip(proposer.prepare(req_ids, 3, [[8]], lengths, token_ids))
        assert proposer.context.lost == {"a"}
        proposer.add_context(*context("a", 3, 1))
        assert proposer.prepare(req_ids, 3, [[9]], lengths, token_ids).drafted == []
        proposer.release(["a"])  # preempted: it starts again from its first token
        client.lose.clear()
        proposer.add_context(*context("a", 0, 4))
        drafts = proposer.round_trip(proposer.prepare(req_ids, 3, [[9]], lengths, token_ids))
        assert drafts.draft_token_ids == [[10, 11, 12]]
    finally:
        proposer.shutdown()


def test_rows_are_not_overwritten_before_the_drafter_read_the_job_that_carried_them():
    client = FakeDFlashClient(lose={"b"})
    received = []
    receive = client.receive
    client.receive = lambda job_id, timeout_s: received.append(job_id) or receive(job_id, timeout_s)
    proposer, context = dflash_proposer(client)
    try:
        req_ids, lengths, token_ids = batch({"b": [1, 2]})
        proposer.add_context(*context("b", 0, 2))  # a prompt chunk: sent, not awaited
        proposer.round_trip(proposer.prepare(req_ids, 3, [[]], lengths, token_ids))
        assert received == []
        proposer.add_context(*context("b", 2, 1))
        proposer.round_trip(proposer.prepare(req_ids, 3, [[]], lengths, token_ids))
        assert received == [1]  # the first job's reply, before its rows were overwritten
        assert proposer.context.lost == {"b"}  # and its resync applied: b's new rows are not sent
        assert len(client.sent) == 1
    finally:
        proposer.shutdown()


def test_the_shutdown_line_sums_what_the_draft_engine_drafted_ahead():
    stats = JobStats()
    stats.observe({"draft_s": 0.1}, None)  # a DFlash engine's reply: no drafting ahead
    assert "drafted ahead" not in stats.summary()
    for hits, misses, late in ((2, 1, 0), (3, 0, 1)):
        stats.observe({"draft_s": 0.1, "ahead_hits": hits, "ahead_misses": misses, "ahead_late": late}, None)
    stats.observe(None, None)  # late: no reply
    assert stats.summary().endswith("drafted ahead: 5 requests found their drafts made, 1 left the path, "
                                    "1 jobs came while drafting ahead")


def test_prompts_go_to_the_drafter_before_their_first_token_and_the_next_job_sends_only_that():
    client = FakeClient()
    proposer = fake_proposer(client)
    proposer.release(["gone"])  # nothing was sent for it: nothing to release
    proposer.send_prompts({"a": [5, 6, 7], "long": list(range(62))})  # long: no room for k drafts after it
    assert client.sent == [{"release": [], "updates": [("a", 0, [5, 6, 7])], "ahead": ["a"], "draft": [],
                            "k": 3}]
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 9]})  # the target's first token: 9
    job = proposer.prepare(req_ids, 3, [[9]], lengths, token_ids)
    assert job.updates == [("a", 3, [9])]
    assert proposer.round_trip(job) == MineDraftDraftTokenIds(["a"], [[10, 11, 12]])  # its reply, not the prompts'


def test_no_prompts_are_sent_where_the_drafter_does_not_draft_ahead():
    client = FakeClient()
    proposer = fake_proposer(client)
    proposer.draft_ahead = "off"
    assert not proposer.sends_ahead
    proposer.draft_ahead = "auto"
    assert proposer.sends_ahead
    proposer.context = object()  # a DFlash draft: it drafts from the target's context, not from tokens
    assert not proposer.sends_ahead
