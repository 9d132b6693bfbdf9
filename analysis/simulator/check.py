"""Check the model against measurements: ``step_overlap.json`` or a sweep's ``summary.json``.

Two formats, told apart by content (:func:`detect_format`):

* ``step_overlap`` (``benchmarks/step_overlap.py``): an object with ``steps``
  (per-step lane medians) and ``e2e`` (tokens/s of ``target``, ``stock_sd``,
  ``minedraft_serial``, ``minedraft_overlap``). The profile is fitted on the file
  itself, one per k; the target's and stock SD's rows are in sample for the
  engine overhead, MineDraft's are out of sample. The acceptance is the kit's
  (the file does not record it).
* ``summary`` (``benchmarks/sweep.py``): a list of rows (or an object whose
  ``rows`` are that list) with ``mode`` in ``no_sd | stock_sd | minedraft_parallel |
  minedraft_auto`` (``minedraft`` with ``minedraft_mode`` in older files),
  ``comparison``, ``batch_size`` (N; MineDraft runs 2N in ``paper`` rows),
  ``total_requests``, ``k``, ``draft``, ``output_tokens_per_s``,
  ``mean_acceptance_length`` and ``parallel_step_fraction``. Every row is
  predicted with the ``cpu`` profile fitted on a calibration
  ``step_overlap.json`` (default: the committed one), so every row is out of
  sample, and with the row's own measured acceptance length.

This module reads files (and the kit's ``config.json``); the model it calls
(model.py, profile.py) does not.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analysis.calibration import fit_engine_and_speed
from analysis.cost_model.calibrate import (
    CPU_STEP_OVERLAP_JSON,
    EngineRow,
    fit_engine_overhead_rows,
    fit_step_overlap,
)
from analysis.cost_model.model import (
    KIT_TAU,
    KIT_TAU_K,
    Workload,
    acceptance_from_length,
    alpha_from_tau,
    predict,
    predict_mode,
)
from analysis.cost_model.profile import LatencyProfile, ModelShape, draft_cost_ratio

FORMATS = ("step_overlap", "summary")
# A summary row's mode (harness.modes.BENCH_MODES; ``minedraft`` in older files) -> the model's.
SUMMARY_MODES = {"no_sd": "no_sd", "stock_sd": "stock_sd", "minedraft": "minedraft_parallel",
                 "minedraft_parallel": "minedraft_parallel", "minedraft_auto": "minedraft_parallel"}
# step_overlap.json's measured modes -> the model's modes.
MEASURED_MODES = {"target": "no_sd", "stock_sd": "stock_sd", "minedraft_overlap": "minedraft_parallel",
                  "minedraft_serial": "minedraft_parallel"}
# How a cheaper drafter's fixed cost per forward scales (its batch-dependent cost scales with FLOPs):
# ``flops`` like the rest, ``layers`` with the number of decoder layers (kernel launches), ``none`` not at all.
DRAFT_FIXED_SCALINGS = ("flops", "layers", "none")
NO_DRAFT = "none"  # the draft column of rows without speculative decoding
# Where the sweep writes its summary in a source checkout.
CPU_SUMMARY_JSON = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cpu" / "summary.json"


@dataclass(frozen=True)
class CheckRow:
    comparison: str
    k: int
    batch_size: int
    mode: str  # as measured (step_overlap: target, stock_sd, minedraft_overlap, minedraft_serial)
    measured: float
    predicted: float
    draft: str = "draft_perturbed"  # NO_DRAFT for no SD
    tau: float | None = None  # acceptance length the prediction used (None: no SD)
    parallel_step_fraction: float | None = None  # as measured (MineDraft rows of a summary)

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class CheckResult:
    rows: Sequence[CheckRow]
    profiles: Mapping[int, LatencyProfile]
    alpha: float | None  # one acceptance for every row (step_overlap); None: per row (summary)
    source: str = "step_overlap"
    notes: Sequence[str] = field(default_factory=tuple)

    def mape(self, by: Sequence[str] = ("comparison", "mode")) -> dict[tuple, float]:
        """Mean absolute percentage error per group (default: per (comparison, mode))."""
        groups = defaultdict(list)
        for r in self.rows:
            groups[tuple(getattr(r, a) for a in by)].append(abs(r.error))
        return {key: 100 * sum(v) / len(v) for key, v in groups.items()}

    def overall_mape(self) -> float:
        return 100 * sum(abs(r.error) for r in self.rows) / len(self.rows)

    def worst(self, n: int = 5) -> list[CheckRow]:
        return sorted(self.rows, key=lambda r: -abs(r.error))[:n]


# --- formats ---------------------------------------------------------------------------------------


def detect_format(data: object) -> str:
    """``step_overlap`` or ``summary``, from the parsed JSON's content."""
    if isinstance(data, Mapping) and "steps" in data and "e2e" in data:
        return "step_overlap"
    rows = data.get("rows") if isinstance(data, Mapping) else data
    if isinstance(rows, list) and rows and all(isinstance(r, Mapping) for r in rows):
        if all(r.get("mode") in SUMMARY_MODES and "output_tokens_per_s" in r for r in rows):
            return "summary"
        bad = sorted({str(r.get("mode")) for r in rows if r.get("mode") not in SUMMARY_MODES})
        raise ValueError(f"summary rows need mode in {', '.join(SUMMARY_MODES)} and output_tokens_per_s "
                         f"(got modes {bad})")
    raise ValueError("not a step_overlap.json (object with steps and e2e) nor a summary.json (list of rows)")


