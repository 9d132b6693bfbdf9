"""analysis/cost_model/model.py: limits, fallback and comparisons, acceptance, blended and
continuous workloads (no engine)."""

from __future__ import annotations

import math

import pytest
from synthetic_profiles import make_profile

from analysis.cost_model import (
    ForwardCost,
    Workload,
    acceptance_from_length,
    alpha_from_tau,
    blend_parallel,
    choose_mode,
    predict,
    predict_mode,
    tokens_per_verification,
)
from analysis.cost_model.model import KIT_AGREEMENT, KIT_ALPHA, mode_time_ms, verification_survival

# --- limits -------------------------------------------------------------------------------------


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
