"""minedraft/scheduling/depth_controller.py against a fake engine whose goodput per depth is known."""

from __future__ import annotations

import random

import pytest

from minedraft.scheduling.depth_controller import DepthController, expected_tokens, per_position_acceptance
from minedraft.scheduling.mode_policy import Rate


class FakeEngine:
    """Steps whose goodput (tokens/s) at each depth is given; ``noise`` is a relative jitter.
    ``headroom``: what every draft accepted would give over the goodput at depths above 0 (the
    ceiling; the default leaves it out of the choice)."""

    def __init__(self, goodput: dict[int, float], noise: float = 0.0, seed: int = 0, headroom: float = 10.0):
        self.goodput, self.noise, self.rng, self.headroom = goodput, noise, random.Random(seed), headroom

    def step(self, depth: int) -> tuple[int, float, int]:
        tokens = 8 * (1 + depth)
        rate = self.goodput[depth] * (1 + self.rng.uniform(-self.noise, self.noise))
        return tokens, tokens / rate, round(tokens * (self.headroom if depth else 1))


def run(controller: DepthController, engine: FakeEngine, steps: int, load: int = 8,
        arrivals: tuple[float, float] | None = None) -> list[int]:
    """``steps`` steps; ``arrivals``: the oldest and newest running request's arrival, given with each."""
    depths = []
    for _ in range(steps):
        depth = controller.depth(load)
        controller.observe(load, depth, *engine.step(depth), arrivals=arrivals)
        depths.append(depth)
    return depths


def peaked_at(best: int, k: int = 5, top: float = 1000.0, slope: float = 0.15) -> dict[int, float]:
    return {d: top * (1 - slope * abs(d - best)) for d in range(k + 1)}


def test_speculation_is_turned_off_where_it_loses():
    controller = DepthController(max_depth=5)
    depths = run(controller, FakeEngine(peaked_at(0)), 400)
    assert controller.verdict(8) == 0
    assert depths[-100:].count(0) >= 90  # the rest: bounded probes


@pytest.mark.parametrize("best", [1, 3, 5])
def test_the_best_depth_is_found_from_k(best):
    controller = DepthController(max_depth=5)
    run(controller, FakeEngine(peaked_at(best), noise=0.02), 1500)
    assert controller.verdict(8) == best


def test_depths_the_prior_rules_out_are_not_probed_until_the_longest_wait():
    """A draft as large as the target (scheduling/depth_prior.py): a first load starts at 0,
    and depth 1 is probed only once the wait between rounds is at its longest."""
    controller = DepthController(max_depth=3, ruled_out=frozenset({1, 2, 3}), exploit_steps=50, exploit_s=0.0)
    assert controller.depth(8) == 0
    depths = run(controller, FakeEngine(peaked_at(0, k=3)), 50 * 2**4)
    assert set(depths) == {0} and controller.probe_steps_run == 0
    depths = run(controller, FakeEngine(peaked_at(0, k=3)), 50 * 2**5)
    assert 1 in depths and controller.verdict(8) == 0


def test_a_wrong_prior_is_found_out_at_the_longest_wait():
    controller = DepthController(max_depth=3, ruled_out=frozenset({1, 2, 3}), exploit_steps=50, exploit_s=0.0)
    run(controller, FakeEngine(peaked_at(3, k=3)), 5000)
    assert controller.verdict(8) == 3


def test_a_first_load_starts_at_the_deepest_depth_not_ruled_out():
    assert DepthController(max_depth=5, ruled_out=frozenset({4, 5})).depth(8) == 3
    with pytest.raises(ValueError, match="depth 0"):
        DepthController(max_depth=3, ruled_out=frozenset({0}))


def test_probes_are_bounded_and_the_verdict_does_not_flap():
    changes = []
    controller = DepthController(max_depth=5, on_change=changes.append)
    # Depths 2 and 3 within 1 %: noise must not make the verdict alternate between them.
    goodput = {0: 500.0, 1: 800.0, 2: 990.0, 3: 1000.0, 4: 900.0, 5: 800.0}
    depths = run(controller, FakeEngine(goodput, noise=0.03, seed=1), 6000)
    assert controller.verdict(8) in (2, 3)
    assert len(changes) <= 3, changes  # without the margin: 4
    assert controller.probe_steps_run / controller.decode_steps < 0.10
    assert sum(d != controller.verdict(8) for d in depths[-3000:]) / 3000 < 0.10


