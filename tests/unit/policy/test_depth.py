"""minedraft/policy/depth.py against a fake engine whose step costs and acceptance are known, and, in the last
test, minedraft/policy/policy.py verifying a re-check's drafts whole.

The choice's clock is the sum of the step times it is fed, so these runs are a fake clock."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import pytest

from minedraft.policy import RequestView, SpeculationPolicy, StepPlan, StepResult, StepView, VerifiedDrafts
from minedraft.policy.depth import RECHECK_REPEATS, DepthChoice
from minedraft.policy.tuning import TUNING

TOKENS_LEFT = 1000  # a typical request's tokens left: weighed only against a catch-up


@dataclass
class FakeEngine:
    """Steps cost ``fixed + per_token * tokens + depth * (draft_fixed + draft_per_request * decodes)``
    seconds, and ``speculating`` more at any depth > 0; each draft is accepted with ``acceptance`` given the
    one before (from the second on with ``deeper``, where set)."""

    fixed: float = 0.010
    per_token: float = 0.001
    draft_fixed: float = 0.002
    draft_per_request: float = 0.0003
    acceptance: float = 0.8
    catch_up_per_token: float = 0.0
    noise: float = 0.0
    seed: int = 0
    deeper: float | None = None
    speculating: float = 0.0
    slow: float = 1.0  # the machine's speed: every step takes this many times as long (a VM's slow spell)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.pending: dict[int, int] = {}  # request -> drafts made for it last step

    def seconds(self, decodes: int, depth: int, verified: int, catch_up: int = 0) -> float:
        t = (self.fixed + self.per_token * (decodes + verified) + depth * (self.draft_fixed + self.draft_per_request
             * decodes) + self.catch_up_per_token * catch_up + (self.speculating if depth else 0.0))
        return self.slow * t * (1 + self.rng.uniform(-self.noise, self.noise))

    def rates(self, decodes: int, max_depth: int) -> list[float]:
        """The true goodput at each depth, in the steady state (no noise)."""
        noise, self.noise = self.noise, 0.0
        rates = [decodes * self.tokens(d) / self.seconds(decodes, d, decodes * d) for d in range(max_depth + 1)]
        self.noise = noise
        return rates

    def accepts(self, position: int) -> float:
        return self.acceptance if position == 0 or self.deeper is None else self.deeper

    def tokens(self, depth: int) -> float:
        """A request's expected tokens from a step verifying ``depth`` drafts."""
        total, run = 1.0, 1.0
        for position in range(depth):
            run *= self.accepts(position)
            total += run
        return total

    def best(self, decodes: int, max_depth: int) -> int:
        rates = self.rates(decodes, max_depth)
        return max(range(max_depth + 1), key=rates.__getitem__)

    def step(self, choice: DepthChoice, decodes: int, catch_up: int = 0, answered: bool = True) -> int:
        """One step of ``decodes`` requests at the choice's depth: verifies last step's drafts. ``answered``
        False: the drafts asked for after it come back empty, and the choice is told as policy.py tells it."""
        depth = choice.depth(decodes, TOKENS_LEFT, catch_up=catch_up)
        verified = []
        for request in range(decodes):
            drafts = self.pending.get(request, 0)
            taken = 0
            while taken < drafts and self.rng.random() < self.accepts(taken):
                taken += 1
            if drafts:
                verified.append(VerifiedDrafts(f"r{request}", drafts, taken))
        drafted = sum(v.drafts for v in verified)
        seconds = self.seconds(decodes, depth, drafted, catch_up if depth else 0)
        choice.observe_verification(verified)
        unanswered = depth > 0 and not answered
        if unanswered:
            choice.repeat_recheck(decodes)
        choice.observe_step(decodes, depth, decodes + drafted, seconds, catch_up if depth else 0, fit=not unanswered)
        self.pending = dict.fromkeys(range(decodes), 0 if unanswered else depth)
        return depth


def accepted_run(rng: random.Random, acceptance: float, drafts: int) -> int:
    taken = 0
    while taken < drafts and rng.random() < acceptance:
        taken += 1
    return taken


def run(choice, engine, decodes, steps):
    return [engine.step(choice, decodes) for _ in range(steps)]


def near_best(engine: FakeEngine, decodes: int, depths: list[int], max_depth: int, within: float = 0.03) -> bool:
    """Every depth in ``depths`` gives within ``within`` of the best goodput at this load."""
    rates = engine.rates(decodes, max_depth)
    return all(rates[d] >= (1 - within) * max(rates) for d in depths)


def test_the_first_steps_run_k_until_acceptance_is_measured():
    choice = DepthChoice(3)
    assert run(choice, FakeEngine(), 4, 2) == [3, 3]


