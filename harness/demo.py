"""``make demo``: the kit's target and its small draft, side by side at two loads.

Real vLLM engines on this machine run the same requests (64-token prompts of held-out text, greedy) at two
loads: one request (``N=1``: a step is mostly fixed cost, so speculation pays) and many at once (``N=32``:
the target's step is fuller, so drafting costs more than it gains). The draft is the kit's one-layer
model distilled from the target: it pays at one load and not at the other. The rows:

* ``target``: the target alone, on every core;
* ``stock_sd``: vLLM's speculative decoding (k = 3), on every core;
* ``minedraft``: MineDraft's default (``auto``): each step's speculation depth chosen from measured goodput
  (0: speculation off), plain SD where the drafter shares the target's cores, as here;

and, on a machine with two cores or more, the drafter on hardware of its own:

* ``stock_sd_core0``: stock SD with the target bound to core 0;
* ``minedraft_own_core``: MineDraft's default with the target on core 0 and the draft model as its own engine
  on core 1 (``drafter: process``): it may verify one group of requests while the drafter drafts the other.

The engines are up at once and take turns: cold is each engine's first run of a load, warm the median of
``WARM_ROUNDS`` more, in an order that rotates from round to round. Ratios pair runs of the same round
(median), so a busy moment of a noisy machine falls on every engine alike. Every run's tokens are compared
with the target alone's. A JSON and a PNG plot are saved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from harness.child import Child
from harness.engine_args import PROCESS_DRAFTER_ON_CORE_1
from harness.sidebyside import IN_PROCESS_CORE, steps_by_depth
from modelkit import build_kit

WARM_ROUNDS = 4
K = 3
PROMPT_TOKENS = 64
LOADS = {"N=1": {"num_requests": 1, "prompt_tokens": PROMPT_TOKENS, "max_tokens": 128},
         "N=32": {"num_requests": 32, "prompt_tokens": PROMPT_TOKENS, "max_tokens": 64}}


@dataclass(frozen=True)
class Row:
    mode: str  # harness.modes.BENCH_MODES
    shows: str  # one line: what the row shows
    cores: str = ""  # VLLM_CPU_OMP_THREADS_BIND of the target's worker ("": vLLM's default, every core)
    minedraft: dict = field(default_factory=dict)  # more MineDraft settings
    baseline: str = "stock_sd"  # the row its "/ stock SD" ratio pairs with: stock SD on the same cores


SHARED = {
    "target": Row("no_sd", "the target alone: what speculation has to beat"),
    "stock_sd": Row("stock_sd", f"vLLM's speculative decoding, k = {K}"),
    "minedraft": Row("minedraft_auto", "MineDraft's default: each step's depth from measured goodput, "
                                       "plain SD (no overlap) where the drafter shares the target's cores"),
}
OWN_CORE = {
    "stock_sd_core0": Row("stock_sd", "stock SD with the target on core 0: the baseline of the row below",
                          cores="0", baseline="stock_sd_core0"),
    "minedraft_own_core": Row("minedraft_auto", "MineDraft's default, the target on core 0, the drafter its own "
                                                "engine on core 1: one group verified while the other is drafted",
                              cores="0", minedraft=PROCESS_DRAFTER_ON_CORE_1, baseline="stock_sd_core0"),
}


def rows_for(cores: int) -> dict[str, Row]:
    """The shared-core rows, and the drafter-on-its-own-core rows where the machine has two cores or more."""
    return {**SHARED, **(OWN_CORE if cores >= 2 else {})}


def acceptance_length(metrics: dict) -> float | None:
    drafts = metrics.get("vllm:spec_decode_num_drafts", 0)
    if not drafts:
        return None
    return 1 + metrics.get("vllm:spec_decode_num_accepted_tokens", 0) / drafts


def describe_depths(metrics: dict) -> str:
    """``k'=0: 812, k'=3: 40``: the steps MineDraft ran at each speculation depth (``-``: none counted)."""
    return ", ".join(f"k'={d}: {n}" for d, n in steps_by_depth(metrics).items()) or "-"


def table(results: dict[str, dict[str, dict]]) -> str:
    """One line per load and row."""
    rows = ["| load | row | cores | cold tok/s | warm tok/s | / stock SD, same cores: cold, warm "
            "| / best static, every core: cold, warm | mean acceptance length | parallel steps | steps by depth "
            "| same tokens as target |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for load, by_row in results.items():
        for name, r in by_row.items():
            m = r["metrics"]
            tau = acceptance_length(m)
            parallel = int(m["minedraft:parallel_steps"]) if "minedraft:parallel_steps" in m else "-"
            rows.append(f"| {load} | {name} | {r['cores'] or 'all'} | {r['output_tokens_per_s']:.0f} | "
                        f"{r['warm_output_tokens_per_s']:.0f} | {r['cold_vs_stock_sd']:.2f}x, "
                        f"{r['warm_vs_stock_sd']:.2f}x | {r['cold_vs_best_static']:.2f}x, "
                        f"{r['warm_vs_best_static']:.2f}x | {'-' if tau is None else f'{tau:.2f}'} | {parallel} | "
                        f"{describe_depths(m)} | {r['same_tokens_as_target']} |")
    return "\n".join(rows)


def plot(results: dict[str, dict[str, dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5), squeeze=False)
    for ax, (load, by_row) in zip(axes[0], results.items()):
        names = list(by_row)
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [by_row[m]["output_tokens_per_s"] for m in names], width=0.4,
               color="#4c72b0", label="cold")
        ax.bar([i + 0.2 for i in x], [by_row[m]["warm_output_tokens_per_s"] for m in names], width=0.4,
               color="#55a868", label=f"warm (median of {WARM_ROUNDS})")
        ax.set_xticks(list(x), names, rotation=20, ha="right")
        ax.legend(fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylabel("output tokens/s")
        ax.set_title(f"{load}: kit target, its small draft, k={K}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


class Progress:
    """Runs done, left and the time to go, on stderr: tqdm's bar on a terminal, else one line per run (a log or
    CI shows progress, not minutes of silence)."""

    def __init__(self, total: int, stream=sys.stderr) -> None:
        self.total, self.done, self.stream = total, 0, stream
        self.started = time.perf_counter()
        self.bar = tqdm(total=total, desc="demo", unit="run", file=stream, smoothing=0, dynamic_ncols=True) \
            if stream.isatty() else None

    def starting(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(what)

    def finished(self, what: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update()
            return
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.done * (self.total - self.done)
        print(f"demo: {self.done}/{self.total} runs ({what}), {elapsed:.0f} s, about {left:.0f} s to go",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def engine_env(row: Row) -> dict[str, str]:
    """The engine core in its child's process (``IN_PROCESS_CORE``): vLLM's worker then runs there too, where a
    worker process would spin for a second after each step it is given (vLLM 0.32.0's shared-memory queue:
    ``SpinCondition.busy_loop_s``), on the cores the next engine's run needs; ``cores``: its worker's
    threads on them (the child binds its engine's thread there too: harness/sidebyside.py)."""
    return {**IN_PROCESS_CORE, **({"VLLM_CPU_OMP_THREADS_BIND": row.cores} if row.cores else {})}


def counters_since(counters: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """An engine's counters (they add up over its life) less those it had before: one run's own."""
    return {k: v - before.get(k, 0) for k, v in counters.items()}


def run_side_by_side(kit, rows: dict[str, Row], progress: Progress) -> dict[str, dict[str, list[dict]]]:
    """Cold and warm runs of every engine at every load, interleaved (see the module docstring); each run's
    ``metrics`` are its own (the engine's counters less those before it)."""
    children = {name: Child(["-m", "harness.sidebyside"], {
        "name": name, "mode": row.mode, "target": str(kit.target), "draft": str(kit.draft_small), "k": K,
        "loads": LOADS, "seed": 0, "minedraft": row.minedraft or None, "cores": row.cores},
        env=engine_env(row)) for name, row in rows.items()}
    runs: dict[str, dict[str, list[dict]]] = {load: {name: [] for name in rows} for load in LOADS}
    last: dict[str, dict] = {name: {} for name in rows}  # each engine's counters after its last run
    try:
        for child in children.values():  # they load at once
            child.ready()
        names = list(rows)
        for round_ in range(1 + WARM_ROUNDS):
            for load in LOADS:
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    what = f"{'cold' if round_ == 0 else f'warm {round_}'}, {load}: {name}"
                    progress.starting(what)
                    run = children[name].call({"cmd": "run", "passes": 1, "load": load})
                    counters = run["metrics"]
                    run["metrics"], last[name] = counters_since(counters, last[name]), counters
                    runs[load][name].append(run)
                    progress.finished(what)
    finally:
        for child in children.values():
            child.close()
    return runs


def summarise(runs: list[dict], stock: list[dict], static: list[list[dict]], target: list[dict]) -> dict:
    """Cold and warm rates of one engine, and its ratios paired by round: to ``stock`` and to the best of
    ``static`` in that round; whether every run's tokens equal the target alone's first run."""
    rate = [r["output_tokens_per_s"] for r in runs]
    paired = [a / b["output_tokens_per_s"] for a, b in zip(rate, stock)]
    best = [a / max(s[i]["output_tokens_per_s"] for s in static) for i, a in enumerate(rate)]
    return {"output_tokens_per_s": rate[0], "cold_vs_stock_sd": paired[0], "cold_vs_best_static": best[0],
            "warm_output_tokens_per_s": statistics.median(rate[1:]),
            "warm_vs_stock_sd": statistics.median(paired[1:]), "warm_vs_best_static": statistics.median(best[1:]),
            "warm_runs": rate[1:],
            "metrics": {k: sum(r["metrics"].get(k, 0) for r in runs) for k in runs[-1]["metrics"]},
            "same_tokens_as_target": all(r["tokens"] == target[0]["tokens"] for r in runs)}


def summarise_all(rows: dict[str, Row], runs: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, dict]]:
    """Every row's summary at every load: ``/ stock SD`` pairs it with stock SD on its own cores, ``/ best
    static`` with the better of the target alone and stock SD on every core (for the own-core row: what the
    same hardware gives without MineDraft)."""
    results = {}
    for load, by_row in runs.items():
        static = [by_row["target"], by_row["stock_sd"]]
        results[load] = {name: {"cores": row.cores, "shows": row.shows,
                                **summarise(by_row[name], by_row[row.baseline], static, by_row["target"])}
                         for name, row in rows.items()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="demo-results", help="folder for the JSON and PNG")
    args = parser.parse_args()
    kit = build_kit()
    rows = rows_for(os.cpu_count() or 1)
    total = len(rows) * len(LOADS) * (1 + WARM_ROUNDS)
    print(f"demo: starting {len(rows)} engines side by side, then {total} runs ({', '.join(LOADS)})",
          file=sys.stderr, flush=True)
    progress = Progress(total)
    try:
        results = summarise_all(rows, run_side_by_side(kit, rows, progress))
    finally:
        progress.close()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    (out / "demo.json").write_text(json.dumps({"loads": LOADS, "k": K, "results": results}, indent=2))
    plot(results, out / "demo.png")
    print(table(results))
    for name, row in rows.items():
        print(f"  {name}: {row.shows}")
    for load, by_row in results.items():
        default = by_row["minedraft"]
        line = (f"{load}: MineDraft's default / the best static choice {default['cold_vs_best_static']:.2f}x cold, "
                f"{default['warm_vs_best_static']:.2f}x warm ({describe_depths(default['metrics'])})")
        if "minedraft_own_core" in by_row:
            own = by_row["minedraft_own_core"]
            line += (f"; the drafter on its own core / stock SD on the target's core {own['cold_vs_stock_sd']:.2f}x "
                     f"cold, {own['warm_vs_stock_sd']:.2f}x warm "
                     f"({int(own['metrics'].get('minedraft:parallel_steps', 0))} parallel steps)")
        print(line + ".")
    print(f"Plot: {out / 'demo.png'}")


if __name__ == "__main__":
    main()
