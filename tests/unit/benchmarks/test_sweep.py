"""benchmarks/sweep.py's summary rows from measured samples (no engine): the best static choice and the
steps per speculation depth."""

from __future__ import annotations

from benchmarks import sweep


COUNTERS = {"vllm:spec_decode_num_drafts": 10, "vllm:spec_decode_num_accepted_tokens": 12,
            "minedraft:parallel_steps": 0, "minedraft:fallback_steps": 40, "minedraft:parallel_trial_steps": 0}


def sample(mode: str, k: int | None, tok_s: float, depths: dict[int, int] | None = None, repeat: int = 0) -> dict:
    counters = dict(COUNTERS)
    for depth, steps in (depths or {}).items():
        counters[sweep.depth_key(depth)] = steps
    return {"mode": mode, "output_tokens": 256, "target": "t", "draft": None if mode == "no_sd" else "d",
            "k": k, "requests": 8, "repeat": repeat, "tok_s": tok_s, "ttft_ms_p50": 1.0, "tpot_ms_p50": 1.0, "counters": counters}


def test_minedraft_rows_are_compared_with_the_best_static_choice_at_their_load():
    samples = [sample("no_sd", None, 900.0), sample("no_sd", None, 1100.0, repeat=1),
               sample("stock_sd", 1, 1200.0), sample("stock_sd", 3, 700.0),
               sample("minedraft_auto", 3, 1140.0, {0: 5, 1: 30}), sample("minedraft_auto", 3, 1160.0, {1: 40}, repeat=1)]
    rows = sweep.summarize(samples, "cpu", "process")
    auto = next(r for r in rows if r["mode"] == "minedraft_auto" and r["k"] == 3)
    assert (auto["vllm_best_static"], auto["vllm_best_static_tok_s"]) == ("stock_sd_k1", 1200.0)
    assert auto["vs_best_static"] == round(1150.0 / 1200.0, 3)
    assert auto["steps_by_depth"] == {"0": 5, "1": 70}


def test_stock_sd_deeper_than_the_row_is_not_a_choice_it_had():
    samples = [sample("no_sd", None, 1000.0), sample("stock_sd", 1, 800.0), sample("stock_sd", 3, 1300.0),
               sample("minedraft_auto", 1, 950.0)]
    auto = next(r for r in sweep.summarize(samples, "cpu", "process") if r["mode"] == "minedraft_auto")
    assert auto["vllm_best_static"] == "no_sd" and auto["vs_best_static"] == 0.95