@pytest.mark.parametrize(("engine", "decodes"), [
    (FakeEngine(), 1),  # cheap drafts, few requests: deep
    (FakeEngine(), 32),
    (FakeEngine(per_token=0.004), 32),  # compute-bound: every verified draft costs a token
    (FakeEngine(acceptance=0.3), 8),
    (FakeEngine(acceptance=0.0), 4),  # a drafter that never helps
    (FakeEngine(fixed=0.05, per_token=0.0001, acceptance=0.6), 16),  # memory-bound: verification is nearly free
])
def test_the_best_depth_is_chosen_within_a_few_steps(engine, decodes):
    """From the third step on, every step's depth gives within the margin (3 %) of the best goodput."""
    choice = DepthChoice(4)
    depths = run(choice, engine, decodes, 40)
    assert near_best(engine, decodes, depths[3:], 4), (engine.rates(decodes, 4), depths)


def test_a_new_load_starts_at_its_own_best_depth_from_its_first_step():
    """Costs learned at one and at 32 requests predict the loads between (each depth's step within 12 %):
    with acceptance known, a new load's first step is at a depth within 5 % of the best."""
    engine = FakeEngine(per_token=0.002, acceptance=0.7)
    choice = DepthChoice(3)
    for decodes in (1, 32, 1, 32):
        run(choice, engine, decodes, 30)
    for decodes in (2, 16, 4, 8):
        true = [engine.seconds(decodes, d, decodes * d) for d in range(4)]
        assert choice.costs.seconds(decodes, 3) == pytest.approx(true, rel=0.12), decodes
        rng = random.Random(decodes)  # acceptance as 100 requests measure it, not as the last few did
        choice.observe_verification([VerifiedDrafts(f"m{i}", 3, accepted_run(rng, 0.7, 3)) for i in range(100)])
        assert near_best(engine, decodes, run(choice, engine, decodes, 1), 3, within=0.05), decodes


def test_a_change_of_text_is_seen_within_a_few_steps():
    engine = FakeEngine(acceptance=0.9)
    choice = DepthChoice(3)
    depths = run(choice, engine, 8, 30)
    assert depths[-1] > 0 and near_best(engine, 8, depths[-10:], 3)
    engine.acceptance = 0.05
    assert run(choice, engine, 8, 6)[-1] == 0


def test_depth_zero_rechecks_acceptance_at_a_bounded_share_of_time():
    """At depth 0 acceptance goes stale: a re-check drafts one step of 8 requests, spaced by its cost over
    the margin (at least stale_s of the fake clock), and a text the drafter predicts again is found."""
    engine = FakeEngine(acceptance=0.0)
    choice = DepthChoice(3, tuning=dataclasses.replace(TUNING, margin=0.05, stale_s=1.0))
    depths = run(choice, engine, 8, 2000)
    clock = choice.seconds
    drafting = [d for d in depths[10:] if d]
    assert drafting and set(drafting) == {1}
    assert len(drafting) <= clock / 1.0 + 1  # no more than one a second
    assert choice.rechecks == len(drafting)
    engine.acceptance = 0.9
    later = run(choice, engine, 8, 400)
    assert later[-1] > 0 and near_best(engine, 8, later[-10:], 3)


def _after_a_long_stretch_at_depth_zero(seed: int) -> tuple[FakeEngine, DepthChoice]:
    """One request of a text the drafter predicts (deep), then 32 requests where the target alone wins
    (depth 0 for seconds of steps): the acceptance measured last is stale."""
    engine = FakeEngine(acceptance=0.9, seed=seed)
    choice = DepthChoice(3)
    assert run(choice, engine, 1, 40)[-1] == 3
    at_32 = run(choice, engine, 32, 300)[20:]
    assert at_32[-1] == 0 and at_32.count(0) >= 0.99 * len(at_32)  # a re-check at most, near a tie of its ceiling
    return engine, choice


@pytest.mark.parametrize("seed", range(3))
def test_acceptance_measured_long_ago_decides_no_depth_before_a_recheck(seed):
    """Then 4 requests of a text it predicts poorly: their first steps are the re-check's (two steps of 4,
    at the depth the acceptance measured last predicts), and what it measures decides: depth 0, not the
    depth the first text earned."""
    engine, choice = _after_a_long_stretch_at_depth_zero(seed)
    engine.acceptance = 0.3
    assert engine.best(4, 3) == 0
    rechecks = choice.rechecks
    depths = run(choice, engine, 4, 12)
    assert depths[:2] == [3, 3] and choice.rechecks == rechecks + 1
    assert max(depths[2:]) <= 1 and depths[-3:] == [0, 0, 0], depths


@pytest.mark.parametrize("seed", range(3))
def test_a_recheck_whose_drafts_come_back_empty_runs_again(seed):
    """Then 4 requests of a text the drafter predicts, whose drafter answers their first two jobs empty: a
    process drafter answering at once has drafts made ahead only for requests it holds (on the real pair at
    N = 16 it prefilled their prompts meanwhile, and the re-check, one step, measured nothing: depth 0 for the
    rest of the batch, 2026-12-06). The steps that came back empty run again, and the load drafts."""
    engine, choice = _after_a_long_stretch_at_depth_zero(seed)
    assert engine.best(4, 3) == 3
    rechecks = choice.rechecks
    depths = [engine.step(choice, 4, answered=False) for _ in range(2)] + run(choice, engine, 4, 12)
    assert depths[:4] == [3, 3, 3, 3] and choice.rechecks == rechecks + 1  # two repeated, then its own two
    assert all(depths[-6:]) and near_best(engine, 4, depths[-3:], 3), depths


