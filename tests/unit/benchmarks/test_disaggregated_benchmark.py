"""benchmarks/disaggregated.py (no server): its workload and how it summarises the rounds."""

from __future__ import annotations

from benchmarks import disaggregated


def test_each_scenario_has_prompts_of_its_own_within_the_stated_lengths():
    first, again, other = (disaggregated.requests_for(seed, vocab=500) for seed in (1, 1, 2))
    assert first == again and len(first) == disaggregated.REQUESTS_PER_SCENARIO
    assert not {tuple(r["prompt"]) for r in first} & {tuple(r["prompt"]) for r in other}
    low, high = disaggregated.PROMPT_TOKENS
    assert all(low <= len(r["prompt"]) <= high and max(r["prompt"]) < 500 for r in first)


def run(topology, r, ttft_ms, tpot_ms, identical=True):
    return {"topology": topology, "round": r, "concurrency": 1, "identical_to_single": identical,
            "ttft_s": [t / 1e3 for t in ttft_ms], "tpot_s": [t / 1e3 for t in tpot_ms]}


def test_the_summary_is_the_median_of_the_rounds_medians_and_flags_a_differing_answer():
    runs = [run("single", 0, [10, 20, 90], [5, 5, 5]), run("1p1d", 0, [30, 40, 50], [6, 6, 6]),
            run("single", 1, [12, 12, 12], [4, 4, 4]), run("1p1d", 1, [36, 36, 36], [8, 8, 8], identical=False),
            run("single", 2, [14, 14, 14], [6, 6, 6]), run("1p1d", 2, [42, 42, 42], [7, 7, 7])]
    runs += [run("1p1d_stock", r, [20, 20, 20], [7, 7, 7]) for r in range(3)]
    row = disaggregated.summarise(runs)["1"]
    assert row["single"] == {"ttft_s": 14.0, "tpot_s": 5.0} and row["1p1d"] == {"ttft_s": 40.0, "tpot_s": 7.0}
    # Ratios pair each round's medians: TTFT 40/20, 36/12, 42/14 -> 3.0; TPOT 6/5, 8/4, 7/6 -> 1.2.
    assert row["1p1d_vs_single"] == {"ttft_s": 3.0, "tpot_s": 1.2}
    assert row["1p1d_vs_1p1d_stock"] == {"ttft_s": 2.0, "tpot_s": 1.0}
    assert row["identical"] is False and "| NO |" in disaggregated.markdown({"summary": {"1": row}})
