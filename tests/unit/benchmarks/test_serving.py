"""benchmarks/serving.py's handling of ``vllm bench serve`` results (no server, no model)."""

from __future__ import annotations

import math

import pytest

from benchmarks import serving
from harness.server import parse_metrics


def bench_result(**over) -> dict:
    """A ``vllm bench serve --save-result`` JSON, trimmed to what serving.py reads."""
    raw = {"duration": 4.0, "completed": 8, "failed": 0, "request_throughput": 2.0,
           "request_goodput": 1.5, "output_throughput": 128.04, "spec_decode_acceptance_length": 2.4877}
    for i, metric in enumerate(("ttft", "tpot", "itl", "e2el")):
        raw[f"mean_{metric}_ms"] = 10.0 * (i + 1) + 0.004
        for p in (50, 90, 99):
            raw[f"p{p}_{metric}_ms"] = 10.0 * (i + 1) + p / 100
    raw.update(over)
    return raw


def test_summarize_keeps_percentiles_mean_and_goodput():
    row = serving.summarize(bench_result())
    assert row["ttft"] == {"mean": 10.0, "p50": 10.5, "p90": 10.9, "p99": 10.99}
    assert row["e2el"]["p99"] == 40.99
    assert row["goodput"] == 1.5
    # 1.5 req/s good over 4 s = 6 of the 8 completed requests met the SLO.
    assert row["slo_attainment"] == 0.75
    assert row["acceptance_length"] == 2.49
    assert row["output_throughput"] == 128.0


def test_summarize_without_speculation_or_slo():
    raw = bench_result(request_goodput=None)
    del raw["spec_decode_acceptance_length"]
    row = serving.summarize(raw)
    assert row["goodput"] is None and row["slo_attainment"] is None and row["acceptance_length"] is None


def test_summarize_with_nothing_completed():
    row = serving.summarize(bench_result(completed=0, failed=8, request_goodput=0.0))
    assert row["slo_attainment"] is None and row["failed"] == 8


def test_minedraft_step_counters_and_parallel_share():
    text = """# HELP minedraft:parallel_steps_total Engine steps ...
# TYPE minedraft:parallel_steps_total counter
minedraft:parallel_steps_total 30.0
minedraft:parallel_steps_created 1.7e+09
minedraft:fallback_steps_total{engine="0"} 10.0
minedraft:arrival_skips_total{engine="0"} 2.0
vllm:num_requests_running{engine="0"} 3.0
"""
    after = serving.parse_counters(parse_metrics(text))  # what Server.metrics() returns
    assert after == {"parallel_steps": 30.0, "fallback_steps": 10.0, "arrival_skips": 2.0}
    assert serving.parallel_share({"parallel_steps": 10.0, "fallback_steps": 0.0}, after) == 0.667
    assert serving.parallel_share({}, {}) is None  # a stock server has no minedraft counters
    assert serving.parallel_share(after, after) is None  # no steps in between


def test_the_first_token_split_on_the_server():
    def scrape(ttft_s: float, queue_s: float, prefill_s: float, n: int) -> dict[str, float]:
        lines = []
        for name, total in (("time_to_first_token", ttft_s), ("request_queue_time", queue_s),
                            ("request_prefill_time", prefill_s)):
            for engine in ("0", "1"):  # summed over vLLM's engine label
                lines += [f'vllm:{name}_seconds_sum{{engine="{engine}",model_name="m"}} {total / 2}',
                          f'vllm:{name}_seconds_count{{engine="{engine}",model_name="m"}} {n / 2}',
                          f'vllm:{name}_seconds_bucket{{engine="{engine}",le="0.1"}} 1.0']
        return serving.parse_counters(parse_metrics("\n".join(lines)))

    before, after = scrape(1.0, 0.0, 0.5, 4), scrape(2.5, 0.01, 1.7, 14)
    assert after["time_to_first_token_seconds_count"] == 14 and serving.parallel_share(before, after) is None
    # Ten first tokens: 150 ms each on the server, 1 ms queued, 120 ms from scheduled; 160 ms at the client.
    assert serving.server_first_token(before, after, 160.0) == {
        "until_queued": 29.0, "queue": 1.0, "prefill": 120.0, "delivery": 10.0}
    assert serving.server_first_token(after, after, 160.0) is None  # no request in between


def test_rotation_puts_each_mode_first_once():
    modes = ("a", "b", "c")
    orders = [serving.rotated(modes, i) for i in range(4)]
    assert orders[:3] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert orders[3] == orders[0]


def test_rates_format_and_sort():
    assert serving.format_rate(math.inf) == "inf" and serving.format_rate(8.0) == "8"
    assert sorted(["inf", "8", "2", "0.5"], key=serving.rate_order) == ["0.5", "2", "8", "inf"]


def result_for_table() -> dict:
    runs = []
    for rate in ("inf", "2"):
        for mode in ("stock_sd", "minedraft_auto", "no_sd"):
            raw = bench_result(output_throughput=90.0) if mode == "minedraft_auto" else bench_result()
            runs.append({"mode": mode, "request_rate": rate, "max_concurrency": 4, "output_len": 32,
                         "parallel_step_share": None, **serving.summarize(raw)})
    return {"device": "cpu (2 cores)", "workload": "w", "slo": {"ttft_ms": 1000.0, "tpot_ms": 50.0},
            "config": {"modes": ["no_sd", "stock_sd", "minedraft_auto"]}, "runs": runs}