def test_a_recheck_runs_again_a_bounded_number_of_times_for_a_drafter_that_never_answers():
    engine, choice = _after_a_long_stretch_at_depth_zero(0)
    rechecks = choice.rechecks
    rechecking = []
    for _ in range(20):
        engine.step(choice, 4, answered=False)
        rechecking.append(choice.rechecking)
    assert choice.rechecks == rechecks + 1
    assert sum(rechecking) == 2 + RECHECK_REPEATS, rechecking  # its two steps and the repeats
    assert not any(rechecking[2 + RECHECK_REPEATS:])


@pytest.mark.parametrize("seed", range(3))
def test_a_recheck_drafts_at_the_depth_the_acceptance_measured_last_predicts(seed):
    """Then one request of the text the drafter predicts, as at a benchmark's N = 1 after N = 32: the
    re-check's steps (8 of one request) draft at depth 3, where it earns most, not at depth 1, the shallowest
    that could pay (on the real pair a third of a 64-token request's steps ran at depth 1 so, 2026-12-03)."""
    engine, choice = _after_a_long_stretch_at_depth_zero(seed)
    assert engine.best(1, 3) == 3
    rechecks = choice.rechecks
    depths = run(choice, engine, 1, 12)
    assert choice.rechecks == rechecks + 1 and depths == [3] * 12, depths


def test_a_prompt_s_prefill_is_not_read_as_what_drafting_costs():
    """The real pair's steps (2026-11-29, engine log): a warm-up of two requests, then one request whose
    38-token prompt took 1.0 s at depth 1 (compute-bound, with the draft's prefill) beside 0.21 s for a
    decode step at depth 3. Read at a decode token's cost, that prompt made every depth > 0 predict a
    loss at one request, depth 0 ran, and nothing measured drafting there again (a real gain: 14 tok/s
    at depth 3 against 10). A step with prefill tokens is not fitted (step_costs.py)."""
    choice = DepthChoice(3, draft_cost=0.33)
    choice.observe_step(1, 3, 1 + 6, 0.57, 38 + 6, prefill=6)  # the warm-up's second prompt (cached)
    choice.observe_verification([VerifiedDrafts("warm-up-1", 3, 1)])
    choice.observe_step(2, 3, 2 + 6, 0.25)
    choice.observe_verification([VerifiedDrafts("warm-up-1", 3, 2), VerifiedDrafts("warm-up-2", 3, 0)])
    choice.observe_step(2, 0, 2 + 6, 0.13)
    choice.observe_step(0, 1, 38, 1.0, 38, prefill=38)  # the request's prompt, the draft's prefill
    choice.observe_verification([])
    choice.observe_step(1, 3, 2, 0.21)
    choice.observe_verification([VerifiedDrafts("request", 1, 1)])
    at_zero, *_, at_three = choice.costs.seconds(1, 3)
    assert at_zero == pytest.approx(0.1, rel=0.2) and at_three == pytest.approx(0.21, rel=0.2)
    assert choice.depth(1, 60) > 0


@pytest.mark.parametrize("seed", range(5))
def test_a_recheck_of_few_requests_drafts_enough_steps_to_see_a_new_text(seed):
    """Two requests: a re-check drafts four steps (8 requests' drafts, not 2 that the prior outweighs),
    and the first re-check after the text turns predictable finds it."""
    engine = FakeEngine(acceptance=0.0, seed=seed)
    choice = DepthChoice(3, tuning=dataclasses.replace(TUNING, stale_s=1.0))
    depths = run(choice, engine, 2, 400)
    rechecks = choice.rechecks
    assert rechecks and depths[-1] == 0
    drafting_runs = [len(run) for run in "".join("d" if d else "." for d in depths[20:]).split(".") if run]
    assert drafting_runs and set(drafting_runs) == {4}
    engine.acceptance = 0.85
    later = run(choice, engine, 2, 400)
    first = later.index(next(d for d in later if d)) + 4  # the first re-check's steps
    assert choice.rechecks >= rechecks + 1
    assert all(later[first + 2:first + 40]), later[first:first + 40]


def test_a_depth_measured_to_lose_is_not_tried_again_while_the_text_holds():
    """A head whose first draft is accepted and later ones never (the kit's EAGLE-3 head): depth 1 wins.
    Positions 2 and 3, unmeasured once the steps draft at 1, keep what they measured while position 1
    holds, so depth 3 is not tried again every second; when the text turns predictable deeper, re-checks of the
    position past the chosen depth find it."""
    engine = FakeEngine(per_token=0.0002, acceptance=0.7, deeper=0.0)
    choice = DepthChoice(3)
    depths = run(choice, engine, 8, 3000)
    assert engine.best(8, 3) == 1 and depths[-1] == 1
    # 30 where a stale position always stands in with the one before; a step of 8 requests reaches
    # position 2 about 5.6 times, under telling_trials, so a few re-tries are the rule's price.
    assert depths[100:].count(3) <= 8
    engine.acceptance, engine.deeper = 0.95, 0.95
    later = run(choice, engine, 8, 400)
    assert later[-1] >= 2 and near_best(engine, 8, later[-50:], 3)


