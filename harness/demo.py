"""``make demo``: one workload on the kit's models, side by side.

Target alone, stock vLLM speculative decoding, MineDraft pinned to parallel
mode (every balanced step overlaps drafting with verification) and MineDraft
in its default ``auto`` mode (each step's speculation depth chosen from measured
goodput, 0 turning speculation off; plain SD, for its drafter shares the
target's cores here) run the same 48 mixed requests through
real vLLM engines on this machine. The four engines are up at once, side by
side, and take turns: cold is each engine's first run of the requests, warm
the median of ``WARM_ROUNDS`` more, in an order that rotates from round to
round; ratios to stock SD pair runs of the same round (median), so a busy
moment of a noisy machine falls on every engine alike. The table shows
throughput, mean acceptance length, what MineDraft did (parallel vs fallback
steps, steps per speculation depth) and whether every run's tokens equal the
target's; a PNG plot is saved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

from harness.child import Child
from harness.sidebyside import steps_by_depth
from minedraft.config.settings import MineDraftSettings
from modelkit import build_kit

# name -> mode (harness.modes.BENCH_MODES)
RUNS = {"target": "no_sd", "stock_sd": "stock_sd", "minedraft_parallel": "minedraft_parallel",
        "minedraft_auto": "minedraft_auto"}
WARM_ROUNDS = 3
NUM_REQUESTS = 48  # the exactness mix of harness/sidebyside.py


def acceptance_length(metrics: dict) -> float | None:
    drafts = metrics.get("vllm:spec_decode_num_drafts", 0)
    if not drafts:
        return None
    return 1 + metrics.get("vllm:spec_decode_num_accepted_tokens", 0) / drafts


def describe_depths(metrics: dict) -> str:
    """``k'=0: 812, k'=3: 40``: the steps MineDraft ran at each speculation depth (``-``: none counted)."""
    return ", ".join(f"k'={d}: {n}" for d, n in steps_by_depth(metrics).items()) or "-"


def table(results: dict[str, dict]) -> str:
    rows = ["| mode | cold tok/s | vs stock SD | warm tok/s | vs stock SD | mean acceptance length "
            "| parallel / fallback steps | steps by depth | same tokens as target |",
            "|---|---|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        m = r["metrics"]
        tau = acceptance_length(m)
        steps = (f"{int(m['minedraft:parallel_steps'])} / {int(m['minedraft:fallback_steps'])}"
                 if "minedraft:parallel_steps" in m else "-")
        rows.append(f"| {mode} | {r['output_tokens_per_s']:.0f} | {r['cold_vs_stock_sd']:.2f}x | "
                    f"{r['warm_output_tokens_per_s']:.0f} | {r['warm_vs_stock_sd']:.2f}x | "
                    f"{'-' if tau is None else f'{tau:.2f}'} | {steps} | {describe_depths(m)} | "
                    f"{r['same_tokens_as_target']} |")
    return "\n".join(rows)


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(results)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [results[m]["output_tokens_per_s"] for m in names], width=0.4,
           color="#4c72b0", label="cold")
    ax.bar([i + 0.2 for i in x], [results[m]["warm_output_tokens_per_s"] for m in names], width=0.4,
           color="#55a868", label=f"warm (median of {WARM_ROUNDS})")
    ax.set_xticks(list(x), names)
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"kit models, {NUM_REQUESTS} mixed requests, k=3, lane={MineDraftSettings.parse().lane}")
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


def run_side_by_side(kit, progress: Progress) -> dict[str, dict]:
    """Cold and warm runs of every engine, interleaved (see the module docstring)."""
    children = {name: Child(["-m", "harness.sidebyside"], {
        "name": name, "mode": mode, "target": str(kit.target), "draft": str(kit.draft_perturbed), "k": 3,
        "num_requests": NUM_REQUESTS, "seed": 0}) for name, mode in RUNS.items()}
    try:
        for child in children.values():  # they load at once
            child.ready()
        runs: dict[str, list[dict]] = {name: [] for name in RUNS}
        names = list(RUNS)
        for round_ in range(1 + WARM_ROUNDS):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                what = f"{'cold' if round_ == 0 else f'warm {round_}'}: {name}"
                progress.starting(what)
                runs[name].append(children[name].call({"cmd": "run", "passes": 1}))
                progress.finished(what)
    finally:
        for child in children.values():
            child.close()
    return {name: summarise(runs[name], runs["stock_sd"], runs["target"]) for name in RUNS}


def summarise(runs: list[dict], stock: list[dict], target: list[dict]) -> dict:
    """Cold and warm rates of one engine, and its ratios paired by round: to stock SD and to the
    best static choice (the faster of the target alone and stock SD in that round)."""
    rate = [r["output_tokens_per_s"] for r in runs]
    paired = [a / b["output_tokens_per_s"] for a, b in zip(rate, stock)]
    best = [a / max(b["output_tokens_per_s"], c["output_tokens_per_s"]) for a, b, c in zip(rate, stock, target)]
    return {"output_tokens_per_s": rate[0], "cold_vs_stock_sd": paired[0], "cold_vs_best_static": best[0],
            "warm_output_tokens_per_s": statistics.median(rate[1:]),
            "warm_vs_stock_sd": statistics.median(paired[1:]), "warm_vs_best_static": statistics.median(best[1:]),
            "warm_runs": rate[1:],
            "metrics": runs[-1]["metrics"],  # counters over all of the engine's runs
            "same_tokens_as_target": all(r["tokens"] == target[0]["tokens"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="demo-results", help="folder for the JSON and PNG")
    args = parser.parse_args()
    kit = build_kit()
    total = len(RUNS) * (1 + WARM_ROUNDS)
    print(f"demo: starting {len(RUNS)} engines side by side, then {total} runs of {NUM_REQUESTS} requests",
          file=sys.stderr, flush=True)
    progress = Progress(total)
    try:
        results = run_side_by_side(kit, progress)
    finally:
        progress.close()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    (out / "demo.json").write_text(json.dumps(results, indent=2))
    plot(results, out / "demo.png")
    print(table(results))
    print(f"MineDraft draft lane: {MineDraftSettings.parse().lane}. Plot: {out / 'demo.png'}")
    auto = results["minedraft_auto"]
    print(f"auto / the best of the target alone and stock SD, paired by round: {auto['cold_vs_best_static']:.2f}x "
          f"cold, {auto['warm_vs_best_static']:.2f}x warm.")
    m = auto["metrics"]
    print(f"auto chose its speculation depth per load ({describe_depths(m)}; k'=0: speculation off, the draft\n"
          "model idle). This draft is as large as the target, so no depth can beat speculation off whatever\n"
          "it accepts (RFC §2.5): auto runs every step at depth 0 and measures nothing. It ran "
          f"{int(m.get('minedraft:parallel_steps', 0))} parallel steps: both lanes share this machine's cores, so\n"
          "parallel steps cannot win at equal concurrency (README, performance model).")


if __name__ == "__main__":
    main()