def test_a_change_is_reported_with_the_rates_compared():
    changes = []
    controller = DepthController(max_depth=3, on_change=changes.append)
    run(controller, FakeEngine(peaked_at(0, k=3)), 300)
    assert changes and changes[0].startswith("MineDraft auto: speculation depth 3 -> ")
    assert "k'=3:" in changes[0] and "tok/s" in changes[0] and "8-15 decodes" in changes[0]


def test_each_load_has_its_own_verdict_and_a_new_load_starts_at_the_nearest():
    controller = DepthController(max_depth=5)
    run(controller, FakeEngine(peaked_at(4)), 1500, load=1)
    assert controller.verdict(1) == 4
    assert controller.depth(2) == 4  # not measured yet: starts where load 1 ended
    run(controller, FakeEngine(peaked_at(0)), 1500, load=16)
    assert (controller.verdict(1), controller.verdict(16)) == (4, 0)


def test_a_load_seen_only_briefly_passes_no_verdict_on():
    """A warm-up's few steps at 4 requests must not decide where 8 starts: load 1's verdict does."""
    controller = DepthController(max_depth=3)
    run(controller, FakeEngine(peaked_at(0, k=3)), 5, load=4)  # no round ended: 4 still holds K
    run(controller, FakeEngine(peaked_at(0, k=3)), 600, load=1)
    assert (controller.verdict(4), controller.verdict(1)) == (3, 0)
    assert controller.depth(8) == 0


def test_a_drift_in_goodput_brings_a_new_verdict_before_the_next_scheduled_round():
    controller = DepthController(max_depth=5, exploit_steps=100_000)
    run(controller, FakeEngine(peaked_at(4)), 1500)
    assert controller.verdict(8) == 4
    # The text changes: the drafter's acceptance falls and with it the best depth.
    slower = {d: g * (0.5 if d >= 2 else 1.0) for d, g in peaked_at(1).items()}
    run(controller, FakeEngine(slower), 600)
    assert controller.verdict(8) == 1


def test_steps_right_after_a_change_of_depth_are_not_counted():
    controller = DepthController(max_depth=2, settle_steps=2, baseline_steps=4)
    engine = FakeEngine({0: 100.0, 1: 100.0, 2: 100.0})
    run(controller, engine, 4)
    assert controller.loads[8].rates[2].steps == 2  # 4 steps, the first 2 settling


def test_max_depth_zero_only_ever_answers_zero():
    controller = DepthController(max_depth=0)
    assert set(run(controller, FakeEngine({0: 100.0}), 200)) == {0}


def test_rounds_that_keep_the_verdict_come_less_and_less_often():
    """Leaving depth 0 costs the draft a catch-up: a verdict that keeps winning is probed ever more rarely."""
    controller = DepthController(max_depth=3, exploit_steps=100, exploit_s=0.0, max_backoff=3)
    depths = run(controller, FakeEngine(peaked_at(0, k=3), noise=0.02), 4000)
    assert controller.verdict(8) == 0
    leaving = [i for i in range(1, len(depths)) if depths[i - 1] == 0 and depths[i] > 0]
    gaps = [b - a for a, b in zip(leaving, leaving[1:])]
    assert gaps[0] < gaps[1] < gaps[2] and min(gaps[2:]) >= 8 * 100  # about 100, 200, 400, then 800 apart
    assert controller.loads[8].kept_rounds >= 4


def test_depth_0_does_not_drift_with_the_step_cost():
    """At depth 0 nothing is drafted: a slower step (longer contexts) is no reason to probe."""
    controller = DepthController(max_depth=3, exploit_steps=100_000)
    run(controller, FakeEngine(peaked_at(0, k=3)), 300)
    assert controller.verdict(8) == 0
    rounds = controller.probe_steps_run
    run(controller, FakeEngine({d: g * 0.6 for d, g in peaked_at(0, k=3).items()}), 300)
    assert controller.probe_steps_run == rounds


