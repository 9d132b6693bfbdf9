"""minedraft/policy/paying_drafts.py: per request, the drafts whose chance of acceptance pays for their
verification; and SpeculationPolicy.plan's trim that applies it to each request verified (minedraft/policy/
policy.py), with views built by hand and step costs fed to the policy's model."""

from __future__ import annotations

import pytest

from minedraft.policy.paying_drafts import paying_drafts
from minedraft.policy.plan import RequestView, StepView, VerifiedDrafts
from minedraft.policy.policy import SpeculationPolicy

# ---------------------------------------------------------------- the function


def test_drafts_are_kept_up_to_the_first_whose_survival_falls_under_the_step_s_threshold():
    """A step of 2 requests taking 0.1 s, a verified token 0.01 s: a draft pays where its survival is above
    0.01 s x the step's tokens a second (0.475 with every draft here, 0.63 once the prose's are gone)."""
    code, prose = [0.9, 0.8, 0.7], [0.2, 0.1, 0.05]
    assert paying_drafts([code, prose], 2, step_seconds=0.1, token_seconds=0.01) == [3, 0]
    assert paying_drafts([[0.9, 0.5, 0.3]], 2, step_seconds=0.1, token_seconds=0.01) == [2]


@pytest.mark.parametrize("step_seconds, token_seconds", [(0.1, 0.0), (0.0, 0.01)])
def test_a_step_where_a_token_costs_nothing_verifies_every_draft(step_seconds, token_seconds):
    assert paying_drafts([[0.2, 0.1, 0.05], [0.01]], 2, step_seconds, token_seconds) == [3, 1]


def test_the_threshold_rises_once_the_poor_drafts_are_gone():
    """With every draft the step makes fewer tokens a second than without the ones that do not pay: a
    draft that passes the threshold of the step with every draft (0.45) but not that of the step without
    the poor one (0.51) is cut too (the step makes 3.03 tokens a second without either, 2.99 with it)."""
    middling, poor = 0.48, 0.17
    assert 0.17 * (2 + middling + poor) < middling < 0.17 * (2 + middling) / (1 - 0.17)
    assert paying_drafts([[middling], [poor]], 2, step_seconds=1.0, token_seconds=0.17) == [0, 0]
    # Alone beside a request that holds no drafts, the middling draft is weighed against the first threshold
    # only (nothing dropped): it pays.
    assert paying_drafts([[middling], []], 2, step_seconds=1.0, token_seconds=0.17) == [1, 0]


# ---------------------------------------------------------------- the policy's trim


def _steady_costs(costs, num_reqs=2, a=0.05, w=0.01):
    """Steps of a compute-bound target: ``a`` seconds, and ``w`` a verified token, at depths 0..3."""
    for _ in range(6):
        for depth in range(4):
            tokens = num_reqs * (1 + depth)
            costs.observe(num_reqs, depth, tokens, a + w * tokens)


def _measured(w=0.01, good_steps=6) -> SpeculationPolicy:
    """A policy choosing the depth vLLM drafts at, its step costs known, after ``good_steps`` steps of a
    request of code (every draft accepted) beside one of prose (none)."""
    policy = SpeculationPolicy(3, depth_control="drafted")
    _steady_costs(policy.depths.costs, w=w)
    for _ in range(good_steps):
        policy.depths.observe_verification([VerifiedDrafts("code", 3, 3), VerifiedDrafts("prose", 3, 0)])
    return policy


def _decoding(rid: str, drafts: int = 3, **more) -> RequestView:
    return RequestView(rid, True, 100, num_drafts=drafts, **more)


def test_drafts_whose_survival_does_not_pay_for_their_verification_are_trimmed():
    policy = _measured()
    acceptance, costs = policy.depths.acceptance, policy.depths.costs
    survivals = [acceptance.survivals(rid, 3) for rid in ("code", "prose")]
    prose_before = survivals[1][0]
    plan = policy.plan(StepView([_decoding("code"), _decoding("prose")]))
    assert plan.depth == 3 and not policy.depths.rechecking
    # The step as the model predicts it at the depth chosen, every draft verified (3 a request: no more, no
    # fewer than the depth's): the prose's drafts do not pay, the code's do.
    token_s = costs.token_seconds(2)
    assert paying_drafts(survivals, 2, costs.seconds(2, 3)[3], token_s) == [3, 0] and token_s > 0
    assert plan.num_drafts == {"code": 3, "prose": 0}
    counts = plan.counts
    assert (counts.drafts_trimmed, counts.requests_trimmed, counts.drafts_cut) == (3, 1, 0)
    assert counts.requests_by_drafts == {3: 1, 0: 1}
    # Every draft of the prose cut: its own rate fades back towards its prior (a step measured nothing).
    assert acceptance.survivals("prose", 1)[0] > prose_before


def test_a_step_where_a_token_costs_nothing_verifies_every_draft_of_a_poor_request():
    policy = _measured(w=0.0)
    assert policy.depths.costs.token_seconds(1) == 0.0
    plan = policy.plan(StepView([_decoding("prose")]))
    assert plan.num_drafts == {"prose": 3}
    assert (plan.counts.drafts_trimmed, plan.counts.requests_trimmed) == (0, 0)
    assert plan.counts.requests_by_drafts == {3: 1}


def test_a_request_s_own_limit_cuts_its_drafts_before_they_are_weighed():
    """A request that asks for at most 1 draft a step: 2 of its 3 are cut (counted as cut, not trimmed), and
    the one left is weighed like any other."""
    policy = _measured()
    policy.add_request("code", 1)
    plan = policy.plan(StepView([_decoding("code"), _decoding("prose")]))
    assert plan.num_drafts == {"code": 1, "prose": 0}
    assert (plan.counts.drafts_cut, plan.counts.drafts_trimmed) == (2, 3)
    assert plan.counts.requests_by_drafts == {1: 1, 0: 1}


def test_under_step_only_the_depth_is_chosen_and_every_draft_is_verified():
    policy = SpeculationPolicy(3, depth_control="drafted", per_request=False)
    _steady_costs(policy.depths.costs)
    for _ in range(6):
        policy.depths.observe_verification([VerifiedDrafts("code", 3, 3), VerifiedDrafts("prose", 3, 0)])
    plan = policy.plan(StepView([_decoding("code"), _decoding("prose")]))
    assert plan.num_drafts == {"code": 3, "prose": 3}
    assert plan.counts.drafts_trimmed == 0 and not plan.counts.requests_by_drafts
