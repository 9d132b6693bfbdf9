"""The cost model (minedraft.simulator): limits, fallback, comparisons, calibration, CPU check (no engine)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from minedraft.simulator import (
    ForwardCost,
    LatencyProfile,
    Workload,
    alpha_from_tau,
    check,
    choose_mode,
    predict,
    profile_by_name,
    tokens_per_verification,
)
from minedraft.simulator.__main__ import main
from minedraft.simulator.model import KIT_AGREEMENT, KIT_ALPHA, mode_time_ms, verification_survival
from minedraft.simulator.profile import CPU_STEP_OVERLAP_JSON

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
    ms, _ = mode_time_ms(p, "minedraft", n, k, 0.7)
    half = p.t_verify(n / 2, k) + p.t_draft(n / 2, k) + p.t_overhead(n / 2)
    assert ms == pytest.approx(2 * half)


def test_ideal_overlap_matches_the_performance_model():
    """i = 0, no engine overhead: R_paper = (Tv + Td) / max(Tv, Td) (performance-model.md)."""
    p = make_profile(i=0.0, step_overhead_ms=0.0, step_overhead_per_request_ms=0.0)
    k, n = 3, 8
    pr = predict(p, n, k, alpha=0.7, comparison="paper")
    tv, td = p.t_verify(n, k), p.t_draft(n, k)
    assert pr["minedraft"].tokens_per_s / pr["stock_sd"].tokens_per_s == pytest.approx((tv + td) / max(tv, td))


def test_overlap_pays_when_per_request_costs_dominate():
    """Both lanes proportional to the batch, separate hardware: twice stock SD at equal concurrency."""
    p = make_profile(i=0.0, target=ForwardCost(0.0, 1.0, 0.0), verify_fixed_ms=0.0,
                     draft=ForwardCost(0.0, 1.0 / 3, 0.0), propose_fixed_ms=0.0, propose_per_request_ms=0.0,
                     step_overhead_ms=0.0, step_overhead_per_request_ms=0.0)
    choice = choose_mode(p, 16, 3, alpha=0.7)
    assert choice.parallel and choice.best == "minedraft"
    assert choice.gain == pytest.approx(2.0)


# --- fallback and comparisons -------------------------------------------------------------------


@pytest.mark.parametrize("workload", [None, Workload(32, 48)])
def test_single_request_falls_back_to_stock_sd(workload):
    pr = predict(make_profile(), 1, 3, alpha=0.7, workload=workload)
    assert pr["minedraft"].fallback and pr["minedraft"].running == 1
    assert pr["minedraft"].tokens_per_s == pytest.approx(pr["stock_sd"].tokens_per_s)
    assert not choose_mode(make_profile(i=0.0), 1, 3, alpha=0.7).parallel


@pytest.mark.parametrize("workload", [None, Workload(32, 48)])
def test_paper_comparison_runs_minedraft_at_2n(workload):
    p, n, k = make_profile(), 8, 3
    paper = predict(p, n, k, alpha=0.7, comparison="paper", workload=workload)
    at_n = predict(p, n, k, alpha=0.7, workload=workload)
    at_2n = predict(p, 2 * n, k, alpha=0.7, workload=workload)
    assert paper["minedraft"].running == 2 * n and not paper["minedraft"].fallback
    assert paper["minedraft"].tokens_per_s == pytest.approx(at_2n["minedraft"].tokens_per_s)
    for mode in ("no_sd", "stock_sd"):
        assert paper[mode].running == n
        assert paper[mode].tokens_per_s == pytest.approx(at_n[mode].tokens_per_s)
    # Even at N = 1 the paper setting has two groups of one.
    assert not predict(p, 1, k, alpha=0.7, comparison="paper")["minedraft"].fallback


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
                        "output_tokens_per_s": pr["minedraft"].tokens_per_s})
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
        got = LatencyProfile.from_step_overlap_json(path, k, alpha=alpha)
        assert got.interference == pytest.approx(want.interference)
        for field in ("verify_fixed_ms", "propose_fixed_ms", "propose_per_request_ms", "step_overhead_ms",
                      "step_overhead_per_request_ms"):
            assert getattr(got, field) == pytest.approx(getattr(want, field), abs=1e-6), field
        for cost in ("target", "draft"):
            for field in ("fixed_ms", "per_request_ms", "per_token_ms"):
                assert getattr(getattr(got, cost), field) == pytest.approx(getattr(getattr(want, cost), field),
                                                                          abs=1e-6), (cost, field)
    # Without k the interference is fitted on every row: between the two.
    assert 0.7 < LatencyProfile.from_step_overlap_json(path, alpha=alpha).interference < 1.2
    # The data were generated by the model, so the check reproduces them.
    result = check(path, tau=tokens_per_verification(alpha, 3), tau_k=3)
    assert result.overall_mape() == pytest.approx(0.0, abs=1e-6)


def test_calibration_needs_two_k(tmp_path: Path):
    data = synthetic_step_overlap({3: make_profile()}, Workload(32, 48), 0.66)
    path = tmp_path / "one_k.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError):
        LatencyProfile.from_step_overlap_json(path, 3)


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
    assert (same.devices("minedraft"), two.devices("minedraft"), paper.devices("minedraft")) == (1, 2, 5)
    assert paper.devices("stock_sd") == 4
    # BF16 Qwen3-32B plus its drafter leave almost no KV cache on one 80 GB H100.
    assert same.max_running["stock_sd"] < 8 < paper.max_running["stock_sd"]
    fp8 = profile_by_name("h100-same-gpu", target_bytes_per_param=1)
    assert fp8.t_verify(8, 3) < same.t_verify(8, 3) and fp8.max_running["stock_sd"] > 64
    for k in (1, 3, 5):
        pr = predict(paper, 16, k, alpha=0.7, comparison="paper")
        assert 1.0 < pr["minedraft"].tokens_per_s / pr["stock_sd"].tokens_per_s < 2.0


def test_cli(capsys):
    assert main(["--profile", "cpu", "--k", "3", "--tau", "2.4", "--batch", "1", "4"]) == 0
    out = capsys.readouterr().out
    assert "fallback" in out and "paper setting" in out and "equal concurrency" in out
    assert main(["--profile", "h100-paper", "--k", "3", "--alpha", "0.7", "--batch", "16",
                 "--workload", "384", "256"]) == 0
    assert main(["--check", str(CPU_STEP_OVERLAP_JSON)]) == 0
    assert "mean absolute percentage error" in capsys.readouterr().out