def test_what_drafting_at_all_costs_is_not_spread_over_the_depths():
    """vLLM's speculative path costs a step that drafts the same at any depth (rejection sampler,
    metadata, the drafter's call): a head that accepts its first draft 0.7 of the time then loses at
    every depth, depth 1 included, though a fit linear in the depth would predict depth 1 a gain."""
    engine = FakeEngine(per_token=0.0002, draft_fixed=0.0005, draft_per_request=0.0, acceptance=0.7, deeper=0.0,
                        speculating=0.008)
    assert engine.best(8, 3) == 0 and engine.rates(8, 3)[1] > 0.9 * engine.rates(8, 3)[0]
    choice = DepthChoice(3)
    depths = run(choice, engine, 8, 2000)
    assert depths[-1] == 0 and sum(1 for d in depths[50:] if d) <= 0.02 * len(depths[50:])


@pytest.mark.parametrize("seed", range(3))
def test_drafting_measured_in_a_slow_spell_is_measured_again_once_its_steps_are_old(seed):
    """Depth 3 wins; then the machine runs at half speed while a text the drafter predicts poorly drives the
    depth to 0 (the real pair in float32, 2026-12-03: depth-1 steps at 0.61-0.93 s against a steady
    0.41-0.46). The text turns predictable again and the spell ends. Depth 0's steps are measured at full
    speed, drafting's never: priced from the spell, it would hold depth 0 for good (0.67x stock SD there).
    Once those steps are ``cost_stale_s`` old, a re-check prices drafting at the draft's weights, forgets the
    old steps, measures it afresh, and depth 3 returns."""
    engine = FakeEngine(draft_fixed=0.004, acceptance=0.95, seed=seed)
    choice = DepthChoice(3)
    assert run(choice, engine, 1, 40)[-1] == 3
    engine.slow, engine.acceptance = 1.9, 0.3
    assert run(choice, engine, 1, 60)[-10:] == [0] * 10
    engine.slow, engine.acceptance = 1.0, 0.95
    assert engine.best(1, 3) == 3
    start, depths = choice.seconds, []
    while choice.seconds - start < TUNING.cost_stale_s / 2:
        depths.append(engine.step(choice, 1))
    assert set(depths) == {0} and choice.rechecks == 0, "drafting's steps are not old yet"
    while choice.seconds - start < 3 * TUNING.cost_stale_s:
        depths.append(engine.step(choice, 1))
    assert choice.rechecks == 1 and depths[-500:] == [3] * 500, choice.rechecks
    true = [engine.seconds(1, d, d) for d in range(4)]
    assert choice.costs.seconds(1, 3) == pytest.approx(true, rel=0.05)


def test_a_recheck_ends_when_the_load_changes():
    """A re-check begun at one request (8 steps' worth) ends when 16 requests arrive: on the real pair it
    ran 7 steps at depth 1 for all 16, the first with the draft's prefill of their 505 prompt tokens
    (4.2 s), the others 0.46 s each against 0.2 s at depth 0."""
    engine = FakeEngine(per_token=0.004, acceptance=0.0)
    choice = DepthChoice(3, tuning=dataclasses.replace(TUNING, stale_s=1.0))
    run(choice, engine, 1, 300)
    rechecks = choice.rechecks
    while choice.rechecks == rechecks:
        engine.step(choice, 1)
    assert run(choice, engine, 16, 4)[1:] == [0, 0, 0]  # the first: the new load's own re-check, if due


def test_a_recheck_ended_by_a_new_load_does_not_delay_that_load_s_own():
    """The first request of two arrives alone and a re-check begins; the second ends it. The two requests'
    own re-check follows at once (on the real pair, counted as done, it left the phases of one and two
    requests of code at depth 0 for their whole length), and finds the text the drafter now predicts."""
    engine = FakeEngine(acceptance=0.0)
    choice = DepthChoice(3, tuning=dataclasses.replace(TUNING, stale_s=1.0))
    run(choice, engine, 2, 300)
    engine.acceptance = 0.9
    rechecks = choice.rechecks
    while choice.rechecks == rechecks:
        engine.step(choice, 1)
    depths = run(choice, engine, 2, 30)
    assert all(depths[:4]) and all(depths[-10:]), depths


def test_a_recheck_costly_to_catch_up_waits_longer():
    """Leaving depth 0 catches the draft up on every skipped token: a re-check that costs more is rarer."""
    counts = []
    for skipped in (0, 20_000):
        engine = FakeEngine(acceptance=0.0, catch_up_per_token=0.0005)
        choice = DepthChoice(3, tuning=dataclasses.replace(TUNING, stale_s=0.5))
        run(choice, engine, 8, 20)  # learn costs and acceptance
        choice.costs.observe(8, 1, 16, engine.seconds(8, 1, 8, 1000), catch_up=1000)  # a measured catch-up
        for _ in range(3000):
            engine.step(choice, 8, catch_up=skipped)
        counts.append(choice.rechecks)
    assert counts[0] > 5 * max(counts[1], 1)


