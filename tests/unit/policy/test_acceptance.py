"""minedraft/policy/acceptance.py: how often drafts are accepted, per position, for the batch and for each
request, from the same verified drafts."""

from __future__ import annotations

import math

import pytest

from minedraft.policy.acceptance import Acceptance
from minedraft.policy.paying_drafts import paying_drafts
from minedraft.policy.plan import VerifiedDrafts
from minedraft.policy.tuning import TUNING

KEEP = math.exp(-1 / TUNING.request_memory)  # a request's older steps, and older finished requests, per step


def _runs(survivals_by_position: list[float | None]) -> list[float]:
    """A new request's survivals at these rates: the running product, a position never measured as accepted."""
    run, out = 1.0, []
    for rate in survivals_by_position:
        run *= 1.0 if rate is None else rate
        out.append(run)
    return out


# ---------------------------------------------------------------- the batch's


@pytest.mark.parametrize("first_steps, trusted", [(2, False), (5, True)])
def test_a_stale_position_keeps_its_own_rate_only_if_measured_on_enough_trials(first_steps, trusted):
    """Position 1 measured at 0.8 on one request; a few steps at depth 3 had the third draft rejected
    each time; then depth 2 ran for seconds, position 1 still at 0.8. Two such trials tell too little:
    position 3 stands in with position 2 and its steps measure it again. Ten (5 steps of 2 requests)
    are a verdict: it keeps its own."""
    acceptance, now = Acceptance(3), 0.0
    for step in range(30):
        now += 0.1
        acceptance.observe([VerifiedDrafts("r", 1, 1 if step % 5 else 0)], now)
    for step in range(first_steps):
        now += 0.1
        acceptance.observe([VerifiedDrafts(f"r{i}", 3, 2) for i in range(1 if first_steps == 2 else 2)], now)
    for step in range(50):
        now += 0.1
        acceptance.observe([VerifiedDrafts("r", 2, 2 if step % 5 else 0)], now)
    per_position = acceptance.per_position()
    assert (per_position[2] == acceptance.batch_rates[2]) == trusted
    assert (per_position[2] == per_position[1]) != trusted


@pytest.mark.parametrize("rejected, low, high", [(1, 0.55, 1.0), (8, 0.0, 0.3)])
def test_after_seconds_unmeasured_one_rejected_draft_does_not_erase_a_rate_measured_on_many(rejected, low, high):
    """Position 1 measured at about 0.9 on 320 drafts, then 10 s at depth 0. One request's rejected draft
    (a phase of one request, drafted at depth 1) leaves it above 0.55; a re-check's 8 rejections take it
    under 0.3 (a new text the drafter does not predict)."""
    acceptance = Acceptance(3)
    for step in range(40):
        accepted = 1 if step % 8 else 0
        acceptance.observe([VerifiedDrafts(f"r{i}", 1, accepted) for i in range(8)], now=0.1 * step)
    assert acceptance.batch_rates[0] > 0.85
    acceptance.observe([VerifiedDrafts(f"r{i}", 1, 0) for i in range(rejected)], now=14.0)
    assert low < acceptance.batch_rates[0] < high


# ---------------------------------------------------------------- each request's


def test_a_new_request_starts_from_the_batch_s_acceptance_and_moves_with_its_own():
    acceptance = Acceptance(3)
    acceptance.observe([VerifiedDrafts("warm", 2, 1), VerifiedDrafts("warmer", 2, 2)], 0.0)
    batch = acceptance.per_position()
    assert batch[2] is None  # no draft reached position 3: counted as accepted
    assert acceptance.survivals("new", 3) == pytest.approx(_runs(batch))
    for _ in range(5):
        acceptance.observe([VerifiedDrafts("good", 3, 3), VerifiedDrafts("poor", 3, 0)], 0.0)
    prior = acceptance.request_prior()
    good, poor = acceptance.survivals("good", 3), acceptance.survivals("poor", 3)
    assert good[0] > 0.8 and good[2] > 0.5
    # Past its first rejected draft the poor request measured nothing: position 2 on stands at the prior.
    assert poor[0] < 0.3 and poor[1:] == pytest.approx([poor[0] * prior[1], poor[0] * prior[1] * prior[2]])
    for _ in range(40):  # steps that cut all its drafts: it measures nothing, and comes back to its prior
        acceptance.note_all_cut("poor")
    trials = sum(KEEP ** i for i in range(5))  # its 5 rejections, older ones discounted
    pt = TUNING.prior_trials
    faded = prior[0] * pt / (math.exp(-40 / TUNING.request_memory) * trials + pt)  # exp(-1/8) a cut step
    assert poor[0] < acceptance.survivals("poor", 3)[0] == pytest.approx(faded)
    assert faded == pytest.approx(prior[0], abs=0.02)
    acceptance.release(["poor"])
    assert acceptance.undecided("poor") and not acceptance.undecided("good")


