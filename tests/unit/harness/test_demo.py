"""harness/demo.py: how side-by-side runs become the table's numbers."""

from __future__ import annotations

import pytest

import io

from harness.demo import OWN_CORE, SHARED, Progress, counters_since, rows_for, summarise, summarise_all, table


def runs(*rates, tokens=((1, 2),)):
    """One engine's runs (the first cold) at these rates, each with ``tokens``."""
    return [{"output_tokens_per_s": r, "tokens": [list(t) for t in tokens], "metrics": {}} for r in rates]


def test_cold_is_the_first_run_and_warm_the_median_of_the_rest_paired_by_round():
    stock = runs(100, 100, 200, 100)
    target = runs(300, 100, 100, 400)
    s = summarise(runs(150, 120, 220, 300), stock, [stock, target], target)
    assert s["output_tokens_per_s"] == 150 and s["cold_vs_stock_sd"] == 1.5
    assert s["warm_output_tokens_per_s"] == 220
    # paired per round: 1.2, 1.1, 3.0 -> 1.2 (the ratio of medians would be 220 / 100 = 2.2)
    assert s["warm_vs_stock_sd"] == pytest.approx(1.2)
    # the best static choice per round: the target alone, stock SD, the target alone
    assert s["cold_vs_best_static"] == 0.5 and s["warm_vs_best_static"] == pytest.approx(1.1)
    assert s["same_tokens_as_target"]


def test_a_load_sums_its_runs_own_counters():
    mine = runs(100, 100)
    mine[0]["metrics"] = {"minedraft:steps_by_depth[0]": 3}
    mine[1]["metrics"] = {"minedraft:steps_by_depth[0]": 2, "minedraft:steps_by_depth[3]": 5}
    target = runs(100, 100)
    assert summarise(mine, target, [target], target)["metrics"] == {"minedraft:steps_by_depth[0]": 5,
                                                                     "minedraft:steps_by_depth[3]": 5}


def test_a_run_s_own_counters_are_the_engine_s_less_those_before_it():
    assert counters_since({"a": 5, "b": 2}, {"a": 3}) == {"a": 2, "b": 2}


def test_one_run_with_other_tokens_is_reported():
    stock = runs(100, 100)
    mine = runs(100, 100)
    mine[1]["tokens"] = [[1, 3]]
    target = runs(100, 100)
    assert not summarise(mine, stock, [stock, target], target)["same_tokens_as_target"]


def test_the_table_has_a_row_per_engine():
    stock = runs(100, 100)
    target = runs(200, 200)
    results = summarise_all(SHARED, {"N=1": {"target": target, "stock_sd": stock, "minedraft": runs(150, 250)}})
    lines = table(results).splitlines()
    assert len(lines) == 5
    assert lines[2].startswith("| N=1 | target | all | 200 | 200 | 2.00x, 2.00x | 1.00x, 1.00x |")
    assert lines[4].startswith("| N=1 | minedraft | all | 150 | 250 | 1.50x, 2.50x | 0.75x, 1.25x |")


def test_the_own_core_row_pairs_with_stock_sd_on_the_target_core_and_the_best_static_on_every_core():
    assert list(rows_for(1)) == list(SHARED) and list(rows_for(2)) == [*SHARED, *OWN_CORE]
    results = summarise_all(rows_for(2), {"N=8": {"target": runs(200, 200), "stock_sd": runs(100, 300),
                                                  "minedraft": runs(200, 300), "stock_sd_core0": runs(80, 100),
                                                  "minedraft_own_core": runs(100, 150)}})
    own = results["N=8"]["minedraft_own_core"]
    assert own["cores"] == "0" and own["cold_vs_stock_sd"] == 1.25 and own["warm_vs_stock_sd"] == 1.5
    assert own["cold_vs_best_static"] == 0.5 and own["warm_vs_best_static"] == 0.5


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
