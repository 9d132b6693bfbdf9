"""benchmarks/shifting.py (no engine): the workload it builds and how it scores the engines."""

from __future__ import annotations

from benchmarks import shifting


def test_the_load_ramps_up_and_down_and_the_text_alternates_between_ramps():
    prompts = [[i] for i in range(64)]
    plan = shifting.phases(prompts, output_tokens=16)
    assert [p["requests"] for p in plan] == list(shifting.RAMP) * 3
    assert [p["text"] for p in plan] == [t for t in ("greedy", "sampled", "greedy") for _ in shifting.RAMP]
    # Consecutive phases run different prompts: each phase's requests are new ones.
    for before, after in zip(plan, plan[1:]):
        assert not {tuple(p) for p in before["prompts"]} & {tuple(p) for p in after["prompts"]}
    command = shifting.worker_command(plan)
    assert {c["temperature"] for c in command[:9]} == {0.0} and {c["temperature"] for c in command[9:18]} == {1.0}


def sample(engine, r, phase, tokens, seconds, digest=None, depths=None):
    counters = {f"minedraft:steps_by_depth[{d}]": n for d, n in (depths or {}).items()}
    return {"engine": engine, "round": r, "phase": phase, "text": "greedy", "requests": 1,
            "generated_tokens": tokens, "elapsed_s": seconds, "tok_s": tokens / seconds,
            "tokens_digest": digest, "counters": counters}


def test_auto_is_paired_with_the_best_static_engine_of_its_round():
    samples = []
    # Round 0: stock SD k=3 is best (200 tok/s); round 1 (a slower machine): the target alone (100).
    for r, rates in enumerate(({"no_sd": 100, "stock_sd_k1": 150, "stock_sd_k3": 200, "minedraft_auto": 220},
                               {"no_sd": 100, "stock_sd_k1": 60, "stock_sd_k3": 50, "minedraft_auto": 110})):
        for engine, rate in rates.items():
            # Two phases; the workload's rate is its tokens over the sum of its phases' times.
            samples += [sample(engine, r, 0, rate, 0.5, digest="a", depths={3: 4} if engine == "minedraft_auto" else None),
                        sample(engine, r, 1, rate, 1.5, digest="b")]
    summary = shifting.summarize(samples)
    assert summary["best_static_by_round"] == ["stock_sd_k3", "no_sd"]
    auto = summary["engines"]["minedraft_auto"]
    assert auto["vs_best_static_min"] == 1.1 and auto["vs_best_static_max"] == 1.1 and auto["tok_s"] == 165.0
    assert summary["phases"][0]["auto_steps_by_depth"] == {3: 8}
    assert summary["greedy_tokens_equal"] and summary["greedy_batches_compared"] == 4


def test_a_greedy_batch_whose_tokens_differ_between_engines_is_reported():
    samples = [sample(e, 0, 0, 10, 1.0, digest="same") for e in shifting.ENGINES]
    samples[-1]["tokens_digest"] = "other"
    assert not shifting.summarize(samples)["greedy_tokens_equal"]