def summary_rows(data: object) -> tuple[list[Mapping], Mapping]:
    """(rows, file-level metadata) of a summary."""
    if isinstance(data, Mapping):
        return list(data["rows"]), {k: v for k, v in data.items() if k != "rows"}
    return list(data), {}


# --- the CPU profiles ------------------------------------------------------------------------------


def cpu_profiles(calibration: str | Path, ks: Iterable[int], *,
                 alpha: float | None = None) -> dict[int, LatencyProfile]:
    """The ``cpu`` profile for each k: fitted where the calibration has step rows for k,
    otherwise with the interference interpolated linearly between the nearest fitted k
    (held constant beyond them; on the 2-core CPU it grows with k)."""
    data = json.loads(Path(calibration).read_text())
    have = sorted(int(k) for k in data["steps"])
    fitted = {k: fit_step_overlap(calibration, k, alpha=alpha) for k in have}
    out = {}
    for k in sorted(set(ks)):
        if k in fitted:
            out[k] = fitted[k]
            continue
        lo = max((h for h in have if h < k), default=None)
        hi = min((h for h in have if h > k), default=None)
        if lo is None or hi is None:
            near = fitted[hi if lo is None else lo]
            i = near.interference
        else:
            w = (k - lo) / (hi - lo)
            i = (1 - w) * fitted[lo].interference + w * fitted[hi].interference
            near = fitted[lo]
        out[k] = dataclasses.replace(near.with_interference(i), name=f"{near.name}; i interpolated for k={k}")
    return out


def kit_model_shapes(names: Iterable[str]) -> dict[str, ModelShape]:
    """Shapes of kit models (``target``, ``draft_perturbed``, ``draft_small``) from their
    ``config.json`` (builds the kit on first use; cached afterwards)."""
    from modelkit import build_kit

    kit = build_kit()
    return {n: ModelShape.from_config(n, json.loads((Path(getattr(kit, n)) / "config.json").read_text()))
            for n in names}


