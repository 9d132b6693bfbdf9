"""A load that moves: can one static setting keep up with the depth controller?

The best static choice depends on the load: with the kit's 1-layer draft,
stock SD at k = 3 beats the target alone at one request and not at 32, and no
k helps when the drafts are rejected. A user who tunes vLLM for one load loses
at another. This benchmark runs one workload whose load moves, through engines
alive side by side:

* ``no_sd``: the target alone;
* ``stock_sd_k1``, ``stock_sd_k3``: stock vLLM speculative decoding at k = 1 and 3;
* ``minedraft_auto``: MineDraft's default at k = 3 (its depth controller picks
  k' in 0..3 per step).

The workload is a sequence of phases, run back to back in each engine:
concurrency ramps 1 -> 32 -> 1 (``RAMP``, every request ``--output-tokens``
long), three times, and the text alternates between the ramps. The kit's
models have no text their drafter predicts badly under greedy sampling
(acceptance length 3.0 of 4 at k = 3 on code, random tokens and repeats alike),
so the ramps alternate what decides acceptance in practice: greedy requests
(the draft's tokens are accepted: acceptance length about 3.0) and requests
sampled at temperature 1.0 (the tiny models' flat distributions disagree:
about 1.03).

A round runs the whole workload once in every engine, in an order that rotates
from round to round. An engine's throughput is the workload's output tokens
over the sum of its phases' times. ``vs_best_static`` pairs MineDraft with the
best static engine of the same round (median over rounds): what a user who
picked the best single setting for the whole workload in hindsight would get.

    python -m benchmarks.shifting                 # ~15 min on 2 idle cores
    python -m benchmarks.shifting --replot        # plot and table from the JSON

Writes ``benchmarks/results/cpu/shifting.json`` and ``shifting.png``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks import runner, sweep  # the sweep's workers, setup and prompts
from harness.sidebyside import steps_by_depth

# Engine name -> (the sweep's mode, k); the static ones are what a user can pick in vLLM.
ENGINES = {"no_sd": ("no_sd", None), "stock_sd_k1": ("stock_sd", 1), "stock_sd_k3": ("stock_sd", 3),
           "minedraft_auto": ("minedraft_auto", 3)}
STATIC = ("no_sd", "stock_sd_k1", "stock_sd_k3")
RAMP = (1, 4, 8, 16, 32, 16, 8, 4, 1)
TEXTS = {"greedy": 0.0, "sampled": 1.0}  # text kind -> temperature
RAMP_TEXTS = ("greedy", "sampled", "greedy")
OUT = runner.CPU_RESULTS


def phases(prompts: list[list[int]], output_tokens: int) -> list[dict]:
    """The workload: one phase per (ramp, N); each phase's prompts differ from the previous phase's."""
    plan, offset = [], 0
    for text in RAMP_TEXTS:
        for n in RAMP:
            batch = [prompts[(offset + i) % len(prompts)] for i in range(n)]
            offset += n
            plan.append({"text": text, "requests": n, "prompts": batch, "output_tokens": output_tokens})
    return plan


def worker_command(plan: list[dict]) -> list[dict]:
    """The phases as :func:`sweep.measure` takes them."""
    return [{"prompts": p["prompts"], "output_tokens": p["output_tokens"], "temperature": TEXTS[p["text"]]}
            for p in plan]


def run(setup, args, plan: list[dict], log_dir: Path) -> list[dict]:
    specs = {}
    for name, (mode, k) in ENGINES.items():
        specs[name] = sweep.worker_spec(setup, args.draft, mode, k, plan[0]["prompts"][:1] * 4)
    pool = sweep.Pool(max_alive=len(specs), log_dir=log_dir)
    names, samples = list(specs), []
    try:
        pool.start_together(((name,), spec, env) for name, (spec, env) in specs.items())
        with sweep.progress(args.rounds * len(names), "shifting load") as bar:
            for r in range(args.rounds):
                shift = r % len(names)
                for name in names[shift:] + names[:shift]:
                    results = pool.get((name,), *specs[name]).run_phases(worker_command(plan))
                    for i, (phase, result) in enumerate(zip(plan, results)):
                        samples.append({"engine": name, "round": r, "phase": i, "text": phase["text"],
                                        "requests": phase["requests"], **result})
                    bar.update()
    finally:
        pool.stop_all()
    return samples


def totals(samples: list[dict]) -> dict[tuple[str, int], float]:
    """(engine, round) -> the workload's tok/s: all its tokens over the sum of its phases' times."""
    tokens, seconds = {}, {}
    for s in samples:
        key = (s["engine"], s["round"])
        tokens[key] = tokens.get(key, 0) + s["generated_tokens"]
        seconds[key] = seconds.get(key, 0.0) + s["elapsed_s"]
    return {key: tokens[key] / seconds[key] for key in tokens}


def summarize(samples: list[dict]) -> dict:
    """Per engine: median workload tok/s and paired ratios; per phase: median tok/s; greedy digests agree?"""
    by_round = totals(samples)
    rounds = sorted({r for _, r in by_round})
    best = {r: max(STATIC, key=lambda e: by_round[e, r]) for r in rounds}
    engines = {}
    for name in ENGINES:
        ratios = [by_round[name, r] / by_round[best[r], r] for r in rounds]
        engines[name] = {"tok_s": round(statistics.median(by_round[name, r] for r in rounds), 1),
                         "vs_best_static": round(statistics.median(ratios), 3),
                         "vs_best_static_min": round(min(ratios), 3), "vs_best_static_max": round(max(ratios), 3)}
        for other in STATIC:
            engines[name][f"vs_{other}"] = round(statistics.median(
                by_round[name, r] / by_round[other, r] for r in rounds), 3)
    phase_rows = []
    for i in sorted({s["phase"] for s in samples}):
        mine = [s for s in samples if s["phase"] == i]
        row = {"phase": i, "text": mine[0]["text"], "requests": mine[0]["requests"]}
        for name in ENGINES:
            row[name] = round(statistics.median(s["tok_s"] for s in mine if s["engine"] == name), 1)
        depths = {}
        for s in mine:
            if s["engine"] == "minedraft_auto":
                for depth, n in steps_by_depth(s["counters"]).items():
                    depths[depth] = depths.get(depth, 0) + n
        row["auto_steps_by_depth"] = depths
        phase_rows.append(row)
    digests = {}
    for s in samples:
        if s.get("tokens_digest"):
            digests.setdefault((s["phase"], s["round"]), set()).add(s["tokens_digest"])
    return {"engines": engines, "best_static_by_round": [best[r] for r in rounds], "phases": phase_rows,
            "greedy_tokens_equal": all(len(d) == 1 for d in digests.values()), "greedy_batches_compared": len(digests)}


def mean_depth(depths: dict) -> float | None:
    steps = sum(depths.values())
    return sum(int(d) * n for d, n in depths.items()) / steps if steps else None


def markdown(summary: dict, meta: dict) -> str:
    lines = [f"Measured {meta['date'][:10]} on {meta['device_label']}: {meta['draft']}, "
             f"{meta['output_tokens']}-token outputs, concurrency {' -> '.join(map(str, RAMP))} "
             f"three times ({', '.join(RAMP_TEXTS)}), median of {meta['rounds']} rotating rounds.", "",
             "| engine | workload tok/s | vs best static (paired, min-max) | vs target alone | vs stock SD k=3 |",
             "|---|---|---|---|---|"]
    for name, row in summary["engines"].items():
        lines.append(f"| {name} | {row['tok_s']:.0f} | {row['vs_best_static']:.2f}x "
                     f"({row['vs_best_static_min']:.2f}-{row['vs_best_static_max']:.2f}) | "
                     f"{row['vs_no_sd']:.2f}x | {row['vs_stock_sd_k3']:.2f}x |")
    lines += ["", f"Best static engine by round: {', '.join(summary['best_static_by_round'])}. "
              f"Greedy phases' tokens equal across engines: {summary['greedy_tokens_equal']} "
              f"({summary['greedy_batches_compared']} batches)."]
    return "\n".join(lines)


def plot(summary: dict, path: Path, device_label: str) -> Path:
    rows = summary["phases"]
    x = [r["phase"] for r in rows]
    fig, (top, bottom) = runner.pyplot().subplots(2, 1, figsize=(8, 5), sharex=True,
                                                  gridspec_kw={"height_ratios": [3, 1]})
    for name in ENGINES:
        top.plot(x, [r[name] for r in rows], "o-", ms=3, label=name)
    for r in rows:
        if r["text"] == "sampled":
            top.axvspan(r["phase"] - 0.5, r["phase"] + 0.5, color="0.92", lw=0)
    top.set_yscale("log")
    top.set_ylabel("tok/s (median)")
    top.legend(fontsize=7, ncol=2)
    top.set_title(f"Shifting load (grey: sampled at T=1), {device_label}", fontsize=8)
    bottom.bar(x, [mean_depth(r["auto_steps_by_depth"]) or 0 for r in rows], color="tab:red")
    bottom.set_ylabel("auto: mean k'", fontsize=7)
    bottom.set_xticks(x, [str(r["requests"]) for r in rows], fontsize=6)
    bottom.set_xlabel("phase (concurrent requests N)")
    return runner.save(fig, path)


def parse_args(argv=None):
    parser = runner.parser(__doc__, rounds=3)
    parser.add_argument("--draft", default="draft_small")
    parser.add_argument("--output-tokens", type=int, default=128)
    # The sweep's prompts and layout (engine core in its own process).
    return sweep.inherit_workload(parser.parse_args(argv))


def measure(args) -> dict:
    setup = sweep.cpu_setup(args, [args.draft])
    prompts, log_dir = sweep.prompts_and_log_dir(setup, args, args.draft, "shifting")
    started = time.perf_counter()
    samples = run(setup, args, phases(prompts, args.output_tokens), log_dir)
    meta = runner.meta(setup.device_label, started, setup.engine, draft=args.draft,
                       output_tokens=args.output_tokens, rounds=args.rounds, prompt_tokens=args.prompt_tokens,
                       engine_core=args.engine_core, ramp=RAMP, ramp_texts=RAMP_TEXTS, temperatures=TEXTS)
    return {"meta": meta, "summary": summarize(samples), "samples": samples}


def main(argv=None) -> None:
    args = parse_args(argv)
    result = runner.run_or_replot(args, OUT / "shifting.json", lambda: measure(args))
    png = plot(result["summary"], OUT / "shifting.png", result["meta"]["device_label"])
    runner.report(png, markdown(result["summary"], result["meta"]))


if __name__ == "__main__":
    main()
