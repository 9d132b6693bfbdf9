"""Greedy MineDraft == target alone == stock speculative decoding, on a real engine.

48 requests, prompts of 1..500 tokens, max_tokens 1..100, chunked prefill with
a 128-token budget, prefix caching with shared prefixes, and a 48-block KV
cache (block size 32) small enough to force preemptions.
"""

from __future__ import annotations

import pytest

from minedraft.kit import build_kit
from minedraft.sidebyside import run_mode


def run_engine(mode: str, kit) -> dict:
    return run_mode(mode, str(kit.target), str(kit.draft_perturbed))


@pytest.fixture(scope="module")
def kit():
    return build_kit()


@pytest.fixture(scope="module")
def target_alone(kit):
    return run_engine("no_sd", kit)


@pytest.fixture(scope="module")
def stock_sd(kit):
    return run_engine("stock_sd", kit)


@pytest.fixture(scope="module")
def minedraft(kit):
    return run_engine("minedraft_parallel", kit)


def test_stock_sd_matches_target(target_alone, stock_sd):
    assert stock_sd["tokens"] == target_alone["tokens"]


def test_minedraft_matches_target_and_stock_sd(target_alone, stock_sd, minedraft):
    assert minedraft["tokens"] == target_alone["tokens"]
    assert minedraft["tokens"] == stock_sd["tokens"]


def test_minedraft_really_ran_parallel_steps(minedraft):
    m = minedraft["metrics"]
    assert m["minedraft:parallel_steps"] > 0
    assert m["minedraft:draft_only_requests"] > 0
    assert m["vllm:spec_decode_num_accepted_tokens"] > 0


def test_workload_forced_preemption(target_alone, minedraft):
    assert target_alone["metrics"].get("vllm:num_preemptions", 0) > 0
    assert minedraft["metrics"].get("vllm:num_preemptions", 0) > 0


def test_draft_lane_fault_becomes_an_engine_error(kit):
    with pytest.raises(RuntimeError, match="draft lane failed|injected draft-lane fault"):
        run_mode("minedraft_parallel", str(kit.target), str(kit.draft_perturbed), num_requests=8,
                 env={"MINEDRAFT_INJECT_FAULT": "draft_lane"}, timeout=300)
