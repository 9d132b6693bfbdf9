"""The drafter on its own core with the real pair: the target on core 0, the draft engine on core 1.

``dedicated.py`` measures this layout on the kit, all engines alive side by side; the real pair in
float32 fits one engine at a time in 24 GB. This runs ``depth_trace.py`` once per setting, each in a fresh
process with the target's OpenMP threads bound to its cores, in mirrored order (as
``steady_interleaved.py``), on steady loads of code, greedy. Settings:

* on core 0: ``no_sd@0`` (the target alone), ``stock_sd:3@0`` and ``stock_sd:1@0`` (vLLM's SD, the draft
  model in the target's worker);
* on cores 0 and 1, the drafter on core 1: ``process_ahead@0+1`` (MineDraft's default with the process
  drafter, ``draft_ahead`` auto) and ``process_no_ahead@0+1`` (the same, ``draft_ahead`` off);
* on both cores, without MineDraft: ``no_sd@0-1`` and ``stock_sd:3@0-1``.

Comparisons, medians of each setting's runs per load: equal concurrency (MineDraft against the best of the
target alone and stock SD on core 0: the paper's layout, one device more), per hardware (against the best
of the same on both cores), and drafting ahead against the same layout without it. For the process
settings the draft engine's counts (requests that found their drafts made ahead, jobs late) come from the
proposer's shutdown line.

    python -m benchmarks.dedicated_real                      # ~40 min on 2 cores in float32 (N = 1, 2, 4)
    python -m benchmarks.dedicated_real --settings stock_sd:3@0,process_ahead@0+1 --loads 1 --cycles 1

Writes ``benchmarks/results/cpu/real_pair/dedicated_real.json`` and ``.png``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import runner
from benchmarks.steady_interleaved import (add_interleaved_arguments, finish_ratio_panel, medians_at, plot_rates,
                                           run_mirrored)
from harness.engine_args import PROCESS_DRAFTER_ON_CORE_1

# setting -> (depth_trace mode, k, more MineDraft settings, the target's cores)
SETTINGS = {
    "no_sd@0": ("no_sd", 3, None, "0"),
    "stock_sd:3@0": ("stock_sd", 3, None, "0"),
    "stock_sd:1@0": ("stock_sd", 1, None, "0"),
    "process_no_ahead@0+1": ("minedraft_auto", 3, {**PROCESS_DRAFTER_ON_CORE_1, "draft_ahead": "off"}, "0"),
    "process_ahead@0+1": ("minedraft_auto", 3, {**PROCESS_DRAFTER_ON_CORE_1, "draft_ahead": "auto"}, "0"),
    "no_sd@0-1": ("no_sd", 3, None, "0-1"),
    "stock_sd:3@0-1": ("stock_sd", 3, None, "0-1"),
}
CORE0 = ("no_sd@0", "stock_sd:3@0", "stock_sd:1@0")
BOTH_CORES = ("no_sd@0-1", "stock_sd:3@0-1")
AHEAD_LINE = re.compile(r"drafted ahead: (\d+) requests found their drafts made, (\d+) left the path, "
                        r"(\d+) jobs came while drafting ahead")


def run_one(setting: str, args, path: Path) -> dict:
    """One setting's loads in a fresh process; its phase rates and, for a process drafter, its ahead counts."""
    mode, k, minedraft, cores = SETTINGS[setting]
    command = [sys.executable, "-m", "benchmarks.depth_trace", "--mode", mode, "--k", str(k), "--rounds", "1",
               "--loads", ",".join(map(str, args.loads)), "--pair", str(args.pair), "--output", str(path),
               "--output-tokens", str(args.output_tokens)]
    if minedraft:
        command += ["--minedraft", json.dumps(minedraft)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": cores}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = done.stdout
    if done.returncode:
        raise RuntimeError(f"{setting} failed:\n{log[-3000:]}")
    trace = json.loads(path.read_text())
    run = {"setting": setting, "seconds": trace["meta"]["seconds"],
           "tok_s": {str(p["requests"]): p["tok_s"] for p in trace["phases"]},
           "depths": {str(p["requests"]): "".join(str(s["depth"]) for s in p["steps"]) for p in trace["phases"]}}
    ahead = AHEAD_LINE.findall(log)
    if ahead:
        run["ahead_hits"], run["ahead_misses"], run["ahead_late"] = map(int, ahead[-1])
    return run, trace["meta"]


def ahead_counts(run: dict) -> str:
    return f", ahead {run['ahead_hits']} hits / {run['ahead_misses']} misses" if "ahead_hits" in run else ""


def summary(runs: list[dict], loads: list[int]) -> dict:
    out = {}
    for n in loads:
        medians = medians_at(runs, n)

        def best(group):
            present = [s for s in group if s in medians]
            return max(present, key=medians.get) if present else None

        row = {"tok_s": medians, "best_core0": best(CORE0), "best_both_cores": best(BOTH_CORES)}
        for setting in ("process_no_ahead@0+1", "process_ahead@0+1"):
            if setting not in medians:
                continue
            for name, base in (("equal_concurrency", row["best_core0"]), ("per_hardware", row["best_both_cores"])):
                if base:
                    row[f"{setting}_{name}"] = round(medians[setting] / medians[base], 3)
            if "stock_sd:3@0" in medians:
                row[f"{setting}_over_stock_sd_k3_core0"] = round(medians[setting] / medians["stock_sd:3@0"], 3)
        if "process_ahead@0+1" in medians and "process_no_ahead@0+1" in medians:
            row["ahead_over_no_ahead"] = round(medians["process_ahead@0+1"] / medians["process_no_ahead@0+1"], 3)
        out[str(n)] = row
    return out


def measure(args) -> dict:
    started = time.perf_counter()
    runs, trace_meta = run_mirrored(args.settings, args.cycles, lambda setting, path: run_one(setting, args, path),
                                    describe=ahead_counts)
    meta = runner.meta(trace_meta["device_label"], started, trace_meta["engine"], models=trace_meta["models"],
                       settings={s: SETTINGS[s] for s in args.settings}, cycles=args.cycles,
                       order="mirrored, one engine at a time", output_tokens=args.output_tokens, loads=args.loads)
    return {"meta": meta, "summary": summary(runs, args.loads), "runs": runs}


def plot(result: dict, path: Path) -> Path:
    plt = runner.pyplot()
    loads = result["meta"]["loads"]
    fig, (rates, ratio) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    plot_rates(rates, result, "target on core 0, drafter on core 1")
    for key, label in (("process_ahead@0+1_equal_concurrency", "the default / best on core 0"),
                       ("process_ahead@0+1_per_hardware", "the default / best on both cores"),
                       ("process_no_ahead@0+1_equal_concurrency", "without drafting ahead / best on core 0"),
                       ("process_no_ahead@0+1_per_hardware", "without drafting ahead / best on both cores"),
                       ("ahead_over_no_ahead", "drafting ahead / without")):
        if not any(key in result["summary"][str(n)] for n in loads):
            continue
        ratio.plot(loads, [result["summary"][str(n)].get(key) for n in loads], marker="o", label=label)
    finish_ratio_panel(ratio, loads)
    return runner.save(fig, path)


def parse_args(argv=None):
    parser = runner.parser(__doc__)
    add_interleaved_arguments(parser, SETTINGS, [1, 2, 4], runner.CPU_RESULTS / "real_pair" / "dedicated_real.json")
    parser.add_argument("--output-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}: {', '.join(SETTINGS)}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    result = runner.run_or_replot(args, args.output, lambda: measure(args))
    table = "\n".join(f"N={n}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "tok_s")
                      for n, row in result["summary"].items())
    runner.report(plot(result, args.output.with_suffix(".png")), table)


if __name__ == "__main__":
    main()