def test_a_catch_up_is_weighed_against_the_tokens_left():
    """Leaving depth 0 is worth a catch-up only if enough tokens are left to earn it back."""
    engine = FakeEngine(acceptance=0.8, catch_up_per_token=0.001)
    choice = DepthChoice(3)
    run(choice, engine, 8, 30)
    choice.costs.observe(8, 3, 32, engine.seconds(8, 3, 24, 2000), catch_up=2000)
    free = choice.goodput(8, TOKENS_LEFT)[3]
    assert choice.goodput(8, 10, catch_up=2000)[3] < 0.5 * free
    assert choice.goodput(8, 10_000, catch_up=2000)[3] > 0.9 * free


@pytest.mark.parametrize("acceptance", [0.55, 0.62, 0.7])
def test_no_flapping_on_a_noisy_machine_near_a_tie(acceptance):
    """Depths 0 and 1 within 1-10 % of each other, steps jittered by 10 %: the choice (re-checks
    aside) moves once in 100 steps at most."""
    engine = FakeEngine(per_token=0.0012, acceptance=acceptance, noise=0.10)
    changes = []
    choice = DepthChoice(2, on_change=changes.append)
    run(choice, engine, 8, 600)
    assert len(changes) <= 6, changes


def test_a_draft_as_large_as_the_target_starts_at_zero():
    """policy/weight_bound.py: with every draft accepted, no depth beats speculation off."""
    assert DepthChoice(3, draft_cost=1.0).depth(4, TOKENS_LEFT) == 0
    assert DepthChoice(3, draft_cost=0.1).depth(4, TOKENS_LEFT) == 3
    assert DepthChoice(3).depth(4, TOKENS_LEFT) == 3


def test_where_the_weight_bound_rules_out_every_depth_nothing_is_drafted_or_measured():
    """A draft as large as the target cannot pay at any acceptance: depth 0 on every step, no re-check,
    even where the fake engine's drafts would be cheap enough to pay, and no step is modelled."""
    choice = DepthChoice(3, draft_cost=1.0)
    assert not choice.can_speculate
    assert run(choice, FakeEngine(draft_fixed=0.0, draft_per_request=0.0, acceptance=1.0), 4, 200) == [0] * 200
    assert choice.rechecks == 0 and not choice.costs.known


def test_a_cost_fit_from_prompt_steps_alone_does_not_decide_a_decode_steps_depth():
    """Steps of long prompt chunks alone (their cost bends with the tokens: fitted, they predicted a decode
    step at 0 s or less) are not fitted: the choice keeps its starting depth until a decode step is
    measured."""
    choice = DepthChoice(3)
    choice.observe_verification([VerifiedDrafts("request", 3, 3)])
    choice.observe_step(1, 0, 128, 0.05, prefill=127)
    choice.observe_step(1, 0, 64, 0.01, prefill=63)
    assert not choice.costs.known
    assert choice.depth(1, TOKENS_LEFT) == 3


def test_steps_that_all_verify_as_many_tokens_do_not_split_the_fixed_cost_at_random():
    """At one request held at depth 3 every step verifies the 3 drafts of the one before, and the single
    step at depth 0 does too: nothing tells the fixed part from the part per token. Solved freely, the
    priors put 0.61 s in the fixed part (0.11 measured) and -0.12 s per token, and depth 1 read 0.41 s
    against a true 0.16. No term is negative: every depth is predicted within 20 % of the truth."""
    engine = FakeEngine(fixed=0.095, per_token=0.005, draft_fixed=0.045, draft_per_request=0.0025,
                        speculating=0.0075, acceptance=0.92, noise=0.1)
    choice = DepthChoice(3)
    depths = run(choice, engine, 1, 64)
    assert depths[8:] == [3] * 56
    a, w, *_ = choice.costs._fit(1)
    assert a >= 0 and w >= 0
    engine.noise = 0.0
    truth = [engine.seconds(1, d, d) for d in range(4)]
    for predicted, true in zip(choice.costs.seconds(1, 3), truth):
        assert predicted == pytest.approx(true, rel=0.2)


def test_changes_are_reported_with_the_predicted_rates():
    changes = []
    choice = DepthChoice(3, on_change=changes.append)
    run(choice, FakeEngine(acceptance=0.0), 8, 10)
    assert changes and changes[0].startswith(
        "MineDraft auto: speculation depth 3 -> 0 at 8 requests (predicted depth 0:")


def test_changes_are_reported_once_in_ten_seconds_with_those_between_counted():
    changes = []
    choice = DepthChoice(1, on_change=changes.append)
    for step in range(1, 61):  # a change every second of steps
        choice.observe_step(4, 0, 4, 1.0)
        choice._settle(step % 2, 4, None)
    assert len(changes) == 6 and all("9 changes since the last line" in line for line in changes[1:])


def test_the_choice_takes_no_depth_below_zero_or_above_k():
    with pytest.raises(ValueError):
        DepthChoice(-1)
    choice = DepthChoice(0)
    assert run(choice, FakeEngine(), 4, 5) == [0] * 5


