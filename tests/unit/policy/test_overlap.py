"""Whether a step may run in parallel (minedraft/policy/overlap.py): the drafter's placement, then trials.

The choice is fed steps by a fake clock (rates in tokens/s per kind of step), as minedraft/policy/policy.py
feeds it each step's output tokens and seconds.
"""

from __future__ import annotations

import dataclasses

import pytest

from minedraft.config.modes import PLACEMENTS
from minedraft.policy.load import Load
from minedraft.policy.overlap import OverlapChoice, placement
from minedraft.policy.plan import StepPlan, StepResult
from minedraft.policy.policy import SpeculationPolicy
from minedraft.policy.tuning import TUNING

LOAD8 = Load.of(8, 3)


def run(choice: OverlapChoice, steps: int, rate: dict[bool, float], load: Load = LOAD8) -> list[bool]:
    """Feed ``steps`` decode steps of 10 tokens at the given tokens/s per kind of step (parallel: True)."""
    allowed = []
    for _ in range(steps):
        a = choice.allowed(load)
        allowed.append(a)
        choice.observe(a, load, 10, 10 / rate[a])
    return allowed


def dedicated(trial_every: int = 400, **kw) -> OverlapChoice:
    """A drafter on hardware of its own, with short trials (4 plain-SD steps, then 4 parallel ones)."""
    return OverlapChoice("auto", dedicated=True, tuning=dataclasses.replace(TUNING, trial_steps=4,
                                                                            trial_every=trial_every), **kw)


# ------------------------------------------------------------------ placement


def test_the_placement_follows_the_device_the_lane_and_the_drafter():
    assert placement("cpu", "overlap") == "cpu-threads"
    assert placement("cuda", "overlap") == "gpu-stream"
    assert placement("cuda", "serial") == placement("cpu", "serial") == "inline"


def test_a_process_drafter_is_a_dedicated_placement():
    assert placement("cpu", "overlap", "process") == "dedicated"
    assert placement("cuda", "overlap", "process") == "dedicated"
    assert placement("cpu", "serial", "process") == "dedicated"  # its own hardware whatever the lane
    assert placement("cpu", "overlap") == "cpu-threads"


# ------------------------------------------------------------------ shared hardware: plain SD, no trial

SHARED = sorted({placement(device, lane) for device in ("cpu", "cuda") for lane in ("overlap", "serial")})


def test_every_placement_but_a_process_drafter_shares_the_target_s_hardware():
    assert SHARED == sorted(set(PLACEMENTS) - {"dedicated"})


@pytest.mark.parametrize("where", SHARED)
@pytest.mark.parametrize("load", [Load.of(2, 1), LOAD8, Load.of(64, 5), Load.of(1024, 1)])
def test_auto_on_shared_hardware_never_runs_or_tries_parallel_steps(where, load):
    """Where the drafter shares the target's cores or SMs (or the lane is serial), two lanes cannot win at
    equal concurrency: however much faster parallel steps would be, and however short and frequent trials
    are tuned, none is tried (a trial's cost on the CPU thread lane outlived its own steps)."""
    choice = OverlapChoice("auto", dedicated=where == "dedicated",
                           tuning=dataclasses.replace(TUNING, trial_steps=1, trial_every=1))
    assert run(choice, 5_000, {True: 1000.0, False: 100.0}, load) == [False] * 5_000
    assert choice.trial_steps_run == 0 and choice.trying is None and not choice.parallel
    assert choice.last_verdict == ""


def test_auto_on_shared_hardware_says_nothing_while_it_runs_plain_sd():
    lines = []
    choice = OverlapChoice("auto", on_change=lines.append)
    run(choice, 100, {True: 1000.0, False: 100.0})
    assert lines == []


# ------------------------------------------------------------------ a drafter of its own: trials


