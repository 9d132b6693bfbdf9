"""Bad and unusual requests behave under MineDraft exactly as under stock SD.

Each case (prompt over max_model_len, max_tokens 0, invalid sampling
parameters, logprobs, prompt_logprobs, structured output, requests that limit
their own drafts, prompts past the speculative max_model_len) must give the same
outputs, or the same vLLM error, in both engines; and the engine must keep serving afterwards. A bad limit on a
request's drafts is MineDraft's own error, for that request alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.child import run_once
from modelkit import build_kit

SCRIPT = Path(__file__).with_name("request_cases.py")


def run_cases(mode: str) -> dict:
    kit = build_kit()
    return run_once([str(SCRIPT)], {"name": mode, "mode": mode, "target": str(kit.target),
                                    "draft": str(kit.draft_perturbed)}, timeout_s=600)


@pytest.fixture(scope="module")
def stock():
    return run_cases("stock_sd")


@pytest.fixture(scope="module")
def minedraft():
    return run_cases("minedraft_parallel")


CASES = ["prompt_over_max_model_len", "max_tokens_0", "negative_temperature", "top_p_zero", "logprobs",
         "prompt_logprobs", "structured_regex", "structured_choice", "speculation_limits",
         "past_speculative_max_model_len", "engine_still_serves"]


@pytest.mark.parametrize("case", CASES)
def test_same_behaviour_as_stock_sd(stock, minedraft, case):
    assert minedraft["results"][case] == stock["results"][case]


def test_invalid_requests_are_refused_and_valid_ones_answered(minedraft):
    r = minedraft["results"]
    for case in ("prompt_over_max_model_len", "negative_temperature", "top_p_zero"):
        assert "error" in r[case], case
    for case in ("logprobs", "prompt_logprobs", "structured_regex", "structured_choice", "engine_still_serves"):
        assert "outputs" in r[case], (case, r[case])
    assert all(o["logprob_tokens"] == o["token_ids"] for o in r["logprobs"]["outputs"])
    assert all(o["text"] in ("yes", "no", "maybe") for o in r["structured_choice"]["outputs"])
    assert minedraft["metrics"]["minedraft:parallel_steps"] > 0


def test_requests_that_limit_their_drafts_keep_their_tokens_and_a_bad_limit_fails_that_request_alone(stock, minedraft):
    """Greedy tokens of the request without drafts and of the one with one draft a step equal stock SD's
    (where they are not limited; the same as the target alone's); drafts were cut; a bad value is one
    error naming the key, raised before the request reached the engine core, which serves on."""
    r = minedraft["results"]
    assert r["speculation_limits"] == stock["results"]["speculation_limits"]
    assert minedraft["metrics"]["minedraft:drafts_cut"] > 0
    assert r["bad_speculation_limit"]["error"] == "VLLMValidationError"
    assert "extra_args['num_speculative_tokens'] must be an integer >= 0" in r["bad_speculation_limit"]["message"]
    assert "outputs" in stock["results"]["bad_speculation_limit"]  # vLLM's scheduler ignores the key
    assert "outputs" in r["engine_still_serves"]


def test_each_request_verifies_at_most_the_drafts_it_asked_for(minedraft):
    """Counted per request (tests/e2e/policy_hooks.py): the request limited to 0 held drafts and verified none,
    the one limited to 1 verified one a step at most, the two others verified up to K = 3."""
    off, one, free, other = minedraft["per_request"]["speculation_limits"]
    assert off[0] > 0 and off[1] == off[0] and off[2] == 0, off  # [steps with drafts, steps cut, verified, most]
    assert one[2] > 0 and one[3] == 1, one
    assert free[3] == other[3] == 3 and free[1] == other[1] == 0, (free, other)


def test_requests_past_the_speculative_max_model_len_verify_no_drafts_and_keep_their_tokens(stock, minedraft):
    """The speculative config's max_model_len, which vLLM's V1 scheduler accepts and ignores: the two
    prompts past it verify no drafts (each counted once, when it passes), the two short ones speculate;
    greedy tokens equal stock SD's (the target alone's)."""
    assert minedraft["results"]["past_speculative_max_model_len"] == stock["results"]["past_speculative_max_model_len"]
    assert minedraft["metrics"]["minedraft:past_spec_max_len"] == 2
