"""benchmarks/core_contention.py: the summary read from runs and the draft load's rate from its lines (no engine)."""

from __future__ import annotations

from benchmarks.core_contention import draft_rate, summary


def test_the_target_beside_the_draft_is_compared_with_it_alone_by_medians():
    runs = [{"setting": "alone", "tok_s": 8.0}, {"setting": "beside", "tok_s": 2.5, "draft_tok_s": 10.0},
            {"setting": "beside", "tok_s": 2.7, "draft_tok_s": 12.0}, {"setting": "alone", "tok_s": 7.0},
            {"setting": "alone", "tok_s": 100.0}]
    out = summary(runs)
    assert out["tok_s"] == {"alone": 8.0, "beside": 2.6}
    assert out["beside_over_alone"] == round(2.6 / 8.0, 3) and out["draft_tok_s"] == 11.0


def test_a_setting_not_run_gives_no_ratio():
    out = summary([{"setting": "alone", "tok_s": 8.0}])
    assert "beside_over_alone" not in out and out["draft_tok_s"] is None


def test_the_draft_load_s_rate_is_its_last_count_over_its_seconds():
    lines = ["ready", '{"tokens": 64, "seconds": 4.0}', "a log line", '{"tokens": 128, "seconds": 10.0}']
    assert draft_rate(lines) == 12.8
    assert draft_rate(["ready"]) is None
