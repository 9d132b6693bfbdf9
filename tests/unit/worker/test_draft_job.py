"""minedraft/worker/in_process/draft_job.py: a deferred call's inputs copied at capture, replayed later."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from minedraft.worker.in_process.draft_job import DraftJob, as_lists, snapshot, snapshot_nbytes


def test_snapshot_is_isolated_from_buffer_reuse():
    buf = torch.arange(6)
    job = DraftJob.capture(["a", "b"], lambda x, scale: (x[:2] * scale).view(2, 1), (buf,), {"scale": 2})
    buf.zero_()  # the runner reuses its buffers next step
    req_ids, drafts = job.run()
    assert req_ids == ["a", "b"] and as_lists(drafts) == [[0], [2]]
    assert snapshot({"k": [buf]})["k"][0] is not buf


@dataclasses.dataclass
class CaptureMeta:  # a dataclass of tensors, like vLLM's CommonAttentionMetadata
    slots: torch.Tensor
    seq_lens: np.ndarray
    n: int


def test_snapshot_nbytes_counts_what_a_capture_copies():
    """EAGLE-3's target hidden states dominate: [T, 3H] next to ids and positions of [T]."""
    hidden, ids = torch.zeros(10, 3 * 8, dtype=torch.bfloat16), torch.zeros(10, dtype=torch.int64)
    meta = CaptureMeta(slots=torch.zeros(10, dtype=torch.int64), seq_lens=np.zeros(2, dtype=np.int32), n=2)
    args, kwargs = (ids,), {"target_hidden_states": hidden, "meta": meta, "k": 3, "extra": [ids, None]}
    assert snapshot_nbytes((args, kwargs)) == 10 * 24 * 2 + 3 * 10 * 8 + 2 * 4
    assert snapshot_nbytes((args, kwargs)) == snapshot_nbytes(snapshot((args, kwargs)))


def test_lists_of_scalars_are_copied_whole_and_mixed_lists_element_by_element():
    # The sampling metadata's output token ids: one list per request, appended to in the next step.
    output_token_ids = [[1, 2, 3], [4, 5]]
    mixed = [7, torch.arange(3), None]
    copied = snapshot({"output_token_ids": output_token_ids, "mixed": mixed, "pair": (1, "a")})
    output_token_ids[0].append(9)
    mixed[1].zero_()
    assert copied["output_token_ids"] == [[1, 2, 3], [4, 5]]
    assert copied["mixed"][0] == 7 and copied["mixed"][1].tolist() == [0, 1, 2] and copied["mixed"][2] is None
    assert copied["pair"] == (1, "a")
    assert copied["output_token_ids"][1] is not output_token_ids[1]
    assert snapshot_nbytes([[1, 2], [3.0, None]]) == snapshot_nbytes([(1, 2), (3.0, None)]) == 0
    assert snapshot_nbytes([1, torch.zeros(4, dtype=torch.int32)]) == 16


def test_a_completed_job_hands_over_drafts_made_at_capture():
    drafts = torch.tensor([[5, 6], [7, 8]])
    req_ids, got = DraftJob.completed(["a", "b"], drafts).run()
    assert req_ids == ["a", "b"] and got is drafts
