"""MineDraftScheduler semantics over a fake KV cache (no model)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduler_harness import prefilled, FakeWorker, fake_model_dir, make_request, make_scheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from minedraft.scheduling.scheduler import MineDraftScheduler


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return fake_model_dir(tmp_path_factory.mktemp("model"))


def _decodes(sched):
    return {r.request_id for r in sched.running if not r.is_prefill_chunk}


def test_groups_alternate_and_draft_only_get_no_blocks(model_dir):
    sched, worker = prefilled(model_dir, MineDraftScheduler, 6, 20, 40)
    groups = []
    for _ in range(8):
        out = sched.schedule()
        blocks_before = {rid: list(sched.kv_cache_manager.get_block_ids(rid)[0]) for rid in out.draft_only_req_ids}
        verified = set(out.num_scheduled_tokens)
        assert out.defer_drafts
        assert not verified & set(out.draft_only_req_ids)
        groups.append(frozenset(verified))
        worker.step(sched, out)
        for rid, blocks in blocks_before.items():
            assert list(sched.kv_cache_manager.get_block_ids(rid)[0]) == blocks
    assert len(groups[0]) == 3 and groups[0] != groups[1]
    assert groups[0::2] == [groups[0]] * 4 and groups[1::2] == [groups[1]] * 4


def test_verify_step_allocates_lookahead_for_deferred_draft(model_dir):
    sched = make_scheduler(model_dir, MineDraftScheduler)
    for i in range(2):
        sched.add_request(make_request(f"r{i}", 16, 40))
    worker = FakeWorker(3, lambda rid, n: 0)
    worker.step(sched, sched.schedule())
    out = sched.schedule()
    for rid in out.num_scheduled_tokens:
        req = sched.requests[rid]
        slots = len(sched.kv_cache_manager.get_block_ids(rid)[0]) * 16
        # Verified positions plus k drafts the lane writes next step.
        assert slots >= req.num_computed_tokens + sched.num_spec_tokens


def test_single_request_falls_back_to_stock_sd(model_dir):
    sched = make_scheduler(model_dir, MineDraftScheduler)
    sched.add_request(make_request("solo", 10, 20))
    worker = FakeWorker(3, lambda rid, n: n)
    for _ in range(6):
        out = sched.schedule()
        assert not out.defer_drafts and out.draft_only_req_ids == []
        assert "solo" in out.num_scheduled_tokens
        worker.step(sched, out)
    assert sched.minedraft_totals.parallel_steps == 0


def test_no_speculative_config_is_stock(model_dir):
    md = make_scheduler(model_dir, MineDraftScheduler, k=None)
    stock = make_scheduler(model_dir, Scheduler, k=None)
    for s in (md, stock):
        for i in range(4):
            s.add_request(make_request(f"r{i}", 12 + i, 8))
    worker = FakeWorker(0, lambda rid, n: 0)
    for _ in range(10):
        a, b = md.schedule(), stock.schedule()
        assert a.num_scheduled_tokens == b.num_scheduled_tokens
        worker.step(md, a)
        worker.step(stock, b)


def test_abort_and_preemption_leave_draft_list(model_dir):
    sched = make_scheduler(model_dir, MineDraftScheduler)
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 20, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    worker.step(sched, sched.schedule())
    out = sched.schedule()
    worker.step(sched, out)
    drafting = set(out.num_scheduled_tokens)
    victim = sorted(drafting)[0]
    sched.finish_requests(victim, RequestStatus.FINISHED_ABORTED)
    out = sched.schedule()
    assert victim not in out.draft_only_req_ids
    assert set(out.draft_only_req_ids) == drafting - {victim}




@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), num_blocks=st.sampled_from([40, 80, 10_000]),
       prefix_caching=st.booleans(), k=st.integers(1, 5))
def test_invariants_hold_under_random_traffic(model_dir, seed, num_blocks, prefix_caching, k):
    rng = random.Random(seed)
    sched = make_scheduler(model_dir, MineDraftScheduler, k=k, num_blocks=num_blocks,
                           max_num_batched_tokens=512, enable_prefix_caching=prefix_caching)
    free_at_start = sched.kv_cache_manager.block_pool.get_num_free_blocks()
    worker = FakeWorker(k, lambda rid, n: rng.randint(0, n))
    last_verified: dict[str, int] = {}
    shared = [7] * 32
    next_id = 0
    for step in range(60):
        for _ in range(rng.choice([0, 0, 1, 2])):
            sched.add_request(make_request(f"q{next_id}", rng.randint(1, 120), rng.randint(1, 40),
                                           prefix=shared if rng.random() < 0.3 else None))
            next_id += 1
        if sched.running and rng.random() < 0.05:
            sched.finish_requests(rng.choice(sched.running).request_id, RequestStatus.FINISHED_ABORTED)
        decodes_before = _decodes(sched)
        out = sched.schedule()
        verified = set(out.num_scheduled_tokens)
        # No request is verified and drafted in the same step.
        assert not verified & set(out.draft_only_req_ids)
        # Draft-only requests are running and got no tokens.
        for rid in out.draft_only_req_ids:
            assert sched.requests[rid].status == RequestStatus.RUNNING
        for rid in verified:
            last_verified[rid] = step
        # No starvation: a running decode request waits at most one step, unless
        # vLLM itself could not schedule it (preemption under a tiny cache).
        if out.preempted_req_ids is None or not out.preempted_req_ids:
            for rid in decodes_before & _decodes(sched):
                if rid in last_verified and num_blocks == 10_000:
                    assert step - last_verified[rid] <= 2, rid
        worker.step(sched, out)
    for rid in list(sched.requests):
        sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
    sched.schedule()
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == free_at_start