@pytest.mark.parametrize("steps_at_depth_1, step_s, stands_in", [(8, 0.1, False), (15, 0.1, True),
                                                                  (15, 0.01, False), (16, 0.01, True)])
def test_a_request_s_own_rejection_at_its_first_verification_goes_stale(steps_at_depth_1, step_s, stands_in):
    """A lone request's first verification rejects its second draft (the real pair's code prompt does), and
    its steps at depth 1 after it accept every draft. Within stale_s (1 s) and 2 x request_memory (16) of its
    steps, its own position 2 holds that rejection; past either, with one trial, it stands in with its position
    1, so the depth can go deeper again (on the real pair the request otherwise drafted at depth 1 to its end,
    2026-12-03; make demo's kit request, steps of 3 ms, did within a second)."""
    acceptance, now = Acceptance(3), 0.0
    acceptance.observe([VerifiedDrafts("r", 3, 1)], now)
    for _ in range(steps_at_depth_1):
        now += step_s
        acceptance.observe([VerifiedDrafts("r", 1, 1)], now)
    first, second = acceptance.survivals("r", 2)
    assert first > 0.85
    assert (second / first == pytest.approx(first)) == stands_in
    assert (second / first < 0.5) != stands_in


@pytest.mark.parametrize("steps_at_depth_1", [1, 4, 7])
def test_a_request_s_positions_its_steps_do_not_reach_fade_with_each_of_its_verified_steps(steps_at_depth_1):
    """Other requests accept every draft; one request's first verification rejects its second draft, and its
    steps at depth 1 after it accept their one draft. Its own trial at position 2 weighs exp(-1/8) less with
    each of those steps, as a trial it reached would: the position returns to the prior it had, where it
    would otherwise hold that one rejection for 2 x request_memory steps (make demo's single request, whose
    first verifications reject deep drafts, drafted at depth 1 for 15 of its 50 steps, 0.91x stock SD)."""
    acceptance, now = Acceptance(3), 0.0
    for step in range(20):
        now += 0.01
        acceptance.observe([VerifiedDrafts(f"good{i}", 3, 3) for i in range(4)], now)
    acceptance.observe([VerifiedDrafts("r", 3, 1)], now)
    for _ in range(steps_at_depth_1):
        now += 0.01
        acceptance.observe([VerifiedDrafts("r", 1, 1)], now)
    prior, pt = acceptance.request_prior()[1], TUNING.prior_trials
    first, second = acceptance.survivals("r", 2)
    own = KEEP ** steps_at_depth_1  # its one trial at position 2, faded by the steps since
    assert second / first == pytest.approx(prior * pt / (own + pt))


def test_a_request_whose_drafts_are_all_cut_fades_to_its_prior_by_exp_minus_one_over_its_memory_a_step():
    """One rejection of its own, then three steps that cut all its drafts: its counts weigh exp(-3/8) of
    themselves. Verified again, its older count is discounted for those steps and for the new one."""
    acceptance = Acceptance(1)
    acceptance.observe([VerifiedDrafts("poor", 1, 0)], 0.0)
    prior, pt = acceptance.request_prior()[0], TUNING.prior_trials
    assert acceptance.survivals("poor", 1) == pytest.approx([prior * pt / (1 + pt)])
    for _ in range(3):
        acceptance.note_all_cut("poor")
    assert acceptance.survivals("poor", 1) == pytest.approx([prior * pt / (KEEP ** 3 + pt)])
    acceptance.observe([VerifiedDrafts("poor", 1, 1)], 0.0)
    prior = acceptance.request_prior()[0]
    assert acceptance.survivals("poor", 1) == pytest.approx([(1 + prior * pt) / (KEEP ** 4 + 1 + pt)])


def test_a_step_cutting_an_unknown_request_s_drafts_changes_nothing():
    acceptance = Acceptance(3)
    acceptance.note_all_cut("unknown")
    assert acceptance.undecided("unknown") and acceptance.survivals("unknown", 3) == [1.0, 1.0, 1.0]


