"""Calibration: fit a :class:`~analysis.cost_model.profile.LatencyProfile` to measurements.

:func:`fit_step_overlap` fits the CPU lanes and the engine overhead to a
``step_overlap.json`` (``benchmarks/step_overlap.py``); :func:`profile_by_name`
returns the named profiles (``cpu`` and the H100 layouts), the CPU one fitted on
the measurements in ``calibration/``. The fits that only check the model offline
(the GPU constants, the machine's speed on the day) are in ``analysis/calibration.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from analysis.cost_model.model import KIT_ALPHA, Workload, mode_time_ms
from analysis.cost_model.profile import ForwardCost, LatencyProfile

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
      acceptance length, see :data:`~analysis.cost_model.model.KIT_TAU`).
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
