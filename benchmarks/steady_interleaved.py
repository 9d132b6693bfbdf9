"""Steady loads on the real pair, one engine at a time, the settings interleaved: where two engines do not fit.

``real_pair.py`` keeps its engines alive side by side; in float32 on a 24 GB machine two of them do not fit
(``real_pair`` refuses such a group). This runs ``depth_trace.py`` once per setting, each in a fresh
process, in mirrored order (A B C C B A, ...: a machine that drifts across the run weighs on every setting
alike), and reads per load the median tok/s of each setting and the default over the best static choice
there (the target alone or stock SD at its best k among those run).

    python -m benchmarks.steady_interleaved          # ~40 min on 2 cores in float32 (N = 1..32, 4 settings, 2 cycles)
    python -m benchmarks.steady_interleaved --settings minedraft_auto,stock_sd:3,no_sd --loads 1,4 --cycles 1

A setting is ``minedraft_auto`` (the default at K = 3), ``stock_sd:<k>`` or ``no_sd``. Writes
``benchmarks/results/cpu/real_pair/steady_interleaved.json`` and ``.png`` (``--replot --output FILE.json``:
the PNG of that result again, no run) (tok/s per load; the ratio), with
each run's phase rates and, for the default, each phase's steps as ``depth_trace.py`` records them.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import real_pair, runner

DEFAULT = "minedraft_auto"
SETTINGS = ("minedraft_auto", "stock_sd:3", "stock_sd:1", "no_sd")
BAR = 0.95  # issue 72: the default at steady loads against the best static choice


def parse_setting(setting: str) -> tuple[str, int]:
    """``stock_sd:1`` -> (``stock_sd``, 1); the default and ``no_sd`` at K = 3 (``no_sd`` ignores it)."""
    mode, _, k = setting.partition(":")
    if mode not in ("minedraft_auto", "stock_sd", "no_sd") or (k and not k.isdigit()) or (k and mode != "stock_sd"):
        raise ValueError(f"unknown setting {setting!r}: minedraft_auto, stock_sd:<k> or no_sd")
    return mode, int(k or 3)


def mirrored(settings: list[str], cycles: int) -> list[str]:
    """The run order: the settings forwards, then backwards, ``cycles`` times in all."""
    return [s for c in range(cycles) for s in (settings if c % 2 == 0 else settings[::-1])]


def medians_at(runs: list[dict], n: int) -> dict[str, float]:
    """Each setting's median tok/s over its runs at load ``n``."""
    rates: dict[str, list[float]] = {}
    for run in runs:
        rates.setdefault(run["setting"], []).append(run["tok_s"][str(n)])
    return {s: round(statistics.median(v), 3) for s, v in rates.items()}


def summary(runs: list[dict], loads: list[int]) -> dict:
    """Per load: each setting's median tok/s over its runs, the best static setting, and the default over it."""
    out = {}
    for n in loads:
        medians = medians_at(runs, n)
        static = {s: v for s, v in medians.items() if s != DEFAULT}
        best = max(static, key=static.get) if static else None
        ratio = medians[DEFAULT] / static[best] if best and DEFAULT in medians and static[best] > 0 else None
        out[str(n)] = {"tok_s": medians, "best_static": best,
                       "default_over_best_static": None if ratio is None else round(ratio, 3)}
    return out


def run_one(setting: str, args, path: Path) -> tuple[dict, dict]:
    """One setting's steady phases in a fresh process (``depth_trace.py``): its phase rates (for the
    default, every step too), and the trace's meta."""
    mode, k = parse_setting(setting)
    command = [sys.executable, "-m", "benchmarks.depth_trace", "--mode", mode, "--k", str(k), "--rounds", "1",
               "--loads", ",".join(map(str, args.loads)), "--pair", str(args.pair), "--output", str(path)]
    subprocess.run(command, check=True)
    trace = json.loads(path.read_text())
    run = {"setting": setting, "date": trace["meta"]["date"], "seconds": trace["meta"]["seconds"],
           "tok_s": {str(p["requests"]): p["tok_s"] for p in trace["phases"]}}
    if mode == DEFAULT:  # what explains its reading: every step the policy observed (depth_trace.py's record)
        run["depths"] = {str(p["requests"]): "".join(str(s["depth"]) for s in p["steps"]) for p in trace["phases"]}
        run["steps"] = {str(p["requests"]): p["steps"] for p in trace["phases"]}
    return run, trace["meta"]


