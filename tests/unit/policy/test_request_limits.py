"""minedraft/policy/request_limits.py: a request's own limit on its drafts, and the speculative max_model_len;
through MineDraftScheduler on vLLM's KV manager (fake worker, no model)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from scheduler_harness import FakeWorker, make_request, make_scheduler

from minedraft.policy import RequestView, SpeculationPolicy, StepView
from minedraft.policy.request_limits import RequestLimits, requested_limit
from minedraft.scheduling.drafter_limits import speculative_max_len
from minedraft.scheduling.scheduler import MineDraftScheduler


def _params(**extra):
    return SimpleNamespace(extra_args=extra or None)


@pytest.mark.parametrize(("extra", "limit"), [({}, None), ({"other": 1}, None), ({"num_speculative_tokens": 0}, 0),
                                              ({"num_speculative_tokens": 2}, 2), ({"num_speculative_tokens": 9}, 9)])
def test_a_request_s_limit_is_read_from_extra_args(extra, limit):
    assert requested_limit(_params(**extra)) == limit


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True, None, [1]])
def test_a_bad_limit_is_one_line_naming_the_key(bad):
    with pytest.raises(ValueError, match=r"extra_args\['num_speculative_tokens'\] must be an integer >= 0") as e:
        requested_limit(_params(num_speculative_tokens=bad))
    assert "\n" not in str(e.value)


def _request(rid, num_tokens=10):
    return RequestView(rid, decoding=True, tokens_left=100, num_tokens=num_tokens, num_drafts=3)


def test_each_request_verifies_up_to_its_own_limit():
    limits = RequestLimits(max_depth=3)
    for rid, limit in (("off", 0), ("one", 1), ("deep", 5), ("free", None)):
        limits.add(rid, limit)
    requests = [_request(rid) for rid in ("off", "one", "deep", "free")]
    assert [limits.limit(r) for r in requests] == [0, 1, 3, 3]  # at or above K: K
    assert limits.newly_past(requests) == 0  # no max_model_len: nobody passes it
    limits.release(["off"])
    assert [limits.limit(r) for r in requests] == [3, 1, 3, 3]  # a released id asks nothing any more


def test_a_request_past_the_speculative_max_len_verifies_no_drafts_from_then_on():
    limits = RequestLimits(max_depth=3, max_model_len=20)
    short, long = _request("short", num_tokens=17), _request("long", num_tokens=18)
    assert limits.newly_past([short, long]) == 1
    assert limits.limit(long) == 0 and limits.limit(short) == 3
    assert limits.newly_past([long]) == 0 and limits.limit(long) == 0  # counted once


def test_the_policy_s_plan_cuts_each_request_s_drafts_to_its_limit():
    """The plan carries each verified request's drafts cut to its limit, and counts the drafts cut."""
    policy = SpeculationPolicy(3)
    for rid, limit in (("off", 0), ("one", 1), ("deep", 5), ("free", None)):
        policy.add_request(rid, limit)
    plan = policy.plan(StepView([_request(rid) for rid in ("off", "one", "deep", "free")]))
    assert dict(plan.num_drafts) == {"off": 0, "one": 1, "deep": 3, "free": 3}
    assert (plan.counts.drafts_cut, plan.counts.past_spec_max_len) == (5, 0)
    policy.finish("off")  # released before the next plan: an id reused later asks nothing
    assert policy.plan(StepView([_request("off")])).num_drafts == {"off": 3}


def test_the_policy_s_plan_verifies_no_drafts_past_the_speculative_max_len_and_counts_each_request_once():
    policy = SpeculationPolicy(3, spec_max_len=20)
    plan = policy.plan(StepView([_request("short", num_tokens=17), _request("long", num_tokens=18)]))
    assert dict(plan.num_drafts) == {"short": 3, "long": 0}
    assert (plan.counts.drafts_cut, plan.counts.past_spec_max_len) == (3, 1)
    plan = policy.plan(StepView([_request("long", num_tokens=19)]))
    assert dict(plan.num_drafts) == {"long": 0} and (plan.counts.drafts_cut, plan.counts.past_spec_max_len) == (3, 0)


def test_the_speculative_max_len_counts_only_below_the_target_s():
    config = SimpleNamespace(model_config=SimpleNamespace(max_model_len=100),
                             speculative_config=SimpleNamespace(max_model_len=None))
    assert speculative_max_len(config) is None
    config.speculative_config.max_model_len = 100
    assert speculative_max_len(config) is None
    config.speculative_config.max_model_len = 64
    assert speculative_max_len(config) == 64
    config.speculative_config = None
    assert speculative_max_len(config) is None


def _limited(rid, limit, prompt_len=12, max_tokens=40):
    request = make_request(rid, prompt_len, max_tokens)
    if limit is not None:
        request.sampling_params.extra_args = {"num_speculative_tokens": limit}
    return request


