"""Greedy MineDraft == target alone == stock speculative decoding, on a real engine.

48 requests, prompts of 1..500 tokens, max_tokens 1..100, chunked prefill with
a 128-token budget, prefix caching with shared prefixes, and a 48-block KV
cache (block size 32) small enough to force preemptions. MineDraft runs with
its in-process drafter and with its process drafter (the draft model as its
own engine, on core 1), and with the kit's EAGLE-3 head (``method: eagle3``):
its deferred jobs carry the target's auxiliary hidden states, and with a small
``capture_max_mib`` the steps holding a prefill chunk draft inline instead.
"""

from __future__ import annotations

import pytest

from harness.sidebyside import run_mode, steps_by_depth
from modelkit import build_kit
from tests.e2e.fault_injection import run_with_faults

PROCESS_DRAFTER = {"drafter": "process", "drafter_device": "cpu:1"}
# EAGLE-3 on the kit's target copies 3 x 256 float32 = 3 KiB of hidden states per scheduled token: a
# step with a 128-token prefill chunk needs more than 0.25 MiB, a step of decodes alone mostly less.
EAGLE3_CAPPED = {"capture_max_mib": 0.25}
# vLLM's per-batch-size depth: 3 up to 2 scheduled requests, 0 from 3 to 12 (the draft model skips its
# forward and catches up when it next drafts: worker/draft_catch_up.py), 1 above.
DEPTH_TABLE = [[1, 2, 3], [3, 12, 0], [13, 64, 1]]
INLINE_DRAFTS_LINE = "a deferred draft call would copy"


def run_engine(mode: str, kit, minedraft: dict | None = None) -> dict:
    return run_mode(mode, str(kit.target), str(kit.draft_perturbed), minedraft=minedraft)


def run_eagle3(mode: str, kit, minedraft: dict | None = None, log_dir=None) -> dict:
    return run_mode(mode, str(kit.target), str(kit.eagle3), method="eagle3", minedraft=minedraft, log_dir=log_dir)


@pytest.fixture(scope="module")
def kit():
    return build_kit()


@pytest.fixture(scope="module")
def stock_sd(kit):
    return run_engine("stock_sd", kit)


@pytest.fixture(scope="module")
def minedraft(kit):
    return run_engine("minedraft_parallel", kit)


@pytest.fixture(scope="module")
def minedraft_process(kit):
    return run_engine("minedraft_parallel", kit, PROCESS_DRAFTER)


@pytest.fixture(scope="module")
def minedraft_depth_auto(kit):
    return run_engine("minedraft_parallel", kit, {"speculation_depth": "auto"})


@pytest.fixture(scope="module")
def minedraft_depth_table(kit):
    return run_mode("minedraft_parallel", str(kit.target), str(kit.draft_perturbed),
                    speculation_extra={"num_speculative_tokens_per_batch_size": DEPTH_TABLE})


@pytest.fixture(scope="module")
def stock_eagle3(kit):
    return run_eagle3("stock_sd", kit)


@pytest.fixture(scope="module")
def minedraft_eagle3(kit):
    return run_eagle3("minedraft_parallel", kit)


def run_eagle3_depth_table(mode: str, kit, log_dir=None) -> dict:
    return run_mode(mode, str(kit.target), str(kit.eagle3), method="eagle3", log_dir=log_dir,
                    speculation_extra={"num_speculative_tokens_per_batch_size": DEPTH_TABLE})


@pytest.fixture(scope="module")
def stock_eagle3_depth_table(kit):
    return run_eagle3_depth_table("stock_sd", kit)


