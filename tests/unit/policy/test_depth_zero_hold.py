"""A depth 0 held without weighing it again (DepthChoice.holds_zero): the same depths as weighing every
step, on a load that moves between text the draft misses and text it predicts, with requests joining and
leaving, re-checks and cost refits; and held on most steps at depth 0."""

from __future__ import annotations

import random

import pytest

from minedraft.policy import RequestView, SpeculationPolicy, StepResult, StepView, VerifiedDrafts
from minedraft.policy.depth import DepthChoice

MAX_DEPTH = 3


def _drive(seed: int, closed: bool = False, steps: int = 1500, plans: list | None = None,
           keyed: list | None = None) -> tuple[list[int], int]:
    """Depths of a policy over a batch of 16 whose text swings between prose (acceptance 0.2: depth 0
    pays) and code (0.95: drafting pays) every 300 steps; each request makes 40-120 tokens and is replaced
    by a new one (its prompt computed first); a draft forward costs about a tenth of a step.
    ``closed``: each step's view says no request waits (a closed batch is scored by its last request).
    Also the re-checks begun. ``plans``: each step's plan, appended; ``keyed``: each plan made from the
    step's key (held_plan) where it could be, appended, the others planned from the view."""
    rng = random.Random(seed)
    policy = SpeculationPolicy(MAX_DEPTH, depth_control="drafted", draft_cost=0.05, catches_up=True)
    serial = iter(range(10**6))

    def new() -> dict:
        rid = f"r{next(serial)}"
        policy.add_request(rid, None)
        return {"id": rid, "left": rng.randint(40, 120), "prompt": True, "held": 0}

    batch = [new() for _ in range(16)]
    depths = []
    for step in range(steps):
        acceptance = 0.95 if (step // 300) % 2 else 0.2
        view = StepView([RequestView(r["id"], not r["prompt"], r["left"], prompt_left=64 if r["prompt"] else 0,
                                     num_drafts=r["held"]) for r in batch], closed=closed)
        plan = policy.held_plan(view.key()) if keyed is not None else None
        if plan is not None:
            keyed.append(plan)
        else:
            plan = policy.plan(view)
        depths.append(plan.depth)
        if plans is not None:
            plans.append(plan)
        verified, output = [], 0
        for r in batch:
            if r["prompt"]:
                continue
            drafts = min(r["held"], plan.num_drafts.get(r["id"], r["held"]))
            taken = 0
            while taken < drafts and rng.random() < acceptance:
                taken += 1
            if drafts:
                verified.append(VerifiedDrafts(r["id"], drafts, taken))
            output += 1 + taken
        decoding = sum(not r["prompt"] for r in batch)
        tokens = decoding + sum(v.drafts for v in verified)
        prompts = 64 * (len(batch) - decoding)
        seconds = (0.010 + 0.0002 * (tokens + prompts) + plan.depth * (0.0005 + 0.00003 * decoding)) * (
            1 + rng.uniform(-0.05, 0.05))
        policy.observe(StepResult(plan, num_decoding=decoding, tokens=tokens + prompts, prefill_tokens=prompts,
                                  scheduled={r["id"]: 64 if r["prompt"] else 1 for r in batch},
                                  prompt_tokens=prompts, output_tokens=output, verified=verified, seconds=seconds))
        for i, r in enumerate(batch):
            r["left"] -= 0 if r["prompt"] else 1
            r["prompt"], r["held"] = False, 0 if r["id"] in plan.undrafted else plan.depth
            if r["left"] <= 0:
                policy.finish(r["id"])
                batch[i] = new()
    return depths, policy.depths.rechecks


@pytest.mark.parametrize("seed, closed", [(0, False), (1, False), (2, False), (0, True), (1, True)])
def test_holding_depth_zero_chooses_the_depths_weighing_every_step_chooses(seed, closed, monkeypatch):
    held_steps = []
    original = DepthChoice.holds_zero

    def counted(self, num_reqs, even=True, decoding=True):
        holds = original(self, num_reqs, even, decoding)
        held_steps.append(holds)
        return holds

    monkeypatch.setattr(DepthChoice, "holds_zero", counted)
    holding, rechecks = _drive(seed, closed)
    monkeypatch.setattr(DepthChoice, "holds_zero", lambda self, num_reqs, even=True, decoding=True: False)
    weighing, rechecks_weighing = _drive(seed, closed)
    assert holding == weighing and rechecks == rechecks_weighing
    # The load is what the test is about: long stretches at depth 0, drafting in the code phases, re-checks.
    assert holding.count(0) > 500 and sum(d > 0 for d in holding) > 300 and rechecks >= 2
    if not closed:  # most steps at depth 0 were held, not weighed
        assert sum(held_steps) > holding.count(0) / 2
    else:  # its requests' tokens left differ: held only where no depth could beat 0 however the batch drains
        assert sum(held_steps) > holding.count(0) / 8


@pytest.mark.parametrize("seed, closed", [(0, False), (1, False), (0, True)])
def test_a_step_planned_from_its_key_is_planned_as_from_its_view(seed, closed):
    """held_plan, where a depth 0 stands and the step needs no request's view, plans it as plan(view) does;
    every later plan too (what a plan leaves for the next, a re-check's drafts verified whole among it)."""
    from_views, from_keys, keyed = [], [], []
    _drive(seed, closed, plans=from_views)
    _drive(seed, closed, plans=from_keys, keyed=keyed)
    assert from_keys == from_views
    assert len(keyed) > 300  # of about 800 steps at depth 0 in 1500


def _closed_pair(seed: int, good: float = 0.9, holds: list[bool] | None = None) -> list[int]:
    """Depths of a closed batch of two requests that differ: the one with the most tokens left drafts well
    (``good``: 0.9), the other poorly (0.1). Scored by its last request, the batch's depth-0 score moves towards
    drafting as both decode: the poor request, setting the pace, has ever fewer steps left. ``holds``: each
    plan's holds_zero answers, where it was asked."""
    rng = random.Random(seed)
    policy = SpeculationPolicy(MAX_DEPTH, depth_control="drafted", draft_cost=0.1)
    if holds is not None:
        asked = policy.depths.holds_zero
        policy.depths.holds_zero = lambda *args: holds.append(asked(*args)) or holds[-1]
    batch = [{"id": "good", "left": 400, "acceptance": good, "held": 0},
             {"id": "poor", "left": 300, "acceptance": 0.1, "held": 0}]
    for r in batch:
        policy.add_request(r["id"], None)
    depths = []
    while batch:
        view = StepView([RequestView(r["id"], True, r["left"], num_drafts=r["held"]) for r in batch], closed=True)
        plan = policy.plan(view)
        depths.append(plan.depth)
        verified = []
        for r in batch:
            drafts = min(r["held"], plan.num_drafts.get(r["id"], r["held"]))
            taken = 0
            while taken < drafts and rng.random() < r["acceptance"]:
                taken += 1
            if drafts:
                verified.append(VerifiedDrafts(r["id"], drafts, taken))
            r["left"] -= 1 + taken
        tokens = len(batch) + sum(v.drafts for v in verified)
        policy.observe(StepResult(plan, num_decoding=len(batch), tokens=tokens, verified=verified,
                                  scheduled={r["id"]: 1 for r in batch}, output_tokens=tokens,
                                  seconds=(0.010 + 0.0002 * tokens + plan.depth * 0.002) * (1 + rng.uniform(-0.02, 0.02))))
        for r in batch:
            r["held"] = plan.depth
            if r["left"] <= 0:
                policy.finish(r["id"])
        batch = [r for r in batch if r["left"] > 0]
    return depths


@pytest.mark.parametrize("seed", range(6))
def test_a_closed_batch_of_requests_with_different_tokens_left_is_weighed_every_step(seed, monkeypatch):
    """Held there, depth 0 lagged weighing by a few steps (5 of 18 such runs differed, 2026-12-04)."""
    held = _closed_pair(seed)
    monkeypatch.setattr(DepthChoice, "holds_zero", lambda self, num_reqs, even=True, decoding=True: False)
    assert held == _closed_pair(seed)


@pytest.mark.parametrize("seed", range(4))
def test_a_closed_batch_where_no_request_drafts_well_holds_depth_zero_however_it_drains(seed, monkeypatch):
    """No depth can score above the best request's tokens a step over its seconds, however the tokens left
    move: where that ceiling is below depth 0's rate, depth 0 stands unweighed though the requests' tokens left
    differ (a batch of 32 after a re-check was weighed every step, 0.3 ms of a kit step), and the depths are
    those weighing every step chooses."""
    holds: list[bool] = []
    held = _closed_pair(seed, good=0.1, holds=holds)
    assert held.count(0) > 250 and sum(holds) > held.count(0) / 2
    monkeypatch.setattr(DepthChoice, "holds_zero", lambda self, num_reqs, even=True, decoding=True: False)
    assert held == _closed_pair(seed, good=0.1)
