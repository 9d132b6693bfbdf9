"""MineDraftScheduler semantics over a fake KV cache (no model), and the auto mode's policy driven
through it on vLLM's own KV manager with a fake clock."""

from __future__ import annotations

import copy
import dataclasses
import random
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduler_harness import FakeWorker, make_request, make_scheduler, prefilled
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from minedraft.config.methods import METHODS, method_of
from minedraft.policy.depth import DepthChoice
from minedraft.policy.overlap import OverlapChoice
from minedraft.policy.tuning import TUNING
import minedraft.scheduling.scheduler as scheduler_module
from minedraft.scheduling.scheduler import MineDraftScheduler


@pytest.fixture(autouse=True)
def parallel_steps_pinned(monkeypatch):
    """The two groups are what these tests are about: MINEDRAFT_MODE=parallel unless a test sets its own."""
    monkeypatch.setenv("MINEDRAFT_MODE", "parallel")


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
    sched, _ = prefilled(model_dir, MineDraftScheduler, 2, 16, 40, accept=lambda rid, n: 0)
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
    sched, worker = prefilled(model_dir, MineDraftScheduler, 4, 20, 60)
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


# ------------------------------------------------------------------ the auto mode's policy


def test_stock_mode_scheduler_matches_stock_sd_step_for_step(model_dir):
    md = make_scheduler(model_dir, MineDraftScheduler)
    md.speculation.overlap = OverlapChoice("stock")
    stock = make_scheduler(model_dir, Scheduler)
    for s in (md, stock):
        for i in range(6):
            s.add_request(make_request(f"r{i}", 20 + 7 * i, 30))
    workers = FakeWorker(3, lambda rid, n: n // 2), FakeWorker(3, lambda rid, n: n // 2)
    for _ in range(30):
        a, b = md.schedule(), stock.schedule()
        assert a.num_scheduled_tokens == b.num_scheduled_tokens
        assert a.scheduled_spec_decode_tokens == b.scheduled_spec_decode_tokens
        assert not a.defer_drafts
        workers[0].step(md, a)
        workers[1].step(stock, b)
    assert md.minedraft_totals.parallel_steps == 0


def test_scheduler_feeds_the_policy_decode_steps(model_dir):
    sched = make_scheduler(model_dir, MineDraftScheduler)
    # A drafter on hardware of its own: auto tries parallel steps (all three of a trial's, whatever they read:
    # a trial's early end is test_overlap.py's).
    sched.speculation.overlap = OverlapChoice("auto", dedicated=True, tuning=dataclasses.replace(
        TUNING, trial_steps=3, trial_every=1000, trial_early_loss=0.0))
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 20, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    parallel = []
    for _ in range(20):
        out = sched.schedule()
        parallel.append(out.defer_drafts)
        worker.step(sched, out)
    # Prefill, the first decode step (its mix was the prefill's: another load),
    # 3 plain-SD baseline steps at 4-7 requests, then a parallel trial there:
    # the policy saw real steps and decided.
    assert parallel.index(True) == 5 and parallel[5:8] == [True] * 3
    # Requests finish after 16 decode steps if the verdict is plain SD; more if it is parallel (each step
    # verifies half of them). Which one wins depends on the steps' measured times (on a busy machine too).
    assert sched.speculation.overlap.decode_steps >= 16
    assert sched.speculation.overlap.last_verdict.startswith("4-7 requests, depth 3")


def test_policy_charges_the_post_step_draft_join(model_dir, monkeypatch):
    """A parallel step's draft lane is joined in the engine's post-step, after
    update_from_output: its step time must run to the next schedule()."""
    import minedraft.scheduling.scheduler as scheduler_module

    clock = [0.0]
    monkeypatch.setattr(scheduler_module.time, "perf_counter", lambda: clock[0])
    sched = make_scheduler(model_dir, MineDraftScheduler)
    policy = sched.speculation.overlap = OverlapChoice(  # a trial that runs its steps however slow they are
        "auto", dedicated=True, tuning=dataclasses.replace(TUNING, trial_steps=4, trial_every=1000,
                                                           trial_early_loss=0.0))
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 20, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    for _ in range(10):
        out = sched.schedule()
        clock[0] += 0.010  # execute_model .. update_from_output
        worker.step(sched, out)
        clock[0] += 0.030 if out.defer_drafts else 0.0  # the post-step lane join
        if policy.trying is not None:
            baseline = policy._baseline[policy.trying]
    assert baseline.steps == 4 and baseline.seconds == pytest.approx(4 * 0.010)
    assert policy._trial.steps >= 3 and policy._trial.seconds == pytest.approx(policy._trial.steps * 0.040)


# ------------------------------------------------------------------ speculation depth


def test_a_fixed_depth_leaves_vllm_s_lookup_alone(model_dir):
    sched, worker = prefilled(model_dir, MineDraftScheduler, 4, 20, 40)
    assert sched.speculation.depths is None and sched.dynamic_sd_lookup is None
    assert sched.schedule().num_spec_tokens_to_schedule == 3


@pytest.mark.parametrize(("method", "parallel_drafting", "fixed"), [
    ("draft_model", True, "parallel drafting"),  # PARD
    ("eagle3", True, "parallel drafting"),  # P-EAGLE
    ("dflash", True, "parallel drafting"),  # vLLM sets parallel_drafting for DFlash
    ("suffix", False, "suffix decoding"),  # its proposer asserts depth == K
    ("medusa", False, "Medusa"),  # so does its proposer: one head per draft token
    ("draft_model", False, None), ("eagle3", False, None), ("ngram", False, None), ("mtp", False, None),
])
def test_drafters_vllm_runs_only_at_depth_k_are_named(method, parallel_drafting, fixed):
    spec = SimpleNamespace(method=method, parallel_drafting=parallel_drafting)
    assert method_of(spec).drafts_only_k == fixed


def drafts_only_k(monkeypatch):
    """The harness's n-gram drafter as one vLLM runs only at depth K (parallel drafting, suffix decoding)."""
    monkeypatch.setitem(METHODS, "ngram", dataclasses.replace(METHODS["ngram"], drafts_only_k="parallel drafting"))


def test_a_drafter_that_drafts_only_k_is_verified_at_k_by_default(model_dir, monkeypatch):
    monkeypatch.setenv("MINEDRAFT_MODE", "auto")
    drafts_only_k(monkeypatch)
    sched, worker = prefilled(model_dir, MineDraftScheduler, 4, 20, 40)
    assert sched.speculation.depths is None and sched.dynamic_sd_lookup is None
    out = sched.schedule()
    assert {len(ids) for ids in out.scheduled_spec_decode_tokens.values()} == {3}


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_a_drafter_that_drafts_only_k_gets_its_drafts_verified_at_the_controller_s_depth(
        model_dir, monkeypatch, depth):
    """Parallel drafting and suffix decoding under speculation_depth auto: vLLM's drafter makes K drafts
    whatever the depth, so the controller's depth is how many of them each request has verified; the
    drafter is still asked for K."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    drafts_only_k(monkeypatch)
    sched, worker = prefilled(model_dir, MineDraftScheduler, 4, 20, 40)
    assert sched.speculation.depth_control == "verified" and sched.dynamic_sd_lookup is None
    assert sched.speculation.depths.draft_cost == 0.0  # the draft costs the same at every depth
    observed = pin_depth(sched, monkeypatch, depth)
    verified = []
    for _ in range(4):
        out = sched.schedule()
        assert out.num_spec_tokens_to_schedule == 3  # the drafter drafts K
        verified += [len(out.scheduled_spec_decode_tokens.get(rid, ())) for rid in out.num_scheduled_tokens]
        worker.step(sched, out)
    sched.schedule()  # times the last step
    assert verified and set(verified) == {depth}
    assert {depth for _, depth, *_ in observed[1:]} == {depth}  # [0]: the prefill step, at K
    assert sched.minedraft_totals.steps_by_depth.get(str(depth), 0) >= 4


def pin_depth(sched, monkeypatch, depth: int) -> list[tuple]:
    """The policy's depth choice answers ``depth``; the steps it is told of are recorded in the list returned."""
    observed = []
    monkeypatch.setattr(sched.speculation.depths, "depth", lambda *load, **more: depth)
    monkeypatch.setattr(sched.speculation.depths, "observe_step", lambda *step, **fit: observed.append(step))
    return observed


def choose_depths_freely(sched, max_depth: int = 3) -> DepthChoice:
    """The harness's draft is as large as the target, which rules out every depth > 0 (policy/weight_bound.py):
    a depth choice without that bound, whose choices the test makes."""
    sched.speculation.depths = DepthChoice(max_depth)
    sched.speculation.depth = sched.speculation.depths.starting_depth
    return sched.speculation.depths


@pytest.mark.parametrize("mode", ["stock", "parallel", "auto"])
def test_the_controller_s_depth_reaches_vllm_s_output_and_the_counters(model_dir, monkeypatch, mode):
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    monkeypatch.setenv("MINEDRAFT_MODE", mode)
    sched, worker = prefilled(model_dir, MineDraftScheduler, 4, 20, 40)
    if mode == "stock":  # stock stays vLLM's fixed depth, for comparisons
        assert sched.speculation.depths is None and sched.schedule().num_spec_tokens_to_schedule == 3
        return
    observed = pin_depth(sched, monkeypatch, 1)
    for _ in range(3):
        out = sched.schedule()
        assert out.num_spec_tokens_to_schedule == 1
        worker.step(sched, out)
    sched.schedule()  # times the last step
    assert [depth for _, depth, *_ in observed] == [3, 1, 1, 1]  # the prefill step, at K, then the choice
    assert sched.minedraft_totals.steps_by_depth == {"3": 1, "1": 4}  # the prefill step drafted at K


def test_the_counters_show_the_depth_of_a_user_s_per_batch_size_table(model_dir):
    """With vLLM's num_speculative_tokens_per_batch_size the controller is off; the counters still show
    the depth each step drafted at (vLLM's lookup: here 0 from 2 scheduled requests up)."""
    sched, worker = prefilled(model_dir, MineDraftScheduler, 4, 20, 40)
    sched.dynamic_sd_lookup = [3, 3] + [0] * 63
    for _ in range(3):
        out = sched.schedule()
        assert out.num_spec_tokens_to_schedule == 0
        worker.step(sched, out)
    assert sched.minedraft_totals.steps_by_depth == {"3": 1, "0": 3}  # the prefill step: k, no table yet


def test_depth_zero_runs_no_parallel_step_and_its_steps_are_measured(model_dir, monkeypatch):
    """A decode step at depth 0 verifies no drafts, by design: the controller still times it."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    sched, worker = prefilled(model_dir, MineDraftScheduler, 6, 20, 40)  # pinned to parallel by the test env
    observed = pin_depth(sched, monkeypatch, 0)
    for _ in range(3):
        out = sched.schedule()
        assert not out.defer_drafts and out.num_spec_tokens_to_schedule == 0
        worker.step(sched, out)
    sched.schedule()
    assert [(decodes, depth) for decodes, depth, *_ in observed] == [(6, 3)] + [(6, 0)] * 3  # [0]: the prefill


def test_the_process_drafter_has_its_depth_chosen_too(model_dir, monkeypatch):
    """Its jobs carry the step's depth (contract.py ProposeCall.depth)."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    monkeypatch.setenv("MINEDRAFT_DRAFTER", "process")
    monkeypatch.setenv("MINEDRAFT_DRAFTER_DEVICE", "cpu:1")
    sched = make_scheduler(model_dir, MineDraftScheduler)
    assert sched.speculation.depths is not None and sched.dynamic_sd_lookup is not None


def test_only_a_step_that_drafted_nothing_lets_the_engine_skip_collecting_drafts(model_dir, monkeypatch):
    """expects_draft_tokens (monkeypatch/patch_draft_collection.py): False only at depth 0 with no job on the lane."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    sched, worker = prefilled(model_dir, MineDraftScheduler, 6, 20, 40)  # pinned to parallel by the test env
    depth = 1
    monkeypatch.setattr(sched.speculation.depths, "depth", lambda *load, **more: depth)
    out = sched.schedule()
    assert out.defer_drafts and sched.expects_draft_tokens()
    worker.step(sched, out)
    depth = 0  # the next step drafts nothing, but the lane runs the last step's deferred job
    out = sched.schedule()
    assert out.draft_only_req_ids and not out.defer_drafts and sched.expects_draft_tokens()
    worker.step(sched, out)
    out = sched.schedule()
    assert not out.draft_only_req_ids and out.num_spec_tokens_to_schedule == 0
    assert not sched.expects_draft_tokens()


def test_the_controller_sees_each_request_s_drafts_verified_and_accepted(model_dir, monkeypatch):
    """Acceptance per draft position (policy/acceptance.py) is measured from each verified request."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    # One draft of three accepted.
    sched, worker = prefilled(model_dir, MineDraftScheduler, 4, 20, 40, accept=lambda rid, n: min(n, 1))
    pin_depth(sched, monkeypatch, 3)
    verified = []
    monkeypatch.setattr(sched.speculation.depths, "observe_verification", lambda step: verified.append(list(step)))
    for _ in range(4):
        worker.step(sched, sched.schedule())
    sched.schedule()  # a step is observed once the next one is planned: then its duration is known
    assert {(v.drafts, v.accepted) for step in verified for v in step} == {(3, 1)}
    assert sum(map(len, verified)) >= 8


def test_a_step_that_starts_requests_chooses_its_depth_for_them(model_dir, monkeypatch):
    """A step's drafts are verified next step by the requests running then: a prefill step of waiting
    requests asks the controller for them, the draft's prefill of their prompts counted as work done
    once, and a decode step with one more arriving counts it too (tokens_left: the median of their
    max_tokens left; survivals: each request's, the new ones' the batch's; closing, none being left
    waiting: each request's max_tokens left)."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=8, max_model_len=128, draft_model=True)
    asked = []
    monkeypatch.setattr(sched.speculation.depths, "depth", lambda *load, **more: asked.append((*load, more)) or 3)
    for i in range(3):
        sched.add_request(make_request(f"r{i}", 10, 40))
    worker = FakeWorker(3, lambda rid, n: n)
    worker.step(sched, sched.schedule())
    sched.add_request(make_request("late", 20, 30))
    worker.step(sched, sched.schedule())
    unmeasured = [1.0] * 3  # each request's drafts, nothing measured yet: counted as accepted
    assert asked == [(3, 40, {"catch_up": 30, "survivals": [unmeasured] * 3, "closing": [40] * 3, "row_catch_ups": []}),
                     (4, 39, {"catch_up": 20, "survivals": [unmeasured] * 4, "closing": [39] * 3 + [30],
                              "row_catch_ups": [0, 0, 0]})]


def test_while_requests_wait_the_depth_serves_the_batch_s_throughput(model_dir, monkeypatch):
    """Requests left waiting past the batch's room: no request's tokens left are passed (the batch's
    tokens per second frees their slots soonest); once none waits, each request's are."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=2, max_model_len=128, draft_model=True)
    asked = []
    monkeypatch.setattr(sched.speculation.depths, "depth", lambda *load, **more: asked.append(more["closing"]) or 3)
    for i in range(3):
        sched.add_request(make_request(f"r{i}", 10, 5))
    worker = FakeWorker(3, lambda rid, n: n)
    while sched.get_request_counts()[1]:
        worker.step(sched, sched.schedule())
    worker.step(sched, sched.schedule())
    assert asked[0] is None and asked[-1] is not None


def test_the_controller_sees_the_tokens_a_drafter_catches_up_on(model_dir, monkeypatch):
    """A draft model skips its forward at depth 0 and catches up when next drafted
    (worker/in_process/draft_catch_up.py): the step that drafts again is told how many tokens that is."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    monkeypatch.setenv("MINEDRAFT_MODE", "auto")
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=8, max_model_len=128, draft_model=True)
    choice = choose_depths_freely(sched)
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 10, 40))
    worker = FakeWorker(3, lambda rid, n: n)
    worker.step(sched, sched.schedule())  # the prefill, at the starting depth K: the draft's prefill
    depth = 0
    monkeypatch.setattr(choice, "depth", lambda *load, **more: depth)
    observed = []
    monkeypatch.setattr(choice, "observe_step", lambda *step, **fit: observed.append(step))
    for depth in (0, 0, 3, 3):
        worker.step(sched, sched.schedule())
    sched.schedule()  # times the last step
    assert [depth for _, depth, *_ in observed] == [3, 0, 0, 3, 3]
    skipped = sum(tokens for _, _, tokens, *_ in observed[1:3])
    assert [catch_up for *_, catch_up, _ in observed] == [4 * 10, 0, 0, skipped, 0]
    # The target's prefill tokens: such a step is not fitted by the step-cost model (policy/step_costs.py).
    assert [prefill for *_, prefill in observed] == [4 * 10, 0, 0, 0, 0]


@pytest.mark.parametrize(("mode", "first_token", "expected"), [
    ("auto", "early", True), ("parallel", "early", True), ("stock", "early", False), ("auto", "after_drafts", False)])
def test_a_fallback_step_with_prompt_tokens_drafts_after_its_outputs(model_dir, monkeypatch, mode, first_token,
                                                                     expected):
    """drafts_after_output: every step that computes prompt tokens (each chunk of a chunked prefill,
    the last one sampling the first token) and drafts inline; never a decode-only step, never stock mode."""
    monkeypatch.setenv("MINEDRAFT_MODE", mode)
    monkeypatch.setenv("MINEDRAFT_FIRST_TOKEN", first_token)
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "fixed")  # K: the draft, as large as the target, would start at 0
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_batched_tokens=16, max_num_seqs=4,
                           max_model_len=128, draft_model=True)
    sched.add_request(make_request("long", 40, 20))
    worker = FakeWorker(3, lambda rid, n: n)
    chunks = []
    while not sched.requests["long"].output_token_ids:
        out = sched.schedule()
        chunks.append(out.drafts_after_output)
        assert not out.defer_drafts
        worker.step(sched, out)
    assert len(chunks) == 3 and chunks == [expected] * 3  # 40 prompt tokens, 16 a step
    assert sched.schedule().num_scheduled_tokens == {"long": 1 + 3}  # a decode: 1 + k


@pytest.mark.parametrize(("idle_drafter", "first_token", "holds"), [
    ("skip", "early", True), ("run", "early", False), ("skip", "after_drafts", False)])
def test_a_decode_step_holds_its_drafting_for_arrivals_where_the_drafter_catches_up(
        model_dir, monkeypatch, idle_drafter, first_token, holds):
    """With a drafter that catches up on a skipped call (a draft model, idle_drafter=skip), every plain SD
    step drafts after its outputs, and the engine core may skip that round for a waiting request
    (skips_held_drafts: once per step, counted); without one, a decode step drafts inline as vLLM."""
    for name, value in {"MODE": "auto", "SPECULATION_DEPTH": "fixed", "IDLE_DRAFTER": idle_drafter,
                        "FIRST_TOKEN": first_token}.items():
        monkeypatch.setenv(f"MINEDRAFT_{name}", value)
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=4, max_model_len=128, draft_model=True)
    sched.add_request(make_request("solo", 10, 20))
    worker = FakeWorker(3, lambda rid, n: n)
    worker.step(sched, sched.schedule())  # the prefill
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"solo": 1 + 3} and not out.defer_drafts
    assert out.drafts_after_output is holds
    assert sched.skips_held_drafts() is holds and not sched.skips_held_drafts()
    assert sched.minedraft_totals.arrival_skips == int(holds)


@pytest.mark.parametrize("others", [0, 1])
def test_a_step_whose_every_request_finished_collects_no_drafts(model_dir, monkeypatch, others):
    """Drafts made after a request's last step would never be verified: where every request the step ran has
    finished, the engine core does not collect them (so held drafting is never done), and the step, short of
    its drafting, is not timed; where one goes on, they are collected as always."""
    for name, value in {"MODE": "auto", "SPECULATION_DEPTH": "fixed"}.items():
        monkeypatch.setenv(f"MINEDRAFT_{name}", value)
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=4, max_model_len=128, draft_model=True)
    sched.add_request(make_request("short", 10, 3))
    for i in range(others):
        sched.add_request(make_request(f"long{i}", 10, 40))
    worker = FakeWorker(3, lambda rid, n: n)
    worker.step(sched, sched.schedule())  # the prefills: 1 token each
    out = sched.schedule()
    assert out.drafts_after_output and sched.expects_draft_tokens()
    sched.add_request(make_request("arrived", 10, 20))  # meanwhile: the engine has work after the step
    worker.step(sched, out)  # "short" accepts its 3 drafts: 4 tokens, past its 3
    assert "short" not in sched.requests or sched.requests["short"].is_finished()
    assert sched.expects_draft_tokens() is bool(others)
    assert (sched._ran.started is None) is (not others)


@pytest.mark.parametrize("blocked_by", ["a full batch", "a request already waiting"])
def test_a_held_round_is_kept_for_a_request_that_could_not_start_next_step(model_dir, monkeypatch, blocked_by):
    """Skipping would lose the round for nothing: the new request would not be scheduled next step."""
    for name, value in {"MODE": "auto", "SPECULATION_DEPTH": "fixed"}.items():
        monkeypatch.setenv(f"MINEDRAFT_{name}", value)
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=1 if blocked_by == "a full batch" else 4,
                           max_model_len=128, draft_model=True)
    sched.add_request(make_request("solo", 10, 20))
    worker = FakeWorker(3, lambda rid, n: n)
    worker.step(sched, sched.schedule())
    assert sched.schedule().drafts_after_output
    if blocked_by == "a request already waiting":
        sched.add_request(make_request("queued", 10, 20))
    assert not sched.skips_held_drafts() and sched.minedraft_totals.arrival_skips == 0


def test_a_drafter_without_a_forward_drafts_inline_as_vllm(model_dir, monkeypatch):
    """n-gram drafts in host code from the token table: nothing to move off the first token."""
    monkeypatch.setenv("MINEDRAFT_MODE", "auto")
    sched = make_scheduler(model_dir, MineDraftScheduler)  # the harness's speculative config: ngram
    sched.add_request(make_request("solo", 10, 20))
    assert not sched.schedule().drafts_after_output


@pytest.mark.parametrize(("can_speculate", "blocks"), [(False, 1), (True, 2)])
def test_a_depth_zero_step_reserves_no_kv_slots_for_drafts(model_dir, monkeypatch, can_speculate, blocks):
    """vLLM reserves K slots past each request's tokens for its drafter; a draft model skips its depth-0
    call, so a step at depth 0 reserves none: a request of 15 tokens holds one block of 16, as it
    would with the target alone, and two where the step drafts (15 + K = 18)."""
    monkeypatch.setenv("MINEDRAFT_MODE", "auto")
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=4, max_model_len=128, draft_model=True)
    if can_speculate:
        choose_depths_freely(sched)  # no weight bound: it starts at K
    assert sched.speculation.depths.can_speculate is can_speculate  # the harness's draft is as large as the target
    sched.add_request(make_request("r0", 15, 8))
    out = sched.schedule()
    assert out.num_spec_tokens_to_schedule == (3 if can_speculate else 0)
    assert len(sched.kv_cache_manager.get_block_ids("r0")[0]) == blocks


def test_the_engine_s_call_after_a_batch_s_last_request_is_not_a_step(model_dir):
    """vLLM's engine core calls schedule() once more after the last request of a batch finished, to tell the
    workers; it schedules nothing and is not a step: the counters and the gauges keep the last step that ran."""
    sched, worker = prefilled(model_dir, MineDraftScheduler, 2, 20, 6)
    while sched.has_unfinished_requests():
        worker.step(sched, sched.schedule())
    before = (sched.minedraft_totals.to_payload(), sched.minedraft_stats.to_payload())
    out = sched.schedule()
    assert not out.num_scheduled_tokens and out.finished_req_ids  # the call tells the workers, runs nothing
    assert (sched.minedraft_totals.to_payload(), sched.minedraft_stats.to_payload()) == before


@pytest.mark.parametrize("seed", range(3))
def test_a_step_planned_from_its_key_gets_the_plan_its_view_gives(model_dir, monkeypatch, seed):
    """Where a depth 0 stands, the scheduler plans the step from its key, building no request's view
    (SpeculationPolicy.held_plan): the key it builds is the one its view gives, and so is the plan, under
    traffic that starts, finishes, aborts and preempts requests (a KV cache of 80 blocks)."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    monkeypatch.setenv("MINEDRAFT_MODE", "auto")
    rng = random.Random(seed)
    sched = make_scheduler(model_dir, MineDraftScheduler, num_blocks=80, max_num_batched_tokens=512, max_num_seqs=8)
    original = type(sched.speculation).held_plan
    keys, held = [], []

    def checked(policy, key):
        decoding = [r for r in sched.running if not r.is_prefill_chunk]
        view = sched._view(decoding, sched._starting(), set())
        assert key == view.key()
        keys.append(key)
        twin = copy.deepcopy(policy)
        plan = original(policy, key)
        if plan is not None:
            assert plan == twin.plan(view)
            held.append(plan)
        return plan

    monkeypatch.setattr(type(sched.speculation), "held_plan", checked)
    clock = [0.0]
    monkeypatch.setattr(scheduler_module.time, "perf_counter", lambda: clock[0])
    worker = FakeWorker(3, lambda rid, n: 0)  # every draft rejected: the policy settles at depth 0
    next_id = 0
    for step in range(240):
        if step % 60 < 20:  # arrivals, then a stretch of the same requests where depth 0 can stand
            for _ in range(rng.choice([0, 1, 2])):
                sched.add_request(make_request(f"q{next_id}", rng.randint(1, 120), rng.randint(20, 90)))
                next_id += 1
            if sched.running and rng.random() < 0.1:
                sched.finish_requests(rng.choice(sched.running).request_id, RequestStatus.FINISHED_ABORTED)
        out = sched.schedule()
        clock[0] += 0.005 + 0.002 * out.num_spec_tokens_to_schedule  # the checks above take no step time
        worker.step(sched, out)
    assert len(keys) > 100 and len(held) > 30
    assert any(not k.closed for k in keys) and any(k.num_requests > len(k.decoding) for k in keys)
