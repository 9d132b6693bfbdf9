"""A DFlash draft in the real draft engine process: its context kept from job to job, shared by prefix.

A scripted target drives the process drafter the way the proposer does: hidden-state rows through
shared memory (``ContextWriter``), entries of (request, first position, rows, tokens, prefix). The
rows are random (any hidden states make a context); what must hold is that the drafts depend only
on each request's whole context, not on how it arrived: in one job or in several, alone or in a
batch, computed or taken from the engine's prefix cache. A request whose context has a gap is
reported (``resync``) and gets no drafts.
"""

from __future__ import annotations

import pytest
import torch
from vllm.engine.arg_utils import EngineArgs

from harness.sidebyside import engine_cores
from minedraft.config.drafter_device import DrafterDevice
from minedraft.process_drafter.context_channel import ContextWriter
from minedraft.process_drafter.frontend import draft_engine_kwargs
from minedraft.process_drafter.target.client import ProcessDrafterClient

pytestmark = pytest.mark.e2e

K = 3
# A hang guard, not a timing: a job may take many times its usual time on a core another test's engine
# also uses (a draft-session job waited over 60 s on CI's machine, 2026-12-03).
ANSWER_TIMEOUT_S = 600
BLOCK = 32  # vLLM 0.32's CPU attention takes multiples of 32


@pytest.fixture(scope="module")
def drafter(method_checkpoints, tmp_path_factory):
    device = DrafterDevice.parse(f"cpu:{engine_cores()[-1]}")  # no target here: this worker's core
    args = EngineArgs(model=method_checkpoints.dflash_target, dtype="float32", max_model_len=512,
                      enforce_eager=True, max_num_seqs=8, block_size=BLOCK)
    spec = method_checkpoints.speculative_config("dflash", K)
    client = ProcessDrafterClient(draft_engine_kwargs(args, spec, device), device, K,
                           log_dir=str(tmp_path_factory.mktemp("dflash_drafter")))
    writer = ContextWriter()
    yield client, writer
    writer.close()
    client.close()


def job(drafter, entries, rows, draft=(), next_tokens=(), release=()) -> dict:
    client, writer = drafter
    message = {"release": list(release), "draft": list(draft), "next": list(next_tokens), "k": K}
    if entries:
        message["context"] = {**writer.write(torch.cat(rows)), "entries": entries}
    reply = client.receive(client.send(message), timeout_s=ANSWER_TIMEOUT_S)
    assert reply is not None, "the draft engine did not answer"
    return reply


def entry(req_id, start, rows, tokens, prefix=None):
    return [req_id, start, len(rows), tokens[start:start + len(rows)], prefix]


@pytest.fixture(scope="module")
def context():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(80, 3 * 256, generator=generator), list(range(100, 180))


def test_the_engine_says_which_target_layers_it_takes(drafter):
    assert drafter[0].context_layers == [1, 2, 3]  # the kit draft's target_layer_ids + 1, as vLLM's runner


def test_drafts_depend_on_the_context_not_on_how_it_arrived(drafter, context):
    hidden, tokens = context
    whole = job(drafter, [entry("whole", 0, hidden[:40], tokens)], [hidden[:40]], ["whole"], [7])["drafts"][0]
    job(drafter, [entry("parts", 0, hidden[:25], tokens)], [hidden[:25]])
    parts = job(drafter, [entry("parts", 25, hidden[25:40], tokens)], [hidden[25:40]], ["parts"], [7])
    two = job(drafter, [entry("a", 0, hidden[:30], tokens), entry("a", 30, hidden[30:40], tokens)],
              [hidden[:30], hidden[30:40]], ["a", "whole"], [7, 7])
    assert len(whole) == K and parts["drafts"][0] == whole and two["drafts"] == [whole, whole]
    other = job(drafter, [entry("other", 0, hidden[40:80], tokens)], [hidden[40:80]], ["other"], [7])["drafts"][0]
    assert other != whole  # the drafts do depend on the context
    job(drafter, [], [], release=["whole", "parts", "a", "other"])


def test_a_prefix_the_target_took_from_its_cache_comes_from_the_engine_s(drafter, context):
    hidden, tokens = context
    job(drafter, [entry("first", 0, hidden[:40], tokens)], [hidden[:40]])
    expected = job(drafter, [], [], ["first"], [7])["drafts"][0]
    job(drafter, [], [], release=["first"])  # its full blocks stay cached
    # A block (32 tokens) came from the target's prefix cache: the rows start after it.
    hit = job(drafter, [entry("second", 32, hidden[32:40], tokens, prefix=tokens[:32])], [hidden[32:40]],
              ["second"], [7])
    assert hit["resync"] == [] and hit["drafts"][0] == expected
    unknown = [t + 1 for t in tokens[:32]]
    miss = job(drafter, [entry("third", 32, hidden[32:40], tokens, prefix=unknown)], [hidden[32:40]], ["third"], [7])
    assert miss["resync"] == ["third"] and miss["drafts"] == [[]]
    job(drafter, [], [], release=["second"])


def test_a_gap_in_the_context_is_reported_and_drafts_nothing(drafter, context):
    hidden, tokens = context
    job(drafter, [entry("gap", 0, hidden[:10], tokens)], [hidden[:10]])
    reply = job(drafter, [entry("gap", 12, hidden[12:14], tokens)], [hidden[12:14]], ["gap"], [7])
    assert reply["resync"] == ["gap"] and reply["drafts"] == [[]]
    # Released, it starts again from its first token.
    again = job(drafter, [entry("gap", 0, hidden[:14], tokens)], [hidden[:14]], ["gap"], [7], release=["gap"])
    assert again["resync"] == [] and len(again["drafts"][0]) == K
