"""The offline analysis (analysis/simulator/): the CPU check of the cost model, the summary check,
the paper comparison, the report and the command line (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.simulator.__main__ import main
from analysis.simulator.check import check, cpu_profiles, detect_format, draft_scales
from analysis.simulator.paper import HEADLINES, compare_headlines, verdict
from analysis.simulator.report import render_report
from analysis.cost_model import tokens_per_verification
from analysis.cost_model.calibrate import CPU_STEP_OVERLAP_JSON
from analysis.cost_model.model import KIT_ALPHA

# Bound on the CPU check, per (comparison, mode) and over all rows. Measured when this was written:
# 3.2-8.5 % per mode (MineDraft rows out of sample), 5.9 % over all 54 rows.
CPU_MAPE_BOUND = 15.0
CPU_OVERALL_MAPE_BOUND = 10.0


# --- the committed CPU measurements ------------------------------------------------------------------


def test_cpu_check_on_committed_measurements():
    result = check(CPU_STEP_OVERLAP_JSON)
    assert len(result.rows) == 54
    mape = result.mape()
    assert set(mape) == {("equal_concurrency", m) for m in ("target", "stock_sd", "minedraft_serial",
                                                            "minedraft_overlap")} | {
        ("paper", m) for m in ("minedraft_serial", "minedraft_overlap")}
    assert max(mape.values()) < CPU_MAPE_BOUND, mape
    assert result.overall_mape() < CPU_OVERALL_MAPE_BOUND
    # The 2-core CPU gains little or nothing from overlap: i close to 1 or above.
    assert all(p.interference > 0.5 for p in result.profiles.values())


def test_profiles_for_unmeasured_k_interpolate_the_interference():
    profiles = cpu_profiles(CPU_STEP_OVERLAP_JSON, [1, 2, 3, 4, 5, 6])
    i = {k: p.interference for k, p in profiles.items()}
    assert i[1] < i[2] < i[3] < i[4] < i[5] == i[6]
    assert i[2] == pytest.approx((i[1] + i[3]) / 2)
    assert profiles[2].t_verify(8, 2) == profiles[3].t_verify(8, 2)  # only i differs


def test_cli(capsys):
    assert main(["--profile", "cpu", "--k", "3", "--tau", "2.4", "--batch", "1", "4"]) == 0
    out = capsys.readouterr().out
    assert "fallback" in out and "paper setting" in out and "equal concurrency" in out
    assert main(["--profile", "h100-paper", "--k", "3", "--alpha", "0.7", "--batch", "16",
                 "--workload", "384", "256"]) == 0
    assert main(["--check", str(CPU_STEP_OVERLAP_JSON)]) == 0
    assert "mean absolute percentage error" in capsys.readouterr().out


# --- a sweep's summary.json ---------------------------------------------------------------------------


def summary_from_step_overlap(data: dict, tau_of_k) -> list[dict]:
    """A step_overlap.json's end-to-end rows in the sweep's summary schema (the fixture the summary
    check is tested on until a measured summary.json exists): overlap lane only, no SD and stock SD
    under both comparisons, the acceptance length (not in the file) from ``tau_of_k``."""
    rows, seen = [], set()
    for r in data["e2e"]:
        mode = {"target": "no_sd", "stock_sd": "stock_sd", "minedraft_overlap": "minedraft_parallel"}.get(r["mode"])
        if mode is None:
            continue
        k, n = int(r["k"]), int(r["batch_size"])
        for comparison in ("equal_concurrency", "paper") if mode != "minedraft_parallel" else (r["comparison"],):
            key = (mode, comparison, n, None if mode == "no_sd" else k)
            if key in seen:  # the target's rows repeat for every k
                continue
            seen.add(key)
            rows.append({"mode": mode, "comparison": comparison, "batch_size": n,
                         "total_requests": 2 * n if comparison == "paper" and mode == "minedraft_parallel" else n,
                         "k": key[3], "draft": None if mode == "no_sd" else data.get("draft", "draft_perturbed"),
                         "output_tokens_per_s": r["output_tokens_per_s"],
                         "mean_acceptance_length": None if mode == "no_sd" else round(tau_of_k(k), 3),
                         "ttft_ms_p50": None, "tpot_ms_p50": None,
                         "parallel_step_fraction": 1.0 if mode == "minedraft_parallel" else None,
                         "device": data.get("device", "")})
    return rows


# The kit's config.json values (modelkit/specs.py): the drafts' shapes without building the kit.
KIT_CONFIGS = {
    "draft_perturbed": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                        "head_dim": 64, "intermediate_size": 768, "vocab_size": 2048, "tie_word_embeddings": False},
    "draft_small": {"hidden_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                    "head_dim": 64, "intermediate_size": 384, "vocab_size": 2048, "tie_word_embeddings": False},
}


def kit_tau(k: int) -> float:
    return tokens_per_verification(KIT_ALPHA, k)


@pytest.fixture(scope="module")
def synthetic_summary(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("summary") / "summary.json"
    path.write_text(json.dumps(summary_from_step_overlap(json.loads(CPU_STEP_OVERLAP_JSON.read_text()), kit_tau)))
    return path


def test_detect_format(synthetic_summary: Path):
    step_overlap = json.loads(CPU_STEP_OVERLAP_JSON.read_text())
    rows = json.loads(synthetic_summary.read_text())
    assert detect_format(step_overlap) == "step_overlap"
    assert detect_format(rows) == "summary"
    assert detect_format({"rows": rows, "prompt_tokens": 32, "output_tokens": 48}) == "summary"
    for bad in ({"e2e": []}, [], [{"mode": "target", "output_tokens_per_s": 1.0}], 3):
        with pytest.raises(ValueError):
            detect_format(bad)


def test_summary_check_reproduces_the_step_overlap_check(synthetic_summary: Path):
    """The same measurements in the summary schema give the same errors, now with the rows' own acceptance."""
    summary = check(synthetic_summary)
    assert summary.source == "summary" and summary.alpha is None
    assert all(r.draft == "none" and r.tau is None for r in summary.rows if r.mode == "no_sd")
    assert all(r.tau == pytest.approx(kit_tau(r.k), abs=1e-3) for r in summary.rows if r.mode != "no_sd")
    reference = check(CPU_STEP_OVERLAP_JSON).mape()
    got = summary.mape()
    assert set(got) == {(c, m) for c in ("equal_concurrency", "paper") for m in ("no_sd", "stock_sd", "minedraft_parallel")}
    assert got[("equal_concurrency", "no_sd")] == pytest.approx(reference[("equal_concurrency", "target")], abs=0.05)
    assert got[("equal_concurrency", "minedraft_parallel")] == pytest.approx(
        reference[("equal_concurrency", "minedraft_overlap")], abs=0.1)
    assert got[("paper", "minedraft_parallel")] == pytest.approx(reference[("paper", "minedraft_overlap")], abs=0.1)
    assert max(got.values()) < CPU_MAPE_BOUND and summary.overall_mape() < CPU_OVERALL_MAPE_BOUND
    assert len(summary.worst(3)) == 3 and abs(summary.worst(1)[0].error) == max(abs(r.error) for r in summary.rows)


