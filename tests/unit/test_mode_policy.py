"""The auto mode policy: probe both modes, keep the faster, re-probe (no model)."""

from __future__ import annotations

import pytest
from scheduler_harness import FakeWorker, fake_model_dir, make_request, make_scheduler

from minedraft.core.mode_policy import ModePolicy
from minedraft.core.scheduler import MineDraftScheduler


def run(policy: ModePolicy, steps: int, rate: dict[bool, float]) -> list[bool]:
    """Feed ``steps`` decode steps of 10 tokens at the given tokens/s per mode."""
    allowed = []
    for _ in range(steps):
        a = policy.parallel_allowed()
        allowed.append(a)
        policy.observe(a, True, 10, 10 / rate[a])
    return allowed


@pytest.mark.parametrize("parallel_rate, expect_parallel", [(200.0, True), (90.0, False), (101.0, False)])
def test_auto_keeps_the_faster_mode(parallel_rate, expect_parallel):
    policy = ModePolicy("auto", probe_steps=4, exploit_steps=20, margin=0.03)
    allowed = run(policy, 8 + 20, {True: parallel_rate, False: 100.0})
    assert allowed[:4] == [True] * 4 and allowed[4:8] == [False] * 4
    # Within the 3 % margin a tie goes to plain speculative decoding.
    assert allowed[8:] == [expect_parallel] * 20


def test_auto_probes_again_and_follows_the_load():
    policy = ModePolicy("auto", probe_steps=4, exploit_steps=10)
    run(policy, 8 + 10, {True: 200.0, False: 100.0})
    assert policy.parallel_allowed()  # re-probing starts with parallel
    allowed = run(policy, 8 + 10, {True: 50.0, False: 100.0})
    assert allowed[8:] == [False] * 10


def test_steps_without_decodes_do_not_count():
    policy = ModePolicy("auto", probe_steps=2, exploit_steps=10)
    for _ in range(50):
        policy.observe(True, False, 100, 0.001)  # prefill-only steps
    assert policy.parallel_allowed() and policy.last_rates == (0.0, 0.0)


def test_pinned_modes_never_change():
    for mode, expected in (("parallel", True), ("stock", False)):
        policy = ModePolicy(mode, probe_steps=1, exploit_steps=1)
        assert set(run(policy, 20, {True: 1.0, False: 1000.0})) == {expected}


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown MineDraft mode"):
        ModePolicy("fast")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return fake_model_dir(tmp_path_factory.mktemp("model"))


def test_stock_mode_scheduler_matches_stock_sd_step_for_step(model_dir):
    from vllm.v1.core.sched.scheduler import Scheduler

    md = make_scheduler(model_dir, MineDraftScheduler)
    md.mode_policy = ModePolicy("stock")
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
    sched.mode_policy = ModePolicy("auto", probe_steps=3, exploit_steps=1000)
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 20, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    parallel = []
    for _ in range(20):
        out = sched.schedule()
        parallel.append(out.defer_drafts)
        worker.step(sched, out)
    # Prefill, 3 parallel probe steps, then plain SD for the stock probe:
    # the policy saw real steps and moved through its phases.
    assert parallel[1:4] == [True] * 3
    assert not any(parallel[4:7])
    assert sched.mode_policy._phase == "exploit"


def test_policy_charges_the_post_step_draft_join(model_dir, monkeypatch):
    """A parallel step's draft lane is joined in the engine's post-step, after
    update_from_output: its step time must run to the next schedule()."""
    import minedraft.core.scheduler as scheduler_module

    clock = [0.0]
    monkeypatch.setattr(scheduler_module.time, "perf_counter", lambda: clock[0])
    sched = make_scheduler(model_dir, MineDraftScheduler)
    sched.mode_policy = ModePolicy("auto", probe_steps=4, exploit_steps=1000)
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 20, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    for _ in range(9):
        out = sched.schedule()
        clock[0] += 0.010  # execute_model .. update_from_output
        worker.step(sched, out)
        clock[0] += 0.030 if out.defer_drafts else 0.0  # the post-step lane join
    parallel, stock = sched.mode_policy._rates[True], sched.mode_policy._rates[False]
    assert parallel.steps == 4 and parallel.seconds == pytest.approx(4 * 0.040)
    assert stock.steps >= 3 and stock.seconds == pytest.approx(stock.steps * 0.010)