def test_windows_last_long_enough_to_see_past_the_noise():
    """Steps of 1 ms at +-30 % noise: an 8-step window picks between depths 2 and 3 (4 % apart) by chance."""
    goodput = {0: 700.0, 1: 900.0, 2: 1000.0, 3: 960.0}

    def verdicts(min_window_s: float) -> list[int]:
        found = []
        for seed in range(10):
            controller = DepthController(max_depth=3, min_window_s=min_window_s, exploit_s=0.5)
            run(controller, FakeEngine({d: 8 * 4 * g for d, g in goodput.items()}, noise=0.3, seed=seed), 6000)
            found.append(controller.verdict(8))
        return found

    with_window, without = verdicts(0.05), verdicts(0.0)
    # A miss keeps depth 3, 4 % below the best (a move must beat the verdict measured before and after
    # the probes): never a depth 10 % below or worse. Measured: 7 of 10 at 2 with the window, 4 without.
    assert set(with_window) <= {2, 3} and with_window.count(2) >= 7 > without.count(2), (with_window, without)


def test_short_steps_do_not_make_rounds_frequent():
    """Probe windows last a time (min_window_s): with steps under 1 ms, a wait counted in steps alone
    spends about half the time probing (measured: 0.51), a wait of 2 s too a sixth (0.17)."""
    def time_off_the_verdict(exploit_s: float) -> float:
        controller = DepthController(max_depth=3, exploit_s=exploit_s, max_backoff=0)
        goodput = {d: 8 * 4 * g for d, g in peaked_at(2, k=3).items()}
        depths = run(controller, FakeEngine(goodput, seed=3), 30000)[5000:]
        assert controller.verdict(8) == 2
        return sum(d != 2 for d in depths) / len(depths)

    assert time_off_the_verdict(2.0) < time_off_the_verdict(0.0) / 2


def test_a_depth_that_cannot_pay_at_any_acceptance_is_not_probed_until_the_longest_wait():
    """A draft as costly as the target: depth 1's ceiling (every draft accepted) loses to depth 0.
    Leaving depth 0 costs the draft a catch-up, so such a depth is not probed again, except once
    the wait between rounds is at its longest (a ceiling measured cold may be low)."""
    def leaving(headroom):
        controller = DepthController(max_depth=1, exploit_steps=100, exploit_s=0.0, max_backoff=3)
        depths = run(controller, FakeEngine({0: 1000.0, 1: 600.0}, headroom=headroom), 5000)
        assert controller.verdict(8) == 0
        # Depth 0 wins by more than the machine moves (decisive_gain): the move needs no second look at 1.
        return [i for i in range(1, len(depths)) if depths[i - 1] == 0 and depths[i] == 1]

    # Ceiling 1200 tok/s: better acceptance could win, so depth 1 is probed about 100, 200, 400, 800 steps apart.
    probed = leaving(headroom=2.0)
    assert min(b - a for a, b in zip(probed, probed[1:])) < 8 * 100
    # Ceiling 900 tok/s (measured while depth 1 was the starting verdict): only at the longest wait.
    skipped = leaving(headroom=1.5)
    assert min(b - a for a, b in zip(skipped, skipped[1:])) >= 8 * 100 and skipped[0] >= 100 + 200 + 400
    assert len(skipped) <= len(probed) - 2


def test_depth_0_is_probed_again_when_the_acceptance_falls_below_its_rate():
    """Depth 0's goodput is its ceiling: once it lost it is skipped, until the verdict's own rate
    falls (drift: the text changed) below it."""
    controller = DepthController(max_depth=2, exploit_steps=100, exploit_s=0.0)
    run(controller, FakeEngine({0: 600.0, 1: 900.0, 2: 1000.0}, headroom=1.2), 3000)
    assert controller.verdict(8) == 2
    run(controller, FakeEngine({0: 600.0, 1: 450.0, 2: 400.0}, headroom=1.2), 3000)
    assert controller.verdict(8) == 0


