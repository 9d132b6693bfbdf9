"""Replay a measured shifting workload through the speculation policy, step by step, without an engine.

    python -m analysis.depth_replay                 # benchmarks/results/cpu/shifting.json
    python -m analysis.depth_replay --phases        # and each phase's depths beside the best per phase
    python -m analysis.depth_replay --grid          # every recorded run x five machines (below), and the mean
    python -m analysis.depth_replay --step-level    # the step's depth alone (speculation_depth: step)
    python -m analysis.depth_replay --sensitivity   # the grid's mean with each constant of the policy halved, doubled

``benchmarks/shifting.py`` runs one workload whose load and text move through the target alone, stock
SD at k = 1 and at k = K and MineDraft's ``auto``. On the 2-core VMs that run it a whole-engine ratio
resolves about +-10 %, so a change of the policy's rules cannot be judged from one run. This replays
the same workload through ``SpeculationPolicy`` itself (its ``plan`` and ``observe``, the scheduler's
interface), fed from that run's measurements:

* a step at depth d and N requests lasts what the static engines measured there (the step time of
  depth 2 when only 1 and K were measured: their mean), less a token's cost (the slope of depth-0 steps over
  N) for each draft the policy cut, each step jittered by ``--noise``;
* each request gains 1 + a_d tokens a step, a_d the accepted drafts of a geometric acceptance whose
  rate per text is solved from stock SD at K's own counters (vLLM's accepted tokens per draft);
* every phase is new requests (their arrival is the phase), as in the benchmark.

* the machine (``Machine``, off unless asked): ``--stalls P SECONDS`` adds a stall of SECONDS to a step with
  probability P; ``--swings`` multiplies step times by a speed drawn from 0.75x-1.3x for 1-3 s at a time
  (this project's VMs move by 30 % within seconds).

The policy sees what the scheduler shows it: each step's requests (each holding K drafts, verifying the first
``depth`` of those its plan keeps) and is told what the scheduler tells it: the step's tokens and duration,
and each request's drafts verified and accepted (drawn from the geometric acceptance).

What it leaves out: the draft's catch-up after depth 0, MineDraft's own step cost at depth 0, and the
one-step lag between drafting and verification (so a request's drafts cut by its own acceptance are cut
from K, which leaves the cut's threshold a little low). So it measures the rules' choices, not the engine:
``auto`` against each fixed depth and against the best depth of each phase in hindsight (the oracle),
medians over ``--seeds`` seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from minedraft.policy import RequestView, SpeculationPolicy, StepResult, StepView, VerifiedDrafts
from minedraft.policy.acceptance import geometric_tokens
from minedraft.policy.tuning import TUNING, Tuning

SHIFTING_JSON = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cpu" / "shifting.json"
STATIC_DEPTHS = {"no_sd": 0, "stock_sd_k1": 1}  # and stock_sd_k<K>: K
OUTPUT_TOKENS = 128
EARLIER_RUNS = SHIFTING_JSON.parent / "history" / "shifting"


@dataclass(frozen=True)
class Phase:
    index: int
    text: str
    requests: int


@dataclass(frozen=True)
class Machine:
    """What the machine adds to a step's time beyond per-step jitter."""

    stall_p: float = 0.0  # a step stalls with this probability ...
    stall_s: float = 0.0  # ... for this many seconds
    swings: bool = False  # the machine's speed moves between 0.75x and 1.3x, 1-3 s at a time

    def slowdown(self, rng: random.Random):
        """Step seconds at time ``elapsed`` -> as this machine stretches them (one generator per replay)."""
        speed, until = 1.0, 0.0
        seconds, elapsed = yield 0.0
        while True:
            if self.swings and elapsed >= until:
                speed, until = rng.uniform(0.75, 1.3), elapsed + rng.uniform(1.0, 3.0)
            stall = self.stall_s if rng.random() < self.stall_p else 0.0
            seconds, elapsed = yield seconds * speed + stall


