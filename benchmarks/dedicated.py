"""The drafter on its own hardware: MineDraft's process drafter on core 1, the target on core 0.

Issue #14's measurement on this 2-core CPU, with the sweep's workload and
engine layout (``sweep.py`` is reused: prompts, engine arguments, workers,
engine core in its own process). Modes, all with the kit's target and the
same draft and k:

* ``stock_sd_core0``: vLLM's speculative decoding, its worker bound to core 0
  (``VLLM_CPU_OMP_THREADS_BIND=0``): the paper's baseline, one device fewer;
* ``stock_sd_2cores``: the same on both cores (``VLLM_CPU_OMP_THREADS_BIND=0-1``):
  the baseline with the same hardware as MineDraft;
* ``minedraft_process``: MineDraft pinned to parallel mode, the target on core
  0, the draft model as its own engine on core 1
  (``MINEDRAFT_DRAFTER=process``, ``MINEDRAFT_DRAFTER_DEVICE=cpu:1``);
* ``minedraft_process_auto``: the same in the default ``auto`` mode, which
  knows the drafter has hardware of its own (no prior: it probes parallel
  steps and keeps them where they win);
* ``minedraft_process_serial``: the same in ``stock`` mode (draft, then
  verify): the cost of drafting through an engine in another process, with
  no overlap to pay for it.

Comparisons: ``equal_concurrency`` (every mode runs N requests) and ``paper``
(``minedraft_process`` runs 2N against stock SD's N). Ratios pair runs of the
same round (all engines up at once, the order rotating per round).

    python -m benchmarks.dedicated                          # ~30 min on 2 idle cores
    python -m benchmarks.dedicated --pair large --ks 1 3 5  # the larger pair (modelkit/large.py)
    python -m benchmarks.dedicated --replot

Writes ``benchmarks/results/cpu/dedicated.json`` (``dedicated_large.json`` for the
larger pair) and ``dedicated_<draft>.png``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import runner, sweep  # the sweep's workers, setup and workload
from harness.engine_args import PROCESS_DRAFTER_ON_CORE_1, engine_kwargs

# mode -> (benchmark mode of the engine, MineDraft settings, target's cores)
MODES = {
    "stock_sd_core0": ("stock_sd", None, "0"),
    "stock_sd_2cores": ("stock_sd", None, "0-1"),
    "minedraft_process": ("minedraft_parallel", PROCESS_DRAFTER_ON_CORE_1, "0"),
    "minedraft_process_auto": ("minedraft_auto", PROCESS_DRAFTER_ON_CORE_1, "0"),
    "minedraft_process_serial": ("minedraft_parallel", {**PROCESS_DRAFTER_ON_CORE_1, "mode": "stock"}, "0"),
}
BASELINES = ("stock_sd_core0", "stock_sd_2cores")
PAPER_MODE = "minedraft_process"
OUT = runner.CPU_RESULTS

def readme_markers(pair: str) -> tuple[str, str]:
    name = "dedicated" if pair == "kit" else f"dedicated-{pair}"
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def result_path(pair: str) -> Path:
    return OUT / ("dedicated.json" if pair == "kit" else f"dedicated_{pair}.json")


def pair_setup(args):
    """The sweep's CPU setup, with the larger pair in place of the kit's for ``--pair large``."""
    import dataclasses

    setup = sweep.cpu_setup(args, args.drafts)
    if args.pair == "kit":
        return setup
    from modelkit.large import LARGE_ARCH, build_large_pair

    pair = build_large_pair()
    return dataclasses.replace(
        setup, pairs={"large_perturbed": (pair.target, pair.draft)}, target_names={"large_perturbed": "target_large"},
        meta={"models": f"modelkit.large: a {LARGE_ARCH['num_hidden_layers']}-layer, "
                        f"{LARGE_ARCH['hidden_size']}-wide random target and its perturbed copy (float32)",
              "draft_agreement": {"large_perturbed": pair.marker("draft").get("agreement")}})


def worker(setup, draft: str, mode: str, k: int, prompts) -> tuple[tuple, dict, dict]:
    bench_mode, settings, cores = MODES[mode]
    target, draft_path = setup.pairs[draft]
    kwargs = engine_kwargs(bench_mode, target, sweep.Speculation(draft_path, k), minedraft=settings,
                           defaults={}, **setup.engine)
    env = {**setup.env, "VLLM_CPU_OMP_THREADS_BIND": cores}
    return (mode, draft, f"k{k}"), {"engine": kwargs, "warmup_prompts": prompts[:4]}, env


def block_jobs(args) -> list[tuple[int, str, int]]:
    """(repeat, mode, requests) of every run of one (draft, k), in run order: each round
    (one repeat at one N) runs every mode once, the order rotating per round."""
    jobs = []
    rounds = [(r, n) for r in range(args.repeats) for n in args.concurrency]
    for index, (repeat, n) in enumerate(rounds):
        at = [(mode, n) for mode in MODES] + [(PAPER_MODE, 2 * n)] * (2 * n not in args.concurrency)
        shift = index % len(at)
        jobs += [(repeat, mode, requests) for mode, requests in at[shift:] + at[:shift]]
    return jobs


def run_block(setup, args, pool, draft: str, k: int, prompts, bar) -> list[dict]:
    """Every run of one (draft, k), all engines up at once; ``bar`` counts the runs."""
    bar.set_postfix_str(f"{draft} k={k}: starting engines")
    workers = {mode: worker(setup, draft, mode, k, prompts) for mode in MODES}
    pool.start_together(workers.values())
    samples = []
    for repeat, mode, requests in block_jobs(args):
        bar.set_postfix_str(f"{draft} k={k} {mode} x{requests}")
        result = pool.get(*workers[mode]).run(prompts[:requests], args.output_tokens)
        bar.update()
        samples.append({"draft": draft, "k": k, "mode": mode, "requests": requests, "repeat": repeat,
                        **result})
    pool.stop_all()
    sweep.print_block([{**s, "output_tokens": args.output_tokens} for s in samples])
    return samples


def summarize(samples: list[dict], concurrency: list[int]) -> list[dict]:
    """Per (draft, k, N): every mode's median tok/s and MineDraft's paired ratios to each baseline."""
    rate = {(s["draft"], s["k"], s["mode"], s["requests"], s["repeat"]): s["tok_s"] for s in samples}
    by = defaultdict(list)
    for s in samples:
        by[(s["draft"], s["k"], s["mode"], s["requests"])].append(s)
    rows = []
    for draft, k in sorted({(s["draft"], s["k"]) for s in samples}):
        for n in concurrency:
            row = {"draft": draft, "k": k, "batch_size": n}
            for mode in MODES:
                runs = by.get((draft, k, mode, n), [])
                row[f"{mode}_tok_s"] = round(statistics.median(s["tok_s"] for s in runs), 1) if runs else None
                if runs and mode.startswith("minedraft"):
                    for counter in ("parallel_steps", "parallel_trial_steps", "late_drafts"):
                        row[f"{mode}_{counter}"] = int(sum(s["counters"].get(f"minedraft:{counter}", 0)
                                                           for s in runs))
            repeats = sorted({s["repeat"] for s in samples})
            for mode, total, comparison in (("minedraft_process", n, "equal_concurrency"),
                                            ("minedraft_process_auto", n, "equal_concurrency"),
                                            ("minedraft_process_serial", n, "equal_concurrency"),
                                            ("minedraft_process", 2 * n, "paper")):
                for base in BASELINES:
                    ratios = [rate[(draft, k, mode, total, r)] / rate[(draft, k, base, n, r)] for r in repeats
                              if (draft, k, mode, total, r) in rate and (draft, k, base, n, r) in rate]
                    if ratios:
                        row[f"{mode}_{comparison}_vs_{base}"] = round(statistics.median(ratios), 3)
            rows.append(row)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    out = [f"{meta['date'][:10]}, {meta['device_label']}: target on core 0, draft engine on core 1; prompt "
           f"{meta['prompt_tokens']} tokens, {meta['output_tokens']} output tokens, median of {meta['repeats']} "
           "paired repeats.", ""]
    columns = [("minedraft_process", "equal_concurrency", "stock_sd_core0", "parallel / stock core 0"),
               ("minedraft_process", "equal_concurrency", "stock_sd_2cores", "parallel / stock 2 cores"),
               ("minedraft_process", "paper", "stock_sd_core0", "paper: parallel 2N / stock core 0 N"),
               ("minedraft_process", "paper", "stock_sd_2cores", "paper: parallel 2N / stock 2 cores N"),
               ("minedraft_process_auto", "equal_concurrency", "stock_sd_core0", "auto / stock core 0"),
               ("minedraft_process_auto", "equal_concurrency", "stock_sd_2cores", "auto / stock 2 cores"),
               ("minedraft_process_serial", "equal_concurrency", "stock_sd_core0", "serial / stock core 0")]
    out += ["| draft | k | N | " + " | ".join(c[3] for c in columns) + " |", "|---|---|---|" + "---|" * len(columns)]
    for row in rows:
        cells = [row.get(f"{m}_{c}_vs_{b}") for m, c, b, _ in columns]
        out.append(f"| {row['draft']} | {row['k']} | {row['batch_size']} | "
                   + " | ".join(f"{v:.2f}x" if v is not None else "" for v in cells) + " |")
    return "\n".join(out) + "\n"


def plot(rows: list[dict], out_dir: Path, label: str) -> list[Path]:
    paths = []
    for draft in sorted({r["draft"] for r in rows}):
        at = [r for r in rows if r["draft"] == draft]
        ks = sorted({r["k"] for r in at})
        fig, axes = runner.pyplot().subplots(1, len(ks), figsize=(3.8 * len(ks), 3.6), sharey=True, squeeze=False)
        for ax, k in zip(axes[0], ks):
            series = sorted((r for r in at if r["k"] == k), key=lambda r: r["batch_size"])
            x = [r["batch_size"] for r in series]
            for key, style, name in (
                    ("minedraft_process_equal_concurrency_vs_stock_sd_core0", "o-", "vs stock SD core 0"),
                    ("minedraft_process_equal_concurrency_vs_stock_sd_2cores", "s-", "vs stock SD 2 cores"),
                    ("minedraft_process_paper_vs_stock_sd_core0", "o--", "paper (2N) vs stock core 0"),
                    ("minedraft_process_auto_equal_concurrency_vs_stock_sd_core0", "^-", "auto vs stock core 0"),
                    ("minedraft_process_serial_equal_concurrency_vs_stock_sd_core0", "x:", "serial vs stock core 0")):
                ax.plot(x, [r.get(key) for r in series], style, ms=4, label=name)
            runner.requests_axis(ax, "N (stock SD's running requests)", ticks=x)
            ax.set_title(f"k={k}")
        axes[0][0].set_ylabel("MineDraft process drafter / stock SD")
        axes[0][-1].legend(fontsize=7)
        fig.suptitle(f"Process drafter on core 1, target on core 0, {draft}; {label}", fontsize=8)
        paths.append(runner.save(fig, out_dir / f"dedicated_{draft}.png"))
    return paths


def merge(previous: dict, samples: list[dict], args) -> tuple[list[dict], dict]:
    """The previous run's samples of other (draft, k) pairs, then this run's."""
    measured = {(d, k) for d in args.drafts for k in args.ks}
    kept = [s for s in previous["samples"] if (s["draft"], s["k"]) not in measured]
    note = {"kept_from": previous["meta"]["date"], "kept_pairs": sorted({(s["draft"], s["k"]) for s in kept}),
            "measured_pairs": sorted(measured)}
    return kept + samples, note


def parse_args(argv=None):
    parser = runner.parser(__doc__)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--pair", choices=("kit", "large"), default="kit",
                        help="the kit's tiny pair, or modelkit.large's (about 8x the target's compute per token)")
    parser.add_argument("--drafts", nargs="+", default=None, help="default: draft_perturbed (kit), large_perturbed")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--merge", action="store_true",
                        help="keep the existing JSON's samples of the (draft, k) pairs this run does not measure")
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args(argv)
    args.drafts = args.drafts or (["draft_perturbed"] if args.pair == "kit" else ["large_perturbed"])
    args.engine_core = "process"
    return args


def measure(args, path: Path) -> dict:
    setup = pair_setup(args)
    prompts, log_dir = sweep.prompts_and_log_dir(setup, args, args.drafts[0], "dedicated")
    pool = sweep.Pool(max_alive=len(MODES), log_dir=log_dir)
    started, samples = time.perf_counter(), []
    total = len(args.drafts) * len(args.ks) * len(block_jobs(args))
    try:
        with sweep.progress(total, "dedicated") as bar:
            for draft in args.drafts:
                for k in args.ks:
                    sweep.say(f"{draft} k={k}")
                    samples += run_block(setup, args, pool, draft, k, prompts, bar)
    finally:
        pool.stop_all()
    meta = runner.meta(
        setup.device_label, started, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
        repeats=args.repeats, concurrency=args.concurrency,
        modes={m: {"engine_mode": b, "minedraft": s, "target_cores": c} for m, (b, s, c) in MODES.items()},
        engine_core="process", pair=args.pair, models=setup.meta.get("models"),
        draft_agreement=setup.meta.get("draft_agreement"), engine_starts=pool.starts)
    if args.merge and path.exists():
        samples, meta["merged"] = merge(json.loads(path.read_text()), samples, args)
    return {"meta": meta, "rows": summarize(samples, args.concurrency), "samples": samples}


def main(argv=None) -> None:
    args = parse_args(argv)
    path = result_path(args.pair)
    result = runner.run_or_replot(args, path, lambda: measure(args, path))
    pngs = plot(result["rows"], OUT, result["meta"]["device_label"])
    table = markdown(result["rows"], result["meta"])
    runner.report(pngs, table)
    if args.update_readme:
        begin, end = readme_markers(args.pair)
        sweep.update_readme(table, begin=begin, end=end)


if __name__ == "__main__":
    main()
