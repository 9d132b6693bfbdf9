"""minedraft/scheduling/first_measurement.py: a new request's first drafts, measured where what they could
gain outweighs what they could lose; through MineDraftScheduler on vLLM's KV manager (fake worker, no model)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from scheduler_harness import FakeWorker, make_request, make_scheduler

from minedraft.scheduling.depth_controller import DepthController
from minedraft.scheduling.first_measurement import decide_first_measurements
from minedraft.scheduling.request_depths import RequestDepths
from minedraft.scheduling.scheduler import MineDraftScheduler

TARGET_S, DRAFT_S = 0.3, 0.25  # a step of one request, and a draft forward: a CPU where drafting costs most


def _controller(batch=((3, 3), (3, 0))) -> DepthController:
    """Steps of 1 and 2 requests at every depth, a draft forward 0.25 s, a verified token 0.01 s: at one
    request a depth pays only where its first drafts are accepted more than 0.83 of the time or so; the
    batch's acceptance measured on ``batch`` (drafts verified, accepted)."""
    controller = DepthController(3)
    for _ in range(8):
        for decodes in (1, 2):
            for depth in range(4):
                tokens = decodes * (1 + depth)
                controller.costs.observe(decodes, depth, tokens, TARGET_S + 0.01 * tokens + depth * DRAFT_S)
    controller.observe_verification(batch)
    return controller


def _finished(depths: RequestDepths, kinds: list[str], steps: int = 8) -> None:
    """Requests of code (every draft accepted) and prose (none) run ``steps`` verified steps each and finish."""
    for i, kind in enumerate(kinds):
        for _ in range(steps):
            depths.observe([(f"{kind}{i}", 3, 3 if kind == "code" else 0)])
        depths.release([f"{kind}{i}"])


def _new(rid: str = "new") -> SimpleNamespace:
    return SimpleNamespace(request_id=rid, spec_token_ids=[])


def test_the_upper_rate_is_that_of_the_finished_requests_above_their_mean():
    depths = RequestDepths(3)
    assert depths.upper is None
    _finished(depths, ["prose"], steps=1)  # cut after its first rejection
    _finished(depths, ["code"], steps=8)
    share, rate = depths.upper
    # Each request counted once, whatever its trials; the prose's discounted once more (it finished first).
    assert rate == 1.0 and share == pytest.approx(1 / (1 + math.exp(-1 / depths.requests_tau)))
    _finished(depths, ["prose"] * 3)
    assert depths.upper[0] < share / 2 and depths.upper[1] == 1.0


def test_a_request_measured_first_stands_at_the_upper_rate_for_its_first_verified_steps_only():
    depths = RequestDepths(3)
    _finished(depths, ["code", "prose"])
    mean = depths.survivals("other", 1, [0.5] * 3)[0]
    assert 0.4 < mean < 0.7
    depths.decide(["new"], 1.0)
    assert depths.survivals("new", 1, [0.5] * 3) == [1.0]
    depths.observe([("new", 3, 0)])  # rejected: its own count stands against the upper rate...
    assert depths.survivals("new", 1, [0.5] * 3)[0] == pytest.approx(2 / 3)
    depths.observe([("new", 3, 0)])  # ... for prior_trials verified steps, then against the mean
    trials = 1 + math.exp(-1 / depths.tau)
    assert depths.survivals("new", 1, [0.5] * 3)[0] == pytest.approx(mean * 2 / (2 + trials))


@pytest.mark.parametrize(("finished", "measured"), [
    (["code", "prose"], True),  # half of the requests drafted well: a new one may be code
    (["prose", "prose"], False),  # none did: nothing above the mean pays
    (["code"] + ["prose"] * 7, False),  # one in eight: the chance of the gain is under that of the loss
])
def test_a_new_request_is_measured_first_where_the_chance_of_the_gain_outweighs_that_of_the_loss(finished,
                                                                                                  measured):
    controller, depths = _controller(), RequestDepths(3)
    _finished(depths, finished)
    rates = controller.acceptance.per_position()
    plain = controller.goodput(1, survivals=[depths.survivals("new", 3, rates)])
    assert max(range(4), key=plain.__getitem__) == 0  # at the finished requests' mean rate no depth pays
    counted = decide_first_measurements(controller, depths, [_new()], 1, [3], rates, 0, 100, [100], [100])
    assert counted == int(measured) and not depths.undecided("new")
    assert (depths.survivals("new", 1, rates)[0] == 1.0) is measured