def test_the_position_past_the_chosen_depth_is_rechecked_and_a_text_drafted_deeper_is_found():
    """Position 1 accepted always and the later ones never: depth 1 wins, and positions 2 and 3 keep what
    they measured. When the text turns predictable at every position, position 1 reads the same, so
    only a re-check of position 2 (one step of 8 requests' drafts at depth 2, spaced
    as depth 0's are) finds it; then position 3's, and the steps draft at the best depth."""
    engine = FakeEngine(per_token=0.0002, acceptance=1.0, deeper=0.0)
    choice = DepthChoice(3, tuning=dataclasses.replace(TUNING, stale_s=1.0))
    depths = run(choice, engine, 8, 2000)
    assert engine.best(8, 3) == 1 and depths[-1] == 1
    clock, rechecks = choice.seconds, choice.rechecks
    probes = depths[100:].count(2)
    assert 0 < probes <= clock / 1.0 + 1  # re-checked, at most once a second of steps
    assert depths[100:].count(3) <= 8
    engine.deeper = 0.95
    later = run(choice, engine, 8, 1000)
    assert choice.rechecks > rechecks
    assert engine.best(8, 3) == 3 and later[-1] == 3 and near_best(engine, 8, later[-50:], 3)


def _code_and_prose(a=0.05, w=0.005, draft=0.005, draft_per_request=0.0005, steps=30, seed=0):
    """A choice and each request's acceptance after ``steps`` steps at depth 3 of 4 requests of code
    (0.95 of drafts accepted) and 4 of prose (0.05), on a compute-bound target whose costs it measured
    (``w`` a verified token, ``draft + draft_per_request * decodes`` a draft forward)."""
    rng = random.Random(seed)
    choice = DepthChoice(3, draft_cost=0.2)
    for _ in range(8):  # loads around 8: a verified token's cost told apart from a draft forward's
        for decodes in (4, 8, 16):
            for depth in range(4):
                tokens = decodes * (1 + depth)
                seconds = a + w * tokens + depth * (draft + draft_per_request * decodes)
                choice.costs.observe(decodes, depth, tokens, seconds)
    for _ in range(steps):
        choice.observe_verification([VerifiedDrafts(f"r{i}", 3, accepted_run(rng, 0.95 if i < 4 else 0.05, 3))
                                     for i in range(8)])
    return choice, [choice.acceptance.survivals(f"r{i}", 3) for i in range(8)]


def test_in_a_batch_of_code_and_prose_the_depth_weighs_the_drafts_that_pay():
    """The batch's acceptance (about 0.5 at position 1) pays for no depth; each request verifying only the
    drafts its own acceptance pays for (the prose's are cut), the code's pay for k = 3: the step's tokens
    and seconds are those of the code's drafts alone, the drafter's forwards paid for all eight."""
    choice, survivals = _code_and_prose()
    batch, per_request = choice.goodput(8, TOKENS_LEFT), choice.goodput(8, TOKENS_LEFT, survivals=survivals)
    assert max(range(4), key=batch.__getitem__) == 0 and choice.depth(8, TOKENS_LEFT) == 0
    assert per_request[0] == pytest.approx(batch[0]) and per_request[3] > 1.03 * per_request[0]
    code_tokens = sum(sum(s) for s in survivals[:4])
    true_seconds = 0.05 + 0.005 * (8 + 12) + 3 * (0.005 + 0.0005 * 8)
    assert per_request[3] == pytest.approx((8 + code_tokens) / true_seconds, rel=0.02)
    assert choice.depth(8, TOKENS_LEFT, survivals=survivals) > 0


def test_with_nothing_waiting_the_depth_serves_the_request_that_ends_the_batch():
    """Where no request waits, the batch ends with its last request. Code and prose with as many tokens
    left: the prose, a token a step at any depth, ends the batch, and every step that drafts for the
    code delays it, so depth 0 wins. Prose about to finish beside code with many tokens left: the code
    ends the batch, and its drafts pay."""
    choice, survivals = _code_and_prose()
    throughput = choice.goodput(8, TOKENS_LEFT, survivals=survivals)
    even = choice.goodput(8, TOKENS_LEFT, survivals=survivals, closing=[64] * 8)
    assert even[0] == pytest.approx(throughput[0])
    assert max(range(4), key=even.__getitem__) == 0
    assert choice.depth(8, TOKENS_LEFT, survivals=survivals, closing=[64] * 8) == 0
    prose_ending = choice.goodput(8, TOKENS_LEFT, survivals=survivals, closing=[64] * 4 + [4] * 4)
    # At depth 3 the prose's drafts are cut and the code's kept: the step's tokens are the code's, and the
    # batch ends with the code request that makes the fewest a step.
    code = [1 + sum(s) for s in survivals[:4]]
    assert prose_ending[3] == pytest.approx(8 * min(code) * throughput[3] / (4 + sum(code)))
    assert choice.depth(8, TOKENS_LEFT, survivals=survivals, closing=[64] * 4 + [4] * 4) == 3


def test_in_a_batch_of_one_kind_nothing_waiting_scores_as_its_throughput():
    """Requests alike, with as many tokens left: the last to finish makes what every request makes, and the
    scores are the batch's tokens per second."""
    choice, survivals = _code_and_prose()
    code = [survivals[0]] * 8
    assert choice.goodput(8, TOKENS_LEFT, survivals=code, closing=[20] * 8) == pytest.approx(
        choice.goodput(8, TOKENS_LEFT, survivals=code))


