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


def test_a_losing_trial_runs_all_its_steps_then_plain_sd_until_the_next_trial():
    """No early stop: a trial losing by half still runs its ``trial_steps`` (every rate it compares is over
    as many steps), then plain SD runs until ``trial_every`` decode steps after it."""
    choice = OverlapChoice("auto", dedicated=True, tuning=dataclasses.replace(TUNING, trial_steps=16,
                                                                              trial_every=80))
    allowed = run(choice, 16 + 16 + 80, {True: 50.0, False: 100.0})
    assert allowed[:16] == [False] * 16 and allowed[16:32] == [True] * 16
    assert choice.trial_steps_run == 16 and choice.trying is None
    assert choice.last_verdict.startswith(f"{LOAD8}: plain SD (parallel 50 tok/s vs plain SD 100 tok/s)")
    # Tried again once 80 decode steps have passed since the trial ended (at step 32): step 113.
    assert not any(allowed[32:]) and allowed[32 + 80 - 1] is False
    assert run(choice, 1, {True: 50.0, False: 100.0}) == [True]


def test_a_win_expires_and_plain_sd_is_measured_again():
    choice = dedicated(trial_every=20)
    run(choice, 8, {True: 200.0, False: 100.0})
    assert run(choice, 20, {True: 200.0, False: 100.0}) == [True] * 20
    # 20 decode steps after the win: back to plain SD for a fresh baseline, then a new trial
    # that now loses (the load got slower in parallel).
    allowed = run(choice, 4 + 4 + 10, {True: 50.0, False: 100.0})
    assert allowed[:4] == [False] * 4 and allowed[4:8] == [True] * 4 and not any(allowed[8:])


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
