"""analysis/calibration.py: the offline fits reproduce the constants the cost model ships with, and
recover a known engine overhead and machine speed (no engine)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from analysis.calibration import fit_compute_efficiency, fit_engine_and_speed, fit_gpu_overlap
from analysis.cost_model import ForwardCost, Workload, profile
from analysis.cost_model.calibrate import EngineRow, profile_by_name
from analysis.cost_model.model import mode_time_ms


def test_measured_gpu_constants_agree_with_the_committed_h100_run():
    """The published-figure profile's measured constants are the fit of benchmarks/gpu_overlap.py's
    committed rows: rerunning the benchmark without updating them fails here."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "nvidia-h100-80gb-hbm3" / "gpu_overlap.json"
    fit = fit_gpu_overlap(path)
    assert fit.bandwidth_efficiency["target"] == pytest.approx(profile.BANDWIDTH_EFFICIENCY, abs=0.005)
    assert fit.bandwidth_efficiency["draft"] == pytest.approx(profile.DRAFT_BANDWIDTH_EFFICIENCY, abs=0.005)
    assert fit.host_ms_per_layer == pytest.approx(profile.EAGER_HOST_MS_PER_LAYER, abs=0.005)
    assert fit.interference["eager"] == pytest.approx(profile.SAME_GPU_INTERFERENCE, abs=0.005)
    assert fit.interference["graph"] == pytest.approx(profile.SAME_GPU_INTERFERENCE_GRAPHS, abs=0.005)
    # Sharing one GPU costs, on both GPUs measured: neither mode overlaps as separate devices would (i = 0).
    h200 = path.parents[1] / "nvidia-h200"
    for gpu_fit in (fit, *(fit_gpu_overlap(h200 / name) for name in ("gpu_overlap.json", "gpu_overlap_repeat.json"))):
        assert 0.3 < gpu_fit.interference["graph"] < gpu_fit.interference["eager"] <= 1.1


def test_the_h200s_two_runs_of_the_full_grid_fit_the_same_graph_constants():
    """The graph rows are reproducible: the H200's two runs of the whole grid, minutes apart, fit one
    graph interference and one bandwidth share per model (the eager rows, bound by the host's
    launches, are not: 0.79 and 0.98), so a constant fitted on one run stands for the GPU."""
    h200 = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "nvidia-h200"
    first, repeat = (fit_gpu_overlap(h200 / name) for name in ("gpu_overlap.json", "gpu_overlap_repeat.json"))
    assert first.interference["graph"] == pytest.approx(repeat.interference["graph"], abs=0.02)
    for model in ("target", "draft"):
        assert first.bandwidth_efficiency[model] == pytest.approx(repeat.bandwidth_efficiency[model], abs=0.01)


def test_compute_efficiency_is_the_fit_of_the_committed_depth_run():
    """COMPUTE_EFFICIENCY is what benchmarks/gpu_depth.py's committed H200 rows fit, and it fits
    them better than the 0.60 assumed before they were measured."""
    results = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "nvidia-h200"
    fit = fit_compute_efficiency(results / "gpu_depth.json")
    assert fit["efficiency"] == pytest.approx(profile.COMPUTE_EFFICIENCY, abs=0.005)
    assert fit["rms_error"] < fit["rms_error_at_0_60"]
    assert fit_compute_efficiency(results / "gpu_depth_iters20.json")["efficiency"] == pytest.approx(
        fit["efficiency"], abs=0.02)
    # The H100 (the profiles' GPU; the Llama pair only) has the H200's compute and fits the same.
    h100 = results.parent / "nvidia-h100-80gb-hbm3" / "gpu_depth.json"
    assert fit_compute_efficiency(h100)["efficiency"] == pytest.approx(fit["efficiency"], abs=0.02)


def test_engine_overhead_and_machine_speed_are_recovered():
    """fit_engine_and_speed: rows from the same engine on a machine 1.3x slower, with 2 ms + 0.05 ms per
    request of engine overhead per step, give both back."""
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
