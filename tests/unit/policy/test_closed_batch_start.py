"""A closed batch's first steps, before its requests' own acceptance tells them apart: scored by its last request
to finish (depth.py), which, of requests alike at their prior, is the poorest drafter
(SpeculationPolicy._poorest_last, Acceptance.poorest_of)."""

from __future__ import annotations

import random

import pytest

from minedraft.policy import RequestView, SpeculationPolicy, StepResult, StepView, VerifiedDrafts
from minedraft.policy.acceptance import Acceptance

MAX_DEPTH = 3


def _closed_rounds(seed: int, rounds: int = 6) -> list[tuple[float, list[int]]]:
    """Rounds of a closed batch of 32 requests (a prompt step, then 64 tokens each): three in four draft well
    (acceptance 0.9), one in four poorly (0.1). At the mean a depth > 0 pays; the batch ends with a poor drafter,
    for which depth 0 pays. Each round's seconds and depths."""
    rng = random.Random(seed)
    policy = SpeculationPolicy(MAX_DEPTH, depth_control="drafted", draft_cost=0.05, catches_up=True)
    out = []
    for n in range(rounds):
        batch = [{"id": f"{n}-{i}", "left": 64, "prompt": True, "held": 0, "rate": 0.1 if i % 4 == 0 else 0.9}
                 for i in range(32)]
        for r in batch:
            policy.add_request(r["id"], None)
        seconds, depths = 0.0, []
        while batch:
            view = StepView([RequestView(r["id"], not r["prompt"], r["left"], prompt_left=64 if r["prompt"] else 0,
                                         num_drafts=r["held"]) for r in batch], closed=True)
            plan = policy.plan(view)
            depths.append(plan.depth)
            verified, output = [], 0
            for r in batch:
                if r["prompt"]:
                    continue
                drafts = min(r["held"], plan.num_drafts.get(r["id"], r["held"]))
                taken = 0
                while taken < drafts and rng.random() < r["rate"]:
                    taken += 1
                if drafts:
                    verified.append(VerifiedDrafts(r["id"], drafts, taken))
                output += 1 + taken
                r["left"] -= 1 + taken
            decoding = sum(not r["prompt"] for r in batch)
            tokens = decoding + sum(v.drafts for v in verified)
            prompts = 64 * (len(batch) - decoding)
            step = (0.010 + 0.0002 * (tokens + prompts) + plan.depth * (0.0005 + 0.00003 * decoding)) * (
                1 + rng.uniform(-0.02, 0.02))
            seconds += step
            policy.observe(StepResult(plan, num_decoding=decoding, tokens=tokens + prompts, prefill_tokens=prompts,
                                      scheduled={r["id"]: 64 if r["prompt"] else 1 for r in batch},
                                      prompt_tokens=prompts, output_tokens=output, verified=verified, seconds=step))
            for r in batch:
                r["prompt"], r["held"] = False, 0 if r["id"] in plan.undrafted else plan.depth
                if r["left"] <= 0:
                    policy.finish(r["id"])
            batch = [r for r in batch if r["left"] > 0]
        out.append((seconds, depths))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_a_closed_batch_of_requests_like_the_finished_ones_starts_at_the_depth_its_poorest_drafter_pays_for(
        seed, monkeypatch):
    scored = _closed_rounds(seed)
    monkeypatch.setattr(SpeculationPolicy, "_poorest_last", lambda self, requests, limits, survivals: survivals)
    at_mean = _closed_rounds(seed)
    # After the first round: fewer steps drafted (for the batch's mean drafter, whom no step waits for), sooner done.
    drafted = [sum(sum(d > 0 for d in depths) for _, depths in run[1:]) for run in (scored, at_mean)]
    assert drafted[0] < drafted[1] * 0.85
    assert sum(s for s, _ in scored[1:]) < sum(s for s, _ in at_mean[1:])


def test_the_poorest_of_n_requests_is_their_mean_for_one_and_falls_with_n():
    """24 requests accepted their one verified draft, 8 rejected it. Each measured on one trial, a rate leans
    to their mean (0.75) as a prior of two trials would: 1 -> 5/6, 0 -> 1/2."""
    acceptance = Acceptance(3)
    assert acceptance.poorest_of(4) is None
    acceptance.observe([VerifiedDrafts(f"r{i}", 1, int(i < 24)) for i in range(32)], 0.0)
    acceptance.release(f"r{i}" for i in range(32))
    assert acceptance.poorest_of(1) == pytest.approx(0.75)
    assert acceptance.poorest_of(2) == pytest.approx(0.5 * (1 - 0.75 ** 2) + 5 / 6 * 0.75 ** 2)
    assert acceptance.poorest_of(32) == pytest.approx(0.5 * (1 - 0.75 ** 32) + 5 / 6 * 0.75 ** 32)
    assert acceptance.at_prior("new")
