"""minedraft/hybrid/scheduler_drafts.py through MineDraftScheduler on vLLM's KV manager (fake worker, no
model): suffix drafts from each request's tokens, deeper than K, verified and counted by vLLM's own stats."""

from __future__ import annotations

import dataclasses

from scheduler_harness import FakeWorker, make_request, make_scheduler

from minedraft.config.settings import CONFIG_KEY
from minedraft.scheduling.scheduler import MineDraftScheduler


def _hybrid_scheduler(model_dir, depth=8, mode="auto"):
    config = make_scheduler(model_dir, MineDraftScheduler, draft_model=True).vllm_config
    config = dataclasses.replace(config, additional_config={
        CONFIG_KEY: {"mode": mode, "hybrid": {"method": "suffix", "num_speculative_tokens": depth}}})
    return make_scheduler(model_dir, MineDraftScheduler, vllm_config=config)


def test_a_request_that_repeats_itself_verifies_suffix_drafts_deeper_than_k(model_dir):
    """The fake worker samples token 1 every time: after a few steps each request's tree predicts more 1s,
    up to the source's depth (8 > K = 3); vLLM's stats take acceptances past K (its per-position counts
    sized to the deeper source), and MineDraft's count each source."""
    sched = _hybrid_scheduler(model_dir)
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
    assert deepest == 8
    assert sched.minedraft_totals.suffix_requests > 0
    # vLLM counted them (model drafts of a first measurement besides): more than K accepted a verification
    assert accepted >= sched.minedraft_totals.suffix_accepted > 3 * sched.minedraft_totals.suffix_requests


def test_a_finished_request_s_tree_is_released_and_stock_mode_runs_no_second_source(model_dir):
    sched = _hybrid_scheduler(model_dir)
    sched.add_request(make_request("r0", 40, 4))
    worker = FakeWorker(3, lambda rid, n: n)
    for _ in range(8):
        worker.step(sched, sched.schedule())
    assert "r0" not in sched.requests and sched._suffix.source._fed == {}
    assert _hybrid_scheduler(model_dir, mode="stock")._suffix is None