@pytest.mark.parametrize("mode", ["auto", "parallel"])
def test_the_scheduler_verifies_each_request_s_drafts_up_to_its_limit(model_dir, monkeypatch, mode):
    monkeypatch.setenv("MINEDRAFT_MODE", mode)
    sched = make_scheduler(model_dir, MineDraftScheduler)
    for rid, limit in (("off", 0), ("one", 1), ("free", None), ("also_free", None)):
        sched.add_request(_limited(rid, limit))
    worker, verified = FakeWorker(3, lambda rid, n: n), {}
    for _ in range(12):
        out = sched.schedule()
        for rid, drafts in out.scheduled_spec_decode_tokens.items():
            verified.setdefault(rid, set()).add(len(drafts))
        worker.step(sched, out)
    assert "off" not in verified and verified["one"] == {1}
    assert verified["free"] == {3} and verified["also_free"] == {3}
    assert sched.minedraft_totals.drafts_cut >= 2 * 3 and sched.minedraft_totals.past_spec_max_len == 0


def test_the_scheduler_stops_verifying_drafts_past_the_speculative_max_len(model_dir, monkeypatch):
    # At the user's depth: a depth chosen from these fake steps' wall times may be 0 on a busy machine (this
    # test once verified no draft in a run beside an engine), and the limit is what is tested here.
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "fixed")
    sched = make_scheduler(model_dir, MineDraftScheduler)
    sched.speculation.limits = RequestLimits(max_depth=3, max_model_len=24)  # as speculative_max_len reads it
    sched.add_request(_limited("long", None, prompt_len=12))
    worker, verified_at = FakeWorker(3, lambda rid, n: n), []
    for _ in range(12):
        length = sched.requests["long"].num_tokens  # before this step: the drafts' own positions come after
        out = sched.schedule()
        if out.scheduled_spec_decode_tokens.get("long"):
            verified_at.append(length)
        worker.step(sched, out)
    assert verified_at and all(n + 3 <= 24 for n in verified_at)
    assert sched.requests["long"].num_tokens > 24
    assert sched.minedraft_totals.past_spec_max_len == 1 and sched.minedraft_totals.drafts_cut >= 3


def test_a_bad_limit_that_reaches_the_engine_core_is_ignored_with_a_warning(model_dir, caplog):
    sched = make_scheduler(model_dir, MineDraftScheduler)
    with caplog.at_level("WARNING"):
        sched.add_request(_limited("bad", -2))
    assert any("request bad speculates as if it asked nothing" in r.getMessage() for r in caplog.records)
    assert sched.speculation.limits.limit(RequestView("bad", decoding=True, tokens_left=40, num_tokens=12)) == 3


@pytest.mark.parametrize("spec_len", [None, 48])
def test_no_step_is_deferred_to_the_lane_where_vllm_s_runner_would_not_draft(model_dir, monkeypatch, spec_len):
    """vLLM's runner drafts for none of a step's requests where the longest, with K drafts, passes the
    drafter's max_model_len (the speculative one where set, else the target's: 64 here); a parallel step
    there would leave the next step's lane without its job (a LanePlanError, the engine dead). Steps
    are parallel while the requests are short, and none is once one passes."""
    monkeypatch.setenv("MINEDRAFT_MODE", "parallel")
    sched = make_scheduler(model_dir, MineDraftScheduler, max_model_len=64)
    if spec_len is not None:
        sched._drafter_room = spec_len - 3  # as drafter_room reads a speculative max_model_len of 48
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 12, 100))
    worker, parallel_lengths, longest_seen = FakeWorker(3, lambda rid, n: n), [], 0
    while sched.has_unfinished_requests():
        out = sched.schedule()
        longest = max((sched.requests[rid].num_computed_tokens for rid in out.num_scheduled_tokens), default=0)
        longest_seen = max(longest_seen, longest)
        if out.defer_drafts:
            parallel_lengths.append(longest)
        worker.step(sched, out)
    room = (spec_len or 64) - 3
    assert parallel_lengths and max(parallel_lengths) <= room < longest_seen


def test_vllm_s_placeholder_drafts_for_a_step_it_did_not_draft_for_are_not_verified(model_dir, monkeypatch):
    """After a step whose longest request has no room for K drafts in the drafter, vLLM's runner returns K
    zeros for each of its requests: they are dropped (not verified next step), and where no lane job drafts
    either the engine core is told there is nothing to collect."""
    monkeypatch.setenv("MINEDRAFT_MODE", "parallel")
    sched = make_scheduler(model_dir, MineDraftScheduler, max_model_len=64)
    sched._drafter_room = 48 - 3  # a speculative max_model_len of 48 (vLLM's scheduler itself trims near 64)
    for i in range(4):
        sched.add_request(make_request(f"r{i}", 12, 100))
    worker, placeholders_verified, verified, collected_after_unfit = FakeWorker(3, lambda rid, n: n), 0, 0, []
    unfit: set[str] = set()  # the requests of the last step vLLM's runner would not draft for
    while sched.has_unfinished_requests():
        out = sched.schedule()
        for rid, drafts in out.scheduled_spec_decode_tokens.items():
            placeholders_verified += len(drafts) * (rid in unfit)
            verified += len(drafts)
        fits = sched._drafter_runs_after(out.num_scheduled_tokens)
        unfit = set() if fits else set(out.num_scheduled_tokens)
        if not fits and not out.draft_only_req_ids:
            collected_after_unfit.append(sched.expects_draft_tokens())
        worker.step(sched, out)
    assert verified > 0 and placeholders_verified == 0
    assert collected_after_unfit and not any(collected_after_unfit)