def test_a_new_request_starts_from_the_finished_requests_each_weighed_once():
    """Code drafts on while the prose is cut after 3 rejections: by trials the batch reads the code's rate,
    but the request after both starts between them, and moves towards the requests that finish next."""
    acceptance = Acceptance(3)
    for step in range(40):
        acceptance.observe([VerifiedDrafts("code", 3, 3)] + [VerifiedDrafts("prose", 3, 0)] * (step < 3), 0.0)
    code, prose = sum(KEEP ** i for i in range(40)), sum(KEEP ** i for i in range(3))  # discounted trials
    acceptance.release(["code", "prose"])
    batch = acceptance.per_position()
    # At position 1 each request's rate (code 1, prose 0) weighed by its trials over them and prior_trials (2),
    # alike in age (they arrived together), and the batch's rate as one request more.
    shares = (code / (code + 2), prose / (prose + 2))
    expected = (shares[0] + batch[0]) / (sum(shares) + 1)
    assert batch[0] > 0.9 and 0.65 < expected < 0.75  # the batch at the code's rate; the prior between them
    # Past position 1, the batch's rate.
    assert acceptance.survivals("next", 3) == pytest.approx(
        [expected, expected * batch[1], expected * batch[1] * batch[2]])
    for i in range(8):  # more prose finishes, each cut after 3 rejections, beside code: the prior follows it
        for _ in range(3):
            acceptance.observe([VerifiedDrafts(f"prose {i}", 3, 0)]
                               + [VerifiedDrafts(f"code {j}", 3, 3) for j in range(4)], 0.0)
        acceptance.release([f"prose {i}"])
    assert acceptance.per_position()[0] > 0.75  # the batch still reads mostly code
    assert acceptance.survivals("next", 1)[0] < 0.3


def test_a_closed_batch_s_last_requests_to_finish_do_not_set_the_prior_alone():
    """A closed batch of 32 arrived together: the 24 whose drafts were accepted finished first, the 8 whose
    drafts were rejected (fewer tokens a step) last. The next request's prior is all 32's mean, with the batch's
    rate as one request more; aged in the order they finished, the last 8 would have weighed most."""
    acceptance = Acceptance(3)
    poor = {f"r{i}" for i in range(24, 32)}
    acceptance.observe([VerifiedDrafts(f"r{i}", 1, int(f"r{i}" not in poor)) for i in range(32)], 0.0)
    acceptance.release(f"r{i}" for i in range(24))
    acceptance.release(poor)
    batch, weight = 25 / 34, 32 / 3  # 24 of 32 behind the batch's prior of 1 in 2; each request's 1 trial over 3
    assert acceptance.request_prior()[0] == pytest.approx((0.75 * weight + batch) / (weight + 1))
    assert acceptance.upper == pytest.approx((0.75, 1.0))  # the 24 above the mean: 3 in 4 of the requests


def test_one_finished_request_s_rejections_do_not_close_a_position_to_the_requests_after_it():
    """In a batch measured at 0.9, a short request rejected its first draft and finished: the next request
    still verifies its drafts (a verified token costs a tenth of the step's seconds), and where they are
    accepted drafts on."""
    acceptance = Acceptance(3)
    for _ in range(9):
        acceptance.observe([VerifiedDrafts("long", 3, 3)], 0.0)
    assert acceptance.per_position()[0] == pytest.approx(0.9, abs=0.01)
    acceptance.observe([VerifiedDrafts("short", 3, 0)], 0.0)
    acceptance.release(["short"])
    code = acceptance.survivals("code", 3)
    assert code[0] > 0.5
    assert paying_drafts([code], 1, step_seconds=0.1, token_seconds=0.01) == [3]
    for _ in range(5):
        acceptance.observe([VerifiedDrafts("code", 3, 3)], 0.0)
    assert acceptance.survivals("code", 3)[2] > 0.7


def test_a_request_s_first_survivals_can_be_asked_as_if_it_were_measured_first():
    acceptance = Acceptance(2)
    acceptance.observe([VerifiedDrafts("r", 2, 1)], 0.0)
    prior = acceptance.request_prior()
    assert acceptance.survivals("new", 2, first=0.9) == pytest.approx([0.9, 0.9 * prior[1]])
    assert acceptance.survivals("new", 2) == pytest.approx([prior[0], prior[0] * prior[1]])
