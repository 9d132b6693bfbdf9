"""benchmarks/real_pair.py (no engine): how engines in groups of two are put on one scale and scored."""

from __future__ import annotations

import pytest

from benchmarks import real_pair

PHASES = [("steady", "code", n) for n in real_pair.STEADY] + [("moving", t, n) for n, t in real_pair.MOVING]


def samples(seconds, rounds=(0, 1), groups=None):
    """Every engine of ``groups`` (by name; A, B and C of real_pair.GROUPS), each phase 64 tokens a request in
    ``seconds(engine, phase)``."""
    groups = groups or {g: real_pair.GROUPS[g] for g in "ABC"}
    out = []
    for engine in [e for group in groups.values() for e in group]:
        for r in rounds:
            for i, (part, text, n) in enumerate(PHASES):
                out.append({"engine": engine, "round": r, "phase": i, "part": part, "text": text, "requests": n,
                            "generated_tokens": 64 * n, "elapsed_s": seconds(engine, i)})
    return out


def test_a_group_s_rates_are_scaled_by_its_twin_of_the_target_alone():
    """Group B's machine ran at half speed (its twin too): stock SD's rate is read on group A's scale."""
    def seconds(engine, phase):
        slow = 2.0 if engine in real_pair.GROUPS["B"] else 1.0
        return slow * {"stock_sd_k3": 0.5, "minedraft_auto": 0.8}.get(engine, 1.0)

    summary = real_pair.summarize(samples(seconds))
    for row in summary["steady"].values():
        assert row["tok_s"]["stock_sd_k3"] == pytest.approx(2 * row["tok_s"]["no_sd"])
        assert row["auto_vs_best_static"] == pytest.approx(0.5 / 0.8)
    assert summary["moving"]["auto_vs_best_static"] == pytest.approx(0.5 / 0.8)


def test_with_the_default_as_twin_its_ratio_to_a_static_engine_is_read_inside_that_engine_s_group():
    """Group B carries a second default: stock SD's ratio to it in B is the default's ratio to stock SD, however
    far group A's default ran from B's (here B's machine at half speed and A's default faster still)."""
    groups = {"A": real_pair.GROUPS["A"], **{g: real_pair.with_twin(real_pair.GROUPS[g], "minedraft_auto")
                                             for g in "BC"}}
    assert set(groups["B"]) == {"stock_sd_k3", "minedraft_auto_B"}
    assert groups["B"]["minedraft_auto_B"] == real_pair.GROUPS["A"]["minedraft_auto"]

    def seconds(engine, phase):
        slow = 2.0 if engine in groups["B"] else 1.0
        return slow * {"stock_sd_k3": 0.5, "minedraft_auto": 0.7, "minedraft_auto_B": 0.55,
                       "minedraft_auto_C": 0.9}.get(engine, 1.0)

    summary = real_pair.summarize(samples(seconds, groups=groups))
    for row in summary["steady"].values():
        assert row["best_static"] == ["stock_sd_k3"] * 2
        assert row["auto_vs_best_static"] == pytest.approx(0.5 / 0.55)
        assert row["tok_s"]["stock_sd_k1"] == pytest.approx(row["tok_s"]["minedraft_auto"] * 0.9)


def test_the_per_phase_ceiling_takes_each_phase_s_best_static_engine():
    """Stock SD wins the even moving phases, the target alone the odd ones: the ceiling beats both."""
    first_moving = len(real_pair.STEADY)

    def seconds(engine, phase):
        if engine == "stock_sd_k3":
            return 0.5 if (phase - first_moving) % 2 == 0 else 2.0
        return 1.0

    moving = real_pair.summarize(samples(seconds))["moving"]
    tokens = sum(64 * n for n, _ in real_pair.MOVING)
    even = sum(0.5 if i % 2 == 0 else 1.0 for i in range(len(real_pair.MOVING)))
    assert moving["per_phase_ceiling_tok_s"] == pytest.approx(tokens / even)
    assert moving["per_phase_ceiling_tok_s"] > max(moving["tok_s"][e] for e in ("no_sd", "stock_sd_k1", "stock_sd_k3"))
    assert moving["auto_vs_ceiling"] == pytest.approx(moving["tok_s"]["minedraft_auto"] / (tokens / even))
    assert "| moving (per-phase ceiling" in real_pair.markdown(
        real_pair.summarize(samples(seconds)), {"models": "m", "device_label": "cpu", "date": "d",
                                                "output_tokens": 64, "rounds": 2})


def test_prompts_of_a_kind_differ_from_request_to_request():
    for kind in real_pair.TEMPERATURE:
        texts = real_pair.prompt_texts(kind, 32)
        assert len(set(texts)) == 32


def test_vllm_s_depth_table_is_a_row_to_compare_never_the_best_static_choice():
    """Group E (vLLM's depth table) is read on group A's scale beside the others, but the default is scored
    against the static engines only, even where the table is faster than all of them."""
    def seconds(engine, phase):
        slow = 2.0 if engine in real_pair.GROUPS["E"] else 1.0
        return slow * {"vllm_depth_table": 0.25, "minedraft_auto": 0.8}.get(engine, 1.0)

    summary = real_pair.summarize(samples(seconds, groups={g: real_pair.GROUPS[g] for g in "ABCE"}))
    for row in summary["steady"].values():
        assert row["tok_s"]["vllm_depth_table"] == pytest.approx(4 * row["tok_s"]["no_sd"])
        assert "vllm_depth_table" not in row["best_static"]
        assert row["auto_vs_best_static"] == pytest.approx(1 / 0.8)
    assert summary["moving"]["tok_s"]["vllm_depth_table"] == pytest.approx(4 * summary["moving"]["tok_s"]["no_sd"])
    table = real_pair.markdown(summary, {"models": "m", "device_label": "cpu", "date": "d", "output_tokens": 64,
                                         "rounds": 2})
    assert "vLLM's depth table" in table and "nan" not in table.split("\n")[-1]


@pytest.mark.parametrize(("flags", "dtype"), [("fpu avx2 avx512f avx512_bf16", "bfloat16"),
                                              ("fpu avx2 amx_tile amx_bf16", "bfloat16"),
                                              ("fpu avx2 avx512f", "float32")])
def test_the_pair_runs_in_bf16_only_where_the_cpu_computes_it(flags, dtype):
    """An AVX2-only CPU multiplies bf16 about 30x slower than float32: the pair loads in float32 there."""
    assert real_pair.native_dtype(f"processor\t: 0\nflags\t\t: {flags}\n") == dtype


def test_a_float32_group_is_refused_where_two_engines_do_not_fit():
    """A group of two float32 engines was killed for memory on 23.5 GiB; bf16 groups run in 24 GB."""
    assert not real_pair.group_fits("float32", 23.5)
    assert real_pair.group_fits("float32", 64) and real_pair.group_fits("bfloat16", 23.5)