def test_a_verdict_below_what_depth_0_gave_probes_depth_0_alone():
    """The text turns unpredictable: the verdict's goodput falls below what speculation off gave at this
    load (measured in an earlier round), so the round goes straight to depth 0 instead of through the
    neighbours first (each a window of steps speculating on text the drafter misses)."""
    controller = DepthController(max_depth=3, exploit_steps=100_000)
    greedy = FakeEngine(peaked_at(3, k=3))
    run(controller, greedy, 400)
    while controller.loads[8].rates[3].steps:  # to the end of a window: the next is all on the new text
        run(controller, greedy, 1)
    assert controller.verdict(8) == 3 and 0 in controller.loads[8].ceilings
    rejected = {0: 850.0, 1: 500.0, 2: 400.0, 3: 300.0}
    depths = run(controller, FakeEngine(rejected), 400)
    assert controller.verdict(8) == 0
    last_at_3 = len(depths) - 1 - depths[::-1].index(3)
    assert {1, 2}.isdisjoint(depths[:last_at_3])  # no step at 1 or 2 on the way (after it: the climb's probe)
    assert depths[-100:].count(0) >= 90


def test_a_move_off_depth_0_at_one_load_brings_a_round_at_the_others():
    """Acceptance belongs to the text, which every load shares: once one load finds speculation paying
    again, the loads that settled on depth 0 judge theirs at their next window, without waiting for
    their own scheduled round or for their requests to be replaced."""
    controller = DepthController(max_depth=2, exploit_steps=100_000)
    rejected = {0: 1000.0, 1: 600.0, 2: 500.0}
    for load in (1, 8):
        run(controller, FakeEngine(rejected, headroom=3.0), 400, load=load, arrivals=(0.0, 1.0))
        assert controller.verdict(load) == 0
    predicted = peaked_at(2, k=2, top=1800.0)
    probes = controller.probe_steps_run
    run(controller, FakeEngine(predicted), 300, load=8, arrivals=(0.0, 1.0))
    assert controller.verdict(8) == 0 and controller.probe_steps_run == probes  # nothing new at load 8
    for turnover in (2.0, 4.0):  # load 1's requests replaced twice: its round (one kept round: twice)
        run(controller, FakeEngine(predicted), 300, load=1, arrivals=(turnover, turnover + 1))
    assert controller.verdict(1) > 0
    run(controller, FakeEngine(predicted), 600, load=8, arrivals=(0.0, 1.0))  # still the same requests
    assert controller.verdict(8) == 2


def test_at_depth_0_new_requests_bring_a_new_verdict():
    """Acceptance belongs to the requests: at depth 0 nothing is drafted, so no drift shows that the
    text changed; once every running request arrived after the last round, a round starts at once."""
    controller = DepthController(max_depth=3, exploit_steps=100_000)
    sampled = {0: 1000.0, 1: 700.0, 2: 600.0, 3: 500.0}  # drafts rejected: speculation off
    greedy = peaked_at(3, k=3, top=1600.0)
    greedy_engine = FakeEngine(greedy, headroom=1.0)  # every draft accepted
    run(controller, FakeEngine(sampled, headroom=3.0), 400, arrivals=(0.0, 1.0))
    assert controller.verdict(8) == 0
    # The same requests go on: no round, whatever their drafts would do now.
    probes = controller.probe_steps_run
    run(controller, greedy_engine, 400, arrivals=(0.0, 1.0))
    assert controller.verdict(8) == 0 and controller.probe_steps_run == probes
    # Some requests replaced: still the old verdict's evidence for the rest.
    run(controller, greedy_engine, 400, arrivals=(0.5, 2.0))
    assert controller.verdict(8) == 0 and controller.probe_steps_run == probes
    # All replaced, once: depth 0 already kept one round (the one right after the move), so the
    # requests must all be replaced twice before the next.
    assert controller.loads[8].kept_rounds == 1
    run(controller, greedy_engine, 400, arrivals=(2.0, 3.0))
    assert controller.verdict(8) == 0 and controller.probe_steps_run == probes
    # All replaced again: a round, and the climb to the new best.
    run(controller, greedy_engine, 400, arrivals=(4.0, 5.0))
    assert controller.verdict(8) == 3


