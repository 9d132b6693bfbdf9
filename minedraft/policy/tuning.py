"""Every constant the speculation policy decides with, in one table: its value, why, and what set it.

One frozen :class:`Tuning` is handed to every part of the policy; tests and the replay pass their own
(``dataclasses.replace(TUNING, margin=0.05)``). "Replay grid": ``python -m analysis.depth_replay --grid``
(every recorded run of the load that moves, on five modelled machines: the mean of the policy over the best
fixed depth); ``--sensitivity`` replays it with each constant halved and doubled. "Real pair": the benchmarks
on Qwen2.5-Coder-1.5B / 0.5B (benchmarks/README.md, where each rule's measured loss is told). The log's rate
limit (``depth.REPORT_EVERY_S``) decides nothing and stays with its log line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


def _constant(value: float, why: str, set_by: str):
    return field(default=value, metadata={"why": why, "set_by": set_by})


@dataclass(frozen=True)
class Tuning:
    margin: float = _constant(
        0.03, "the smallest predicted gain the policy acts on (a depth, parallel steps, a first measurement, a "
        "depth the weight bound leaves), and the share of time re-checks may take: what noise may cost it",
        "the design (26d2cb0); replay grid")
    prior_trials: float = _constant(
        2, "trials a rate's prior weighs (the batch's: one of two accepted), so one rejected draft does not "
        "read as a drafter that never helps; a request measured first stands at its prior this many steps",
        "replay grid; real pair, mixed batches")
    batch_memory: float = _constant(
        32, "trials that discount the batch's older ones by 1/e: a step of 32 requests all but replaces what "
        "was known, a step of one moves it a little", "replay grid")
    request_memory: float = _constant(
        8, "a request's steps (verified, or all its drafts cut) that discount its older ones by 1/e; arrivals "
        "that discount a finished request's share of a new request's prior", "real pair, mixed batches")
    stale_s: float = _constant(
        1.0, "acceptance unmeasured for longer keeps what it knew as prior_trials trials (one rejection after a "
        "gap read 0.35 where 0.93 was measured); no re-check comes sooner", "real pair, load that moves")
    cost_stale_s: float = _constant(
        30.0, "where no step near a load drafted for longer, what drafting cost there no longer rules a re-check "
        "out: its ceiling prices drafting at the draft's weights, and it measures drafting afresh (steps measured "
        "in a slow spell of the VM held one request at depth 0 for good, 0.67x stock SD)",
        "real pair, float32 trace (2026-12-03)")
    warm_up_steps: int = _constant(
        8, "a fresh engine's first timed steps, whose seconds are its start's and not fitted: a first step at "
        "each batch shape builds oneDNN kernels (about 1 ms a weight matrix), and the demo's first steps ran at "
        "2-8x their later cost; fitted, they held its single request at depth 0 (0.69x the best static choice)",
        "make demo (2026-12-04)")
    telling_trials: int = _constant(
        8, "trials that tell a rate from its prior: a re-check drafts for this many requests' steps; a stale "
        "deeper position keeps its own rate only if measured on this many", "real pair, (2, code) after prose")
    draft_cost_prior: float = _constant(
        0.1, "a draft forward's cost over the target's where the draft's weights are not known (EAGLE, MTP, "
        "n-gram): the step-cost model's prior until steps measure it", "the design (26d2cb0)")
    cost_memory: float = _constant(
        0.8, "a step-cost cell's older steps count this much less with each new one (about five kept)",
        "the design (26d2cb0); replay grid")
    neighbour_weight: float = _constant(
        0.25, "a step-cost cell one batch bucket away counts this much, two away its square: the cost per "
        "token bends between one request and 32", "the design (26d2cb0); replay grid")
    cost_prior_steps: float = _constant(
        1.0, "steps each soft prior of the step-cost model weighs as (what drafting at all costs: a tenth of "
        "that, so one depth-0 step overrides it)", "kit EAGLE-3 (depth 1 lost 15 % without that term)")
    stall_cap: float = _constant(
        2.0, "a step counts at most this many times its prediction: a VM stall of 100 ms beside 5 ms steps is "
        "not the depth's cost", "replay grid with stalls")
    refit_s: float = _constant(
        0.05, "step seconds observed before the step-cost fits are solved again (a solve costs about 0.1 ms "
        "alone, 0.25 ms in an engine process right after a forward: 4 % of a kit step if every step, nothing "
        "beside a real model's; 0.2 s read 1.033 on the replay grid)", "kit EAGLE-3, N = 8 (b16ed15); kit, N = 32 "
        "(2026-12-06)")
    trial_steps: int = _constant(
        16, "parallel steps a trial of overlapping runs at one load, and plain-SD steps measured there before "
        "it (a drafter on hardware of its own)", "the design (41c44a9)")
    trial_every: int = _constant(
        400, "decode steps at one load before parallel steps are tried there again", "the design (41c44a9)")
    trial_early_loss: float = _constant(
        0.8, "a trial whose parallel steps, after a quarter of its steps, ran under this share of plain SD's rate "
        "ends there, lost: a drafter that drafts ahead overlaps plain SD's steps already, and halving the batch "
        "verified ran at 0.7x (a whole trial cost a batch of 8 a third of its rate)",
        "real pair, drafter on core 1, N = 8 (2026-12-06)")


TUNING = Tuning()


def markdown_table(tuning: Tuning = TUNING) -> str:
    """The table as benchmarks/README.md shows it."""
    rows = ["| constant | value | why | set by |", "| --- | --- | --- | --- |"]
    rows += [f"| `{f.name}` | {getattr(tuning, f.name):g} | {f.metadata['why']} | {f.metadata['set_by']} |"
             for f in dataclasses.fields(tuning)]
    return "\n".join(rows)
