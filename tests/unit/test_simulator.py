"""The cost model (minedraft.cost_model) and its offline analysis (analysis.simulator): limits, fallback, comparisons, calibration, CPU check, the
summary check, the paper comparison and the report (no engine)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from analysis.simulator.__main__ import main
from analysis.simulator.check import check, cpu_profiles, detect_format, draft_scales
from analysis.simulator.paper import HEADLINES, compare_headlines, verdict
from analysis.simulator.report import render_report
from minedraft.cost_model import (
    ForwardCost,
    LatencyProfile,
    ModelShape,
    Workload,
    acceptance_from_length,
    alpha_from_tau,
    blend_parallel,
    choose_mode,
    predict,
    predict_mode,
    tokens_per_verification,
)
from minedraft.cost_model.calibrate import CPU_STEP_OVERLAP_JSON, fit_step_overlap, profile_by_name
from minedraft.cost_model.model import KIT_AGREEMENT, KIT_ALPHA, mode_time_ms, verification_survival
from minedraft.cost_model.profile import H100_SXM, QWEN3_8B, QWEN3_32B, kv_capacity

# Bound on the CPU check, per (comparison, mode) and over all rows. Measured when this was written:
# 3.2-8.5 % per mode (MineDraft rows out of sample), 5.9 % over all 54 rows.
CPU_MAPE_BOUND = 15.0
CPU_OVERALL_MAPE_BOUND = 10.0


def make_profile(i: float = 0.5, **kw) -> LatencyProfile:
    values = dict(name="synthetic", target=ForwardCost(2.0, 0.1, 0.2), verify_fixed_ms=1.0,
                  draft=ForwardCost(1.5, 0.05, 0.1), propose_fixed_ms=0.5, propose_per_request_ms=0.02,
                  step_overhead_ms=1.0, step_overhead_per_request_ms=0.03, interference=i)
    values.update(kw)
    return LatencyProfile(**values)


# --- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize("tv, td", [(10.0, 4.0), (3.0, 9.0), (5.0, 5.0)])
def test_overlap_limits(tv, td):
    assert make_profile(i=1.0).t_overlap(tv, td) == pytest.approx(tv + td)  # fully serial
    assert make_profile(i=0.0).t_overlap(tv, td) == pytest.approx(max(tv, td))  # separate hardware
    assert max(tv, td) < make_profile(i=0.5).t_overlap(tv, td) < tv + td


def test_serial_lane_round_is_two_stock_half_steps():
    """i = 1: a MineDraft round is the two half batches verified and drafted one after the other."""
    p, k, n = make_profile(i=1.0), 3, 8
    ms, _ = mode_time_ms(p, "minedraft_parallel", n, k, 0.7)
    half = p.t_verify(n / 2, k) + p.t_draft(n / 2, k) + p.t_overhead(n / 2)
    assert ms == pytest.approx(2 * half)


def test_ideal_overlap_matches_the_performance_model():
    """i = 0, no engine overhead: R_paper = (Tv + Td) / max(Tv, Td) (performance-model.md)."""
    p = make_profile(i=0.0, step_overhead_ms=0.0, step_overhead_per_request_ms=0.0)
    k, n = 3, 8
    pr = predict(p, n, k, alpha=0.7, comparison="paper")
    tv, td = p.t_verify(n, k), p.t_draft(n, k)
    assert pr["minedraft_parallel"].tokens_per_s / pr["stock_sd"].tokens_per_s == pytest.approx((tv + td) / max(tv, td))


def test_overlap_pays_when_per_request_costs_dominate():
    """Both lanes proportional to the batch, separate hardware: twice stock SD at equal concurrency."""
    p = make_profile(i=0.0, target=ForwardCost(0.0, 1.0, 0.0), verify_fixed_ms=0.0,
                     draft=ForwardCost(0.0, 1.0 / 3, 0.0), propose_fixed_ms=0.0, propose_per_request_ms=0.0,
                     step_overhead_ms=0.0, step_overhead_per_request_ms=0.0)
    choice = choose_mode(p, 16, 3, alpha=0.7)
    assert choice.parallel and choice.best == "minedraft_parallel"
    assert choice.gain == pytest.approx(2.0)


# --- fallback and comparisons -------------------------------------------------------------------


@pytest.mark.parametrize("workload", [None, Workload(32, 48)])
def test_single_request_falls_back_to_stock_sd(workload):
    pr = predict(make_profile(), 1, 3, alpha=0.7, workload=workload)
    assert pr["minedraft_parallel"].fallback and pr["minedraft_parallel"].running == 1
    assert pr["minedraft_parallel"].tokens_per_s == pytest.approx(pr["stock_sd"].tokens_per_s)
    assert not choose_mode(make_profile(i=0.0), 1, 3, alpha=0.7).parallel


@pytest.mark.parametrize("workload", [None, Workload(32, 48)])
def test_paper_comparison_runs_minedraft_at_2n(workload):
    p, n, k = make_profile(), 8, 3
    paper = predict(p, n, k, alpha=0.7, comparison="paper", workload=workload)
    at_n = predict(p, n, k, alpha=0.7, workload=workload)
    at_2n = predict(p, 2 * n, k, alpha=0.7, workload=workload)
    assert paper["minedraft_parallel"].running == 2 * n and not paper["minedraft_parallel"].fallback
    assert paper["minedraft_parallel"].tokens_per_s == pytest.approx(at_2n["minedraft_parallel"].tokens_per_s)
    for mode in ("no_sd", "stock_sd"):
        assert paper[mode].running == n
        assert paper[mode].tokens_per_s == pytest.approx(at_n[mode].tokens_per_s)
    # Even at N = 1 the paper setting has two groups of one.
    assert not predict(p, 1, k, alpha=0.7, comparison="paper")["minedraft_parallel"].fallback


def test_bad_arguments():
    with pytest.raises(ValueError):
        predict(make_profile(), 4, 3, alpha=0.7, comparison="nope")
    with pytest.raises(ValueError):
        predict(make_profile(), 4, 3, tau=2.0, alpha=0.7)
    with pytest.raises(ValueError):
        alpha_from_tau(4.5, 3)


# --- acceptance ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha, k", [(0.0, 3), (0.3, 1), (0.68, 3), (0.9, 5), (1.0, 4)])
def test_tau_alpha_round_trip(alpha, k):
    tau = tokens_per_verification(alpha, k)
    assert 1.0 <= tau <= k + 1
    assert alpha_from_tau(tau, k) == pytest.approx(alpha, abs=1e-9)


def test_kit_acceptance():
    assert tokens_per_verification(KIT_ALPHA, 3) == pytest.approx(2.40)
    assert abs(KIT_ALPHA - KIT_AGREEMENT) < 0.03  # derived from tau, close to the measured agreement


def test_verification_counts():
    assert len(verification_survival(1.0, 3, 47)) == math.ceil(47 / 4)  # every draft accepted
    assert len(verification_survival(0.0, 3, 47)) == 47  # only bonus tokens
    survival = verification_survival(0.7, 3, 400)
    # Long outputs: the mean number of verifications approaches tokens / tau.
    assert sum(survival) == pytest.approx(400 / tokens_per_verification(0.7, 3), rel=0.02)


# --- calibration -----------------------------------------------------------------------------------


def synthetic_step_overlap(truth: dict[int, LatencyProfile], workload: Workload, alpha: float) -> dict:
    """A step_overlap.json generated from known profiles (one per k, differing only in i)."""
    steps, e2e = {}, []
    for k, p in truth.items():
        rows = []
        for n in (1, 2, 4, 8, 16):
            tv, td = p.t_verify(n, k), p.t_draft(n, k)
            rows.append({"verify_group": n, "draft_group": n, "samples": 30, "t_verify_alone_ms": tv,
                         "t_draft_alone_ms": td, "t_step_serial_ms": tv + td,
                         "t_step_overlap_ms": p.t_overlap(tv, td)})
        steps[str(k)] = rows
        for n in (4, 8, 16):
            pr = predict(p, n, k, alpha=alpha, workload=workload)
            e2e.append({"comparison": "equal_concurrency", "k": k, "batch_size": n, "mode": "target",
                        "output_tokens_per_s": pr["no_sd"].tokens_per_s})
            e2e.append({"comparison": "equal_concurrency", "k": k, "batch_size": n, "mode": "stock_sd",
                        "output_tokens_per_s": pr["stock_sd"].tokens_per_s})
            e2e.append({"comparison": "equal_concurrency", "k": k, "batch_size": n, "mode": "minedraft_overlap",
                        "output_tokens_per_s": pr["minedraft_parallel"].tokens_per_s})
    return {"device": "synthetic", "prompt_tokens": workload.prompt_tokens,
            "output_tokens": workload.output_tokens, "steps": steps, "e2e": e2e}


def test_calibration_recovers_known_parameters(tmp_path: Path):
    # The CPU fit gives the drafter the target's cost per prompt token (same-shape draft).
    base = make_profile(draft=ForwardCost(1.5, 0.05, 0.2))
    truth = {1: base.with_interference(0.7), 3: base.with_interference(1.2)}
    workload, alpha = Workload(32, 48), 0.66
    path = tmp_path / "step_overlap.json"
    path.write_text(json.dumps(synthetic_step_overlap(truth, workload, alpha)))

    for k, want in truth.items():
        got = fit_step_overlap(path, k, alpha=alpha)
        assert got.interference == pytest.approx(want.interference)
        for field in ("verify_fixed_ms", "propose_fixed_ms", "propose_per_request_ms", "step_overhead_ms",
                      "step_overhead_per_request_ms"):
            assert getattr(got, field) == pytest.approx(getattr(want, field), abs=1e-6), field
        for cost in ("target", "draft"):
            for field in ("fixed_ms", "per_request_ms", "per_token_ms"):
                assert getattr(getattr(got, cost), field) == pytest.approx(getattr(getattr(want, cost), field),
                                                                          abs=1e-6), (cost, field)
    # Without k the interference is fitted on every row: between the two.
    assert 0.7 < fit_step_overlap(path, alpha=alpha).interference < 1.2
    # The data were generated by the model, so the check reproduces them.
    result = check(path, tau=tokens_per_verification(alpha, 3), tau_k=3)
    assert result.overall_mape() == pytest.approx(0.0, abs=1e-6)


def test_calibration_needs_two_k(tmp_path: Path):
    data = synthetic_step_overlap({3: make_profile()}, Workload(32, 48), 0.66)
    path = tmp_path / "one_k.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError):
        fit_step_overlap(path, 3)


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


def test_cpu_profile_prefers_no_sd():
    """What the measurements say: on this CPU plain decoding beats both, parallel mode does not pay."""
    p = profile_by_name("cpu", 3)
    for n in (4, 8, 16):
        choice = choose_mode(p, n, 3, tau=2.4)
        assert not choice.parallel and choice.best == "no_sd"


# --- published GPU profiles --------------------------------------------------------------------------


def test_published_layouts():
    same, two, paper = (profile_by_name(n) for n in ("h100-same-gpu", "h100-two-gpus", "h100-paper"))
    assert 0.0 < same.interference < 1.0 and two.interference == 0.0 and paper.interference == 0.0
    assert (same.devices("minedraft_parallel"), two.devices("minedraft_parallel"), paper.devices("minedraft_parallel")) == (1, 2, 5)
    assert paper.devices("stock_sd") == 4
    # BF16 Qwen3-32B plus its drafter leave almost no KV cache on one 80 GB H100.
    assert same.max_running["stock_sd"] < 8 < paper.max_running["stock_sd"]
    fp8 = profile_by_name("h100-same-gpu", target_bytes_per_param=1)
    assert fp8.t_verify(8, 3) < same.t_verify(8, 3) and fp8.max_running["stock_sd"] > 64
    for k in (1, 3, 5):
        pr = predict(paper, 16, k, alpha=0.7, comparison="paper")
        assert 1.0 < pr["minedraft_parallel"].tokens_per_s / pr["stock_sd"].tokens_per_s < 2.0


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


@pytest.mark.parametrize("k", [1, 3, 5])
def test_acceptance_length_maps_to_alpha(k):
    for alpha in (0.0, 0.4, 0.665, 0.9):
        tau = tokens_per_verification(alpha, k)
        a, t = acceptance_from_length(tau, k)
        assert t == pytest.approx(tau) and a == pytest.approx(alpha, abs=1e-9)
    # Measurement noise at the ends is clipped to [1, k + 1].
    assert acceptance_from_length(0.97, k) == (0.0, 1.0)
    assert acceptance_from_length(k + 1.2, k) == (1.0, k + 1)
    # Not measured: the kit's acceptance.
    assert acceptance_from_length(None, k)[0] == pytest.approx(KIT_ALPHA)


def test_blend_parallel_mixes_steps():
    p, n, k, alpha = make_profile(i=0.3), 8, 3, 0.7
    par = predict_mode(p, "minedraft_parallel", n, k, alpha=alpha)
    stock = predict_mode(p, "stock_sd", n, k, alpha=alpha)
    assert predict_mode(p, "minedraft_parallel", n, k, alpha=alpha, parallel_step_fraction=0.0) == pytest.approx(stock)
    assert blend_parallel(par, stock, 1.0) == pytest.approx(par)
    # Half the steps parallel: tokens and time summed over one parallel round (two steps) and two stock steps.
    tau = tokens_per_verification(alpha, k)
    round_ms = mode_time_ms(p, "minedraft_parallel", n, k, alpha)[0]
    stock_ms = mode_time_ms(p, "stock_sd", n, k, alpha)[0]
    want = 1e3 * (n * tau + 2 * n * tau) / (round_ms + 2 * stock_ms)
    assert blend_parallel(par, stock, 0.5) == pytest.approx(want)


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


def test_profiles_for_unmeasured_k_interpolate_the_interference():
    profiles = cpu_profiles(CPU_STEP_OVERLAP_JSON, [1, 2, 3, 4, 5, 6])
    i = {k: p.interference for k, p in profiles.items()}
    assert i[1] < i[2] < i[3] < i[4] < i[5] == i[6]
    assert i[2] == pytest.approx((i[1] + i[3]) / 2)
    assert profiles[2].t_verify(8, 2) == profiles[3].t_verify(8, 2)  # only i differs


def test_draft_scale_keeps_the_proposer():
    p = make_profile()
    assert p.with_draft_scale(1.0).t_draft(8, 3) == pytest.approx(p.t_draft(8, 3))
    half = p.with_draft_scale(0.5, 1.0)
    assert half.draft.per_token_ms == p.draft.per_token_ms / 2 and half.draft.fixed_ms == p.draft.fixed_ms
    assert half.propose_fixed_ms == p.propose_fixed_ms and half.t_verify(8, 3) == p.t_verify(8, 3)
    with pytest.raises(ValueError):
        p.with_draft_scale(0.0)


def test_model_shape_from_config():
    q32 = ModelShape.from_config("Qwen3-32B", {
        "hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936})
    assert q32.params_b == pytest.approx(QWEN3_32B.params_b, rel=0.01)  # the model card: 32.8B, 31.2B
    assert q32.non_embedding_params_b == pytest.approx(QWEN3_32B.non_embedding_params_b, rel=0.01)
    assert q32.kv_bytes_per_token == QWEN3_32B.kv_bytes_per_token
    assert q32.flops_per_token(512) > q32.flops_per_token(0) == pytest.approx(2e9 * q32.read_params_b)


def test_continuous_workload_has_no_drain():
    p, k, alpha = make_profile(i=0.0), 3, 0.7
    long = Workload(8, 4000, continuous=True)
    steady = predict(p, 8, k, alpha=alpha, comparison="paper")
    cont = predict(p, 8, k, alpha=alpha, comparison="paper", workload=long)
    for mode in ("stock_sd", "minedraft_parallel"):  # long outputs: the prefill vanishes, no drain to pay
        assert cont[mode].tokens_per_s == pytest.approx(steady[mode].tokens_per_s, rel=0.01)
    short = Workload(64, 48)
    drained = predict(p, 8, k, alpha=alpha, workload=short)["minedraft_parallel"].tokens_per_s
    full = predict(p, 8, k, alpha=alpha, workload=Workload(64, 48, continuous=True))["minedraft_parallel"].tokens_per_s
    assert full > drained


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


def test_kv_capacity_puts_the_drafter_on_the_first_gpu():
    cap = kv_capacity(QWEN3_32B, QWEN3_8B, H100_SXM, 4, True, gpu_memory_utilization=0.65, tokens_per_request=384)
    assert cap["stock_sd"] < cap["minedraft_parallel"] < cap["no_sd"]
    assert kv_capacity(QWEN3_32B, QWEN3_8B, H100_SXM, 1, False, gpu_memory_utilization=0.65)["stock_sd"] == 0


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


def test_engine_overhead_is_recovered_from_rows_of_mixed_workloads():
    """fit_engine_overhead_rows: rows of two output lengths and two acceptances, generated from a
    profile with a known engine overhead, give that overhead back."""
    from minedraft.cost_model.calibrate import EngineRow, fit_engine_overhead_rows

    truth = profile_by_name("cpu", 3)
    truth = dataclasses.replace(truth, step_overhead_ms=2.5, step_overhead_per_request_ms=0.07)
    blank = dataclasses.replace(truth, step_overhead_ms=0.0, step_overhead_per_request_ms=0.0)
    rows = []
    for workload in (Workload(64, 32), Workload(64, 256)):
        for mode, alpha in (("no_sd", 0.7), ("stock_sd", 0.7), ("stock_sd", 0.5)):
            for n in (1, 4, 16):
                ms, tokens = mode_time_ms(truth, mode, n, 3, alpha, workload)
                rows.append(EngineRow(mode, 3, n, 1e3 * tokens / ms, workload, alpha))
    fitted = fit_engine_overhead_rows(blank, rows)
    assert fitted.step_overhead_ms == pytest.approx(2.5, rel=1e-6)
    assert fitted.step_overhead_per_request_ms == pytest.approx(0.07, rel=1e-6)
    with pytest.raises(ValueError, match="at least three"):
        fit_engine_overhead_rows(blank, rows[:2])


def test_engine_overhead_and_machine_speed_are_recovered():
    """fit_engine_and_speed: rows from the same engine on a machine 1.3x slower, with 2 ms + 0.05 ms per
    request of engine overhead per step, give both back."""
    from minedraft.cost_model.calibrate import EngineRow, fit_engine_and_speed

    base = dataclasses.replace(profile_by_name("cpu", 3), step_overhead_ms=0.0, step_overhead_per_request_ms=0.0)

    def slower(f: ForwardCost) -> ForwardCost:
        return ForwardCost(*(1.3 * v for v in (f.fixed_ms, f.per_request_ms, f.per_token_ms, f.floor_ms, f.host_ms)))

    truth = dataclasses.replace(base, target=slower(base.target), draft=slower(base.draft),
                                verify_fixed_ms=1.3 * base.verify_fixed_ms, propose_fixed_ms=1.3 * base.propose_fixed_ms,
                                propose_per_request_ms=1.3 * base.propose_per_request_ms,
                                step_overhead_ms=2.0, step_overhead_per_request_ms=0.05)
    rows = []
    for workload in (Workload(64, 32), Workload(64, 256)):
        for mode in ("no_sd", "stock_sd"):
            for n in (1, 4, 16):
                ms, tokens = mode_time_ms(truth, mode, n, 3, 0.7, workload)
                rows.append(EngineRow(mode, 3, n, 1e3 * tokens / ms, workload, 0.7))
    fitted = fit_engine_and_speed(base, rows)
    assert fitted.step_overhead_ms == pytest.approx(2.0, rel=1e-6)
    assert fitted.step_overhead_per_request_ms == pytest.approx(0.05, rel=1e-6)
    assert fitted.target.per_token_ms == pytest.approx(truth.target.per_token_ms, rel=1e-6)