def test_rounds_that_new_requests_bring_back_off_while_they_keep_depth_0():
    """Many short requests replace the running set often; where speculation keeps losing, the rounds
    they bring need 1, 2, then 4 (at most) replacements of every running request."""
    controller = DepthController(max_depth=1, exploit_steps=100_000)
    engine = FakeEngine({0: 1000.0, 1: 800.0}, headroom=3.0)  # depth 1 loses, its ceiling does not rule it out
    run(controller, engine, 200, arrivals=(0.0, 0.5))
    assert controller.verdict(8) == 0 and controller.loads[8].kept_rounds == 1
    rounds_at = []
    for turnover in range(1, 16):  # every running request replaced every 60 steps
        before = controller.probe_steps_run
        run(controller, engine, 60, arrivals=(float(turnover), turnover + 0.5))
        if controller.probe_steps_run > before:
            rounds_at.append(turnover)
    assert controller.verdict(8) == 0
    assert rounds_at == [2, 6, 10, 14]  # 2 replacements after one kept round, 4 after two and more


def test_new_requests_do_not_bring_back_depths_that_cannot_pay():
    """Depths ruled out (the prior) or whose ceiling loses stay out of the rounds new requests bring."""
    controller = DepthController(max_depth=3, ruled_out=frozenset({1, 2, 3}), exploit_steps=100_000)
    for i in range(20):
        run(controller, FakeEngine(peaked_at(0, k=3)), 50, arrivals=(float(i), i + 0.5))
    assert controller.verdict(8) == 0 and controller.probe_steps_run == 0


def test_a_gain_within_the_windows_noise_moves_nothing():
    """Depth 0 gives 9 % more on average, but over steps that run at 2,500 and 700 tok/s in turn (a busy
    machine): within one standard error of the difference, the verdict stays; the same gain over
    steady steps moves it."""
    def verdict_after_one_round(steady: bool, confidence: float) -> int:
        controller = DepthController(max_depth=1, exploit_steps=10**6, min_window_s=0.0, confidence=confidence)
        fast = [True]
        for _ in range(60):
            depth = controller.depth(8)
            if depth == 1:
                controller.observe(8, 1, 16, 16 / 1000)
            else:
                fast[0] = not fast[0]
                rate = 1093.0 if steady else (2500.0 if fast[0] else 700.0)  # harmonic mean of the pair: 1093
                controller.observe(8, 0, 8, 8 / rate)
        return controller.verdict(8)

    assert verdict_after_one_round(steady=True, confidence=1.0) == 0
    assert verdict_after_one_round(steady=False, confidence=0.0) == 0  # the margin alone: moved on noise
    assert verdict_after_one_round(steady=False, confidence=1.0) == 1


def test_the_standard_error_of_a_rate_shrinks_with_its_steps():
    from minedraft.scheduling.mode_policy import Rate

    def alternating(steps: int) -> Rate:
        rate = Rate()
        for i in range(steps):
            rate.add(8, 0.005 if i % 2 else 0.015)
        return rate

    steady = Rate()
    for _ in range(10):
        steady.add(8, 0.01)
    assert Rate().standard_error == float("inf") and steady.standard_error == pytest.approx(0.0, abs=1e-3)
    assert alternating(10).per_second == pytest.approx(steady.per_second) == 800.0
    assert 0 < alternating(100).standard_error < alternating(10).standard_error / 3  # about 1/sqrt(10)


def test_a_move_is_judged_against_the_verdict_before_and_after_the_probes():
    """The machine slows down for the verdict's first window only (a busy moment): depth 0 looks 25 %
    better against it. Measured once more after the probes, the verdict is as good as depth 0: no move.
    On a steady machine the same round moves, since depth 0 is really better."""
    def verdict(busy_first_window: bool) -> int:
        controller = DepthController(max_depth=1, exploit_steps=10**6, min_window_s=0.0)
        goodput = {0: 1000.0, 1: 1000.0 if busy_first_window else 800.0}
        for step in range(80):
            depth = controller.depth(8)
            tokens = 8 * (1 + depth)
            slow = busy_first_window and step < 14 and depth == 1
            controller.observe(8, depth, tokens, tokens / (goodput[depth] * (0.8 if slow else 1.0)))
        return controller.verdict(8)

    assert verdict(busy_first_window=True) == 1
    assert verdict(busy_first_window=False) == 0


