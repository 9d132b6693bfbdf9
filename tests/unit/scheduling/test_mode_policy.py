"""The auto mode policy (minedraft/scheduling/mode_policy.py): a prior, then measurement.

The policy is fed steps by a fake clock (rates in tokens/s per mode); its prior
is tested in test_mode_prior.py, the scheduler driving it in test_scheduler.py.
"""

from __future__ import annotations

import pytest

from minedraft.scheduling.mode_policy import Load, ModePolicy

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
