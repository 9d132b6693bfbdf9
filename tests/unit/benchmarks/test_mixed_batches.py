"""benchmarks/mixed_batches.py: the mixed workload's phases and the summary's scaling across groups."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import mixed_batches


def test_each_batch_mixes_code_greedy_and_prose_sampled(monkeypatch):
    monkeypatch.setattr(mixed_batches.real_pair, "tokenized", lambda target, kind, n: [[kind, i] for i in range(n)])
    plan = mixed_batches.workload(Path("target"), 8)
    assert [p["requests"] for p in plan] == [1, 1, 2, 4, 8, 16, 32]
    assert [p["text"] for p in plan[:3]] == ["code", "prose", "code and prose"]
    four = plan[3]["command"]
    assert four["prompts"] == [["code", 0], ["prose", 1], ["code", 2], ["prose", 3]]
    assert four["temperature"] == [0.0, 1.0, 0.0, 1.0] and four["output_tokens"] == 8


def _samples(seconds: dict[str, float]) -> list[dict]:
    """Every engine's phases in one round: N = 1 twice (code, prose), then 2..32; each phase takes the
    engine's seconds per request."""
    requests = [1, 1, 2, 4, 8, 16, 32]
    return [{"engine": e, "round": 0, "phase": p, "requests": n, "elapsed_s": s * n, "generated_tokens": 10 * n,
             "counters": {}} for e, s in seconds.items() for p, n in enumerate(requests)]


def test_rates_are_scaled_to_group_a_s_target_alone_and_n_1_takes_both_phases():
    # Group S's twin ran twice as slow as group A's target alone: its engine's seconds count half.
    seconds = {"no_sd": 1.0, "minedraft_auto": 0.8, "minedraft_step": 2.0, "no_sd_S": 2.0,
               "stock_sd_k3": 1.0, "no_sd_B": 1.0, "stock_sd_k1": 0.5, "no_sd_C": 0.5}
    summary = mixed_batches.summarize(_samples(seconds))
    one = summary["1"]
    assert one["tok_s"]["no_sd"] == pytest.approx(20 / 2.0)  # both N = 1 phases: 20 tokens in 2 s
    assert one["tok_s"]["minedraft_step"] == pytest.approx(one["tok_s"]["no_sd"])
    assert one["auto_vs_step"] == pytest.approx(1.25) and one["auto_vs_best_static"] == pytest.approx(1.25)
    assert summary["32"]["best_static"] == ["no_sd"] and set(summary) == {"1", "2", "4", "8", "16", "32"}


def test_groups_a_and_s_alone_summarize_against_the_target_alone():
    """``--groups AS``: no stock SD ran; the best static choice is the target alone, the table marks the rest."""
    seconds = {"no_sd": 1.0, "minedraft_auto": 0.8, "minedraft_step": 2.0, "no_sd_S": 2.0}
    summary = mixed_batches.summarize(_samples(seconds))
    one = summary["1"]
    assert one["auto_vs_best_static"] == pytest.approx(1.25) and one["auto_vs_step"] == pytest.approx(1.25)
    assert summary["32"]["best_static"] == ["no_sd"] and "stock_sd_k1" not in one["tok_s"]
    table = mixed_batches.markdown(summary, {"models": "m", "device_label": "cpu", "date": "d", "output_tokens": 8,
                                             "rounds": 1})
    assert "| 1 | 10.0 | - | - | 10.0 | 12.5 | 1.25x | 1.25x |" in table and "was not run" in table
    alone = mixed_batches.summarize(_samples({"no_sd": 1.0, "minedraft_auto": 0.8}))
    assert "auto_vs_step" not in alone["1"] and alone["1"]["auto_vs_best_static"] == pytest.approx(1.25)
