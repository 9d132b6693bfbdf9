"""benchmarks/dedicated_real.py: the comparisons read from runs (no engine)."""

from __future__ import annotations

from benchmarks.dedicated_real import summary


def run(setting: str, tok_s: float) -> dict:
    return {"setting": setting, "tok_s": {"1": tok_s}}


def test_each_comparison_takes_the_best_baseline_of_its_hardware_and_medians_of_runs():
    runs = [run("no_sd@0", 4.0), run("stock_sd:3@0", 5.0), run("stock_sd:3@0", 6.0), run("stock_sd:3@0", 100.0),
            run("no_sd@0-1", 4.5), run("stock_sd:3@0-1", 5.5),
            run("process_no_ahead@0+1", 3.0), run("process_ahead@0+1", 2.4)]
    row = summary(runs, [1])["1"]
    assert row["tok_s"]["stock_sd:3@0"] == 6.0  # the median of three
    assert row["best_core0"] == "stock_sd:3@0" and row["best_both_cores"] == "stock_sd:3@0-1"
    assert row["process_no_ahead@0+1_equal_concurrency"] == 0.5
    assert row["process_no_ahead@0+1_per_hardware"] == round(3.0 / 5.5, 3)
    assert row["ahead_over_no_ahead"] == 0.8
