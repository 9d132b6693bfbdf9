"""minedraft/process_drafter/proposer.py: jobs holding only new tokens; the reply applied by the proposer."""

from __future__ import annotations

import dataclasses

import pytest
from process_drafter_fakes import FakeClient, batch, fake_proposer

from minedraft.process_drafter.proposer import RemoteDraftJob
from minedraft.scheduling.output import MineDraftDraftTokenIds


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
    assert RemoteDraftJob(["b"], [], [], [], 3).message() is None
    assert proposer.send(RemoteDraftJob(["b"], [], [], [], 3)) is None


def test_jobs_carry_the_steps_depth_and_depth_0_sends_nothing_until_the_next_draft():
    client = FakeClient()
    proposer = fake_proposer(client)
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7]})
    proposer.round_trip(proposer.prepare(req_ids, 3, [[7]], lengths, token_ids))
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8]})
    idle = proposer.prepare(req_ids, 0, [[8]], lengths, token_ids)
    assert idle.message() is None and proposer.round_trip(idle) == MineDraftDraftTokenIds(["a"], [[]])
    req_ids, lengths, token_ids = batch({"a": [5, 6, 7, 8, 9]})
    job = proposer.prepare(req_ids, 2, [[9]], lengths, token_ids)
    assert job.message() == {"release": [], "updates": [("a", 3, [8, 9])], "draft": ["a"], "k": 2}
