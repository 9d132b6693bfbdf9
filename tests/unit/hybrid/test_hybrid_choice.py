"""The second draft source's settings (config/hybrid.py), refusals (config/validation.py) and the policy's
choice per request (policy/draft_sources.py, policy/policy.py). Engines: tests/e2e/test_exactness.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.hybrid import lookup_limits
from minedraft.config.settings import MineDraftSettings
from minedraft.config.validation import validate_vllm_config
from minedraft.policy import RequestView, SpeculationPolicy, StepResult, StepView, VerifiedDrafts
from minedraft.policy.draft_sources import PRIOR_TOKENS, LookupCalibration, worth


def test_vllm_s_suffix_fields_set_the_source_s_limits():
    limits = lookup_limits({"method": "suffix", "num_speculative_tokens": 12, "suffix_decoding_max_tree_depth": 32,
                            "suffix_decoding_min_token_prob": 0.3})
    assert (limits.max_depth, limits.max_tree_depth, limits.min_token_prob) == (12, 32, 0.3)
    assert lookup_limits(None) is None
    assert lookup_limits({"method": "suffix"}).max_depth == 16


@pytest.mark.parametrize(("fields", "matched"), [({}, (5, 5)), ({"prompt_lookup_max": 4}, (4, 4)),
                                                 ({"prompt_lookup_min": 2}, (2, 2)),
                                                 ({"prompt_lookup_min": 2, "prompt_lookup_max": 4}, (2, 4))])
def test_vllm_s_prompt_lookup_fields_set_the_ngram_source_s_limits_with_its_defaults(fields, matched):
    """vLLM's rule (config/speculative.py): both unset, 5 and 5; one unset, the other's value."""
    limits = lookup_limits({"method": "ngram", **fields})
    assert (limits.prompt_lookup_min, limits.prompt_lookup_max, limits.max_depth) == (*matched, 16)


@pytest.mark.parametrize(("hybrid", "says"), [
    ({"method": "medusa"}, "method must be one of suffix, ngram"),
    ({"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 2}, "must be <= prompt_lookup_max=2"),
    ({"method": "ngram", "prompt_lookup_max": 0}, "prompt_lookup_max must be a positive integer"),
    ({"method": "ngram", "suffix_decoding_max_tree_depth": 8}, "unknown field"),
    ({"method": "suffix", "num_speculative_tokens": 0}, "positive integer"),
    ({"method": "suffix", "suffix_decoding_min_token_prob": 1.5}, r"a number in \[0, 1\]"),
    ({"method": "suffix", "suffix_decoding_max_cached_requests": -1}, "an integer >= 0"),
    ({"method": "suffix", "prompt_lookup_max": 4}, "unknown field"),
    ("suffix", "must be an object")])
def test_a_bad_hybrid_setting_is_one_line_before_any_model_loads(hybrid, says):
    with pytest.raises(MineDraftConfigError, match=says) as e:
        MineDraftSettings.parse({"minedraft": {"hybrid": hybrid}})
    assert "\n" not in str(e.value)


def test_hybrid_runs_beside_the_process_drafter():
    """The draft engine is sent the tokens each request gained since its last job, however many the target
    accepted (process_drafter/target/proposer.py): drafts of the second source verified deeper than K too."""
    settings = MineDraftSettings.parse({"minedraft": {"hybrid": {"method": "suffix"}, "drafter": "process",
                                                      "drafter_device": "cpu:1"}})
    assert settings.drafter == "process" and settings.hybrid == {"method": "suffix"}


def _config(method="draft_model", **spec):
    return SimpleNamespace(
        speculative_config=SimpleNamespace(method=method, num_speculative_tokens=3, **spec),
        parallel_config=SimpleNamespace(pipeline_parallel_size=1), model_config=SimpleNamespace(runner_type="generate"),
        additional_config={"minedraft": {"hybrid": {"method": "suffix"}}})


@pytest.mark.parametrize(("config", "says"), [
    (_config("ngram"), "runs none"), (_config("suffix"), "runs none"),
    (_config(draft_sample_method="probabilistic", rejection_sample_method="standard"), "no draft probabilities"),
    (_config(draft_sample_method="greedy", rejection_sample_method="block"), "no draft probabilities")])
def test_hybrid_is_refused_where_a_request_s_drafts_could_not_come_from_either_source(config, says):
    with pytest.raises(MineDraftConfigError, match=says):
        validate_vllm_config(config)


def test_hybrid_beside_a_greedy_model_drafter_is_accepted():
    validate_vllm_config(_config("eagle3", draft_sample_method="greedy", rejection_sample_method="standard"))


def test_the_calibration_scales_the_tree_s_estimates_by_what_was_accepted():
    calibration = LookupCalibration()
    assert calibration.survivals("a", [0.9, 0.5]) == [0.9, 0.5]  # no verification yet: the counts at their word
    calibration.observe("a", estimated=3 * PRIOR_TOKENS, accepted=0)
    assert calibration.factor == pytest.approx(0.25)
    assert calibration.survivals("new", [0.8]) == [pytest.approx(0.2)]  # a new request: every request's


def test_a_request_s_own_misses_do_not_discount_another_s_matches():
    """Prose beside an edit in one batch: the prose request's suffix drafts are rejected, the edit's accepted."""
    calibration = LookupCalibration()
    for _ in range(4):
        calibration.observe("prose", estimated=4.0, accepted=0)
        calibration.observe("edit", estimated=4.0, accepted=4)
    assert calibration.factor == pytest.approx((16 + 8) / (32 + 8))
    assert calibration.factor_of("prose") < 0.25 < 0.85 < calibration.factor_of("edit")  # both 0.6 over all
    calibration.release(["prose"])
    assert calibration.factor_of("prose") == pytest.approx(calibration.factor)  # an id used again starts afresh


def test_a_source_is_worth_its_paying_drafts_above_the_threshold():
    assert worth([0.9, 0.6, 0.2, 0.9], 0.5) == pytest.approx(0.4 + 0.1)  # stops at the first below it
    assert worth([], 0.0) == 0.0


def _view(*requests):
    return StepView(list(requests))


def _decoding(rid, num_drafts=3, suffix=()):
    return RequestView(rid, True, tokens_left=100, num_tokens=50, num_drafts=num_drafts, lookup_probs=suffix)


def test_at_a_fixed_depth_a_request_verifies_the_suffix_draft_where_its_score_reaches_the_model_s_length():
    """ArcticInference's rule where the policy measures no acceptance: the model's drafts count as accepted."""
    policy = SpeculationPolicy(3)
    plan = policy.plan(_view(_decoding("copy", suffix=(1.0,) * 4), _decoding("prose", suffix=(0.9, 0.8, 0.5)),
                             _decoding("none")))
    assert plan.lookup_drafts == {"copy": 4}
    assert plan.num_drafts == {"copy": 0, "prose": 3, "none": 3}  # the copying request's model drafts dropped


def test_a_request_s_own_limit_caps_the_suffix_draft_too():
    policy = SpeculationPolicy(3)
    policy.add_request("capped", 2)
    policy.add_request("off", 0)
    policy.add_request("deep", 9)  # above K: the suffix source's own depth is not K
    plan = policy.plan(_view(_decoding("capped", num_drafts=0, suffix=(1.0,) * 12),
                             _decoding("off", num_drafts=0, suffix=(1.0,) * 12),
                             _decoding("deep", num_drafts=0, suffix=(1.0,) * 12)))
    assert plan.lookup_drafts == {"capped": 2, "deep": 9}


def test_at_depth_0_the_suffix_draft_is_verified_where_the_model_has_none():
    policy = SpeculationPolicy(3)
    plan = policy.plan(_view(_decoding("a", num_drafts=0, suffix=(0.6, 0.3))))
    assert plan.lookup_drafts == {"a": 2}


def test_suffix_verifications_calibrate_the_source_and_not_the_model_s_acceptance():
    """The same step observed with and without a's rejected suffix drafts: the model's acceptance the same."""
    policies = [SpeculationPolicy(3, depth_control="drafted", draft_cost=0.3) for _ in range(2)]
    for policy, verified in zip(policies, ([VerifiedDrafts("a", 8, 0), VerifiedDrafts("b", 3, 3)],
                                           [VerifiedDrafts("b", 3, 3)])):
        plan = policy.plan(_view(_decoding("a", num_drafts=0, suffix=(1.0,) * 8), _decoding("b")))
        assert plan.lookup_drafts == {"a": 8}
        policy.observe(StepResult(plan, num_decoding=2, tokens=2 + 8 + 3, verified=verified))
    with_suffix, without = policies
    assert with_suffix.lookup_calibration.accepted == 0 and with_suffix.lookup_calibration.estimated == 8
    assert with_suffix.depths.acceptance.survivals("a", 3) == without.depths.acceptance.survivals("a", 3)


def _catching_up_policy(second_source=True):
    return SpeculationPolicy(3, depth_control="drafted", draft_cost=0.3, catches_up=True, second_source=second_source)


def _starting(rid, prompt_left=500):
    return RequestView(rid, False, tokens_left=64, prompt_left=prompt_left)


def test_the_model_drafter_skips_a_step_whose_every_request_verifies_suffix_drafts():
    """Its drafts would all be dropped next step if the text keeps repeating itself: depth 0, caught up later."""
    policy = _catching_up_policy()
    plan = policy.plan(_view(_decoding("a", suffix=(1.0,) * 8), _decoding("b", num_drafts=0, suffix=(1.0,) * 8)))
    assert plan.lookup_drafts == {"a": 8, "b": 8}
    assert plan.depth == 0 and not plan.parallel and plan.counts.lookup_only == 1
    policy.observe(StepResult(plan, num_decoding=2, tokens=18, scheduled={"a": 9, "b": 9}))
    plan = policy.plan(_view(_decoding("a", num_drafts=0), _decoding("b", num_drafts=0, suffix=(1.0,) * 8)))
    assert plan.lookup_drafts == {"b": 8} and plan.depth > 0  # "a" missed: the model drafts it again


def test_the_model_drafter_runs_where_a_request_of_the_step_verifies_its_drafts_and_skips_the_others_rows():
    """"open" verifies the model's drafts: the drafter runs, for "open" alone; "a" (suffix drafts) and "new"
    (a prompt beside it) are undrafted, their tokens noted as skipped and weighed when next drafted."""
    policy = _catching_up_policy()
    plan = policy.plan(_view(_decoding("a", suffix=(1.0,) * 8), _decoding("open"), _starting("new")))
    assert plan.lookup_drafts == {"a": 8} and plan.depth > 0
    assert plan.undrafted == {"a", "new"} and plan.counts.undrafted == 2
    policy.observe(StepResult(plan, num_decoding=2, tokens=9 + 4 + 500, scheduled={"a": 9, "open": 4, "new": 500},
                              prompt_tokens=0))
    assert policy._skipped == {"a": 9, "new": 500}


def test_what_a_copying_request_skipped_is_not_weighed_as_a_catch_up_of_the_step_beside_it():
    """"new" copies its 900-token prompt: its draft prefill, skipped beside "a", would cost a catch-up only
    if the model drafted for it, which it does not while suffix decoding drafts it; the depth for "open"
    weighs none of it (it held such batches at depth 0)."""
    policy = _catching_up_policy()
    weighed, depth = [], policy.depths.depth
    policy.depths.depth = lambda *args, **kwargs: weighed.append(kwargs["catch_up"]) or depth(*args, **kwargs)
    plan = policy.plan(_view(_decoding("a", suffix=(1.0,) * 8), _decoding("open"), _starting("new", 900)))
    policy.observe(StepResult(plan, num_decoding=2, tokens=913, scheduled={"a": 9, "open": 4, "new": 900}))
    assert policy._skipped == {"a": 9, "new": 900}
    policy.plan(_view(_decoding("a", suffix=(1.0,) * 8), _decoding("open"), _decoding("new", 0, (1.0,) * 8)))
    assert weighed == [0, 0]


@pytest.mark.parametrize("skips_rows", [True, False])
def test_the_process_drafter_leaves_the_rows_out_and_no_catch_up_is_weighed(skips_rows):
    """The process drafter does not catch up in this process: its engine's sessions take a request's missed
    tokens with its next job (skips_rows), so "a" and "new" are undrafted and nothing is noted as skipped here;
    a drafter that can do neither drafts every row."""
    policy = SpeculationPolicy(3, depth_control="drafted", draft_cost=0.3, catches_up=False, skips_rows=skips_rows,
                               second_source=True)
    plan = policy.plan(_view(_decoding("a", suffix=(1.0,) * 8), _decoding("open"), _starting("new")))
    assert plan.lookup_drafts == {"a": 8} and plan.depth > 0
    assert plan.undrafted == ({"a", "new"} if skips_rows else frozenset())
    policy.observe(StepResult(plan, num_decoding=2, tokens=9 + 4 + 500, scheduled={"a": 9, "open": 4, "new": 500}))
    assert policy._skipped == {}


def test_no_row_is_undrafted_where_no_request_verifies_lookup_drafts():
    plan = _catching_up_policy().plan(_view(_decoding("open"), _starting("new")))
    assert plan.depth > 0 and plan.undrafted == frozenset()


@pytest.mark.parametrize("others", [[], [_decoding("a", suffix=(1.0,) * 8)]])
def test_a_prompt_s_draft_prefill_waits_until_the_model_drafts_for_its_request(others):
    """Beside suffix decoding, a step that starts prompts and runs no request the model drafts for runs at
    depth 0: the draft's prefill is caught up when the model first drafts for the request, and never where
    suffix decoding drafts it to its end. Without a second source, the prompt's drafts are made as before."""
    plan = _catching_up_policy().plan(_view(_starting("new"), *others))
    assert plan.depth == 0 and plan.counts.lookup_only == 1
    plan = _catching_up_policy(second_source=False).plan(_view(_starting("new"), *others))
    assert plan.depth > 0 and plan.counts.lookup_only == 0


def test_a_model_drafter_that_cannot_catch_up_drafts_every_step():
    policy = SpeculationPolicy(3, depth_control="drafted", draft_cost=0.3, second_source=True)
    plan = policy.plan(_view(_decoding("a", suffix=(1.0,) * 8), _starting("new")))
    assert plan.lookup_drafts == {"a": 8} and plan.depth > 0