class CostEngine:
    """Steps of a fixed cost per depth (ms) on text whose drafts are each accepted with ``acceptance``
    given the one before: tokens and ceilings as the scheduler counts them."""

    def __init__(self, cost_ms: dict[int, float], acceptance: float, requests: int = 8):
        self.cost_ms, self.acceptance, self.requests = cost_ms, acceptance, requests

    def step(self, depth: int) -> tuple[int, float, int]:
        tokens = round(self.requests * expected_tokens(self.acceptance, depth))
        return tokens, self.cost_ms[depth] / 1e3, self.requests * (1 + depth)


COSTS = {0: 1.0, 1: 1.6, 2: 1.9, 3: 2.2}


def test_the_acceptance_per_draft_position_is_read_from_tokens_over_the_ceiling():
    for acceptance in (0.0, 0.1, 0.5, 0.9, 1.0):
        window = Rate()
        for _ in range(10):
            window.add(*CostEngine(COSTS, acceptance, requests=1000).step(3))
        assert per_position_acceptance(window, 3) == pytest.approx(acceptance, abs=0.01)
    assert per_position_acceptance(window, 0) is None


def test_a_decisive_win_moves_at_once_and_a_probe_predicted_to_lose_is_skipped():
    """Drafts rejected (a = 0.1): depth 0 gives twice depth 3's goodput. It moves there without
    measuring 3 again, and the climb does not probe 1: its step costs (between depths 0 and 2, measured)
    at the acceptance just measured cannot beat 0. With predictions off the climb probes 1."""
    def depths(**args):
        controller = DepthController(max_depth=3, min_window_s=0.0, exploit_steps=10_000, **args)
        return run(controller, CostEngine(COSTS, acceptance=0.1), 300), controller

    seen, controller = depths()
    first_zero = seen.index(0)
    assert set(seen[first_zero:]) == {0} and controller.verdict(8) == 0
    seen, _ = depths(prediction_tolerance=10.0)
    assert 1 in seen[seen.index(0):]
    seen, _ = depths(decisive_gain=10.0)  # not decisive: the verdict measured again before the move
    assert 3 in seen[seen.index(0):]


def test_a_load_back_after_a_long_absence_starts_its_window_again():
    """Its unfinished window measured requests that may have left: it does not carry over."""
    controller = DepthController(max_depth=3, baseline_steps=1000)
    run(controller, CostEngine(COSTS, acceptance=0.9), 5, load=8)
    assert controller.loads[8].rates[3].steps == 3  # two settling
    run(controller, CostEngine(COSTS, acceptance=0.9), 200, load=1)  # 0.44 s elsewhere
    run(controller, CostEngine(COSTS, acceptance=0.1), 5, load=8)
    assert controller.loads[8].rates[3].steps == 5 and controller.loads[8].rates[3].tokens == 5 * 9
    run(controller, CostEngine(COSTS, acceptance=0.1), 2, load=1)  # a short visit elsewhere: kept
    run(controller, CostEngine(COSTS, acceptance=0.1), 5, load=8)
    assert controller.loads[8].rates[3].steps == 10


def test_a_depth_that_cannot_pay_is_passed_over_not_a_wall():
    """The jump to depth 1 costs the draft's first forward: here depth 1's ceiling (every draft accepted)
    is below depth 0's rate, while deeper depths amortise that forward and pay on predictable text. A load
    on depth 0 whose rounds probed depth 1 and found it cannot pay probes depth 2 next, and climbs."""
    jump = {0: 1.0, 1: 2.1, 2: 2.3, 3: 2.5}  # ms a step: ceilings 0.95x (depth 1), 1.30x, 1.60x of depth 0
    controller = DepthController(max_depth=3, min_window_s=0.0, exploit_steps=100_000)
    run(controller, CostEngine(jump, acceptance=0.1), 300, arrivals=(0.0, 1.0))
    assert controller.verdict(8) == 0
    for turnover in range(2, 30):  # predictable text; every running request replaced every 100 steps
        run(controller, CostEngine(jump, acceptance=0.9), 100, arrivals=(float(turnover), turnover + 0.5))
    assert controller.loads[8].ceilings[1] < controller.loads[8].ceilings[0]  # probed, and it cannot pay
    assert controller.verdict(8) == 3
