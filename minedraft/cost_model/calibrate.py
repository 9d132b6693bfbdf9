"""Calibration: fit a :class:`~minedraft.cost_model.profile.LatencyProfile` to measurements.

:func:`fit_step_overlap` fits the CPU lanes and the engine overhead to a
``step_overlap.json`` (``benchmarks/step_overlap.py``); :func:`fit_gpu_overlap` and
:func:`fit_compute_efficiency` check the GPU profile's measured constants against
``benchmarks/gpu_overlap.py`` and ``benchmarks/gpu_depth.py``; :func:`profile_by_name`
returns the named profiles (``cpu`` and the H100 layouts). The CPU measurements
ship in the package (``calibration/``): ``auto``'s prior
(``minedraft/scheduling/mode_prior.py``) fits on them at run time.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from minedraft.cost_model.model import KIT_ALPHA, Workload, mode_time_ms
from minedraft.cost_model.profile import (
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

# The CPU measurements (``make bench-steps`` writes them here; calibration/README.md).
CPU_STEP_OVERLAP_JSON = Path(__file__).resolve().parent / "calibration" / "cpu_step_overlap.json"


def fit_step_overlap(path: str | Path = CPU_STEP_OVERLAP_JSON, k: int | None = None, *,
                     alpha: float | None = None) -> LatencyProfile:
    """Calibrate on ``benchmarks/step_overlap.py``'s output.

    * Lane costs, by least squares over the per-step medians of all k
      (``steps``): verification ``a + b·n + c·n·(1+k)`` from
      ``t_verify_alone_ms``; drafting ``e + f·n + k·(g + h·n)`` from
      ``t_draft_alone_ms``.
    * Interference ``i``, by least squares of ``T_overlap - max = i·min`` on
      the rows of ``k`` (all rows when ``k`` is None): on the 2-core CPU it
      grows with k (about 0.8 at k = 1, 1.0 at k = 3, 1.4 at k = 5), so a
      profile is calibrated for one k.
    * Engine overhead per step (``c0 + c1·n``) and the plain-decode share of
      the target's fixed cost: the step table is timed inside the worker
      and never sees them, so they are fitted on the file's end-to-end
      rows of the target alone and of stock SD (equal concurrency), with
      acceptance ``alpha`` (default: derived from the kit's measured mean
      acceptance length, see :data:`~minedraft.cost_model.model.KIT_TAU`).
      MineDraft's rows are never fitted: checking them is out of sample.
    """
    data = json.loads(Path(path).read_text())
    steps = {int(kk): rows for kk, rows in data["steps"].items()}
    lanes = fit_lanes(steps)
    if k is not None and k not in steps:
        raise ValueError(f"no step rows for k={k} in {path} (has k={sorted(steps)})")
    chosen = steps[k] if k is not None else [r for rows in steps.values() for r in rows]
    profile = LatencyProfile(
        name=f"cpu (fitted: {Path(path).name}" + (f", k={k})" if k is not None else ")"),
        target=ForwardCost(lanes["verify_fixed"], lanes["verify_per_request"], lanes["verify_per_token"]),
        verify_fixed_ms=0.0,
        # The kit's perturbed draft has the target's shape: same cost per prompt token.
        draft=ForwardCost(lanes["draft_step_fixed"],
                          max(lanes["draft_step_per_request"] - lanes["verify_per_token"], 0.0),
                          min(lanes["verify_per_token"], lanes["draft_step_per_request"])),
        propose_fixed_ms=lanes["propose_fixed"],
        propose_per_request_ms=lanes["propose_per_request"],
        step_overhead_ms=0.0,
        step_overhead_per_request_ms=0.0,
        interference=fit_interference(chosen),
        notes=data.get("device", ""),
    )
    if data.get("e2e"):
        workload = Workload(int(data["prompt_tokens"]), int(data["output_tokens"]))
        profile = fit_engine_overhead(profile, data["e2e"], KIT_ALPHA if alpha is None else alpha, workload)
    return profile


def fit_engine_overhead(profile: LatencyProfile, e2e: Sequence[Mapping], alpha: float,
                        workload: Workload) -> LatencyProfile:
    """Fit ``step_overhead_ms``, ``step_overhead_per_request_ms`` and the plain-decode
    fixed cost (the rest of the verification's fixed cost is ``verify_fixed_ms``) on
    the end-to-end rows of the target alone and of stock SD (equal concurrency), all
    of one workload and acceptance. MineDraft rows are left out."""
    rows = {(r["mode"], r["k"] if r["mode"] != "target" else 0, r["batch_size"]): r for r in e2e
            if r["comparison"] == "equal_concurrency" and r["mode"] in ("target", "stock_sd")}
    return fit_engine_overhead_rows(profile, [
        EngineRow("no_sd" if mode == "target" else "stock_sd", k, n, r["output_tokens_per_s"], workload, alpha)
        for (mode, k, n), r in rows.items()])


@dataclasses.dataclass(frozen=True)
class EngineRow:
    """One measured batch of no SD or stock SD: what the engine-overhead fit needs."""

    mode: str  # no_sd or stock_sd
    k: int
    batch_size: int
    tokens_per_s: float
    workload: Workload
    alpha: float


def fit_engine_overhead_rows(profile: LatencyProfile, rows: Sequence[EngineRow]) -> LatencyProfile:
    """:func:`fit_engine_overhead` over rows of any workload and acceptance.

    The predicted batch time is linear in the three parameters, so this is least
    squares on the relative error of the time."""
    if len(rows) < 3:
        raise ValueError("need at least three end-to-end rows of the target alone and stock SD")
    verify_fixed_total = profile.target.fixed_ms + profile.verify_fixed_ms

    def with_params(c0: float, c1: float, plain_fixed: float) -> LatencyProfile:
        return dataclasses.replace(
            profile, step_overhead_ms=c0, step_overhead_per_request_ms=c1,
            target=dataclasses.replace(profile.target, fixed_ms=plain_fixed),
            verify_fixed_ms=verify_fixed_total - plain_fixed)

    def batch_ms(p: LatencyProfile, r: EngineRow) -> float:
        return mode_time_ms(p, r.mode, r.batch_size, max(r.k, 1), r.alpha, r.workload)[0]

    basis = [with_params(*v) for v in ((0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1))]
    design, target_ms = [], []
    for r in rows:
        measured = 1e3 * r.batch_size * r.workload.output_tokens / r.tokens_per_s
        base = batch_ms(basis[0], r)
        design.append([(batch_ms(b, r) - base) / measured for b in basis[1:]])
        target_ms.append((measured - base) / measured)
    c0, c1, plain_fixed = np.linalg.lstsq(np.array(design), np.array(target_ms), rcond=None)[0]
    return with_params(float(c0), float(c1), float(plain_fixed))


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


def _lstsq(rows: Sequence[Sequence[float]], y: Sequence[float]) -> np.ndarray:
    return np.linalg.lstsq(np.asarray(rows, dtype=float), np.asarray(y, dtype=float), rcond=None)[0]


def fit_lanes(steps: Mapping[int, Sequence[Mapping]]) -> dict[str, float]:
    """Least-squares lane costs from per-step rows (``step_overlap.json``'s ``steps``)."""
    rows = [(k, r) for k, rs in steps.items() for r in rs]
    if len({(r["verify_group"], k) for k, r in rows}) < 4 or len(steps) < 2:
        raise ValueError("need step rows for at least two k and four (k, group) pairs to separate the costs")
    a, b, c = _lstsq([[1, r["verify_group"], r["verify_group"] * (1 + k)] for k, r in rows],
                     [r["t_verify_alone_ms"] for k, r in rows])
    e, f, g, h = _lstsq([[1, r["draft_group"], k, k * r["draft_group"]] for k, r in rows],
                        [r["t_draft_alone_ms"] for k, r in rows])
    values = {"verify_fixed": a, "verify_per_request": b, "verify_per_token": c, "propose_fixed": e,
              "propose_per_request": f, "draft_step_fixed": g, "draft_step_per_request": h}
    return {name: float(v) for name, v in values.items()}


def fit_interference(rows: Sequence[Mapping]) -> float:
    """``i`` minimising ``Σ (T_overlap - max - i·min)²`` over the step rows (never below 0)."""
    x = np.array([min(r["t_verify_alone_ms"], r["t_draft_alone_ms"]) for r in rows])
    y = np.array([r["t_step_overlap_ms"] - max(r["t_verify_alone_ms"], r["t_draft_alone_ms"]) for r in rows])
    return max(0.0, float(x @ y / (x @ x)))


# --- GPU: benchmarks/gpu_overlap.py ------------------------------------------------------------

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


PROFILE_NAMES = ("cpu", "h100-same-gpu", "h100-two-gpus", "h100-paper")


def profile_by_name(name: str, k: int | None = None, *, calibration: str | Path | None = None,
                    target_bytes_per_param: float = 2) -> LatencyProfile:
    """``cpu`` (fitted on the committed CPU measurements for ``k``), or an H100 layout:
    ``h100-same-gpu`` (target and drafter on one H100), ``h100-two-gpus`` (drafter on a
    second H100, i = 0), ``h100-paper`` (target TP=4 + drafter on a fifth H100, the
    paper's layout). ``target_bytes_per_param`` 1: FP8 target, 0.5: INT4 weights (H100 profiles)."""
    if name == "cpu":
        path = Path(calibration) if calibration else CPU_STEP_OVERLAP_JSON
        steps = json.loads(path.read_text())["steps"]
        return fit_step_overlap(path, k if k is not None and str(k) in steps else None)
    layouts = {"h100-same-gpu": {}, "h100-two-gpus": {"draft_on_own_device": True},
               "h100-paper": {"target_devices": 4, "draft_on_own_device": True}}
    if name in layouts:
        return LatencyProfile.from_published(target_bytes_per_param=target_bytes_per_param, **layouts[name])
    raise ValueError(f"unknown profile {name!r}: expected one of {', '.join(PROFILE_NAMES)}")
