"""harness/demo.py: how side-by-side runs become the table's numbers."""

from __future__ import annotations

import pytest

import io

from harness.demo import Progress, summarise, table


def runs(*rates, tokens=((1, 2),)):
    """One engine's runs (the first cold) at these rates, each with ``tokens``."""
    return [{"output_tokens_per_s": r, "tokens": [list(t) for t in tokens], "metrics": {}} for r in rates]


def test_cold_is_the_first_run_and_warm_the_median_of_the_rest_paired_by_round():
    stock = runs(100, 100, 200, 100)
    s = summarise(runs(150, 120, 220, 300), stock, runs(300, 100, 100, 400))
    assert s["output_tokens_per_s"] == 150 and s["cold_vs_stock_sd"] == 1.5
    assert s["warm_output_tokens_per_s"] == 220
    # paired per round: 1.2, 1.1, 3.0 -> 1.2 (the ratio of medians would be 220 / 100 = 2.2)
    assert s["warm_vs_stock_sd"] == pytest.approx(1.2)
    # the best static choice per round: the target alone, stock SD, the target alone
    assert s["cold_vs_best_static"] == 0.5 and s["warm_vs_best_static"] == pytest.approx(1.1)
    assert s["same_tokens_as_target"]


def test_one_run_with_other_tokens_is_reported():
    stock = runs(100, 100)
    mine = runs(100, 100)
    mine[1]["tokens"] = [[1, 3]]
    assert not summarise(mine, stock, runs(100, 100))["same_tokens_as_target"]


def test_the_table_has_a_row_per_engine():
    stock = runs(100, 100)
    target = runs(200, 200)
    results = {"target": summarise(target, stock, target), "stock_sd": summarise(stock, stock, target)}
    lines = table(results).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| target | 200 | 2.00x | 200 | 2.00x |")


def test_progress_prints_a_line_per_run_where_stderr_is_not_a_terminal():
    stream = io.StringIO()  # not a terminal: no tqdm bar, whose carriage returns a log shows as one line
    progress = Progress(4, stream)
    progress.starting("cold: target")
    progress.finished("cold: target")
    progress.finished("cold: stock_sd")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["demo: 1/4 runs", "demo: 2/4 runs"]
    assert "(cold: stock_sd)" in lines[1] and lines[1].endswith("s to go")
