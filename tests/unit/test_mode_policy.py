"""The auto mode policy: a prior from placement and the cost model, then measurement.

The policy is fed steps by a fake clock (rates in tokens/s per mode); the
scheduler tests at the end drive it through MineDraft's scheduler on vLLM's
own KV manager with a fake clock (no model).
"""

from __future__ import annotations

import pytest
from scheduler_harness import FakeWorker, fake_model_dir, make_request, make_scheduler

from minedraft.scheduling.mode_policy import Load, ModePolicy
from minedraft.scheduling.mode_prior import make_prior, placement
from minedraft.scheduling.scheduler import MineDraftScheduler

LOAD8 = Load.of(8, 3)


def run(policy: ModePolicy, steps: int, rate: dict[bool, float], load: Load = LOAD8) -> list[bool]:
    """Feed ``steps`` decode steps of 10 tokens at the given tokens/s per mode."""
    allowed = []
    for _ in range(steps):
        a = policy.parallel_allowed(load)
        allowed.append(a)
        policy.observe(a, load, 10, 10 / rate[a])
    return allowed


def no_prior(**kw) -> ModePolicy:
    return ModePolicy("auto", prior=None, probe_steps=4, baseline_steps=4, **kw)


@pytest.mark.parametrize("parallel_rate, expect_parallel", [(200.0, True), (95.0, False), (101.0, False)])
def test_without_a_prior_auto_measures_and_keeps_the_faster_mode(parallel_rate, expect_parallel):
    policy = no_prior(exploit_steps=40, early_stop_loss=0.5)
    allowed = run(policy, 4 + 4 + 20, {True: parallel_rate, False: 100.0})
    # Plain SD first (the baseline), then a parallel probe of 4 steps at the same load.
    assert allowed[:4] == [False] * 4 and allowed[4:8] == [True] * 4
    # Within the 3 % margin a tie goes to plain speculative decoding.
    assert allowed[8:] == [expect_parallel] * 20


def test_a_win_expires_and_plain_sd_is_measured_again():
    policy = no_prior(exploit_steps=20)
    run(policy, 8, {True: 200.0, False: 100.0})
    assert run(policy, 20, {True: 200.0, False: 100.0}) == [True] * 20
    # 20 decode steps after the win: back to plain SD for a fresh baseline, then a new probe
    # that now loses (the load got slower in parallel mode).
    allowed = run(policy, 4 + 4 + 10, {True: 50.0, False: 100.0})
    assert allowed[:4] == [False] * 4 and allowed[4] is True and not any(allowed[8:])


def test_prior_ruling_parallel_out_means_no_probe_by_default():
    policy = ModePolicy("auto", prior=lambda load: 0.6)
    assert run(policy, 20_000, {True: 1000.0, False: 100.0}) == [False] * 20_000
    assert policy.probe_steps_run == 0


def test_prior_ruling_parallel_out_means_no_probe_in_a_short_run():
    policy = ModePolicy("auto", prior=lambda load: 0.6, ruled_out_budget=0.02)
    # 600 decode steps: 2 % is 12 steps, less than one 16-step probe.
    assert run(policy, 600, {True: 1000.0, False: 100.0}) == [False] * 600
    assert policy.probe_steps_run == 0


def test_prior_ruling_parallel_out_bounds_probing_to_two_percent():
    policy = ModePolicy("auto", prior=lambda load: 0.6, ruled_out_budget=0.02)
    allowed = run(policy, 20_000, {True: 50.0, False: 100.0})
    assert 0 < sum(allowed) <= 0.02 * len(allowed)
    # Every probe loses by half and stops early after min_probe_steps.
    assert policy.probe_steps_run == sum(allowed)
    assert sum(allowed) % policy.min_probe_steps == 0 and sum(allowed) < 0.02 * len(allowed) / 2


def test_a_wrong_prior_is_found_out_on_a_long_run_with_a_budget():
    policy = ModePolicy("auto", prior=lambda load: 0.6, ruled_out_budget=0.02)
    allowed = run(policy, 3_000, {True: 150.0, False: 100.0})
    first = allowed.index(True)
    assert first >= 16 / 0.02  # the budget of 2 % allows the first probe here
    assert all(allowed[first:first + 400])  # won: parallel kept until the verdict expires


def test_losing_probe_stops_early():
    policy = no_prior(early_stop_loss=0.10, exploit_steps=1000)
    policy.probe_steps = 16
    allowed = run(policy, 4 + 16 + 20, {True: 80.0, False: 100.0})
    assert allowed[4:8] == [True] * 4  # min_probe_steps
    assert not any(allowed[8:])
    assert "stopped after 4 steps" in policy.last_verdict


def test_a_new_load_gets_its_own_probe():
    policy = no_prior(exploit_steps=1000)
    small, large = Load.of(4, 3), Load.of(32, 3)
    assert run(policy, 8, {True: 80.0, False: 100.0}, small)[4:] == [True] * 4  # lost at 4-7 decodes
    assert not any(run(policy, 50, {True: 80.0, False: 100.0}, small))  # no re-probe there soon
    allowed = run(policy, 8 + 5, {True: 200.0, False: 100.0}, large)
    assert allowed[:4] == [False] * 4 and all(allowed[4:])  # probed and won at 32-63 decodes
    assert not run(policy, 1, {True: 200.0, False: 100.0}, small)[0]  # still plain SD at 4-7


