"""Which of a step's hidden states become a DFlash draft's context
(minedraft/process_drafter/target/step_context.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from minedraft.process_drafter.target.step_context import step_context


def scheduler_output(new: dict[str, int], cached: dict[str, int], scheduled: dict[str, int],
                     drafts: dict[str, list[int]], resumed=()) -> SimpleNamespace:
    """The fields step_context reads: ``new``/``cached``, computed tokens before the step per request."""
    return SimpleNamespace(
        scheduled_new_reqs=[SimpleNamespace(req_id=r, num_computed_tokens=n) for r, n in new.items()],
        scheduled_cached_reqs=SimpleNamespace(req_ids=list(cached), num_computed_tokens=list(cached.values()),
                                              resumed_req_ids=set(resumed)),
        num_scheduled_tokens=scheduled, scheduled_spec_decode_tokens=drafts)


def test_prompt_chunks_and_accepted_tokens_are_context_rejected_drafts_are_not():
    # Rows: "chunk" (prompt tokens 0-3, more to come), "decode" (token 9 at position 9 and three
    # drafts, one accepted), "last" (prompt tokens 4-5 of 6 after a 4-token prefix-cache hit).
    out = scheduler_output(new={"last": 4}, cached={"chunk": 0, "decode": 9},
                           scheduled={"chunk": 4, "decode": 4, "last": 2}, drafts={"decode": [1, 2, 3]})
    sampled = [[], [51, 52], [60]]
    step_tokens = 4 + 4 + 2
    aux = [torch.arange(step_tokens, dtype=torch.float32)[:, None] + 100 * layer for layer in range(2)]
    token_ids = np.arange(3 * 20).reshape(3, 20)
    entries, rows = step_context(["chunk", "decode", "last"], out, sampled, aux, token_ids)
    assert [e[:3] for e in entries] == [["chunk", 0, 4], ["decode", 9, 2], ["last", 4, 2]]
    assert [r[:, 0].tolist() for r in rows] == [[0, 1, 2, 3], [4, 5], [8, 9]]  # the step's token rows
    assert rows[0][:, 1].tolist() == [100, 101, 102, 103]  # layers side by side
    assert entries[1][3] == [29, 30] and entries[1][4] is None  # tokens at positions 9 and 10
    assert entries[2][3] == [44, 45] and entries[2][4] == [40, 41, 42, 43]  # the prefix it started after


def test_a_step_without_the_batch_s_requests_has_no_context():
    out = scheduler_output(new={}, cached={}, scheduled={}, drafts={})
    assert step_context(["idle"], out, [[]], [torch.zeros(0, 1)], np.zeros((1, 4))) == ([], [])