def draft_scales(calibrated: str, drafts: Iterable[str], context_tokens: float, *,
                 configs: Mapping[str, Mapping] | None = None,
                 fixed_scaling: str = "flops") -> dict[str, tuple[float, float]]:
    """``{draft: (ratio, fixed_ratio)}`` to turn the calibrated drafter's costs into each
    other drafter's: the ratio of their forward FLOPs per token at ``context_tokens``
    (``config.json`` shapes, from ``configs`` or the kit)."""
    if fixed_scaling not in DRAFT_FIXED_SCALINGS:
        raise ValueError(f"fixed_scaling: one of {', '.join(DRAFT_FIXED_SCALINGS)}")
    others = sorted(set(drafts) - {calibrated})
    if not others:
        return {}
    names = [calibrated, *others]
    shapes = ({n: ModelShape.from_config(n, configs[n]) for n in names} if configs is not None
              else kit_model_shapes(names))
    out = {}
    for name in others:
        ratio = draft_cost_ratio(shapes[name], shapes[calibrated], context_tokens)
        fixed = {"flops": ratio, "layers": shapes[name].layers / shapes[calibrated].layers, "none": 1.0}[fixed_scaling]
        out[name] = (ratio, fixed)
    return out


# --- the check -------------------------------------------------------------------------------------


def check(path: str | Path, *, tau: float = KIT_TAU, tau_k: int = KIT_TAU_K, calibration: str | Path | None = None,
          workload: Workload | None = None, draft_configs: Mapping[str, Mapping] | None = None,
          draft_fixed_scaling: str = "flops", fit_engine: bool = False) -> CheckResult:
    """Predict every measured row of ``path`` (either format, see the module doc).

    ``tau``/``tau_k``: the acceptance for a step_overlap file. ``calibration``,
    ``workload``, ``draft_configs`` and ``draft_fixed_scaling``: summary files only
    (see :func:`check_summary`).
    """
    data = json.loads(Path(path).read_text())
    if detect_format(data) == "step_overlap":
        return check_step_overlap(data, path, tau=tau, tau_k=tau_k)
    sibling = Path(path).with_name("summary_meta.json")  # where benchmarks/sweep.py writes the run's settings
    meta = json.loads(sibling.read_text()) if sibling.exists() else {}
    return check_summary(data, meta=meta, calibration=calibration, workload=workload, draft_configs=draft_configs,
                         draft_fixed_scaling=draft_fixed_scaling, fit_engine=fit_engine)


def check_step_overlap(data: Mapping, path: str | Path, *, tau: float = KIT_TAU,
                       tau_k: int = KIT_TAU_K) -> CheckResult:
    """Every end-to-end row of a ``step_overlap.json`` with profiles fitted on it (one per
    k: the interference is k-dependent on the CPU) and the measured workload.
    ``minedraft_serial`` rows use the serial lane (``i = 1``)."""
    alpha = alpha_from_tau(tau, tau_k)
    workload = Workload(int(data["prompt_tokens"]), int(data["output_tokens"]))
    ks = sorted({int(r["k"]) for r in data["e2e"]})
    profiles = {k: fit_step_overlap(path, k if str(k) in data["steps"] else None, alpha=alpha)
                for k in ks}
    rows = []
    for r in data["e2e"]:
        k, n, mode = int(r["k"]), int(r["batch_size"]), r["mode"]
        if mode not in MEASURED_MODES:
            continue
        p = profiles[k].with_interference(1.0) if mode == "minedraft_serial" else profiles[k]
        pred = predict(p, n, k, alpha=alpha, comparison=r["comparison"], workload=workload)
        rows.append(CheckRow(r["comparison"], k, n, mode, float(r["output_tokens_per_s"]),
                             pred[MEASURED_MODES[mode]].tokens_per_s,
                             draft=NO_DRAFT if mode == "target" else data.get("draft", "draft_perturbed"),
                             tau=None if mode == "target" else tau))
    notes = (f"acceptance: tau {tau} at k = {tau_k} (alpha {alpha:.3f}) for every row (not in the file)",)
    return CheckResult(rows, profiles, alpha, "step_overlap", notes)


def _row_workload(row: Mapping, meta: Mapping, default: Workload) -> Workload:
    """The row's lengths, else the file's (a sweep of several output lengths lists them in
    ``meta``: each row then carries its own ``output_tokens``)."""
    prompt = row.get("prompt_tokens", meta.get("prompt_tokens"))
    output = row.get("output_tokens", meta.get("output_tokens"))
    if prompt is not None and isinstance(output, int):
        return Workload(int(prompt), output)
    return default