@dataclass(frozen=True)
class Workload:
    phases: list[Phase]
    step_seconds: dict[tuple[int, int], float]  # (requests, depth) -> seconds
    alpha: dict[str, float]  # text -> per-position acceptance
    max_depth: int
    token_seconds: float = 0.0  # a verified token's cost: the slope of depth-0 steps over their requests

    def seconds(self, requests: int, depth: int, verified: int) -> float:
        """A step of ``requests`` at ``depth`` that verified ``verified`` drafts in all (fewer than
        ``requests * depth`` where the policy cut some: each saves a token's cost)."""
        return self.step_seconds[(requests, depth)] - self.token_seconds * (requests * depth - verified)

    def accepted(self, text: str, depth: int) -> float:
        return accepted_drafts(self.alpha[text], depth)


def acceptance_for_tokens(tokens: float, depth: int) -> float:
    """The ``alpha`` in [0, 1] whose :func:`geometric_tokens` at ``depth`` is ``tokens`` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if geometric_tokens(mid, depth) < tokens else (low, mid)
    return low


def accepted_drafts(alpha: float, depth: int) -> float:
    """Expected accepted drafts of a step at ``depth`` under a geometric per-position acceptance ``alpha``."""
    return geometric_tokens(alpha, depth) - 1


def solve_alpha(accepted_per_draft: float, depth: int) -> float:
    """The geometric per-position acceptance whose expected accepted drafts at ``depth`` is the given."""
    return acceptance_for_tokens(1 + accepted_per_draft, depth)


def load_workload(samples: list[dict]) -> Workload:
    engines = {s["engine"] for s in samples}
    deep = max((e for e in engines if e.startswith("stock_sd_k")), key=lambda e: int(e.removeprefix("stock_sd_k")))
    max_depth = int(deep.removeprefix("stock_sd_k"))
    depth_of = {**STATIC_DEPTHS, deep: max_depth}
    counts = defaultdict(lambda: [0.0, 0.0])
    for s in samples:
        if s["engine"] == deep:
            counts[s["text"]][0] += s["counters"]["vllm:spec_decode_num_accepted_tokens"]
            counts[s["text"]][1] += s["counters"]["vllm:spec_decode_num_drafts"]
    alpha = {text: solve_alpha(accepted / drafts, max_depth) for text, (accepted, drafts) in counts.items()}
    phases = sorted({Phase(s["phase"], s["text"], s["requests"]) for s in samples}, key=lambda p: p.index)
    seconds = defaultdict(list)
    for s in samples:
        depth = depth_of.get(s["engine"])
        if depth is not None:  # a step's tokens over the engine's rate: its duration
            tokens = s["requests"] * (1 + accepted_drafts(alpha[s["text"]], depth))
            seconds[(s["requests"], depth)].append(tokens / s["tok_s"])
    step_seconds = {key: statistics.median(values) for key, values in seconds.items()}
    for n in {p.requests for p in phases}:
        for depth in range(2, max_depth):
            step_seconds[(n, depth)] = (step_seconds[(n, 1)] + step_seconds[(n, max_depth)]) / 2
    sizes = sorted({p.requests for p in phases})
    depth0 = [step_seconds[(n, 0)] for n in sizes]
    mean_n, mean_s = statistics.mean(sizes), statistics.mean(depth0)
    slope = (sum((n - mean_n) * (t - mean_s) for n, t in zip(sizes, depth0))
             / max(sum((n - mean_n) ** 2 for n in sizes), 1e-12))
    return Workload(phases, step_seconds, alpha, max_depth, max(slope, 0.0))


def replay(workload: Workload, policy: int | str, seed: int = 0, noise: float = 0.10,
           machine: Machine = Machine(), per_request: bool = True, tuning: Tuning = TUNING) -> tuple[float, list]:
    """Workload tokens/s under ``policy``: a fixed depth, "oracle" (each phase's best depth) or "auto" (the
    speculation policy, each request verifying the drafts its acceptance pays for unless ``per_request`` is
    False); and per phase (phase, tok/s, steps by depth)."""
    rng = random.Random(seed)
    stretch = machine.slowdown(random.Random(seed + 1))  # its own stream: the same machine for every policy
    next(stretch)
    speculation = SpeculationPolicy(workload.max_depth, depth_control="drafted", per_request=per_request,
                                    tuning=tuning)
    elapsed, rows = 0.0, []
    for phase in workload.phases:
        n, text, started = phase.requests, phase.text, elapsed
        best = max(range(workload.max_depth + 1),
                   key=lambda d: (1 + workload.accepted(text, d)) / workload.step_seconds[(n, d)])
        produced, depths = 0.0, Counter()
        ids = [f"{phase.index}.{i}" for i in range(n)]
        while produced < OUTPUT_TOKENS:
            left = int(OUTPUT_TOKENS - produced)
            plan = None
            if policy == "auto":
                # The drafter made K drafts for each request; the step verifies the first ``depth`` of those
                # the plan keeps (the replay leaves out the one-step lag between drafting and verifying).
                plan = speculation.plan(StepView([RequestView(rid, True, left, num_drafts=workload.max_depth)
                                                  for rid in ids]))
            depth = best if policy == "oracle" else policy if isinstance(policy, int) else plan.depth
            drafts = [depth if plan is None else min(depth, plan.num_drafts.get(rid, depth)) for rid in ids]
            accepted = [_accepted_run(rng, workload.alpha[text], d) for d in drafts]
            gained = 1 + sum(accepted) / n
            seconds = stretch.send((workload.seconds(n, depth, sum(drafts)) * (1 + rng.uniform(-noise, noise)),
                                    elapsed))
            if plan is not None:
                speculation.observe(StepResult(
                    plan, num_decoding=n, tokens=n + sum(drafts), seconds=seconds, output_tokens=n + sum(accepted),
                    verified=[VerifiedDrafts(rid, d, a) for rid, d, a in zip(ids, drafts, accepted) if d]))
            produced += gained
            elapsed += seconds
            depths[depth] += 1
        for rid in ids:
            speculation.finish(rid)
        rows.append((phase, OUTPUT_TOKENS * n / (elapsed - started), dict(sorted(depths.items()))))
    return sum(OUTPUT_TOKENS * p.requests for p in workload.phases) / elapsed, rows


def _accepted_run(rng: random.Random, alpha: float, depth: int) -> int:
    taken = 0
    while taken < depth and rng.random() < alpha:
        taken += 1
    return taken


def summarize(workload: Workload, seeds: int = 5, noise: float = 0.10, machine: Machine = Machine(),
              **policy_args) -> dict[str, float]:
    """Median tokens/s over seeds for each fixed depth, the oracle and ``auto``, and ``auto``'s ratios."""
    policies = [*range(workload.max_depth + 1), "oracle", "auto"]
    rates = {str(p): statistics.median(replay(workload, p, seed, noise, machine, **policy_args)[0]
                                       for seed in range(seeds)) for p in policies}
    best_static = max(rates[str(d)] for d in range(workload.max_depth + 1))
    return {**rates, "auto_vs_best_static": rates["auto"] / best_static,
            "oracle_vs_best_static": rates["oracle"] / best_static}


