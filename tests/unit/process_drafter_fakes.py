"""The process drafter without its process: a fake draft engine client and a proposer around it."""

from __future__ import annotations

import numpy as np

from minedraft.process_drafter.history import Histories, SentHistories
from minedraft.process_drafter.target.proposer import JobStats, ProcessDrafterProposer


class FakeClient:
    """The draft engine process's replies, without the process: drafts are the last token + 1..3.

    ``late``: every reply misses the target's bound (True) or those of these job ids.
    ``fail``: receiving raises it."""

    def __init__(self, late: bool | set[int] = False, fail: BaseException | None = None):
        self.kept, self.late, self.fail, self.sent = Histories(), late, fail, []
        self.applied = 0  # jobs taken so far
        self.closed = False

    def send(self, message):
        self.sent.append(message)
        return len(self.sent)

    def receive(self, job_id, timeout_s):
        if self.fail is not None:
            raise self.fail
        # The engine takes every job in order, those nobody waits for too (their replies are skipped).
        resync = []
        while self.applied < job_id:
            resync = self.kept.apply(self.sent[self.applied]["release"], self.sent[self.applied]["updates"])
            self.applied += 1
        message = self.sent[job_id - 1]
        if self.late is True or (self.late and job_id in self.late):
            return None
        return {"job": job_id, "resync": resync, "draft_s": 0.001,
                "drafts": [[self.kept.tokens[r][-1] + i for i in (1, 2, 3)] if r in self.kept.tokens else []
                           for r in message["draft"]]}


    def close(self):
        self.closed = True


def fake_proposer(client, drives_engine: bool = True) -> ProcessDrafterProposer:
    """A proposer (k = 3, model length 64) whose draft engine is ``client``; ``drives_engine=False``:
    a tensor-parallel rank other than 0's."""
    proposer = ProcessDrafterProposer.__new__(ProcessDrafterProposer)
    proposer.k, proposer.max_model_len, proposer.timeout_s, proposer.draft_ahead = 3, 64, 1.0, "auto"
    proposer.drives_engine = drives_engine
    proposer.sent, proposer.client, proposer.stats = SentHistories(), client, JobStats()
    proposer.context_layers, proposer.context, proposer.writer, proposer._unread = (), None, None, None
    return proposer


def batch(histories: dict[str, list[int]]):
    """vLLM's runner's view of a batch: request ids, token counts, the token id buffer."""
    token_ids = np.zeros((len(histories), 64), dtype=np.int32)
    for row, tokens in enumerate(histories.values()):
        token_ids[row, :len(tokens)] = tokens
    lengths = np.array([len(t) for t in histories.values()], dtype=np.int32)
    return list(histories), lengths, token_ids
