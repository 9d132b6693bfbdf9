"""benchmarks/gpu_depth.py (no GPU): what it derives from a row of timings, and its committed H200 run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gpu_depth


def row(verify_ms, draft_ms, catch_up_ms=None):
    return {"verify_ms": verify_ms, "draft_ms": draft_ms, "catch_up_ms": catch_up_ms or {"16": 4 * draft_ms}}


def test_expected_tokens_count_the_accepted_run_and_the_target_s_own_token():
    assert gpu_depth.expected_tokens(0.7, 0) == 1
    assert gpu_depth.expected_tokens(1.0, 3) == 4
    assert gpu_depth.expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_a_free_verification_and_cheap_drafts_go_deep_and_a_dear_one_stays_at_depth_zero():
    cheap = gpu_depth.derive(row([10.0] * 6, 0.5), cost_ratio=0.05)
    assert cheap["best_depth"]["0.9"]["depth"] == 5
    assert cheap["best_depth"]["0.9"]["gain_over_target_alone"] == pytest.approx(
        gpu_depth.expected_tokens(0.9, 5) * 10 / 12.5, abs=1e-3)
    # Each extra token verified costs a whole forward: no acceptance pays for the drafts.
    dear = gpu_depth.derive(row([10.0 * (d + 1) for d in range(6)], 0.5), cost_ratio=0.05)
    assert {b["depth"] for b in dear["best_depth"].values()} == {0}
    assert dear["depth0_draft_share"] == 0.05
    assert dear["catch_up_per_token_over_draft_step"] == {"16": 0.25}
    assert dear["all_accepted_gain"][0] == 1.0 and dear["prior_bound"][0] == 1.0


def test_the_committed_h200_run_measured_every_row_it_meant_to():
    path = Path(gpu_depth.__file__).parent / "results" / "nvidia-h200" / "gpu_depth.json"
    data = json.loads(path.read_text())
    assert not data["meta"]["skipped"]
    assert {(r["pair"], r["mode"], r["batch"]) for r in data["rows"]} == {
        (pair, mode, b) for pair in ("llama-3.1-8b/llama-3.2-1b", "qwen3-32b/qwen3-1.7b")
        for mode in ("eager", "graph") for b in (1, 8, 32, 128)}
    for r in data["rows"]:
        derived = gpu_depth.derive(r, r["cost_ratio"])
        # The row stores the ratio to 4 places; the bound was computed from the unrounded one.
        assert derived.pop("prior_bound") == pytest.approx(r["prior_bound"], abs=0.002)
        assert r == {**r, **derived}