@pytest.mark.parametrize("parallel_rate, expect_parallel", [(200.0, True), (95.0, False), (101.0, False)])
def test_a_dedicated_drafter_is_tried_and_the_faster_kind_of_step_kept(parallel_rate, expect_parallel):
    choice = dedicated(trial_every=40)
    allowed = run(choice, 4 + 4 + 20, {True: parallel_rate, False: 100.0})
    # Plain SD first (the baseline), then a parallel trial of 4 steps at the same load.
    assert allowed[:4] == [False] * 4 and allowed[4:8] == [True] * 4
    # Within the 3 % margin a tie goes to plain speculative decoding.
    assert allowed[8:] == [expect_parallel] * 20


def test_a_trial_losing_by_half_ends_after_a_quarter_of_its_steps_then_plain_sd_until_the_next_trial():
    """Parallel steps at half plain SD's rate (the real pair's drafter on core 1 at N = 8, drafting ahead: 0.7x)
    end the trial after 4 of its 16 steps; plain SD then runs until ``trial_every`` decode steps after it."""
    choice = OverlapChoice("auto", dedicated=True, tuning=dataclasses.replace(TUNING, trial_steps=16,
                                                                              trial_every=80))
    allowed = run(choice, 16 + 4 + 80, {True: 50.0, False: 100.0})
    assert allowed[:16] == [False] * 16 and allowed[16:20] == [True] * 4
    assert choice.trial_steps_run == 4 and choice.trying is None
    assert choice.last_verdict == f"{LOAD8}: plain SD (parallel 50 tok/s vs plain SD 100 tok/s after 4 steps)"
    # Tried again once 80 decode steps have passed since the trial ended (at step 20): step 101.
    assert not any(allowed[20:]) and allowed[20 + 80 - 1] is False
    assert run(choice, 1, {True: 50.0, False: 100.0}) == [True]


@pytest.mark.parametrize("parallel_rate", [85.0, 95.0])
def test_a_trial_losing_within_noise_runs_all_its_steps(parallel_rate):
    """Above ``trial_early_loss`` (0.8) of plain SD's rate a few steps could be the machine's noise: the trial
    runs its 16 steps, every rate it compares over as many, and loses by its whole reading."""
    choice = OverlapChoice("auto", dedicated=True, tuning=dataclasses.replace(TUNING, trial_steps=16))
    allowed = run(choice, 16 + 16 + 8, {True: parallel_rate, False: 100.0})
    assert allowed[16:32] == [True] * 16 and not any(allowed[32:])
    assert choice.trial_steps_run == 16
    assert choice.last_verdict == f"{LOAD8}: plain SD (parallel {parallel_rate:.0f} tok/s vs plain SD 100 tok/s)"


def test_a_win_expires_and_plain_sd_is_measured_again():
    choice = dedicated(trial_every=20)
    run(choice, 8, {True: 200.0, False: 100.0})
    assert run(choice, 20, {True: 200.0, False: 100.0}) == [True] * 20
    # 20 decode steps after the win: back to plain SD for a fresh baseline, then a new trial
    # that now loses by half (the load got slower in parallel): ended after a quarter of its 4 steps.
    allowed = run(choice, 4 + 1 + 10, {True: 50.0, False: 100.0})
    assert allowed[:4] == [False] * 4 and allowed[4] and not any(allowed[5:])


def test_a_new_load_gets_its_own_trial():
    choice = dedicated(trial_every=1000)
    small, large = Load.of(4, 3), Load.of(32, 3)
    assert run(choice, 8, {True: 80.0, False: 100.0}, small)[4:] == [True] * 4  # lost at 4-7 requests
    assert not any(run(choice, 50, {True: 80.0, False: 100.0}, small))  # no new trial there soon
    allowed = run(choice, 8 + 5, {True: 200.0, False: 100.0}, large)
    assert allowed[:4] == [False] * 4 and all(allowed[4:])  # tried and won at 32-63 requests
    assert not run(choice, 1, {True: 200.0, False: 100.0}, small)[0]  # still plain SD at 4-7


