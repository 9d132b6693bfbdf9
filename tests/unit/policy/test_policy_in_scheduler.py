"""minedraft/policy/policy.py through MineDraftScheduler on vLLM's KV manager (fake worker, no model): each
request verifies the drafts its own acceptance pays for, and a new request is measured first where that pays."""

from __future__ import annotations

import pytest
from scheduler_harness import FakeWorker, make_request, make_scheduler
from test_first_measurement import warm_costs

from minedraft.scheduling.scheduler import MineDraftScheduler


def pin_depth(sched, monkeypatch, depth: int) -> None:
    """The depth choice answers ``depth``, and no step the fake worker runs (microseconds) reaches the costs
    fed to it."""
    monkeypatch.setattr(sched.speculation.depths, "depth", lambda *load, **more: depth)
    monkeypatch.setattr(sched.speculation.depths, "observe_step", lambda *step, **fit: None)


def _steady_costs(costs, num_reqs=8, a=0.05, w=0.004):
    """Steps of a compute-bound target: ``a`` seconds, and ``w`` a verified token, at depths 0..3."""
    for _ in range(6):
        for depth in range(4):
            tokens = num_reqs * (1 + depth)
            costs.observe(num_reqs, depth, tokens, a + w * tokens)


def _code_or_prose(rid: str, drafts: int) -> int:
    """Code: every draft accepted; prose: none."""
    return drafts if rid.startswith("code") else 0


@pytest.mark.parametrize("setting", ["auto", "step"])
def test_the_scheduler_verifies_each_request_s_paying_drafts(model_dir, monkeypatch, setting):
    """Requests of code (every draft accepted) beside prose (none): under ``auto`` the prose requests'
    drafts stop being verified but now and then (their rates fade back while cut), the code's keep K; under
    ``step`` every request verifies the step's drafts."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", setting)
    sched = make_scheduler(model_dir, MineDraftScheduler)
    for i in range(4):
        for kind in ("code", "prose"):
            sched.add_request(make_request(f"{kind}{i}", 12, 400))
    worker = FakeWorker(3, _code_or_prose)
    pin_depth(sched, monkeypatch, 3)
    _steady_costs(sched.speculation.depths.costs)
    verified = {"code": 0, "prose": 0}
    for _ in range(40):
        out = sched.schedule()
        for rid, drafts in out.scheduled_spec_decode_tokens.items():
            verified[rid.rstrip("0123456789")] += len(drafts)
        worker.step(sched, out)
    totals = sched.minedraft_totals
    if setting == "step":
        assert not sched.speculation.per_request and totals.drafts_trimmed == 0 and totals.requests_trimmed == 0
        assert verified["prose"] == verified["code"] > 0
        return
    assert sched.speculation.per_request
    # A prose request's counts fade back to its prior by exp(-1/8) each step that cuts all its drafts, so its
    # drafts are verified again every third or fourth step: about a third of the code's (a quarter where they
    # faded by 0.9).
    assert verified["prose"] < verified["code"] / 2
    assert totals.drafts_trimmed > 0 and totals.requests_by_drafts["3"] > 0 and totals.requests_by_drafts["0"] > 0
    # Every request held 3 drafts: those that kept fewer are the requests trimmed.
    assert totals.requests_trimmed == sum(n for kept, n in totals.requests_by_drafts.items() if kept != "3")


@pytest.mark.parametrize(("setting", "waiting"), [("auto", 2), ("step", 2), ("auto", 0)])
def test_code_beside_prose_gets_its_drafts_where_the_batch_s_rate_pays_for_none(model_dir, monkeypatch, setting,
                                                                                 waiting):
    """Four requests of code (every draft accepted) beside four of prose (none), on a compute-bound target
    with a draft forward's cost, requests waiting: the batch's rate pays for no depth, so the depth alone
    (``step``) settles at 0; under ``auto`` the depth weighs each request's paying drafts and the code
    verifies K. With none waiting, the prose ends the batch and any step that drafts delays it: depth 0."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", setting)
    sched = make_scheduler(model_dir, MineDraftScheduler, max_num_seqs=8)
    choice = sched.speculation.depths
    assert choice.can_speculate  # pinned to parallel steps (the test env): no weight bound rules a depth out
    # The costs are the ones fed here, not the fake worker's microseconds.
    monkeypatch.setattr(choice, "observe_step", lambda *step, **fit: None)
    for _ in range(8):
        for num_reqs in (4, 8, 16):
            for depth in range(4):
                tokens = num_reqs * (1 + depth)
                seconds = 0.05 + 0.005 * tokens + depth * (0.005 + 0.0005 * num_reqs)
                choice.costs.observe(num_reqs, depth, tokens, seconds)
    for i in range(4):
        for kind in ("code", "prose"):
            sched.add_request(make_request(f"{kind}{i}", 12, 400))
    for i in range(waiting):  # none of the eight finishes: these wait throughout
        sched.add_request(make_request(f"waiting{i}", 12, 400))
    worker = FakeWorker(3, _code_or_prose)
    verified = {"code": 0, "prose": 0}
    for step in range(60):
        out = sched.schedule()
        for rid, drafts in out.scheduled_spec_decode_tokens.items():
            verified[rid.rstrip("0123456789")] += len(drafts) * (step >= 30)
        worker.step(sched, out)
    if setting == "step" or not waiting:
        assert verified == {"code": 0, "prose": 0} and sched.speculation.depth == 0
    else:
        # The prose's drafts are verified now and then: its acceptance fades back to its prior while cut.
        assert verified["code"] > 30 * 3 and verified["prose"] < verified["code"] / 3 and sched.speculation.depth > 0


