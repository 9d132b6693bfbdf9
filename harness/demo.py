"""``make demo``: one workload on the kit's models, side by side.

Target alone, stock vLLM speculative decoding, MineDraft pinned to parallel
mode (every balanced step overlaps drafting with verification) and MineDraft
in its default ``auto`` mode (each step's speculation depth chosen from measured
goodput, 0 turning speculation off; plain SD unless parallel steps are measured
to win, which here its prior rules out) run the same 48 mixed requests through
real vLLM engines on this machine, twice per engine: cold (the engine's first
requests) and warm (the same requests again). The table shows throughput,
mean acceptance length, what MineDraft did (parallel vs fallback steps, steps
per speculation depth) and whether the tokens equal the target's; a PNG plot
is saved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from harness.sidebyside import run_mode, steps_by_depth
from minedraft.config.settings import MineDraftSettings
from modelkit import build_kit

# name -> mode (harness.modes.BENCH_MODES)
RUNS = {"target": "no_sd", "stock_sd": "stock_sd", "minedraft_parallel": "minedraft_parallel",
        "minedraft_auto": "minedraft_auto"}


def acceptance_length(metrics: dict) -> float | None:
    drafts = metrics.get("vllm:spec_decode_num_drafts", 0)
    if not drafts:
        return None
    return 1 + metrics.get("vllm:spec_decode_num_accepted_tokens", 0) / drafts


def describe_depths(metrics: dict) -> str:
    """``k'=0: 812, k'=3: 40``: the steps MineDraft ran at each speculation depth (``-``: none counted)."""
    return ", ".join(f"k'={d}: {n}" for d, n in steps_by_depth(metrics).items()) or "-"


def table(results: dict[str, dict]) -> str:
    cold, warm = results["stock_sd"]["output_tokens_per_s"], results["stock_sd"]["warm"][0]["output_tokens_per_s"]
    rows = ["| mode | cold tok/s | vs stock SD | warm tok/s | vs stock SD | mean acceptance length "
            "| parallel / fallback steps | steps by depth | same tokens as target |",
            "|---|---|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        m = r["metrics"]
        tau = acceptance_length(m)
        steps = (f"{int(m['minedraft:parallel_steps'])} / {int(m['minedraft:fallback_steps'])}"
                 if "minedraft:parallel_steps" in m else "-")
        w = r["warm"][0]["output_tokens_per_s"]
        same = r["tokens"] == results["target"]["tokens"] and r["warm_tokens_equal"]
        rows.append(f"| {mode} | {r['output_tokens_per_s']:.0f} | {r['output_tokens_per_s'] / cold:.2f}x | "
                    f"{w:.0f} | {w / warm:.2f}x | {'-' if tau is None else f'{tau:.2f}'} | {steps} | "
                    f"{describe_depths(m)} | {same} |")
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
    ax.bar([i + 0.2 for i in x], [results[m]["warm"][0]["output_tokens_per_s"] for m in names], width=0.4,
           color="#55a868", label="warm")
    ax.set_xticks(list(x), names)
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"kit models, 48 mixed requests, k=3, lane={MineDraftSettings.parse().lane}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="demo-results", help="folder for the JSON and PNG")
    args = parser.parse_args()
    kit = build_kit()
    results = {}
    # Configurations done, left and the ETA on stderr; off where stderr is not a terminal.
    with tqdm(total=len(RUNS), desc="demo", unit="engine", file=sys.stderr, disable=None, smoothing=0,
              dynamic_ncols=True) as bar:
        for name, mode in RUNS.items():
            bar.set_postfix_str(f"running {name}")
            started = time.perf_counter()
            r = results[name] = run_mode(mode, str(kit.target), str(kit.draft_perturbed), passes=2)
            bar.update()
            tqdm.write(f"{name}: {r['output_tokens_per_s']:.0f} tok/s cold, "
                       f"{r['warm'][0]['output_tokens_per_s']:.0f} warm ({time.perf_counter() - started:.0f} s "
                       "with the engine's start)", file=sys.stdout)
            sys.stdout.flush()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    (out / "demo.json").write_text(json.dumps({m: {k: v for k, v in r.items() if k != "tokens"}
                                               for m, r in results.items()}, indent=2))
    plot(results, out / "demo.png")
    print(table(results))
    print(f"MineDraft draft lane: {MineDraftSettings.parse().lane}. Plot: {out / 'demo.png'}")
    m = results["minedraft_auto"]["metrics"]
    print(f"auto chose its speculation depth per load ({describe_depths(m)}; k'=0: speculation off, the draft\n"
          f"model idle) and ran {int(m.get('minedraft:parallel_steps', 0))} parallel steps "
          f"({int(m.get('minedraft:probe_steps', 0))} probe steps allowed). Both lanes share this machine's\n"
          "cores, so parallel steps cannot win at equal concurrency (README, performance model):\n"
          "auto's prior rules them out.")


if __name__ == "__main__":
    main()