def test_summary_rows_use_their_own_acceptance_and_parallel_share(tmp_path: Path, synthetic_summary: Path):
    rows = json.loads(synthetic_summary.read_text())
    stock = next(r for r in rows if r["mode"] == "stock_sd" and r["k"] == 3 and r["batch_size"] == 8)
    md = next(r for r in rows if r["mode"] == "minedraft_parallel" and r["k"] == 3 and r["batch_size"] == 8
              and r["comparison"] == "equal_concurrency")
    variants = [dict(stock, mean_acceptance_length=1.5), dict(stock, mean_acceptance_length=3.5),
                dict(md, parallel_step_fraction=0.0), dict(md, parallel_step_fraction=None),
                dict(md, parallel_step_fraction=0.0, minedraft_mode="parallel")]
    path = tmp_path / "variants.json"
    path.write_text(json.dumps({"rows": [stock, md, *variants]}))
    base_stock, base_md, low, high, md_stock, md_none, md_pinned = check(path).rows
    assert low.predicted < base_stock.predicted < high.predicted
    assert low.tau == 1.5 and high.tau == 3.5
    assert md_stock.predicted == pytest.approx(base_stock.predicted)  # auto, never parallel: stock SD
    assert md_none.predicted == pytest.approx(base_md.predicted)  # not reported: all parallel
    # Pinned to parallel (as the sweep runs it): the fraction counts fallbacks the model predicts itself.
    assert md_pinned.predicted == pytest.approx(base_md.predicted) and md_pinned.parallel_step_fraction == 0.0