@pytest.mark.parametrize(("before", "drafts"), [(["code", "prose"], True), (["prose", "prose"], False)])
def test_the_scheduler_measures_a_code_request_after_code_and_prose_first(model_dir, monkeypatch, before, drafts):
    """A request of code and one of prose finish; the code request after them stands at their mean rate,
    which pays for no depth here, yet is drafted in its first steps, and where its drafts are accepted
    it drafts on. After two requests of prose instead, none drafted well: depth 0 throughout. The scenario as
    measured when the rule came (the two first requests verified in turns, in parallel steps, which leaves the
    batch's rate at 0.96): in plain SD the batch reads 0.67 there, and the code request's two trials at 1.0
    against that prior (0.75) fall short of what a depth needs at these costs (about 0.83)."""
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    monkeypatch.setenv("MINEDRAFT_MODE", "parallel")
    sched = make_scheduler(model_dir, MineDraftScheduler)
    # Costs of a CPU where a draft forward costs most (test_first_measurement.py), fed here; no acceptance
    # yet: the first steps measure it.
    warm_costs(sched.speculation.depths)
    monkeypatch.setattr(sched.speculation.depths, "observe_step", lambda *step, **fit: None)
    worker = FakeWorker(3, _code_or_prose)
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


class AnsweringLate(FakeWorker):
    """A drafter that answers its first ``empty`` jobs after new requests with no drafts, as a process drafter
    answering at once does before it holds them (draft_ahead.py)."""

    def __init__(self, k: int, empty: int):
        super().__init__(k, lambda rid, n: n)
        self.empty = empty

    def step(self, scheduler, output):
        if not self.empty or output.num_spec_tokens_to_schedule == 0:
            return super().step(scheduler, output)
        self.empty -= 1
        scheduler.update_draft_token_ids = lambda drafts: None  # the job's reply: no drafts
        try:
            return super().step(scheduler, output)
        finally:
            del scheduler.update_draft_token_ids  # the class's own again


def test_a_step_whose_drafts_all_come_back_empty_is_marked_so(model_dir, monkeypatch):
    """Plain SD at depth 3: the two steps whose jobs came back empty reach the policy as ``unanswered`` (not
    fitted; a re-check's runs again: tests/unit/policy/test_depth.py), the steps whose drafts arrived do not."""
    monkeypatch.setenv("MINEDRAFT_MODE", "stock")
    sched = make_scheduler(model_dir, MineDraftScheduler)
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 12, 60))
    observed = []
    observe = sched.speculation.observe
    monkeypatch.setattr(sched.speculation, "observe", lambda result: (observed.append(result), observe(result)))
    worker = AnsweringLate(3, empty=2)
    for _ in range(6):
        worker.step(sched, sched.schedule())
    # The prefill step and the first decode step: their drafts came back empty; the next ones' arrived.
    assert [r.unanswered for r in observed] == [True, True, False, False, False], \
        [(r.plan.depth, r.prefill_tokens, r.verified) for r in observed]
    assert observed[0].prefill_tokens and not observed[2].verified and observed[3].verified