def run_mirrored(settings: list[str], cycles: int, run_one, describe=lambda run: "") -> tuple[list[dict], dict]:
    """``run_one(setting, path)`` per setting in mirrored order, each writing its trace to a file of its own;
    the runs (a line printed per run: its rates, then ``describe(run)``) and the last trace's meta."""
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for i, setting in enumerate(mirrored(settings, cycles)):
            run, meta_of_trace = run_one(setting, Path(folder) / f"{i}.json")
            runs.append(run)
            print(f"{setting}: " + ", ".join(f"N={n} {v:.2f}" for n, v in run["tok_s"].items()) + describe(run),
                  flush=True)
    return runs, meta_of_trace


def measure(args) -> dict:
    started = time.perf_counter()
    runs, meta_of_trace = run_mirrored(args.settings, args.cycles, lambda setting, path: run_one(setting, args, path))
    meta = runner.meta(meta_of_trace["device_label"], started, meta_of_trace["engine"],
                       models=meta_of_trace["models"], settings=args.settings, cycles=args.cycles,
                       order="mirrored, one engine at a time", output_tokens=meta_of_trace["output_tokens"],
                       loads=args.loads)
    return {"meta": meta, "summary": summary(runs, args.loads), "runs": runs}


def plot_rates(ax, result: dict, title: str) -> None:
    """Each setting's median tok/s per load."""
    loads = result["meta"]["loads"]
    for setting in result["meta"]["settings"]:
        ax.plot(loads, [result["summary"][str(n)]["tok_s"].get(setting) for n in loads], marker="o", label=setting)
    ax.set(ylabel="tok/s (median)", xscale="log", title=f"{title}, {result['meta']['date']}")
    ax.legend(fontsize=7)


def plot(result: dict, path: Path) -> Path:
    plt = runner.pyplot()
    loads = result["meta"]["loads"]
    fig, (rates, ratio) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    plot_rates(rates, result, "steady loads")
    ratio.plot(loads, [result["summary"][str(n)]["default_over_best_static"] for n in loads], marker="o",
               color="black", label="default / best static")
    ratio.axhline(BAR, color="red", linestyle="--", linewidth=1, label=f"bar {BAR}")
    finish_ratio_panel(ratio, loads)
    return runner.save(fig, path)


def finish_ratio_panel(ax, loads: list[int]) -> None:
    ax.axhline(1.0, color="gray", linewidth=0.5)
    ax.set(xlabel="requests (N)", ylabel="ratio", xscale="log", xticks=loads, xticklabels=loads)
    ax.legend(fontsize=8)


def add_interleaved_arguments(parser, settings, loads: list[int], output: Path) -> None:
    """The arguments of a run of settings one engine at a time, mirrored (this module's and dedicated_real's)."""
    parser.add_argument("--pair", type=Path, default=real_pair.PAIR_DIR, help="real-pair.sh's output folder")
    parser.add_argument("--settings", type=lambda s: s.split(","), default=list(settings))
    parser.add_argument("--loads", type=lambda s: [int(n) for n in s.split(",")], default=loads,
                        help="comma-separated numbers of requests")
    parser.add_argument("--cycles", type=int, default=2, help="passes over the settings, mirrored")
    parser.add_argument("--output", type=Path, default=output, help="the JSON (with --replot: the one read)")


def parse_args(argv=None):
    parser = runner.parser(__doc__)
    add_interleaved_arguments(parser, SETTINGS, [1, 2, 4, 8, 16, 32],
                              runner.CPU_RESULTS / "real_pair" / "steady_interleaved.json")
    args = parser.parse_args(argv)
    for setting in args.settings:
        parse_setting(setting)  # one clear line before any model loads
    if DEFAULT not in args.settings:
        parser.error(f"--settings must include {DEFAULT}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    result = runner.run_or_replot(args, args.output, lambda: measure(args))
    table = "\n".join(f"N={n}: default / {row['best_static']} = {row['default_over_best_static']}"
                      for n, row in result["summary"].items())
    runner.report(plot(result, args.output.with_suffix(".png")), table)


if __name__ == "__main__":
    main()
