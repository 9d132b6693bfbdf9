"""Offline calibration: fits that check the cost model against committed measurements.

Not part of the runtime (``analysis/cost_model/`` keeps what ``auto`` fits at run time):

* :func:`fit_gpu_overlap` and :func:`fit_compute_efficiency` refit the GPU profile's measured
  constants (``analysis/cost_model/profile.py``) on ``benchmarks/gpu_overlap.py``'s and
  ``benchmarks/gpu_depth.py``'s committed rows; a unit test keeps the two equal;
* :func:`fit_engine_and_speed` fits the engine overhead per step and the machine's speed on the
  day to a sweep's rows (``python -m analysis.simulator``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from analysis.cost_model.calibrate import EngineRow, fit_interference
from analysis.cost_model.model import mode_time_ms
from analysis.cost_model.profile import (
    H100_SXM,
    H200,
    LLAMA3_2_1B,
    LLAMA3_8B,
    QWEN3_1_7B,
    QWEN3_32B,
    Accelerator,
    ForwardCost,
    LatencyProfile,
    ModelShape,
)


def fit_engine_and_speed(profile: LatencyProfile, rows: Sequence[EngineRow]) -> LatencyProfile:
    """Fit the engine overhead per step (``c0 + c1·n``) and one speed factor ``s`` that
    scales every forward and proposer cost of ``profile`` (the machine's speed on the
    day: this VM's no-SD rate moved by 25 % within one hour).

    The predicted batch time is ``c0·A + c1·B + s·C``: least squares on the relative
    error of the time, as :func:`fit_engine_overhead_rows`."""
    if len(rows) < 3:
        raise ValueError("need at least three end-to-end rows of the target alone and stock SD")

    def scaled(f: ForwardCost, x: float) -> ForwardCost:
        return ForwardCost(f.fixed_ms * x, f.per_request_ms * x, f.per_token_ms * x, f.floor_ms * x, f.host_ms * x)

    def with_params(c0: float, c1: float, speed: float) -> LatencyProfile:
        return dataclasses.replace(
            profile, step_overhead_ms=c0, step_overhead_per_request_ms=c1,
            target=scaled(profile.target, speed), draft=scaled(profile.draft, speed),
            verify_fixed_ms=profile.verify_fixed_ms * speed, propose_fixed_ms=profile.propose_fixed_ms * speed,
            propose_per_request_ms=profile.propose_per_request_ms * speed)

    def batch_ms(p: LatencyProfile, r: EngineRow) -> float:
        return mode_time_ms(p, r.mode, r.batch_size, max(r.k, 1), r.alpha, r.workload)[0]

    basis = [with_params(*v) for v in ((1, 0, 0), (0, 1, 0), (0, 0, 1))]
    design, target = [], []
    for r in rows:
        measured = 1e3 * r.batch_size * r.workload.output_tokens / r.tokens_per_s
        design.append([batch_ms(b, r) / measured for b in basis])
        target.append(1.0)
    c0, c1, speed = np.linalg.lstsq(np.array(design), np.array(target), rcond=None)[0]
    return with_params(float(c0), float(c1), float(speed))


GPU_OVERLAP_PAIRS: dict[str, tuple[ModelShape, ModelShape]] = {
    "llama-3.1-8b/llama-3.2-1b": (LLAMA3_8B, LLAMA3_2_1B),
    "qwen3-32b/qwen3-1.7b": (QWEN3_32B, QWEN3_1_7B),
}
GPU_ACCELERATORS: dict[str, Accelerator] = {"NVIDIA H200": H200, "NVIDIA H100 80GB HBM3": H100_SXM}


@dataclasses.dataclass(frozen=True)
class GpuOverlapFit:
    """What ``benchmarks/gpu_overlap.py``'s rows say about the published-figure GPU profile's assumptions."""

    device: str
    interference: dict[str, float]  # by mode: eager, graph (fit_interference over the rows of that mode)
    host_ms_per_layer: float  # eager rows: the host's enqueue time per decoder layer (median over both lanes)
    bandwidth_efficiency: dict[str, float]  # target, draft: graph rows at the smallest batch (weights streamed)


def fit_gpu_overlap(path: str | Path) -> GpuOverlapFit:
    """Fit the same-GPU interference, the eager host cost per layer and the share of the
    datasheet bandwidth that weight streaming reaches, on a ``gpu_overlap.json``."""
    data = json.loads(Path(path).read_text())
    device, rows = data["meta"]["device"], data["rows"]
    gpu = GPU_ACCELERATORS[device]
    interference = {mode: fit_interference([
        {"t_verify_alone_ms": r["t_verify_ms"], "t_draft_alone_ms": r["t_draft_ms"],
         "t_step_overlap_ms": r["t_overlapped_ms"]} for r in rows if r["mode"] == mode])
        for mode in sorted({r["mode"] for r in rows})}
    host = [ms / shape.layers / (r["k"] if lane == "draft" else 1)
            for r in rows if r["mode"] == "eager"
            for lane, shape, ms in zip(("verify", "draft"), GPU_OVERLAP_PAIRS[r["pair"]],
                                       (r["host_verify_ms"], r["host_draft_ms"]))]
    graph = [r for r in rows if r["mode"] == "graph"]
    smallest = min(graph, key=lambda r: (r["batch"], r["k"]))
    target, draft = GPU_OVERLAP_PAIRS[smallest["pair"]]
    context = data["meta"]["context"]

    def efficiency(shape: ModelShape, ms: float, forwards: int) -> float:
        nbytes = shape.read_params_b * 1e9 * 2 + smallest["batch"] * context * shape.kv_bytes_per_token
        return forwards * nbytes / (ms * gpu.bandwidth_tb_s * 1e9)

    return GpuOverlapFit(
        device=device, interference=interference, host_ms_per_layer=float(np.median(host)),
        bandwidth_efficiency={"target": efficiency(target, smallest["t_verify_ms"], 1),
                              "draft": efficiency(draft, smallest["t_draft_ms"], smallest["k"])})


def fit_compute_efficiency(path: str | Path) -> dict[str, float]:
    """The share of the dense BF16 peak that the profile's verification model needs to match
    ``benchmarks/gpu_depth.py``'s graph rows (the target's forward over B x (d + 1) tokens, B up
    to 128, d up to 5): ``efficiency`` minimises the rms relative error of
    ``per_request·B + max(floor, per_token·B·(d + 1))`` over those rows, the floor and the KV reads
    at the bandwidth share of each pair's one-request, one-token row; ``rms_error`` is its error,
    ``rms_error_at_0_60`` that of the 0.60 the profile assumed before it was measured."""
    data = json.loads(Path(path).read_text())
    gpu, context = GPU_ACCELERATORS[data["meta"]["device"]], data["meta"]["context"]
    rows = [r for r in data["rows"] if r["mode"] == "graph"]
    cases = []  # (weights ms at full bandwidth, KV ms per request at full bandwidth, FLOPs, bandwidth share, ms)
    for pair in sorted({r["pair"] for r in rows}):
        target = GPU_OVERLAP_PAIRS[pair][0]
        weights_ms = target.read_params_b * 1e9 * 2 / (gpu.bandwidth_tb_s * 1e9)
        kv_ms = context * target.kv_bytes_per_token / (gpu.bandwidth_tb_s * 1e9)
        series = [r for r in rows if r["pair"] == pair]
        smallest = min(series, key=lambda r: r["batch"])
        share = (weights_ms + smallest["batch"] * kv_ms) / smallest["verify_ms"][0]
        cases += [(weights_ms, r["batch"] * kv_ms, 2 * target.read_params_b * 1e9 * r["batch"] * (d + 1), share, ms)
                  for r in series for d, ms in enumerate(r["verify_ms"])]

    def rms_error(efficiency: float) -> float:
        flops_per_ms = gpu.bf16_tflops * efficiency * 1e9
        return float(np.sqrt(np.mean([((kv + max(w, flops * share / flops_per_ms)) / share - ms) ** 2 / ms ** 2
                                      for w, kv, flops, share, ms in cases])))

    best = min(np.arange(0.20, 0.81, 0.01), key=rms_error)
    return {"efficiency": round(float(best), 2), "rms_error": rms_error(best), "rms_error_at_0_60": rms_error(0.60)}