def test_requests_that_verify_no_drafts_leave_only_the_drafter_s_cost():
    """Every request limited to no drafts (survivals empty): a depth > 0 verifies nothing and costs the
    drafter's forwards, so depth 0 wins."""
    choice, _ = _code_and_prose()
    rates = choice.goodput(8, TOKENS_LEFT, survivals=[[]] * 8)
    assert rates[0] > rates[1] > rates[2] > rates[3]
    # The fit, within 5 %: a step of 8 requests' own tokens, and three draft forwards besides.
    assert rates[0] / rates[3] == pytest.approx((0.05 + 0.04 + 3 * 0.009) / (0.05 + 0.04), rel=0.05)


def test_a_recheck_s_depth_is_marked_rechecking_and_a_chosen_depth_is_not():
    """Two requests whose drafts are never accepted: the first steps run the starting depth (not a
    re-check), then depth 0, and each re-check drafts at depth 1 for four steps (8 requests' drafts). Those
    four steps' depths, and only those, are marked a re-check's: the policy verifies their drafts whole."""
    engine, choice = FakeEngine(acceptance=0.0), DepthChoice(3)
    steps = []
    for _ in range(400):
        depth = engine.step(choice, 2)
        steps.append((depth, choice.rechecking))
    assert steps[0] == (3, False)  # the starting depth is chosen, not a re-check's
    assert choice.rechecks >= 2
    assert [rechecking for _, rechecking in steps[20:]] == [depth > 0 for depth, _ in steps[20:]]
    assert sum(rechecking for _, rechecking in steps) == 4 * choice.rechecks
    choice.depth(0, TOKENS_LEFT)
    assert not choice.rechecking  # a step with no requests: no re-check's depth


def _policy_steps(policy: SpeculationPolicy, steps: int) -> list[tuple[dict[str, int], StepPlan, bool, float]]:
    """Two requests whose drafts are never accepted, each step verifying the drafts made at the step
    before's depth, on a compute-bound fake engine (2 ms a token the target computes): per step, the
    drafts each request held, the plan, whether its depth was a re-check's, and request a's own chance
    of its first draft being accepted. The policy's clock is the sum of the steps' seconds."""
    held, out = {"a": 0, "b": 0}, []
    for _ in range(steps):
        plan = policy.plan(StepView([RequestView(rid, True, tokens_left=1000, num_drafts=n)
                                     for rid, n in held.items()]))
        survival = policy.depths.acceptance.survivals("a", 1)[0]
        out.append((dict(held), plan, policy.depths.rechecking, survival))
        verified = [VerifiedDrafts(rid, plan.num_drafts.get(rid, n), 0) for rid, n in held.items()]
        verified = [v for v in verified if v.drafts]
        tokens = len(held) + sum(v.drafts for v in verified)
        policy.observe(StepResult(plan, num_decoding=len(held), tokens=tokens, output_tokens=len(held),
                                  verified=verified, seconds=0.010 + 0.002 * tokens + 0.001 * plan.depth))
        held = dict.fromkeys(held, plan.depth)
    return out


def test_a_recheck_verifies_its_drafts_whole_where_a_poor_request_s_are_trimmed_outside_one():
    """At depth 0 a re-check drafts at depth 1 to measure acceptance again. Its requests' own acceptance
    is poor (every draft rejected so far): cut to the drafts that pay, none would be verified and the
    re-check would measure nothing. So each request keeps every draft the re-check made, in its steps and
    in the step after its last (which verifies the last step's drafts); outside it, the same requests
    holding as many drafts have them all trimmed."""
    policy = SpeculationPolicy(3, depth_control="drafted")
    steps = _policy_steps(policy, 200)
    begins = next(i for i, (_, plan, _, _) in enumerate(steps) if plan.counts.rechecks)
    assert steps[begins][1].depth == 1 and steps[begins][0] == {"a": 0, "b": 0}
    for held, plan, rechecking, survival in steps[begins + 1:begins + 5]:  # its drafts verified
        assert survival < 0.2
        assert held == {"a": 1, "b": 1} and plan.num_drafts == held
        assert plan.counts.drafts_trimmed == 0
    assert [rechecking for _, _, rechecking, _ in steps[begins + 1:begins + 5]] == [True, True, True, False]
    assert not any(rechecking for _, _, rechecking, _ in steps[-2:])
    outside = policy.plan(StepView([RequestView(rid, True, tokens_left=1000, num_drafts=1) for rid in "ab"]))
    assert not policy.depths.rechecking
    assert outside.num_drafts == {"a": 0, "b": 0}
    assert (outside.counts.drafts_trimmed, outside.counts.requests_trimmed) == (2, 2)