def test_a_request_with_few_tokens_left_is_not_measured_first():
    controller, depths = _controller(), RequestDepths(3)
    _finished(depths, ["code", "prose"])
    rates = controller.acceptance.per_position()
    assert decide_first_measurements(controller, depths, [_new()], 1, [3], rates, 0, 8, [8], [8]) == 0
    assert decide_first_measurements(controller, depths, [_new("long")], 1, [3], rates, 0, 400, [400], [400]) == 1


def test_the_scheduler_measures_a_code_request_after_code_and_prose_first(model_dir, monkeypatch):
    """A request of code and one of prose finish; the code request after them stands at their mean rate,
    which pays for no depth here, yet is drafted in its first steps, and where its drafts are accepted
    it drafts on. After two requests of prose instead, none drafted well: depth 0 throughout."""
    for before, drafts in ((["code", "prose"], True), (["prose", "prose"], False)):
        monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
        sched = make_scheduler(model_dir, MineDraftScheduler)
        # The kit's draft is as large as the target: costs fed here; its first steps measure acceptance.
        sched.depth_controller = _controller(batch=())
        monkeypatch.setattr(sched.depth_controller, "observe_step", lambda *step: None)
        worker = FakeWorker(3, lambda rid, n: n if rid.startswith("code") else 0)
        verified = {}

        def run(*requests):
            for request in requests:
                sched.add_request(request)
            while sched.has_unfinished_requests():
                out = sched.schedule()
                for rid, ids in out.scheduled_spec_decode_tokens.items():
                    verified[rid] = verified.get(rid, 0) + len(ids)
                worker.step(sched, out)
            sched.schedule()  # the engine's last call: the finished requests are released

        run(*(make_request(f"{kind}{i}", 12, 24) for i, kind in enumerate(before)))
        run(make_request("code new", 12, 100))
        assert (sched.minedraft_totals.first_measurements == 1) is drafts
        assert (verified.get("code new", 0) > 40) is drafts, verified  # of its 50 steps or so, at depth 1


def test_a_closed_batch_of_new_requests_is_measured_first_only_where_every_one_may_draft_well():
    """Two new requests: while others wait, the gain grows with each one that drafts well (at the share);
    where none waits the batch ends with its last request, and gains only where both draft well."""
    controller, depths = _controller(), RequestDepths(3)
    _finished(depths, ["code", "prose"])
    rates, pair = controller.acceptance.per_position(), [_new("a"), _new("b")]
    assert decide_first_measurements(controller, depths, pair, 2, [3, 3], rates, 0, 100, [100, 100], None) == 2
    closed = [_new("c"), _new("d")]
    assert decide_first_measurements(controller, depths, closed, 2, [3, 3], rates, 0, 100, [100, 100], [100, 100]) == 0


def test_a_request_is_weighed_in_the_first_step_it_decodes_in_not_while_its_prompt_waits():
    """A burst's first request arrives alone: weighed then, as a batch of one, it would be measured first
    and the step would draft for every prompt of the burst after it."""
    controller, depths = _controller(), RequestDepths(3)
    _finished(depths, ["code", "prose"])
    rates = controller.acceptance.per_position()
    assert decide_first_measurements(controller, depths, [_new()], 0, [3], rates, 0, 100, [100], [100]) == 0
    assert depths.undecided("new")
    assert decide_first_measurements(controller, depths, [_new()], 1, [3], rates, 0, 100, [100], [100]) == 1