@pytest.fixture(scope="module")
def minedraft_eagle3_depth_table(kit, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("eagle3_depth_table")
    result = run_eagle3_depth_table("minedraft_parallel", kit, log_dir=log_dir)
    return {**result, "log": (log_dir / "minedraft_parallel.log").read_text()}


@pytest.fixture(scope="module")
def minedraft_eagle3_capped(kit, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("eagle3_capped")
    result = run_eagle3("minedraft_parallel", kit, EAGLE3_CAPPED, log_dir=log_dir)
    return {**result, "log": (log_dir / "minedraft_parallel.log").read_text()}


MINEDRAFT_RUNS = ["minedraft", "minedraft_process", "minedraft_eagle3", "minedraft_eagle3_capped",
                  "minedraft_depth_auto", "minedraft_depth_table", "minedraft_eagle3_depth_table"]


@pytest.mark.parametrize("run", ["stock_sd", "stock_eagle3", "stock_eagle3_depth_table"])
def test_stock_sd_matches_target(mix_target_alone, run, request):
    assert request.getfixturevalue(run)["tokens"] == mix_target_alone["tokens"]


@pytest.mark.parametrize("run", MINEDRAFT_RUNS)
def test_minedraft_matches_target_and_stock_sd(mix_target_alone, stock_sd, run, request):
    minedraft = request.getfixturevalue(run)
    assert minedraft["tokens"] == mix_target_alone["tokens"]
    assert minedraft["tokens"] == stock_sd["tokens"]


def _acceptance_length(m: dict) -> float:
    return 1 + m["vllm:spec_decode_num_accepted_tokens"] / m["vllm:spec_decode_num_drafts"]


def test_the_kit_eagle3_head_is_really_trained(stock_eagle3):
    """Stock vLLM with the kit's head: a mean acceptance length of 1.5 or more at k = 3."""
    assert _acceptance_length(stock_eagle3["metrics"]) >= 1.5, stock_eagle3["metrics"]


def test_deferred_eagle3_accepts_like_stock_eagle3(stock_eagle3, minedraft_eagle3):
    """The deferred call is the call stock SD makes, one step later, with the same hidden states."""
    assert abs(_acceptance_length(minedraft_eagle3["metrics"]) - _acceptance_length(stock_eagle3["metrics"])) < 0.1


def test_a_skipping_eagle3_head_accepts_like_stock_eagle3_at_the_same_depths(stock_eagle3_depth_table,
                                                                             minedraft_eagle3_depth_table):
    """At depth 0 MineDraft's EAGLE-3 head skips its forward and later catches up on the hidden states
    its skipped steps kept (worker/draft_catch_up.py); stock vLLM runs the head every step. The head's
    KV cache is the same either way, so acceptance is too (float32 sums differ between a catch-up
    pass and single steps, hence a tolerance)."""
    assert "MineDraft: first catch-up" in minedraft_eagle3_depth_table["log"]
    assert abs(_acceptance_length(minedraft_eagle3_depth_table["metrics"])
               - _acceptance_length(stock_eagle3_depth_table["metrics"])) < 0.1


def test_the_depth_controller_changed_depth_during_the_run(minedraft_depth_auto):
    """Exactness with the depth changing (test_minedraft_matches_target_and_stock_sd): it did change."""
    m = minedraft_depth_auto["metrics"]
    assert len(steps_by_depth(m)) >= 2, m


def test_capped_eagle3_drafts_long_steps_inline(minedraft_eagle3_capped):
    lines = [line for line in minedraft_eagle3_capped["log"].splitlines() if INLINE_DRAFTS_LINE in line]
    assert len(lines) == 1, lines


@pytest.mark.parametrize("run", MINEDRAFT_RUNS)
def test_minedraft_really_ran_parallel_steps(run, request):
    m = request.getfixturevalue(run)["metrics"]
    assert m["minedraft:parallel_steps"] > 0
    assert m["minedraft:draft_only_requests"] > 0
    assert m["vllm:spec_decode_num_accepted_tokens"] > 0
    assert m.get("minedraft:late_drafts", 0) == 0


def test_process_drafter_accepts_like_stock_sd(stock_sd, minedraft_process):
    """The draft engine drafts what vLLM's in-worker drafter drafts (greedy, same context): the
    acceptance rates agree. Not exactly: a draft engine's batch differs, and float32 sums with it."""
    def rate(m):
        return m["vllm:spec_decode_num_accepted_tokens"] / m["vllm:spec_decode_num_draft_tokens"]

    assert abs(rate(minedraft_process["metrics"]) - rate(stock_sd["metrics"])) < 0.05


@pytest.mark.parametrize("run", MINEDRAFT_RUNS)
def test_workload_forced_preemption(mix_target_alone, run, request):
    assert mix_target_alone["metrics"].get("vllm:num_preemptions", 0) > 0
    assert request.getfixturevalue(run)["metrics"].get("vllm:num_preemptions", 0) > 0


def test_draft_lane_fault_becomes_an_engine_error(kit):
    with pytest.raises(RuntimeError, match="draft lane failed|injected draft-lane fault"):
        run_with_faults("draft_lane", "minedraft_parallel", str(kit.target), str(kit.draft_perturbed),
                        num_requests=8, timeout=300)


def test_a_late_then_dead_drafter_costs_drafts_not_tokens(kit, mix_target_alone, tmp_path):
    """The draft engine stalls 3 s in its 3rd job (the target waits 0.5 s, then verifies without
    drafts) and exits in its 12th: one error line, and the engine finishes every request exactly."""
    settings = {**PROCESS_DRAFTER, "drafter_timeout_s": 0.5}
    result = run_with_faults("drafter_stall,drafter_exit", "minedraft_parallel", str(kit.target),
                             str(kit.draft_perturbed), minedraft=settings, env={"MINEDRAFT_FAULT_STALL_S": "3"},
                             log_dir=tmp_path)
    assert result["tokens"] == mix_target_alone["tokens"]
    m = result["metrics"]
    assert m["minedraft:late_drafts"] > 0 and m["minedraft:parallel_steps"] > 0
    log = (tmp_path / "minedraft_parallel.log").read_text()
    gone = [line for line in log.splitlines() if "the draft engine process on cpu:1 exited (code 3)" in line]
    assert len(gone) == 1, gone