# The machines ``--grid`` replays each run on: calm; rare long stalls; frequent short ones; slow swings; both.
GRID_MACHINES = {"calm": Machine(), "stalls 0.5 % x 100 ms": Machine(0.005, 0.1),
                 "stalls 2 % x 30 ms": Machine(0.02, 0.03), "swings": Machine(swings=True),
                 "stalls and swings": Machine(0.005, 0.1, swings=True)}


def grid(runs: list[Path], seeds: int = 5, noise: float = 0.10, **policy_args) -> dict[str, list[float]]:
    """``auto`` / best fixed depth for each run (a copy of one already listed is skipped) on each of
    :data:`GRID_MACHINES`, by run name."""
    rows, seen = {}, set()
    for run in runs:
        text = run.read_text()
        if text in seen:
            continue
        seen.add(text)
        workload = load_workload(json.loads(text)["samples"])
        rows[run.name] = [summarize(workload, seeds, noise, machine, **policy_args)["auto_vs_best_static"]
                          for machine in GRID_MACHINES.values()]
    return rows


def sensitivity(runs: list[Path], seeds: int, noise: float, **policy_args) -> dict[str, tuple[float, float]]:
    """The grid's mean with each constant of the policy's table (minedraft/policy/tuning.py) halved and doubled
    (whole numbers rounded, at least 1; a share such as ``margin`` or ``cost_memory`` kept below 1). Not the
    constants of parallel steps' trials: the replay's drafter shares the target's hardware."""
    def mean(tuning: Tuning) -> float:
        return statistics.mean(r for ratios in grid(runs, seeds, noise, tuning=tuning, **policy_args).values()
                               for r in ratios)

    out = {}
    for f in dataclasses.fields(TUNING):
        if f.name.startswith("trial_"):
            continue
        value = getattr(TUNING, f.name)
        scaled = []
        for factor in (0.5, 2.0):
            new = value * factor
            if isinstance(value, int):
                new = max(1, round(new))
            elif value < 1 <= new and f.name in ("margin", "cost_memory", "neighbour_weight"):
                new = (1 + value) / 2
            scaled.append(mean(dataclasses.replace(TUNING, **{f.name: new})))
        out[f.name] = (scaled[0], scaled[1])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json", nargs="?", type=Path, default=SHIFTING_JSON)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--noise", type=float, default=0.10, help="each step's relative jitter")
    parser.add_argument("--phases", action="store_true", help="each phase of seed 0: auto beside the oracle")
    parser.add_argument("--stalls", type=float, nargs=2, default=(0.0, 0.0), metavar=("P", "SECONDS"),
                        help="a step stalls with probability P for SECONDS")
    parser.add_argument("--swings", action="store_true", help="the machine's speed moves 0.75x-1.3x every 1-3 s")
    parser.add_argument("--grid", action="store_true",
                        help="the default run and every run in history/shifting/, each on five machines")
    parser.add_argument("--sensitivity", action="store_true",
                        help="the grid's mean with each constant of the policy's table halved and doubled")
    parser.add_argument("--step-level", action="store_true",
                        help="the step's depth alone (speculation_depth: step), every request verifying it")
    args = parser.parse_args(argv)
    policy_args = {"per_request": not args.step_level}
    if args.sensitivity:
        runs = [SHIFTING_JSON, *sorted(EARLIER_RUNS.glob("*.json"))]
        print(f"grid mean as shipped: {statistics.mean(r for v in grid(runs, args.seeds, args.noise, **policy_args).values() for r in v):.3f}")
        print("constant            halved  doubled")
        for name, (half, double) in sensitivity(runs, args.seeds, args.noise, **policy_args).items():
            print(f"{name:18s}  {half:.3f}   {double:.3f}")
        return
    if args.grid:
        rows = grid([SHIFTING_JSON, *sorted(EARLIER_RUNS.glob("*.json"))], args.seeds, args.noise, **policy_args)
        print("auto / best fixed depth; machines: " + "; ".join(GRID_MACHINES))
        for name, ratios in rows.items():
            print(f"{name:34s} " + " ".join(f"{r:.3f}" for r in ratios))
        print(f"mean {statistics.mean(r for ratios in rows.values() for r in ratios):.3f}")
        return
    machine = Machine(*args.stalls, swings=args.swings)
    workload = load_workload(json.loads(args.json.read_text())["samples"])
    alphas = ", ".join(f"{text} {alpha:.2f}" for text, alpha in sorted(workload.alpha.items()))
    print(f"{args.json}: {len(workload.phases)} phases, K = {workload.max_depth}, acceptance per position: {alphas}")
    summary = summarize(workload, args.seeds, args.noise, machine, **policy_args)
    fixed = ", ".join(f"depth {d} {summary[str(d)]:.0f}" for d in range(workload.max_depth + 1))
    print(f"tok/s: {fixed}, oracle {summary['oracle']:.0f}, auto {summary['auto']:.0f}")
    print(f"auto / best static {summary['auto_vs_best_static']:.3f}, oracle / best static "
          f"{summary['oracle_vs_best_static']:.3f}")
    if args.phases:
        auto = replay(workload, "auto", 0, args.noise, machine, **policy_args)[1]
        oracle = replay(workload, "oracle", 0, args.noise, machine)[1]
        for (phase, rate, depths), (_, best_rate, best_depths) in zip(auto, oracle):
            print(f"phase {phase.index:2d} {phase.text:8s} N={phase.requests:2d}: auto {rate:5.0f} tok/s {depths}, "
                  f"oracle {best_rate:5.0f} {best_depths}")


if __name__ == "__main__":
    main()
