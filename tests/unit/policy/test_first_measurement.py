"""minedraft/policy/first_measurement.py: a new request's first drafts, measured where what they could gain
outweighs what they could lose; and the rate it is measured at (Acceptance.upper, minedraft/policy/
acceptance.py)."""

from __future__ import annotations

import math

import pytest

from minedraft.policy.acceptance import Acceptance
from minedraft.policy.depth import DepthChoice
from minedraft.policy.first_measurement import decide_first_measurements
from minedraft.policy.plan import RequestView, VerifiedDrafts
from minedraft.policy.tuning import TUNING

TARGET_S, DRAFT_S = 0.3, 0.25  # a step of one request, and a draft forward: a CPU where drafting costs most


def warm_costs(choice: DepthChoice) -> DepthChoice:
    """Steps of 1 and 2 requests at every depth, a draft forward 0.25 s, a verified token 0.01 s: at one
    request a depth pays only where its first drafts are accepted more than 0.83 of the time or so."""
    for _ in range(8):
        for num_reqs in (1, 2):
            for depth in range(4):
                tokens = num_reqs * (1 + depth)
                choice.costs.observe(num_reqs, depth, tokens, TARGET_S + 0.01 * tokens + depth * DRAFT_S)
    return choice


def _choice(batch=((3, 3), (3, 0))) -> DepthChoice:
    """A depth choice whose step costs are known (``warm_costs``), the batch's acceptance measured on
    ``batch`` (drafts verified, accepted)."""
    choice = warm_costs(DepthChoice(3))
    choice.observe_verification([VerifiedDrafts(f"batch{i}", d, a) for i, (d, a) in enumerate(batch)])
    return choice


def finished(acceptance: Acceptance, kinds: list[str], steps: int = 8) -> None:
    """Requests of code (every draft accepted) and prose (none) run ``steps`` verified steps each and finish
    (their drafts count in the batch's acceptance too)."""
    for i, kind in enumerate(kinds):
        for _ in range(steps):
            acceptance.observe([VerifiedDrafts(f"{kind}{i}", 3, 3 if kind == "code" else 0)], 0.0)
        acceptance.release([f"{kind}{i}"])


def _new(rid: str = "new", tokens_left: int = 100, decoding: bool = True) -> RequestView:
    return RequestView(rid, decoding, tokens_left)


def test_the_upper_rate_is_that_of_the_finished_requests_above_their_mean():
    acceptance = Acceptance(3)
    assert acceptance.upper is None
    finished(acceptance, ["prose"], steps=1)  # cut after its first rejection
    finished(acceptance, ["code"], steps=8)
    share, rate = acceptance.upper
    # Each request counted once, whatever its trials; the prose's discounted once more (it finished first).
    assert rate == 1.0 and share == pytest.approx(1 / (1 + math.exp(-1 / TUNING.request_memory)))
    finished(acceptance, ["prose"] * 3)
    assert acceptance.upper[0] < share / 2 and acceptance.upper[1] == 1.0


def test_a_request_measured_first_stands_at_the_upper_rate_for_its_first_verified_steps_only():
    acceptance = Acceptance(3)
    finished(acceptance, ["code", "prose"])
    mean = acceptance.survivals("other", 1)[0]
    assert 0.4 < mean < 0.7
    acceptance.decide(["new"], 1.0)
    assert acceptance.survivals("new", 1) == [1.0]
    acceptance.observe([VerifiedDrafts("new", 3, 0)], 0.0)  # rejected: its count stands against the upper rate...
    assert acceptance.survivals("new", 1)[0] == pytest.approx(2 / 3)
    acceptance.observe([VerifiedDrafts("new", 3, 0)], 0.0)  # ... for prior_trials verified steps, then the mean's
    mean = acceptance.survivals("other", 1)[0]  # the new request's rejections moved the batch's rate in it
    trials = 1 + math.exp(-1 / TUNING.request_memory)
    assert acceptance.survivals("new", 1)[0] == pytest.approx(mean * 2 / (2 + trials))


@pytest.mark.parametrize(("before", "measured"), [
    (["code", "prose"], True),  # half of the requests drafted well: a new one may be code
    (["prose", "prose"], False),  # none did: nothing above the mean pays
    (["code"] + ["prose"] * 7, False),  # one in eight: the chance of the gain is under that of the loss
])
def test_a_new_request_is_measured_first_where_the_chance_of_the_gain_outweighs_that_of_the_loss(before,
                                                                                                  measured):
    choice = _choice()
    acceptance = choice.acceptance
    finished(acceptance, before)
    plain = choice.goodput(1, 100, survivals=[acceptance.survivals("new", 3)])
    assert max(range(4), key=plain.__getitem__) == 0  # at the finished requests' mean rate no depth pays
    counted = decide_first_measurements(choice, [_new()], [3], 0, 100, closing=[100])
    assert counted == int(measured) and not acceptance.undecided("new")
    assert (acceptance.survivals("new", 1)[0] == 1.0) is measured


def test_a_request_with_few_tokens_left_is_not_measured_first():
    choice = _choice()
    finished(choice.acceptance, ["code", "prose"])
    assert decide_first_measurements(choice, [_new(tokens_left=8)], [3], 0, 8, closing=[8]) == 0
    assert decide_first_measurements(choice, [_new("long", tokens_left=400)], [3], 0, 400, closing=[400]) == 1


def test_a_closed_batch_of_new_requests_is_measured_first_only_where_every_one_may_draft_well():
    """Two new requests: while others wait, the gain grows with each one that drafts well (at the share);
    where none waits the batch ends with its last request, and gains only where both draft well."""
    choice = _choice()
    finished(choice.acceptance, ["code", "prose"])
    assert decide_first_measurements(choice, [_new("a"), _new("b")], [3, 3], 0, 100, closing=None) == 2
    closed = [_new("c"), _new("d")]
    assert decide_first_measurements(choice, closed, [3, 3], 0, 100, closing=[100, 100]) == 0
    assert not choice.acceptance.undecided("c")  # decided, at the mean


def test_a_request_is_weighed_in_the_first_step_it_decodes_in_not_while_its_prompt_waits():
    """A burst's first request arrives alone: weighed then, as a batch of one, it would be measured first
    and the step would draft for every prompt of the burst after it."""
    choice = _choice()
    finished(choice.acceptance, ["code", "prose"])
    assert decide_first_measurements(choice, [_new(decoding=False)], [3], 0, 100, closing=[100]) == 0
    assert choice.acceptance.undecided("new")
    assert decide_first_measurements(choice, [_new()], [3], 0, 100, closing=[100]) == 1


def test_nothing_is_decided_before_the_step_costs_are_known():
    """Its first steps draft at the starting depth anyway; the request is weighed once costs are measured."""
    choice = DepthChoice(3)
    finished(choice.acceptance, ["code", "prose"])
    assert decide_first_measurements(choice, [_new()], [3], 0, 100, closing=[100]) == 0
    assert choice.acceptance.undecided("new")