def test_markdown_table_orders_rows_and_states_the_slo():
    table = serving.to_markdown(result_for_table())
    assert "TTFT <= 1000 ms and TPOT <= 50 ms" in table
    rows = [line.split(" | ")[:4] for line in table.splitlines() if line.startswith("| 32 ")]
    assert rows == [["| 32", "2", "4", "no_sd"], ["| 32", "2", "4", "stock_sd"], ["| 32", "2", "4", "minedraft_auto"],
                    ["| 32", "inf", "4", "no_sd"], ["| 32", "inf", "4", "stock_sd"],
                    ["| 32", "inf", "4", "minedraft_auto"]]
    assert "| 10.5 / 10.9 / 11.0 / 10.0 |" in table  # TTFT p50 / p90 / p99 / mean
    assert "| 1.50 (75 %) | 2.49 | - |" in table
    stock = serving.summarize(bench_result())["output_throughput"]
    assert f"| minedraft_auto | 90 | {90.0 / stock:.2f}x |" in table
    # TTFT p50 beside the target alone's in the same scenario (here every mode has the same TTFT).
    assert table.count("| 10.5 / 10.9 / 11.0 / 10.0 | 1.00x |") == 6


@pytest.mark.parametrize("before, after", [
    ("# B\n\nintro\n\n<!-- serving-eagle3:begin -->\nold\ntable\n<!-- serving-eagle3:end -->\n\n## Next\n",
     "# B\n\nintro\n\n<!-- serving-eagle3:begin -->\nNEW\n<!-- serving-eagle3:end -->\n\n## Next\n"),
    ("# B\n\nintro\n",
     "# B\n\nintro\n\n## Serving benchmark (eagle3)\n\n<!-- serving-eagle3:begin -->\nNEW\n<!-- serving-eagle3:end -->\n"),
])
def test_readme_update_touches_only_the_marked_block_of_its_draft(before, after):
    assert serving.replace_between_markers(before, "NEW", "eagle3") == after
    assert serving.replace_between_markers(after, "NEW", "eagle3") == after  # idempotent
    other = "<!-- serving-draft_small:begin -->\nkept\n<!-- serving-draft_small:end -->\n"
    assert other in serving.replace_between_markers(other + before, "NEW", "eagle3")


def test_a_server_s_drafter_and_minedraft_settings():
    from types import SimpleNamespace

    kit = SimpleNamespace(target="/t", draft_perturbed="/p", draft_small="/s", eagle3="/e")
    args = serving.parse_args(["--draft", "eagle3", "--minedraft-settings", '{"speculation_depth": "fixed"}',
                               "--modes", "stock_sd", "minedraft_auto", "minedraft_auto_after_drafts"])
    cfg = serving.make_config(args)
    engines = {name: serving.server_engine(serving.MODES[name], cfg, kit) for name in cfg.modes}
    assert all(e["speculative_config"]["method"] == "eagle3" and e["speculative_config"]["model"] == "/e"
               for e in engines.values())
    assert "additional_config" not in engines["stock_sd"]
    assert engines["minedraft_auto"]["additional_config"]["minedraft"] == {"mode": "auto",
                                                                           "speculation_depth": "fixed"}
    assert engines["minedraft_auto_after_drafts"]["additional_config"]["minedraft"] == {
        "mode": "auto", "speculation_depth": "fixed", "first_token": "after_drafts"}
    default = serving.make_config(serving.parse_args([]))
    assert default.modes == serving.DEFAULT_MODES == ("no_sd", "stock_sd", "minedraft_auto")
    # The first token's workload: prompts of 52-998 tokens, all requests at once, concurrency 1, 4, 16.
    assert (default.input_len, default.range_ratio, default.rates, default.concurrency) == (
        525, 0.9, (float("inf"),), (1, 4, 16))


def test_each_run_starts_on_a_server_that_has_just_stepped(monkeypatch, tmp_path):
    """Before each run, as many requests as the run's concurrency (by default) go to its server, with
    prompts of their own (a seed no scenario uses) and the run's concurrency; ``--rewarm-prompts 0``: none."""
    from types import SimpleNamespace

    sent = []
    monkeypatch.setattr(serving, "run_bench", lambda argv, path, log: sent.append(argv))
    server, kit = SimpleNamespace(name="no_sd", url="http://x"), SimpleNamespace(tokenizer="/t")
    scenarios = serving.scenarios_of(serving.make_config(serving.parse_args([])))
    for rewarm in ([], ["--rewarm-prompts", "0"], ["--rewarm-prompts", "2"]):
        cfg = serving.make_config(serving.parse_args(rewarm))
        for scenario in scenarios:
            serving.rewarm(cfg, kit, server, scenario, tmp_path, tmp_path / "log")
    assert len(sent) == 2 * len(scenarios)  # default and 2; none with 0

    def flag(argv, name):
        return argv[argv.index(name) + 1]

    for argv, scenario in zip(sent, scenarios + scenarios):
        assert flag(argv, "--max-concurrency") == str(scenario.concurrency)
        assert int(flag(argv, "--seed")) not in {s.seed for s in scenarios}
    assert [flag(argv, "--num-prompts") for argv in sent[:len(scenarios)]] == [str(s.concurrency) for s in scenarios]
    assert {flag(argv, "--num-prompts") for argv in sent[len(scenarios):]} == {"2"}
