"""minedraft/worker/in_process/draft_probs.py: each request's draft distribution, from the call that made its drafts."""

from __future__ import annotations

import pytest
import torch

from minedraft.worker.in_process.draft_probs import DraftProbs

VOCAB = 5


class Drafter:
    """vLLM's proposer interface: ``propose`` returns drafts, ``take_last_draft_probs`` their distribution."""

    def __init__(self):
        self.last = None

    def propose(self, probs: torch.Tensor | None, depth: int):
        self.last = probs
        return torch.zeros(0 if probs is None else probs.shape[0], depth, dtype=torch.long)

    def take_last_draft_probs(self):
        return self.last


def _probs(batch: int, depth: int, seed: int) -> torch.Tensor:
    return torch.softmax(torch.randn(batch, depth, VOCAB, generator=torch.Generator().manual_seed(seed)), dim=-1)


def test_rows_come_from_the_call_that_made_each_requests_drafts_in_the_verified_order():
    drafter = Drafter()
    store = DraftProbs(drafter.take_last_draft_probs)
    group_a, group_b = _probs(2, 3, 1), _probs(2, 3, 2)
    store.recording(drafter.propose, ["a1", "a2"])(group_a, 3)
    store.recording(drafter.propose, ["b1", "b2"])(group_b, 3)  # a later call for the other group
    got = store.for_verification(["b2", "a1", "new"], [2, 3, 0], torch.tensor([0, 0, 0, 0, 0]))
    assert torch.equal(got, torch.cat([group_b[1, :2], group_a[0, :3]]))


def test_a_verified_request_without_a_row_gets_its_drafts_one_hot():
    drafter = Drafter()
    store = DraftProbs(drafter.take_last_draft_probs)
    store.recording(drafter.propose, ["random"])(_probs(1, 2, 3), 2)
    store.recording(drafter.propose, ["greedy"])(None, 2)  # an all-greedy call samples none
    got = store.for_verification(["greedy", "random"], [2, 2], torch.tensor([4, 1, 7, 7]))
    assert torch.equal(got[:2], torch.eye(VOCAB)[[4, 1]])
    assert torch.equal(got[2:], _probs(1, 2, 3)[0])


def test_none_where_no_verified_request_has_a_row():
    drafter = Drafter()
    store = DraftProbs(drafter.take_last_draft_probs)
    store.recording(drafter.propose, ["a"])(_probs(1, 2, 4), 2)
    store.recording(drafter.propose, ["a"])(None, 2)  # its latest drafts were greedy: the old row is stale
    assert store.for_verification(["a"], [2], torch.tensor([1, 2])) is None
    store.recording(drafter.propose, ["b"])(_probs(1, 2, 5), 2)
    store.release(["b"])
    assert store.for_verification(["b"], [2], torch.tensor([1, 2])) is None


def test_more_drafts_than_probabilities_is_an_error():
    drafter = Drafter()
    store = DraftProbs(drafter.take_last_draft_probs)
    store.recording(drafter.propose, ["a"])(_probs(1, 1, 6), 1)
    with pytest.raises(RuntimeError, match="verified with 2 drafts but its draft probabilities cover 1"):
        store.for_verification(["a"], [2], torch.tensor([1, 2]))
