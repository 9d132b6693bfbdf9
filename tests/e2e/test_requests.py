"""Bad and unusual requests behave under MineDraft exactly as under stock SD.

Each case (prompt over max_model_len, max_tokens 0, invalid sampling
parameters, logprobs, prompt_logprobs, structured output) must give the same
outputs, or the same vLLM error, in both engines; and the engine must keep
serving afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minedraft.kit import build_kit

SCRIPT = Path(__file__).with_name("request_cases.py")


def run_cases(mode: str) -> dict:
    kit = build_kit()
    proc = subprocess.run([sys.executable, str(SCRIPT), mode, str(kit.target), str(kit.draft_perturbed)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{mode} engine failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def stock():
    return run_cases("stock_sd")


@pytest.fixture(scope="module")
def minedraft():
    return run_cases("minedraft")


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
