"""Draft sessions in the real draft engine process: drafts equal drafting each history from scratch.

A scripted target drives the drafter the way the proposer does (incremental
updates through ``SentHistories``, releases, resyncs). Its verification is
random: it accepts a random number of each request's drafts and appends a
token of its own, so sessions roll back by every amount from 0 to k. The
drafter's self-check (``MINEDRAFT_DRAFTER_SELF_CHECK``) drafts each request
again as a new request, whole history prefilled, and counts differences.
"""

from __future__ import annotations

import random

import pytest
from vllm.engine.arg_utils import EngineArgs

from harness.sidebyside import engine_cores
from minedraft.config.drafter_device import DrafterDevice
from minedraft.process_drafter.frontend import draft_engine_kwargs
from minedraft.process_drafter.history import SentHistories
from minedraft.process_drafter.target.client import ProcessDrafterClient
from modelkit import build_kit

pytestmark = pytest.mark.e2e

K = 3
# A hang guard, not a timing: a job takes about 3 s here (self-check on), many times that on a core
# another test's engine also uses (a job waited over 60 s on CI's machine, 2026-12-03).
ANSWER_TIMEOUT_S = 600
SESSIONS = 6  # the draft engine's max_num_seqs: fewer than the requests, so idle sessions get evicted
GROUP = SESSIONS - 1  # the self-check's fresh requests need a free slot


def start_drafter(log_dir, self_check: bool, draft_ahead: str = "off", **engine) -> ProcessDrafterClient:
    kit = build_kit()
    device = DrafterDevice.parse(f"cpu:{engine_cores()[-1]}")  # no target here: this worker's core
    args = EngineArgs(model=str(kit.target), dtype="float32", max_model_len=512, enforce_eager=True,
                      max_num_seqs=SESSIONS)
    kwargs = {**draft_engine_kwargs(args, {"model": str(kit.draft_perturbed)}, device), **engine}
    with pytest.MonkeyPatch.context() as env:
        if self_check:
            env.setenv("MINEDRAFT_DRAFTER_SELF_CHECK", "1")
        return ProcessDrafterClient(kwargs, device, K, log_dir=str(log_dir), draft_ahead=draft_ahead)


@pytest.fixture(scope="module")
def drafter(tmp_path_factory):
    # Drafting ahead after every job (draft_ahead.py): the random verification below leaves its path at once.
    client = start_drafter(tmp_path_factory.mktemp("drafter"), self_check=True, draft_ahead="always")
    yield client
    client.close()


class ScriptedTarget:
    """Requests, their histories and what the drafter has been sent, as the proposer keeps them."""

    def __init__(self, client: ProcessDrafterClient, seed: int) -> None:
        self.client, self.rng = client, random.Random(seed)
        self.sent = SentHistories()
        self.histories: dict[str, list[int]] = {}
        self.next_id = 0
        self.replies: list[dict] = []

    def admit(self) -> None:
        # Prompts from 1 token to several KV blocks, so sessions start and roll back across blocks.
        self.histories[f"req-{self.next_id}"] = [self.rng.randrange(3, 2000)
                                                  for _ in range(self.rng.choice([1, 5, 31, 32, 33, 90, 200]))]
        self.next_id += 1

    def job(self, req_ids: list[str], released: list[str], depth: int = K) -> dict[str, list[int]]:
        self.sent.release(released)
        updates = [self.sent.update(r, self.histories[r], len(self.histories[r])) for r in req_ids]
        job_id = self.client.send({"release": self.sent.take_released(), "updates": updates, "draft": req_ids,
                                   "k": depth})
        reply = self.client.receive(job_id, timeout_s=ANSWER_TIMEOUT_S)
        assert reply is not None, "the drafter did not answer"
        self.replies.append(reply)
        self.sent.forget(reply["resync"])
        return dict(zip(req_ids, reply["drafts"]))

    def verify(self, req_id: str, draft: list[int]) -> None:
        accepted = self.rng.randrange(0, len(draft) + 1)
        self.histories[req_id] += draft[:accepted] + [self.rng.randrange(3, 2000)]


