"""minedraft/policy/step_costs.py: steps folded in a batch are the steps added one by one, the fits are
solved again only once ``refit_s`` of steps were observed (or a cell is new or forming), and a caught-up
token is priced as the target's prompt token where a step measured one."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from minedraft.policy.step_costs import StepCosts
from minedraft.policy.tuning import TUNING


def _costs(refit_s: float) -> StepCosts:
    return StepCosts(tuning=dataclasses.replace(TUNING, refit_s=refit_s))


def _steps(n: int, seed: int = 0) -> list[tuple[int, int, int, float, int]]:
    rng = random.Random(seed)
    steps = []
    for _ in range(n):
        num_reqs, depth = rng.choice((1, 2, 8, 9, 32)), rng.choice((0, 1, 3))
        catch_up = rng.choice((0, 0, 0, 40))
        seconds = 0.002 + 0.0001 * num_reqs * (1 + depth) + 0.0005 * depth + 0.00001 * catch_up
        steps.append((num_reqs, depth, num_reqs * (1 + depth), seconds * rng.uniform(0.9, 1.1), catch_up))
    return steps


def test_steps_folded_in_one_pass_are_the_steps_added_one_by_one():
    every_step, batched = _costs(refit_s=0.0), _costs(refit_s=1e9)
    for num_reqs, depth, tokens, seconds, catch_up in _steps(300):
        every_step.observe(num_reqs, depth, tokens, seconds, catch_up)
        every_step.seconds(num_reqs, 3)  # solved (and folded) after every step
        batched.observe(num_reqs, depth, tokens, seconds, catch_up)
    batched.refit()  # one solve folds every step observed since the cells formed
    for num_reqs in (1, 2, 8, 32):
        assert batched.seconds(num_reqs, 3) == pytest.approx(every_step.seconds(num_reqs, 3), rel=1e-9)
    np.testing.assert_allclose(batched.grams, every_step.grams, rtol=1e-9)
    np.testing.assert_allclose(batched.moments, every_step.moments, rtol=1e-9)


def test_the_fits_are_solved_again_after_refit_s_of_steps(monkeypatch):
    costs = _costs(refit_s=0.05)
    solves = []
    solve = costs._solve
    monkeypatch.setattr(costs, "_solve", lambda *a: solves.append(a) or solve(*a))
    for _ in range(3):  # a new cell, then one still forming: solved after each
        costs.observe(8, 0, 8, 0.002)
        costs.seconds(8, 3)
    assert len(solves) == 3
    for _ in range(20):  # 40 ms of settled steps: the fit is not solved again
        costs.observe(8, 0, 8, 0.002)
        costs.seconds(8, 3)
    assert len(solves) == 3
    for _ in range(6):  # past 50 ms: solved once more
        costs.observe(8, 0, 8, 0.002)
        costs.seconds(8, 3)
    assert len(solves) == 4
    costs.observe(8, 1, 16, 0.003)  # a cell not seen before: at once
    costs.seconds(8, 3)
    assert len(solves) == 5


def test_a_caught_up_token_is_priced_as_a_prompt_token_once_a_prompt_was_computed_at_depth_0():
    """The real pair (2026-12-02, EPYC, bf16): memory-bound decode steps (about 0.14 s at 2 and at 8
    requests), a step of 8 prompts' 234 tokens 1.0 s at depth 0, and a re-check's catch-up of 546 tokens
    0.85 s (a draft of a third of the target's weights). Priced as a decode token, that catch-up read
    0.05 s, and the re-checks it paced ran at five times their share of time."""
    costs = StepCosts(draft_cost=0.33)
    for _ in range(4):
        costs.observe(2, 0, 2, 0.141)
        costs.observe(8, 0, 8, 0.144)
        costs.observe(8, 1, 16, 0.27)
    as_decode = costs.catch_up_seconds(8, 546)
    assert costs.prompt_token_seconds is None
    costs.observe(8, 1, 234, 1.4, catch_up=234, prefill=234)  # at depth 1 the draft's prefill is in it too
    assert costs.prompt_token_seconds is None
    costs.observe(8, 0, 234, 1.0, prefill=234)
    price = costs.prompt_token_seconds
    assert price == pytest.approx((1.0 - 0.14) / 226, rel=0.1)
    assert costs.catch_up_seconds(8, 546) == pytest.approx(0.33 * price * 546, rel=0.1)
    assert costs.catch_up_seconds(8, 546) != pytest.approx(as_decode, rel=0.1)
    assert costs.seconds(8, 1) == pytest.approx([0.144, 0.27], rel=0.05)  # the decode steps' fit is kept


@pytest.mark.parametrize("told", [True, False])
def test_a_step_whose_drafter_left_rows_out_is_fitted_at_the_rows_it_drafted(told):
    """A re-check of a few of 32 requests, or the hybrid's undrafted rows: the drafter ran its forwards over 8
    rows. Told so, the fit of steps that drafted every row stands; fitted as if it drafted all 32, a draft
    forward per request reads cheaper, and the full steps' prediction falls short (the test's own check)."""
    costs = StepCosts()
    rng = random.Random(0)

    def seconds(num_reqs: int, depth: int, drafted: int) -> float:  # e: 0.2 ms a request's draft forward
        return (0.004 + 0.0001 * (num_reqs + depth * drafted) + 0.0005 * (depth > 0) + depth * 0.0002 * drafted) * (
            rng.uniform(0.98, 1.02))

    for _ in range(40):
        for num_reqs, depth in ((32, 0), (32, 1), (32, 3), (16, 2)):
            costs.observe(num_reqs, depth, num_reqs * (1 + depth), seconds(num_reqs, depth, num_reqs))
        for _ in range(2):
            costs.observe(32, 3, 32 + 3 * 8, seconds(32, 3, 8), drafted=8 if told else None)
    predicted = costs.seconds(32, 3)[3]
    exact = 0.004 + 0.0001 * 128 + 0.0005 + 3 * 0.0002 * 32
    assert (abs(predicted - exact) < 0.015 * exact) == told, (predicted, exact)  # told: 0.4 % off; not: 3.9 %
    if told:
        assert costs.drafting_seconds(32, 3, 8) == pytest.approx(0.0001 * 24 + 0.0005 + 3 * 0.0002 * 8, rel=0.15)
        assert costs.drafting_seconds(32, 0, 8) == 0.0
