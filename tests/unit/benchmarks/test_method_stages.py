"""benchmarks/method_stages.py (no engine): the engines it builds and how it pairs rounds."""

from __future__ import annotations

import benchmark_scripts

method_stages = benchmark_scripts.load("method_stages")


def test_stages_are_per_counted_step_and_runs_pair_with_stock_sd_by_round():
    # Round 2 ran twice as slow for every engine and MineDraft took one more step in round 1.
    per_round = {
        "stock_sd": [{"run": 1.0, "steps": 10, "schedule": 0.01}, {"run": 2.0, "steps": 10, "schedule": 0.02}],
        "minedraft_auto": [{"run": 1.05, "steps": 11, "schedule": 0.022},
                           {"run": 2.1, "steps": 10, "schedule": 0.04}],
    }
    rows = {r["engine"]: r for r in method_stages.summarize(per_round, "suffix", requests=1)}
    mine = rows["minedraft_auto"]
    assert mine["run_vs_stock_sd_rounds"] == [1.05, 1.05] and mine["run_vs_stock_sd"] == 1.05
    assert mine["steps_per_run"] == 10.5
    assert mine["ms_per_step"]["schedule"] == 3.0  # median of 2 ms and 4 ms per step
    assert rows["stock_sd"]["ms_per_step"] == {"run": 150.0, "schedule": 1.5}
    assert "| suffix | 1 | minedraft_auto | 1.050x | 10.5 |" in method_stages.markdown(list(rows.values()))


def test_each_method_runs_the_same_speculative_config_under_every_engine():
    target, speculation = method_stages.speculation_for("suffix", k=2)
    assert speculation.config() == {"method": "suffix", "num_speculative_tokens": 2}
    assert method_stages.ENGINES == ("stock_sd", "minedraft_auto", "stock_sd_twin")