def test_summary_meta_gives_the_workload(tmp_path: Path, synthetic_summary: Path):
    """benchmarks/sweep.py writes the prompt and output lengths to summary_meta.json beside the rows."""
    rows = json.loads(synthetic_summary.read_text())
    (tmp_path / "summary.json").write_text(json.dumps(rows))
    without = check(tmp_path / "summary.json")
    assert any("assumed (the calibration's)" in n for n in without.notes)
    (tmp_path / "summary_meta.json").write_text(json.dumps({
        "prompt_tokens": 64, "output_tokens": 32, "minedraft_mode": "parallel (MINEDRAFT_MODE=parallel)",
        "worker_env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}))
    with_meta = check(tmp_path / "summary.json")
    assert any("prompt 64, output 32" in n for n in with_meta.notes)
    assert any("in-process" in n for n in with_meta.notes)
    assert all(a.predicted != b.predicted for a, b in zip(without.rows, with_meta.rows))


def test_small_draft_is_scaled_by_flops(tmp_path: Path, synthetic_summary: Path):
    scales = draft_scales("draft_perturbed", ["draft_perturbed", "draft_small"], 56, configs=KIT_CONFIGS)
    ratio, fixed = scales["draft_small"]
    # Per token: 2 x (1 layer of 128 wide + LM head) + attention, against 4 layers of 256.
    assert 0.1 < ratio < 0.16 and fixed == ratio
    assert draft_scales("draft_perturbed", ["draft_small"], 56, configs=KIT_CONFIGS,
                        fixed_scaling="layers")["draft_small"] == (ratio, 0.25)
    assert draft_scales("draft_perturbed", ["draft_perturbed"], 56, configs=KIT_CONFIGS) == {}
    rows = [r for r in json.loads(synthetic_summary.read_text()) if r["mode"] == "stock_sd"][:3]
    path = tmp_path / "small.json"
    path.write_text(json.dumps(rows + [dict(r, draft="draft_small") for r in rows]))
    result = check(path, draft_configs=KIT_CONFIGS)
    perturbed, small = result.rows[:3], result.rows[3:]
    assert all(s.predicted > p.predicted for p, s in zip(perturbed, small))  # a cheaper drafter
    assert any("draft_small" in n and "FLOPs" in n for n in result.notes)
    assert set(result.mape(("draft",))) == {("draft_perturbed",), ("draft_small",)}  # stock SD rows only
    unscaled = check(path, draft_configs=KIT_CONFIGS, draft_fixed_scaling="none").rows[3:]
    assert all(u.predicted < s.predicted for u, s in zip(unscaled, small))


# --- the paper's headline table and the report -----------------------------------------------------------


def test_paper_comparison_rows():
    rows = compare_headlines()
    assert [c.headline for c in rows] == list(HEADLINES)
    by_label = {c.headline.label: c for c in rows}
    top = by_label["Qwen3-32B <- Qwen3-1.7B"]
    assert top.headline.reported == pytest.approx(0.7568) and top.headline.dataset == "Tough"
    for c in rows:
        assert c.verdict in ("agrees", "over-predicts", "under-predicts", "disagrees") and c.why
        assert set(c.layouts) == {"h100-paper", "h100-two-gpus", "h100-same-gpu"}
        lp = c.layouts["h100-paper"]
        assert lp.needed == c.headline.batch * c.headline.samples
        if c.headline.metric == "throughput":
            # MineDraft at 2m over stock SD at m with the drafter on its own GPU: a gain below 2x.
            assert 0.0 < c.predicted < 1.0 and lp.fits
            assert c.predicted == pytest.approx(lp.with_prefill[lp.best_k] - 1)
            assert all(lp.with_prefill[k] <= lp.steady[k] + 1e-9 for k in lp.steady)  # prefill dilutes
    assert by_label["up to, per GPU (5 GPUs vs 4)"].predicted == pytest.approx((1 + top.predicted) * 4 / 5 - 1)
    assert by_label["Qwen3-32B <- Qwen3-1.7B, E2E latency"].predicted == pytest.approx(1 / (1 + top.predicted) - 1)
    assert verdict(1.70, 1.75) == "agrees" and verdict(2.0, 1.5) == "over-predicts"


def test_report_has_the_check_and_the_headline_rows(tmp_path: Path, synthetic_summary: Path):
    text = render_report(summary=synthetic_summary)
    assert "MAPE over all rows: 5.9 %" in text  # step_overlap.json
    assert "summary format, 42 rows" in text
    table = [line for line in text.splitlines() if line.startswith("| Qwen3-32B <- Qwen3-1.7B (the paper's maximum)")]
    assert len(table) == 1 and "+75.7 %" in table[0]
    for c in compare_headlines():
        assert any(line.startswith(f"| {c.headline.label}") for line in text.splitlines()), c.headline.label
    assert "| h100-same-gpu | FP8 | 3 |" in text and "| h100-two-gpus | BF16 | 5 |" in text
    assert "**Equal concurrency**" in text and "**Paper setting**" in text
    out = tmp_path / "report.md"
    assert main(["--report", str(out), "--summary", str(synthetic_summary)]) == 0
    assert out.read_text() == text


def test_cli_check_summary_and_paper(capsys, synthetic_summary: Path):
    assert main(["--check", str(synthetic_summary)]) == 0
    out = capsys.readouterr().out
    assert "summary format, 42 rows" in out and "all rows" in out and "worst 5 rows" in out
    assert main(["--paper"]) == 0
    out = capsys.readouterr().out
    assert "Qwen3-32B <- Qwen3-1.7B" in out and "claims agree" in out
