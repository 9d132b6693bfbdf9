"""minedraft/hybrid/scheduler_drafts.py through MineDraftScheduler on vLLM's KV manager (fake worker, no
model): suffix drafts from each request's tokens, deeper than K, verified and counted by vLLM's own stats."""

from __future__ import annotations

import dataclasses

from scheduler_harness import FakeWorker, make_request, make_scheduler

from minedraft.config.settings import CONFIG_KEY
from minedraft.scheduling.scheduler import MineDraftScheduler


def _hybrid_scheduler(model_dir, depth=8, mode="auto", method="suffix"):
    config = make_scheduler(model_dir, MineDraftScheduler, draft_model=True).vllm_config
    hybrid = {"method": method, "num_speculative_tokens": depth}
    if method == "ngram":
        hybrid.update(prompt_lookup_min=2, prompt_lookup_max=3)
    config = dataclasses.replace(config, additional_config={CONFIG_KEY: {"mode": mode, "hybrid": hybrid}})
    return make_scheduler(model_dir, MineDraftScheduler, vllm_config=config)


def repeats_itself(model_dir, method: str) -> tuple[int, int, int, int]:
    """Three requests the fake worker answers with token 1 every time, 20 steps: the deepest drafts
    scheduled, the requests verified with lookup drafts and their drafts accepted, and all accepted."""
    sched = _hybrid_scheduler(model_dir, method=method)
    for i in range(3):
        sched.add_request(make_request(f"r{i}", 40, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    deepest, accepted = 0, 0
    for _ in range(20):
        output = sched.schedule()
        deepest = max([deepest, *map(len, output.scheduled_spec_decode_tokens.values())])
        for engine_outputs in worker.step(sched, output).values():
            stats = engine_outputs.scheduler_stats
            if stats is not None and stats.spec_decoding_stats is not None:
                accepted += stats.spec_decoding_stats.num_accepted_tokens
    totals = sched.minedraft_totals
    return deepest, totals.lookup_requests, totals.lookup_accepted, accepted


def test_a_request_that_repeats_itself_verifies_suffix_drafts_deeper_than_k(model_dir):
    """The fake worker samples token 1 every time: after a few steps each request's tree predicts more 1s,
    up to the source's depth (8 > K = 3); vLLM's stats take acceptances past K (its per-position counts
    sized to the deeper source), and MineDraft's count each source (n-gram matching: test_ngram_drafts.py)."""
    deepest, lookup_requests, lookup_accepted, accepted = repeats_itself(model_dir, "suffix")
    assert deepest == 8
    assert lookup_requests > 0
    # vLLM counted them (model drafts of a first measurement besides): more than K accepted a verification
    assert accepted >= lookup_accepted > 3 * lookup_requests


def test_a_finished_request_s_tree_is_released_and_stock_mode_runs_no_second_source(model_dir):
    sched = _hybrid_scheduler(model_dir)
    sched.add_request(make_request("r0", 40, 4))
    worker = FakeWorker(3, lambda rid, n: n)
    for _ in range(8):
        worker.step(sched, sched.schedule())
    assert "r0" not in sched.requests and sched._lookup.source._fed == {}
    assert _hybrid_scheduler(model_dir, mode="stock")._lookup is None