def test_a_changed_mix_or_k_is_a_new_load():
    assert Load.of(8, 3) == Load.of(15, 3) != Load.of(16, 3)
    assert Load.of(8, 3) != Load.of(8, 4)
    assert Load.of(8, 3, prefill_tokens=200, decode_tokens=32) != Load.of(8, 3, 0, 32)


def test_a_probe_interrupted_by_a_load_change_decides_nothing():
    policy = no_prior(exploit_steps=1000)
    run(policy, 4 + 2, {True: 200.0, False: 100.0})
    assert policy.probing == LOAD8
    other = Load.of(2, 3)
    assert not policy.parallel_allowed(other) and policy.probing is None and not policy.parallel


def test_one_decode_request_is_never_probed():
    policy = no_prior()
    assert not any(run(policy, 100, {True: 1000.0, False: 100.0}, Load.of(1, 3)))


def test_choice_changes_are_reported_with_their_rates():
    lines = []
    policy = no_prior(exploit_steps=1000, on_change=lines.append)
    run(policy, 9, {True: 200.0, False: 100.0})
    policy.parallel_allowed(Load.of(2, 3))
    assert len(lines) == 2
    assert "parallel steps on at 8-15 decodes, k=3 (parallel 200 tok/s vs plain SD 100 tok/s)" in lines[0]
    assert "parallel steps off at 2-3 decodes" in lines[1]


def test_steps_without_decodes_do_not_count():
    policy = no_prior()
    for _ in range(50):
        policy.observe(False, Load(0, 3), 100, 0.001)  # prefill-only steps
    assert policy.decode_steps == 0 and not policy.parallel_allowed(LOAD8)


def test_pinned_modes_never_change():
    for mode, expected in (("parallel", True), ("stock", False)):
        policy = ModePolicy(mode, probe_steps=1, exploit_steps=1)
        assert set(run(policy, 20, {True: 1.0, False: 1000.0})) == {expected}


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown MineDraft mode"):
        ModePolicy("fast")


# ------------------------------------------------------------------ the prior


@pytest.mark.parametrize("where", ["cpu-threads", "gpu-stream", "serial"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_prior_rules_out_shared_hardware_at_equal_concurrency(where, k):
    prior = make_prior(where)
    for n in (2, 4, 8, 16, 32, 64):
        assert prior(Load.of(n, k)) < 1.0, (where, k, n)


def test_serial_lane_can_never_win_and_dedicated_hardware_has_no_prior():
    serial, threads = make_prior("serial"), make_prior("cpu-threads")
    for k in (1, 3, 5):
        for n in (2, 16, 256, 1024, 4096):
            assert serial(Load.of(n, k)) < 1.0, (k, n)
    # Even where the thread lane is predicted to win (many requests, k = 1).
    assert threads(Load.of(1024, 1)) > 1.0
    assert make_prior("dedicated") is None
    assert placement("cpu", "overlap") == "cpu-threads"
    assert placement("cuda", "overlap") == "gpu-stream"
    assert placement("cuda", "serial") == placement("cpu", "serial") == "serial"
    with pytest.raises(ValueError, match="unknown placement"):
        make_prior("elsewhere")


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
    sched.mode_policy = ModePolicy("auto", probe_steps=3, baseline_steps=3, exploit_steps=1000)
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 20, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    parallel = []
    for _ in range(20):
        out = sched.schedule()
        parallel.append(out.defer_drafts)
        worker.step(sched, out)
    # Prefill, the first decode step (its mix was the prefill's: another load),
    # 3 plain-SD baseline steps at 4-7 decodes, then a parallel probe there:
    # the policy saw real steps and decided.
    assert parallel.index(True) == 5 and parallel[5:8] == [True] * 3
    assert sched.mode_policy.decode_steps == 16  # requests finish after 16 decode steps
    assert sched.mode_policy.last_verdict.startswith("4-7 decodes, k=3")


def test_policy_charges_the_post_step_draft_join(model_dir, monkeypatch):
    """A parallel step's draft lane is joined in the engine's post-step, after
    update_from_output: its step time must run to the next schedule()."""
    import minedraft.scheduling.scheduler as scheduler_module

    clock = [0.0]
    monkeypatch.setattr(scheduler_module.time, "perf_counter", lambda: clock[0])
    sched = make_scheduler(model_dir, MineDraftScheduler)
    policy = sched.mode_policy = ModePolicy("auto", probe_steps=4, baseline_steps=4, exploit_steps=1000,
                                            early_stop_loss=0.9)
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 20, 60))
    worker = FakeWorker(3, lambda rid, n: n)
    for _ in range(10):
        out = sched.schedule()
        clock[0] += 0.010  # execute_model .. update_from_output
        worker.step(sched, out)
        clock[0] += 0.030 if out.defer_drafts else 0.0  # the post-step lane join
        if policy.probing is not None:
            baseline = policy._baseline[policy.probing]
    assert baseline.steps == 4 and baseline.seconds == pytest.approx(4 * 0.010)
    assert policy._probe.steps >= 3 and policy._probe.seconds == pytest.approx(policy._probe.steps * 0.040)