def refit_engine(profiles: Mapping[int, LatencyProfile], rows: Sequence[Mapping], meta: Mapping,
                 default: Workload, calibrated_draft: str, speed: bool = False) -> dict[int, LatencyProfile]:
    """Each k's profile with its engine overhead fitted on the summary's no-SD rows and
    the stock-SD rows of ``calibrated_draft`` at that k (equal concurrency)."""
    out = {}
    for k, profile in profiles.items():
        fit_rows = []
        for r in rows:
            if r["comparison"] != "equal_concurrency" or r["mode"] not in ("no_sd", "stock_sd"):
                continue
            if r["mode"] == "stock_sd" and (r.get("draft") != calibrated_draft or int(r["k"]) != k):
                continue
            alpha, _ = acceptance_from_length(r.get("mean_acceptance_length"), k)
            fit_rows.append(EngineRow(r["mode"], k, int(r["batch_size"]), float(r["output_tokens_per_s"]),
                                      _row_workload(r, meta, default), alpha))
        if len(fit_rows) < 3:
            out[k] = profile
        elif speed:
            out[k] = fit_engine_and_speed(profile, fit_rows)
        else:
            out[k] = fit_engine_overhead_rows(profile, fit_rows)
    return out


def check_summary(data: object, *, meta: Mapping | None = None, calibration: str | Path | None = None,
                  workload: Workload | None = None, draft_configs: Mapping[str, Mapping] | None = None,
                  draft_fixed_scaling: str = "flops", fit_engine: bool = False) -> CheckResult:
    """Every row of a sweep's summary, out of sample.

    * Profile: ``cpu``, fitted on ``calibration`` (a ``step_overlap.json``), per k
      (interference interpolated for k it has no step rows for).
    * Acceptance: the row's ``mean_acceptance_length`` is τ at the row's k
      (``1 + accepted / drafts``); α follows (:func:`acceptance_from_length`).
    * Running requests: N, MineDraft 2N in ``paper`` rows, at most
      ``total_requests``. More requests than that run in waves: the same tokens/s.
    * Workload: ``workload``, else the row's, the file's or ``meta``'s
      (``summary_meta.json``) ``prompt_tokens``/``output_tokens``, else the
      calibration's. All requests start together and drain (as the sweep runs them).
    * MineDraft pinned to parallel mode (``minedraft_mode: parallel`` in the row
      or ``meta``, as the sweep runs it): the model's own prediction, whose drain
      and single-request fallbacks are what ``parallel_step_fraction`` counts.
      Otherwise (``auto``) a share ``parallel_step_fraction`` of its steps in
      parallel mode (:func:`~analysis.cost_model.model.blend_parallel`; missing: 1).
      The overlap lane unless the row says ``lane: serial``.
    * Drafter: a row whose ``draft`` is not the calibration's has its drafter
      forwards scaled by the two drafts' FLOPs per token (``config.json``;
      ``draft_fixed_scaling`` for the fixed part), see :func:`draft_scales`.
    * ``fit_engine``: the engine overhead per step (the layout's term: front end,
      scheduler, persistent batch, IPC) and the machine's speed on the day (one
      factor on every forward: this VM's no-SD rate moved by 25 % within an hour)
      are refitted on the summary's own equal-concurrency no-SD and stock-SD rows
      of the calibrated draft; those rows are then in sample, every MineDraft row
      and every other draft's stays out.
    """
    rows, file_meta = summary_rows(data)
    meta = {**(meta or {}), **file_meta}
    calibration = Path(calibration) if calibration else CPU_STEP_OVERLAP_JSON
    calib = json.loads(calibration.read_text())
    default = workload or _row_workload(meta, {}, Workload(int(calib["prompt_tokens"]), int(calib["output_tokens"])))
    notes = [f"profile: cpu, fitted on {calibration.name} ({calib.get('draft', 'draft_perturbed')}); "
             "every summary row is out of sample"]
    if workload is None and not any(r.get("output_tokens") for r in rows) and not meta.get("output_tokens"):
        notes.append(f"workload not in the summary: prompt {default.prompt_tokens}, output {default.output_tokens} "
                     "tokens per request assumed (the calibration's)")
    else:
        notes.append(f"workload: prompt {default.prompt_tokens}, output {default.output_tokens} tokens per request, "
                     "all requests started together")
    devices = sorted({str(r.get("device") or meta.get("device") or "") for r in rows} - {""})
    if any(not d.startswith("cpu") for d in devices):
        notes.append(f"rows measured on {', '.join(devices)}: the profile is the CPU calibration's; pass "
                     "--calibration with a step_overlap.json from that device")
    if str(meta.get("worker_env", {}).get("VLLM_ENABLE_V1_MULTIPROCESSING", "")) == "0":
        notes.append("the sweep ran vLLM in-process; the calibration's engines ran the engine core in a separate "
                     "process, so the fitted engine overhead per step may not carry over")
    pinned = str(meta.get("minedraft_mode", "")).startswith("parallel")
    ks = {int(r["k"]) for r in rows if r["mode"] != "no_sd" and r.get("k")} or {1}
    profiles = cpu_profiles(calibration, ks | {1})
    calibrated_draft = calib.get("draft", "draft_perturbed")
    context = default.prompt_tokens + default.output_tokens / 2
    scales = draft_scales(calibrated_draft, {r.get("draft") or calibrated_draft for r in rows if r["mode"] != "no_sd"},
                          context, configs=draft_configs, fixed_scaling=draft_fixed_scaling)
    for name, (ratio, fixed) in scales.items():
        notes.append(f"{name}: not calibrated; drafter forward cost = {calibrated_draft}'s x {ratio:.3f} "
                     f"(FLOPs per token from config.json at context {context:.0f}), fixed part x {fixed:.3f} "
                     f"({draft_fixed_scaling})")
    if fit_engine:
        profiles = refit_engine(profiles, rows, meta, default, calibrated_draft, speed=True)
        notes.append(f"engine overhead per step and the machine's speed (one factor on every forward) refitted "
                     f"on the summary's no-SD and stock-SD rows of {calibrated_draft} (in sample); MineDraft rows "
                     "and other drafts' rows out of sample")
    out = []
    for r in rows:
        mode = SUMMARY_MODES[r["mode"]]
        k = int(r["k"]) if mode != "no_sd" and r.get("k") else 1
        n = int(r["batch_size"])
        running = 2 * n if r["comparison"] == "paper" and mode == "minedraft_parallel" else n
        if r.get("total_requests"):
            running = min(running, int(r["total_requests"]))
        draft = NO_DRAFT if mode == "no_sd" else r.get("draft") or calibrated_draft
        p = profiles[k]
        if draft in scales:
            p = p.with_draft_scale(*scales[draft], label=draft)
        if mode == "minedraft_parallel" and r.get("lane") == "serial":
            p = p.with_interference(1.0)
        tau = None if mode == "no_sd" else r.get("mean_acceptance_length")
        alpha, tau_used = acceptance_from_length(tau, k)
        measured_fraction = r.get("parallel_step_fraction") if mode == "minedraft_parallel" else None
        row_pinned = pinned if r.get("minedraft_mode") is None else str(r["minedraft_mode"]).startswith("parallel")
        fraction = 1.0 if measured_fraction is None or row_pinned else float(measured_fraction)
        predicted = predict_mode(p, mode, running, k, alpha=alpha,
                                 workload=workload or _row_workload(r, meta, default),
                                 parallel_step_fraction=fraction)
        out.append(CheckRow(r["comparison"], k if mode != "no_sd" else 0, n, r["mode"], float(r["output_tokens_per_s"]),
                            predicted, draft=draft, tau=None if mode == "no_sd" else tau_used,
                            parallel_step_fraction=measured_fraction))
    if any(r.get("mean_acceptance_length") is None for r in rows if r["mode"] != "no_sd"):
        notes.append("rows without a mean acceptance length use the kit's (tau 2.40 at k = 3)")
    return CheckResult(out, profiles, None, "summary", tuple(notes))
