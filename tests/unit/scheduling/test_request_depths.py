"""minedraft/scheduling/request_depths.py: each request verifies the drafts its own acceptance pays for;
through MineDraftScheduler on vLLM's KV manager (fake worker, no model)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from scheduler_harness import FakeWorker, make_request, make_scheduler
from test_scheduler import pin_depth

from minedraft.scheduling.depth_controller import DepthController
from minedraft.scheduling.request_depths import RequestDepths
from minedraft.scheduling.scheduler import MineDraftScheduler


def _request(rid, drafts=3):
    return SimpleNamespace(request_id=rid, spec_token_ids=list(range(10, 10 + drafts)))


def test_a_new_request_starts_from_the_batch_s_acceptance_and_moves_with_its_own():
    depths = RequestDepths(3)
    assert depths.survivals("new", 3, [0.8, 0.5, None]) == pytest.approx([0.8, 0.4, 0.4])
    for _ in range(5):
        depths.observe([("good", 3, 3), ("poor", 3, 0)])
    good, poor = depths.survivals("good", 3, [0.5] * 3), depths.survivals("poor", 3, [0.5] * 3)
    assert good[0] > 0.8 and good[2] > 0.5
    assert poor[0] < 0.3 and poor[1:] == pytest.approx([poor[0] * 0.5, poor[0] * 0.25])  # position 2 never reached
    for _ in range(40):  # steps that cut all its drafts: it measures nothing, and comes back to the batch's rate
        depths.cut([_request("poor")], 1, step_seconds=0.1, token_seconds=1.0, batch_rates=[0.5] * 3)
    assert poor[0] < depths.survivals("poor", 3, [0.5] * 3)[0] == pytest.approx(0.5, abs=0.02)
    depths.release(["poor"])
    assert depths.request_ids == ["good"]


def test_a_new_request_starts_from_the_finished_requests_each_weighed_once():
    """Code drafts on while the prose is cut after 3 rejections: by trials the batch reads the code's rate,
    but the request after both starts between them, and moves towards the requests that finish next."""
    depths = RequestDepths(3)
    for step in range(40):
        depths.observe([("code", 3, 3)] + [("prose", 3, 0)] * (step < 3))
    keep = math.exp(-1 / depths.tau)
    code, prose = sum(keep ** i for i in range(40)), sum(keep ** i for i in range(3))  # discounted trials
    depths.release(["code", "prose"])
    # At position 1 each request's rate (code 1, prose 0) weighed by its trials over them and prior_trials (2),
    # the code's discounted once more (it finished first), and the batch's rate (0.8) as one request more.
    shares = (math.exp(-1 / depths.requests_tau) * code / (code + 2), prose / (prose + 2))
    expected = (shares[0] + 0.8) / (sum(shares) + 1)
    assert 0.6 < expected < 0.7
    # Past position 1, the batch's rate.
    assert depths.survivals("next", 3, [0.8, 0.7, 0.6]) == pytest.approx([expected, expected * 0.7, expected * 0.42])
    for i in range(8):  # more prose finishes, each cut after 3 rejections: the prior follows it
        for _ in range(3):
            depths.observe([(f"prose {i}", 3, 0)])
        depths.release([f"prose {i}"])
    assert depths.survivals("next", 1, [0.95] * 3)[0] < 0.3


def test_one_finished_request_s_rejections_do_not_close_a_position_to_the_requests_after_it():
    """A short request rejected its first draft: the next request still verifies its drafts (a verified
    token costs a tenth of the step's seconds), and where they are accepted drafts on."""
    depths = RequestDepths(3)
    depths.observe([("short", 3, 0)])
    depths.release(["short"])
    assert depths.survivals("code", 3, [0.9] * 3)[0] > 0.5
    code = _request("code")
    depths.cut([code], 1, step_seconds=0.1, token_seconds=0.01, batch_rates=[0.9] * 3)
    assert code.spec_token_ids == [10, 11, 12]
    for _ in range(5):
        depths.observe([("code", 3, 3)])
    assert depths.survivals("code", 3, [0.9] * 3)[2] > 0.7


def _measured(depths, good_steps=6):
    for _ in range(good_steps):
        depths.observe([("code", 3, 3), ("prose", 3, 0)])


def test_drafts_whose_survival_does_not_pay_for_their_verification_are_cut():
    depths = RequestDepths(3)
    _measured(depths)
    code, prose = _request("code"), _request("prose")
    # A step of 2 decodes taking 0.1 s, a verified token 0.01 s: a draft pays above 0.1 x tokens a second.
    cut, by_drafts = depths.cut([code, prose], decodes=2, step_seconds=0.1, token_seconds=0.01,
                                batch_rates=[0.5] * 3)
    assert code.spec_token_ids == [10, 11, 12] and prose.spec_token_ids == [] and cut == 3
    assert by_drafts == {3: 1, 0: 1}


def test_a_step_where_a_token_costs_nothing_verifies_every_draft():
    depths = RequestDepths(3)
    _measured(depths)
    prose = _request("prose")
    assert depths.cut([prose], 1, step_seconds=0.1, token_seconds=0.0, batch_rates=[0.5] * 3) == (0, {3: 1})
    assert prose.spec_token_ids == [10, 11, 12]


def test_the_threshold_rises_once_the_poor_drafts_are_gone():
    """With every draft the step makes fewer tokens a second than without the ones that do not pay: a
    draft that passes the threshold of the step with every draft (0.45) but not that of the step without
    the poor one (0.51) is cut too (the step makes 3.03 tokens a second without either, 2.99 with it)."""
    depths = RequestDepths(1, prior_trials=1.0)
    depths.observe([("middling", 1, 1), ("poor", 1, 0)])
    depths.observe([("middling", 1, 0), ("poor", 1, 0)])
    middling, poor = (depths.survivals(rid, 1, [0.5])[0] for rid in ("middling", "poor"))
    assert middling == pytest.approx(0.48, abs=0.005) and poor == pytest.approx(0.17, abs=0.005)
    requests = [_request("middling", 1), _request("poor", 1)]
    cut, _ = depths.cut(requests, 2, step_seconds=1.0, token_seconds=0.17, batch_rates=[0.5])
    assert 0.17 * (2 + middling + poor) < middling < 0.17 * (2 + middling) / (1 - 0.17)
    assert cut == 2 and [r.spec_token_ids for r in requests] == [[], []]


def _steady_costs(costs, decodes=8, a=0.05, w=0.004):
    """Steps of a compute-bound target: ``a`` seconds, and ``w`` a verified token, at depths 0..3."""
    for _ in range(6):
        for depth in range(4):
            tokens = decodes * (1 + depth)
            costs.observe(decodes, depth, tokens, a + w * tokens)


@pytest.mark.parametrize("setting", ["auto", "step"])
def test_the_scheduler_verifies_each_request_s_paying_drafts(model_dir, monkeypatch, setting):
    """Requests of code (every draft accepted) beside prose (none): under ``auto`` the prose requests'
    drafts stop being verified but for re-checks, the code's keep k; under ``step`` every request
    verifies the step's drafts."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", setting)
    sched = make_scheduler(model_dir, MineDraftScheduler)
    for i in range(4):
        for kind in ("code", "prose"):
            sched.add_request(make_request(f"{kind}{i}", 12, 400))
    worker = FakeWorker(3, lambda rid, n: n if rid.startswith("code") else 0)
    pin_depth(sched, monkeypatch, 3)
    _steady_costs(sched.depth_controller.costs)
    verified = {"code": 0, "prose": 0}
    for _ in range(40):
        out = sched.schedule()
        for rid, drafts in out.scheduled_spec_decode_tokens.items():
            verified[rid.rstrip("0123456789")] += len(drafts)
        worker.step(sched, out)
    totals = sched.minedraft_totals
    if setting == "step":
        assert sched.request_depths is None and totals.drafts_trimmed == 0
        assert verified["prose"] == verified["code"]
        return
    assert verified["prose"] < verified["code"] / 3
    assert totals.drafts_trimmed > 0 and totals.requests_by_drafts["3"] > 0 and totals.requests_by_drafts["0"] > 0


@pytest.mark.parametrize(("setting", "waiting"), [("auto", 2), ("step", 2), ("auto", 0)])
def test_code_beside_prose_gets_its_drafts_where_the_batch_s_rate_pays_for_none(model_dir, monkeypatch, setting,
                                                                                 waiting):
    """Four requests of code (every draft accepted) beside four of prose (none), on a compute-bound target
    with a draft forward's cost, requests waiting: the batch's rate pays for no depth, so the controller
    alone (``step``) settles at depth 0; under ``auto`` it weighs each request's paying drafts and the code
    verifies k. With none waiting, the prose ends the batch and any step that drafts delays it: depth 0."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", setting)
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=8)
    # The kit's draft is as large as the target, which rules out every depth > 0 (depth_prior.py): a
    # controller without that prior; its costs are the ones fed here, not the fake worker's microseconds.
    sched.depth_controller = DepthController(3)
    monkeypatch.setattr(sched.depth_controller, "observe_step", lambda *step: None)
    for _ in range(8):
        for decodes in (4, 8, 16):
            for depth in range(4):
                tokens = decodes * (1 + depth)
                sched.depth_controller.costs.observe(decodes, depth, tokens,
                                                     0.05 + 0.005 * tokens + depth * (0.005 + 0.0005 * decodes))
    for i in range(4):
        for kind in ("code", "prose"):
            sched.add_request(make_request(f"{kind}{i}", 12, 400))
    for i in range(waiting):  # none of the eight finishes: these wait throughout
        sched.add_request(make_request(f"waiting{i}", 12, 400))
    worker = FakeWorker(3, lambda rid, n: n if rid.startswith("code") else 0)
    verified = {"code": 0, "prose": 0}
    for step in range(60):
        out = sched.schedule()
        for rid, drafts in out.scheduled_spec_decode_tokens.items():
            verified[rid.rstrip("0123456789")] += len(drafts) * (step >= 30)
        worker.step(sched, out)
    if setting == "step" or not waiting:
        assert verified == {"code": 0, "prose": 0} and sched._depth == 0
    else:
        # The prose's drafts are verified now and then: its acceptance fades back to the batch's while cut.
        assert verified["code"] > 30 * 3 and verified["prose"] < verified["code"] / 3 and sched._depth > 0
