"""analysis/sweep_resolution.py: the target alone's twin in a depth sweep's best-static column (no engine)."""

from __future__ import annotations

import json
import statistics

import pytest

from analysis.sweep_resolution import DEFAULT, cells, main


@pytest.fixture(scope="module")
def table():
    meta = json.loads(DEFAULT.with_name("summary_meta.json").read_text())
    return cells(json.loads(DEFAULT.read_text()), meta)


def test_every_cell_of_the_committed_sweep_is_scored(table):
    assert len(table) == 18
    assert {c.requests for c in table} == {1, 8, 32} and {c.k for c in table} == {1, 3}


def test_a_twin_is_the_target_alones_runs_of_its_own_block(table):
    """Where the target alone is best, its twin scatters around 1 (its block against the median of all
    blocks), and never by more than the VM's spread between blocks."""
    alone = [c.twin for c in table if c.best_static == "no_sd"]
    assert 0.9 < statistics.geometric_mean(alone) < 1.1
    assert all(0.8 < t < 1.25 for t in alone)


def test_runs_that_do_not_split_into_blocks_are_refused():
    summary = [{"comparison": "equal_concurrency", "mode": "no_sd", "batch_size": 1, "output_tokens": 256,
                "output_tokens_per_s_runs": [1.0] * 7},
               {"comparison": "equal_concurrency", "mode": "minedraft_auto", "batch_size": 1, "output_tokens": 256,
                "draft": "d", "k": 1, "vllm_best_static": "no_sd", "vllm_best_static_tok_s": 1.0,
                "output_tokens_per_s": 1.0, "output_tokens_per_s_runs": [1.0] * 3}]
    with pytest.raises(ValueError, match="7 runs of the target alone, not 3 for each of 2 blocks"):
        cells(summary, {"drafts": ["d"], "ks": [1, 3]})


def test_a_summary_merged_from_two_sweeps_is_refused():
    """The first depth sweep (history/depth_sweep_2026-11-25/) took its EAGLE-3 rows from a second sweep and
    kept the first sweep's target-alone runs (12: two drafts x two k x 3 repeats), which six blocks would
    otherwise split into twins of 2."""
    merged = DEFAULT.parents[1] / "history" / "depth_sweep_2026-11-25" / "summary.json"
    meta = json.loads(merged.with_name("summary_meta.json").read_text())
    with pytest.raises(ValueError, match="12 runs of the target alone, not 3 for each of 6 blocks"):
        cells(json.loads(merged.read_text()), meta)


def test_the_report_names_both_counts(capsys):
    main([])
    out = capsys.readouterr().out
    assert "twin" in out and "below 0.95" in out