def test_sessions_draft_what_a_fresh_request_drafts(drafter):
    target = ScriptedTarget(drafter, seed=0)
    for _ in range(8):
        target.admit()
    released: list[str] = []
    for step in range(40):
        live = sorted(target.histories)
        group = target.rng.sample(live, min(len(live), target.rng.randrange(1, GROUP + 1)))
        drafts = target.job(group, released)
        released = []
        for req_id, draft in drafts.items():
            assert len(draft) == K, (step, req_id, draft)
            target.verify(req_id, draft)
        if step % 5 == 4:  # a request finishes, another arrives
            finished = target.rng.choice(live)
            del target.histories[finished]
            released.append(finished)
            target.admit()
        if step % 7 == 6:  # preempted by the target: released, later re-sent from its first token
            released.append(target.rng.choice(sorted(target.histories)))
    checked = sum(len(reply["drafts"]) for reply in target.replies)
    assert checked > 100
    assert sum(reply["self_check_mismatches"] for reply in target.replies) == 0


def test_a_gap_in_a_history_resyncs_the_session(drafter):
    target = ScriptedTarget(drafter, seed=1)
    target.admit()
    (req_id,) = target.histories
    target.verify(req_id, target.job([req_id], [])[req_id])
    target.sent.sent[req_id] += 2  # the drafter missed two tokens (a lost job)
    target.histories[req_id] += [7, 8]
    assert target.job([req_id], []) == {req_id: []} and target.replies[-1]["resync"] == [req_id]
    drafts = target.job([req_id], [])  # the whole history again, into a new session
    assert len(drafts[req_id]) == K and target.replies[-1]["self_check_mismatches"] == 0


def test_drafts_made_ahead_are_what_drafting_now_makes(drafter):
    """A target that accepts every draft and samples the draft model's own next token (from the kit's
    draft in transformers): the next job's drafts were made ahead, whatever its depth (fewer drafts
    than made, or more: the rest drafted then), and equal drafting from scratch. One request
    disagrees every other step: its path is dropped."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(build_kit().draft_perturbed), torch_dtype=torch.float32)

    def guess(tokens: list[int]) -> int:
        with torch.no_grad():
            return int(model(torch.tensor([tokens])).logits[0, -1].argmax())

    target = ScriptedTarget(drafter, seed=3)
    for _ in range(3):
        target.admit()
    ids = sorted(target.histories)
    for step in range(9):
        drafts = target.job(ids, [], depth=(K, K - 1, K + 1)[step % 3])
        for req_id, draft in drafts.items():
            if req_id == ids[0] and step % 2:
                target.verify(req_id, draft)
            else:
                target.histories[req_id] += [*draft, guess(target.histories[req_id] + draft)]
    hits = sum(reply["ahead_hits"] for reply in target.replies)
    assert hits >= 12, hits  # 2 agreeing requests x 8 steps, and the other's steps after one it agreed
    assert sum(reply["ahead_misses"] for reply in target.replies) > 0
    assert sum(reply["self_check_mismatches"] for reply in target.replies) == 0


def test_sessions_that_find_no_kv_end_and_the_drafter_keeps_answering(tmp_path):
    """Three KV blocks for five sessions of 90 tokens and more: jobs hit the step bound.
    Those sessions get no drafts that time and restart later; nothing waits without bound."""
    # vLLM's CPU KV blocks hold 128 tokens here: three blocks, a session of 90+ tokens takes one.
    client = start_drafter(tmp_path, self_check=False, num_gpu_blocks_override=3, max_model_len=256)
    try:
        target = ScriptedTarget(client, seed=2)
        for _ in range(GROUP):
            target.histories[f"req-{target.next_id}"] = [target.rng.randrange(3, 2000) for _ in range(90)]
            target.next_id += 1
        counts = []
        for _ in range(6):
            drafts = target.job(sorted(target.histories), [])
            counts.append(sum(len(d) == K for d in drafts.values()))
            assert all(len(d) in (0, K) for d in drafts.values())
            for req_id, draft in drafts.items():
                target.verify(req_id, draft)
        assert sum(counts) > 0 and min(counts) < GROUP, counts  # some drafted, some ended
    finally:
        client.close()
    assert "did not finish within the job's step bound" in (tmp_path / "drafter.log").read_text()