def test_a_recheck_of_a_large_batch_measures_its_drafts():
    """With telling_trials requests or more, a re-check drafts for one step, whose drafts the next step
    verifies. Held only while re-checking, those drafts met a step that was not and were cut to the
    requests' own poor rates: the re-check measured nothing, and a batch of 16 whose text the draft came
    to predict (acceptance 0.2 -> 0.95) stayed at depth 0 (tests/unit/policy/test_depth_zero_hold.py's
    load: 50 of 300 steps at depth 0 in its first phase of code with the drafts kept, 294 without)."""
    policy = SpeculationPolicy(3, depth_control="drafted")
    ids = [f"r{i}" for i in range(16)]
    held = dict.fromkeys(ids, 0)
    rng = random.Random(0)
    measured = []
    for step in range(400):
        acceptance = 0.2 if step < 200 else 0.95
        plan = policy.plan(StepView([RequestView(rid, True, tokens_left=1000, num_drafts=n)
                                     for rid, n in held.items()]))
        drafts = {rid: plan.num_drafts.get(rid, n) for rid, n in held.items()}
        verified = [VerifiedDrafts(rid, n, accepted_run(rng, acceptance, n)) for rid, n in drafts.items() if n]
        measured.append(sum(v.drafts for v in verified))
        tokens = len(held) + sum(v.drafts for v in verified)
        policy.observe(StepResult(plan, num_decoding=len(held), tokens=tokens, verified=verified,
                                  output_tokens=len(held) + sum(v.accepted for v in verified),
                                  seconds=0.010 + 0.0002 * tokens + 0.001 * plan.depth))
        held = dict.fromkeys(held, plan.depth)
    assert policy.depths.rechecks >= 1
    assert sum(measured[200:]) > 0 and policy.depth > 0


def _large_batch_recheck(skips_rows: bool) -> tuple[dict[str, int], list[StepPlan], SpeculationPolicy]:
    """24 requests, and 8 more from step 60, whose drafts are rarely accepted (0.1), under a policy whose drafter
    catches up on the tokens it skipped (``skips_rows``: it can also leave rows of a call out), driven until
    a re-check from depth 0 begins and through the step that verifies its drafts: the tokens each request's
    drafter had skipped when it began, and the plans from it on. A draft forward costs 0.03 ms a row drafted,
    a caught-up token 0.01 ms."""
    policy = SpeculationPolicy(3, depth_control="drafted", draft_cost=0.05, catches_up=True, skips_rows=skips_rows)
    rng = random.Random(0)
    held: dict[str, int] = {}
    plans: list[StepPlan] = []
    skipped: dict[str, int] = {}
    for step in range(3000):
        while len(held) < (24 if step < 60 else 32):
            held[f"r{len(held)}"] = 0
        if not plans:
            skipped = dict(policy._skipped)
        plan = policy.plan(StepView([RequestView(rid, True, 1000, num_drafts=n) for rid, n in held.items()]))
        if plan.counts.rechecks or plans:
            plans.append(plan)
        kept = {rid: min(n, plan.num_drafts.get(rid, n)) for rid, n in held.items()}
        verified = [VerifiedDrafts(rid, n, accepted_run(rng, 0.1, n)) for rid, n in kept.items() if n]
        tokens = len(held) + sum(v.drafts for v in verified)
        drafted = len(held) - len(plan.undrafted)
        caught_up = sum(policy._skipped.get(rid, 0) for rid in held if rid not in plan.undrafted) if plan.depth else 0
        policy.observe(StepResult(plan, num_decoding=len(held), tokens=tokens, verified=verified,
                                  scheduled=dict.fromkeys(held, 1), output_tokens=tokens,
                                  seconds=0.006 + 0.0001 * tokens + plan.depth * (0.0003 + 0.00003 * drafted)
                                  + 0.00001 * caught_up))
        held = {rid: 0 if rid in plan.undrafted else plan.depth for rid in held}
        if len(plans) == 2:
            return skipped, plans, policy
    raise AssertionError("no re-check began")


def test_a_recheck_of_a_large_batch_drafts_for_as_many_requests_as_tell_acceptance():
    """A re-check from depth 0 of 32 requests, where the drafter can leave rows of a call out, drafts for
    telling_trials (8) of them: those it has the fewest skipped tokens to catch up on (the ones that joined
    later). The others' rows are left out, their skipped tokens kept for when they are next drafted; the 8
    verify their drafts whole in the next step."""
    skipped, (recheck, after), policy = _large_batch_recheck(skips_rows=True)
    measured = set(f"r{i}" for i in range(32)) - recheck.undrafted
    assert recheck.depth > 0 and recheck.counts.undrafted == 24
    assert sorted(skipped[rid] for rid in measured) == sorted(skipped.values())[:8]
    assert measured == {f"r{i}" for i in range(24, 32)}
    assert {rid for rid, n in after.num_drafts.items() if n} == measured
    assert all(after.num_drafts[rid] == recheck.depth for rid in measured)
    assert all(policy._skipped[rid] > skipped[rid] for rid in recheck.undrafted)


def test_a_recheck_drafts_every_row_where_the_drafter_cannot_leave_rows_out():
    _, (recheck, after), _ = _large_batch_recheck(skips_rows=False)
    assert recheck.depth > 0 and recheck.undrafted == frozenset()
    assert sum(n > 0 for n in after.num_drafts.values()) == 32