def test_a_changed_mix_or_depth_is_a_new_load():
    assert Load.of(8, 3) == Load.of(15, 3) != Load.of(16, 3)
    assert Load.of(8, 3) != Load.of(8, 4)
    assert Load.of(8, 3, prefill_tokens=200, decode_tokens=32) != Load.of(8, 3, 0, 32)


def test_a_load_change_ends_a_trial_and_it_decides_nothing():
    choice = dedicated(trial_every=1000)
    run(choice, 4 + 2, {True: 200.0, False: 100.0})
    assert choice.trying == LOAD8
    other = Load.of(2, 3)
    assert not choice.allowed(other) and choice.trying is None and not choice.parallel
    assert choice.last_verdict == ""
    # Back at the load: a fresh trial of all 4 steps (the 2 before the change count for nothing).
    allowed = run(choice, 4 + 1, {True: 200.0, False: 100.0})
    assert allowed == [True] * 5 and choice.trial_steps_run == 2 + 4
    assert "parallel (parallel 200 tok/s" in choice.last_verdict


def test_one_decoding_request_is_never_tried():
    choice = dedicated()
    assert not any(run(choice, 100, {True: 1000.0, False: 100.0}, Load.of(1, 3)))
    assert choice.trial_steps_run == 0


def test_choice_changes_are_reported_with_their_rates():
    lines = []
    choice = dedicated(trial_every=1000, on_change=lines.append)
    run(choice, 9, {True: 200.0, False: 100.0})
    choice.allowed(Load.of(2, 3))
    assert len(lines) == 2
    assert "parallel steps on at 8-15 requests, depth 3 (parallel 200 tok/s vs plain SD 100 tok/s)" in lines[0]
    assert "parallel steps off at 2-3 requests, depth 3" in lines[1]


def test_steps_without_decodes_do_not_count():
    choice = dedicated()
    for _ in range(50):
        choice.observe(False, Load(0, 3), 100, 0.001)  # prompt-only steps
    assert choice.decode_steps == 0 and not choice.allowed(LOAD8)


# ------------------------------------------------------------------ pinned modes


@pytest.mark.parametrize("has_own_hardware", [False, True])
def test_pinned_modes_never_change(has_own_hardware):
    for mode, expected in (("parallel", True), ("stock", False)):
        choice = OverlapChoice(mode, dedicated=has_own_hardware,
                               tuning=dataclasses.replace(TUNING, trial_steps=1, trial_every=1))
        assert set(run(choice, 20, {True: 1.0, False: 1000.0})) == {expected}
        assert choice.trial_steps_run == 0 and choice.decode_steps == 0


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown MineDraft mode"):
        OverlapChoice("fast")


def test_steps_whose_requests_got_no_drafts_are_not_plain_sd_s_baseline():
    """A batch's first steps with a draft engine that answers at once, before it holds the new requests,
    run at the target's rate without drafts (real pair, N = 8: 8 tokens in 0.3-0.5 s, against 32 in 0.44 s
    once drafts came): counted, they read plain SD slow and a parallel trial could win against them."""
    policy = SpeculationPolicy(3, mode="auto", dedicated=True)
    load = Load.of(8, 3)

    def step(parallel: bool, output_tokens: int, unanswered: bool = False) -> None:
        plan = StepPlan(3, parallel, {}, load)
        policy.observe(StepResult(plan, num_decoding=8, tokens=32, output_tokens=output_tokens, seconds=0.4,
                                  unanswered=unanswered))

    for _ in range(TUNING.trial_steps):
        step(False, 8, unanswered=True)
    assert not policy.overlap.allowed(load)  # no baseline yet: nothing to try against
    for _ in range(TUNING.trial_steps):
        step(False, 28)
    assert policy.overlap.allowed(load) and policy.overlap.trying == load
    for _ in range(TUNING.trial_steps // 4):
        step(True, 16)
    assert policy.overlap.trying is None and "plain SD 70 tok/s" in policy.overlap.last_verdict
