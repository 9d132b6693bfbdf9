"""Does the default cost throughput? ``minedraft_auto`` against ``stock_sd``, engine pairs re-created.

The sweep (``sweep.py``) keeps one engine per mode for a whole (draft, k)
block. On this 2-core VM two identical engines differ by up to 10 % for
their whole life (vLLM's engine core and worker spin-wait on each other's
shared-memory queues, and where the spinners land against the worker's
OpenMP threads is decided per instance), so one instance per mode cannot
resolve a 3 % margin. This benchmark answers the one question "is the
default ever slower than stock SD?" by pairing instead:

* per (draft, k) it starts ``--instances`` fresh pairs (stock SD, MineDraft
  ``auto``), one pair at a time, both engines up together;
* each pair runs every configuration of the sweep (short outputs at each N,
  long outputs at each long N) once per mode, the order alternating, so the
  pair's ratio at a configuration compares two runs taken back to back;
* a configuration's verdict is the median over pairs of those ratios: one
  unlucky instance on either side no longer decides it.

Both engines run vLLM's default layout (engine core in its own process), the
sweep's workload, prompts and engine arguments (``sweep.py`` is reused).

    python -m benchmarks.auto_guard               # ~35 min on 2 idle cores
    python -m benchmarks.auto_guard --replot      # plot and table from the JSON

Writes ``benchmarks/results/cpu/auto_guard.json`` and ``auto_guard.png``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks import runner, sweep  # the sweep's workers, setup and workload

MODES = ("stock_sd", "minedraft_auto")
MARGIN = 0.97  # issue #12: auto / stock SD >= 0.97 on every configuration
OUT = runner.CPU_RESULTS
README_BEGIN, README_END = "<!-- auto-guard:begin -->", "<!-- auto-guard:end -->"


def configurations(args) -> list[tuple[int, int]]:
    """(output tokens, N) of every configuration, as the sweep runs them."""
    return [(out, n) for out in args.output_tokens for n in sweep.plan(args, out)[0]]


def run_pair(setup, args, draft: str, k: int, instance: int, prompts, log_dir: Path, bar) -> list[dict]:
    """One fresh (stock, auto) pair: every configuration once per mode; ``bar`` counts the runs."""
    bar.set_postfix_str(f"{draft} k={k} pair {instance}: starting engines")
    pool = sweep.Pool(max_alive=len(MODES), log_dir=log_dir)
    specs = {mode: ((mode, draft, f"k{k}", f"i{instance}"),) + sweep.worker_spec(setup, draft, mode, k, prompts[:4])
             for mode in MODES}
    samples = []
    try:
        pool.start_together(specs.values())
        for index, (out, n) in enumerate(configurations(args)):
            order = MODES if (instance + index) % 2 == 0 else MODES[::-1]
            for mode in order:
                bar.set_postfix_str(f"{draft} k={k} pair {instance} {mode} x{n} out {out}")
                result = pool.get(*specs[mode]).run(prompts[:n], out)
                bar.update()
                samples.append({"draft": draft, "k": k, "instance": instance, "mode": mode,
                                "output_tokens": out, "requests": n, **result})
    finally:
        pool.stop_all()
    return samples


def summarize(samples: list[dict]) -> list[dict]:
    """One row per (draft, k, output tokens, N): per-pair ratios and their median."""
    rows = []
    keys = sorted({(s["draft"], s["k"], s["output_tokens"], s["requests"]) for s in samples})
    for draft, k, out, n in keys:
        at = [s for s in samples if (s["draft"], s["k"], s["output_tokens"], s["requests"]) == (draft, k, out, n)]
        rate = {(s["instance"], s["mode"]): s["tok_s"] for s in at}
        pairs = sorted({s["instance"] for s in at})
        ratios = [rate[(i, "minedraft_auto")] / rate[(i, "stock_sd")] for i in pairs
                  if (i, "minedraft_auto") in rate and (i, "stock_sd") in rate]
        auto = [s for s in at if s["mode"] == "minedraft_auto"]
        rows.append({"draft": draft, "k": k, "output_tokens": out, "batch_size": n, "pairs": len(ratios),
                     "vs_stock_sd": round(statistics.median(ratios), 3),
                     "vs_stock_sd_min": round(min(ratios), 3), "vs_stock_sd_max": round(max(ratios), 3),
                     "vs_stock_sd_runs": [round(r, 3) for r in ratios],
                     "stock_sd_tok_s": round(statistics.median(rate[(i, "stock_sd")] for i in pairs), 1),
                     "minedraft_auto_tok_s": round(statistics.median(rate[(i, "minedraft_auto")] for i in pairs), 1),
                     "parallel_steps": int(sum(s["counters"]["minedraft:parallel_steps"] for s in auto)),
                     "parallel_trial_steps": int(sum(sweep.trial_steps(s["counters"]) for s in auto))})
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    below = [r for r in rows if r["vs_stock_sd"] < MARGIN]
    ratios = [r["vs_stock_sd"] for r in rows]
    out = [f"`minedraft_auto` / `stock_sd`, {meta['instances']} fresh engine pairs per (draft, k), "
           f"{meta['date'][:10]}, {meta['device_label']}, engine core {meta['engine_core']}. Cells: median of "
           "the pairs' ratios (min-max).", ""]
    for out_tokens in sorted({r["output_tokens"] for r in rows}):
        at = [r for r in rows if r["output_tokens"] == out_tokens]
        ns = sorted({r["batch_size"] for r in at})
        out += [f"{out_tokens} output tokens", "", "| draft | k | " + " | ".join(f"N={n}" for n in ns) + " |",
                "|---|---|" + "---|" * len(ns)]
        cells = {(r["draft"], r["k"], r["batch_size"]): r for r in at}
        for draft, k in sorted({(r["draft"], r["k"]) for r in at}):
            out.append(f"| {draft} | {k} | " + " | ".join(
                f"{c['vs_stock_sd']:.2f}x ({c['vs_stock_sd_min']:.2f}-{c['vs_stock_sd_max']:.2f})"
                for c in (cells[(draft, k, n)] for n in ns)) + " |")
        out.append("")
    out.append(f"{len(rows)} configurations: median {statistics.median(ratios):.2f}x, range "
               f"{min(ratios):.2f}x-{max(ratios):.2f}x; {len(below)} below {MARGIN}; auto ran "
               f"{sum(r['parallel_steps'] for r in rows)} parallel steps, "
               f"{sum(r.get('parallel_trial_steps', r.get('probe_steps', 0)) for r in rows)} of them trials.")
    return "\n".join(out) + "\n"


def plot(rows: list[dict], path: Path, device_label: str) -> Path:
    fig, ax = runner.pyplot().subplots(figsize=(11, 3.8))
    labels = [f"{r['draft'].replace('draft_', '')} k{r['k']} o{r['output_tokens']} N{r['batch_size']}" for r in rows]
    y = [r["vs_stock_sd"] for r in rows]
    err = [[v - r["vs_stock_sd_min"] for v, r in zip(y, rows)], [r["vs_stock_sd_max"] - v for v, r in zip(y, rows)]]
    ax.errorbar(range(len(rows)), y, yerr=err, fmt="o", ms=3, capsize=2, color="tab:green",
                label="auto / stock SD (median of fresh pairs, min-max)")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.axhline(MARGIN, color="tab:red", lw=0.8, ls="--", label=f"{MARGIN}")
    ax.set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
    ax.set_ylabel("tok/s ratio")
    ax.legend(fontsize=7)
    ax.set_title(f"Default mode against stock SD, equal concurrency, {device_label}", fontsize=8)
    return runner.save(fig, path)


def parse_args(argv=None):
    parser = runner.parser(__doc__)
    parser.add_argument("--instances", type=int, default=3, help="fresh engine pairs per (draft, k)")
    parser.add_argument("--ks", type=int, nargs="+", default=sweep.DEFAULTS["ks"])
    parser.add_argument("--drafts", nargs="+", default=["draft_perturbed", "draft_small"])
    parser.add_argument("--update-readme", action="store_true", help="write the table into benchmarks/README.md")
    # The sweep's workload and layout: its defaults, engine core in its own process.
    return sweep.inherit_workload(parser.parse_args(argv), ("prompt_tokens", "output_tokens", "concurrency",
                                                           "long_concurrency", "repeats", "long_repeats", "engine_core"))


def measure(args) -> dict:
    setup = sweep.cpu_setup(args, args.drafts)
    prompts, log_dir = sweep.prompts_and_log_dir(setup, args, args.drafts[0], "auto-guard")
    started, samples = time.perf_counter(), []
    total = len(args.drafts) * len(args.ks) * args.instances * len(configurations(args)) * len(MODES)
    with sweep.progress(total, "auto guard") as bar:
        for draft in args.drafts:
            for k in args.ks:
                for instance in range(args.instances):
                    sweep.say(f"{draft} k={k} pair {instance}")
                    samples += run_pair(setup, args, draft, k, instance, prompts, log_dir, bar)
    meta = runner.meta(setup.device_label, started, setup.engine, instances=args.instances,
                       engine_core=args.engine_core, prompt_tokens=args.prompt_tokens)
    return {"meta": meta, "rows": summarize(samples), "samples": samples}


def main(argv=None) -> None:
    args = parse_args(argv)
    result = runner.run_or_replot(args, OUT / "auto_guard.json", lambda: measure(args))
    png = plot(result["rows"], OUT / "auto_guard.png", result["meta"]["device_label"])
    table = markdown(result["rows"], result["meta"])
    runner.report(png, table)
    if args.update_readme:
        sweep.update_readme(table, begin=README_BEGIN, end=README_END)


if __name__ == "__main__":
    main()
