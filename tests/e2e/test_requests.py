"""Bad and unusual requests behave under MineDraft exactly as under stock SD.

Each case (prompt over max_model_len, max_tokens 0, invalid sampling
parameters, logprobs, prompt_logprobs, structured output) must give the same
outputs, or the same vLLM error, in both engines; and the engine must keep
serving afterwards.
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
         "prompt_logprobs", "structured_regex", "structured_choice", "engine_still_serves"]


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
