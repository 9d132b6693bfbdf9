"""What a step at speculation depth 0 costs: the floor of the depth controller.

Where speculation loses, the controller's best is depth 0 on every step; this
measures how close that comes to the target alone, with no controller and no
probes. Three engines with the same draft and k, every step forced to depth 0
by vLLM's own table (``num_speculative_tokens_per_batch_size``, one range of 0):

* ``no_sd``: the target alone;
* ``vllm_depth0``: stock vLLM with that table (its draft model still runs one
  forward a step to keep its KV cache in step);
* ``minedraft_depth0``: MineDraft with that table (the draft model skips that
  forward and catches up when it next drafts; no rejection sampler and no
  draft collection where a step has no drafts: RFC §2.5).

With ``--twin`` a fourth engine, ``no_sd_twin``, is the target alone again,
started and run the same way: its ratio to the target alone is what an engine
identical to it reads here, the resolution of the other two columns.

All three (or four) are up at once; each round runs every engine once at each N, in an
order that rotates from round to round; ratios pair runs of the same round
and the reported one is their median. The sweep's workload, prompts, engine
arguments and layout (``sweep.py`` is reused).

    python -m benchmarks.depth_floor              # ~10 min on 2 idle cores
    python -m benchmarks.depth_floor --replot     # plot and table from the JSON
    python -m benchmarks.depth_floor --draft eagle3 --twin --concurrency 8 32
    python -m benchmarks.depth_floor --pair ~/.cache/minedraft/real-pair --twin --concurrency 8 32 --output-tokens 64

``--pair``: the real pretrained pair (``real_pair.py``'s setup and code prompts) instead of the kit's models;
its engines are loaded one at a time, and stock vLLM at depth 0 is left out (four engines of the real pair
ran out of 24 GB).

Writes ``benchmarks/results/cpu/depth_floor.json`` and ``depth_floor.png`` (another ``--draft``:
``depth_floor_<draft>.*``; ``--pair``: ``depth_floor_real_pair.*``; ``--twin``: ``*_twin.*``; ``--draft eagle3``: the kit's EAGLE-3 head, whose depth-0 forward MineDraft
skips too).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from benchmarks import real_pair  # the real pair's setup and prompts
from benchmarks import runner, sweep  # the sweep's workers, setup and workload

# Engine name -> the sweep's mode it is built as; all but no_sd get the depth-0 table.
ENGINES = {"no_sd": "no_sd", "vllm_depth0": "stock_sd", "minedraft_depth0": "minedraft_auto"}
TWIN = {"no_sd_twin": "no_sd"}
OUT = runner.CPU_RESULTS


def engine_specs(setup, draft: str, k: int, warmup, twin: bool = False,
                 leave_out: tuple[str, ...] = ()) -> dict[str, tuple[dict, dict]]:
    specs = {}
    for name, mode in {**ENGINES, **(TWIN if twin else {})}.items():
        if name in leave_out:
            continue
        spec, env = sweep.worker_spec(setup, draft, mode, k, warmup)
        if mode != "no_sd":
            spec["engine"]["speculative_config"]["num_speculative_tokens_per_batch_size"] = [
                [1, sweep.MAX_REQUESTS, 0]]
        specs[name] = (spec, env)
    return specs


def run(setup, args, prompts, log_dir: Path) -> list[dict]:
    specs = engine_specs(setup, args.draft, args.k, prompts[:4], twin=args.twin,
                         leave_out=("vllm_depth0",) if args.pair is not None else ())
    pool = sweep.Pool(max_alive=len(specs), log_dir=log_dir)
    names = list(specs)
    samples = []
    try:
        if args.pair is not None:
            for name, (spec, env) in specs.items():
                pool.get((name,), spec, env)
        else:
            pool.start_together(((name,), spec, env) for name, (spec, env) in specs.items())
        with sweep.progress(args.rounds * len(args.concurrency) * len(names), "depth floor") as bar:
            for r in range(args.rounds):
                for i, n in enumerate(args.concurrency):
                    shift = (r + i) % len(names)
                    for name in names[shift:] + names[:shift]:
                        result = pool.get((name,), *specs[name]).run(prompts[:n], args.output_tokens)
                        samples.append({"engine": name, "round": r, "requests": n, **result})
                        bar.update()
    finally:
        pool.stop_all()
    return samples


def summarize(samples: list[dict]) -> list[dict]:
    """Per (engine, N): median tok/s, and the median over rounds of its ratio to the target alone."""
    by = {(s["engine"], s["requests"], s["round"]): s["tok_s"] for s in samples}
    rows = []
    for engine, n in sorted({(s["engine"], s["requests"]) for s in samples}, key=lambda x: (x[1], x[0])):
        rounds = sorted(r for e, m, r in by if (e, m) == (engine, n))
        ratios = [by[engine, n, r] / by["no_sd", n, r] for r in rounds if ("no_sd", n, r) in by]
        rows.append({"engine": engine, "requests": n, "tok_s": round(statistics.median(by[engine, n, r] for r in rounds), 1),
                     "vs_no_sd": round(statistics.median(ratios), 3), "vs_no_sd_min": round(min(ratios), 3),
                     "vs_no_sd_max": round(max(ratios), 3), "rounds": len(rounds)})
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"Measured {meta['date'][:10]} on {meta['device_label']}: {meta['draft']}, k = {meta['k']}, "
             f"{meta['output_tokens']}-token outputs, medians of {meta['rounds']} interleaved rounds.", "",
             "| N | target alone (tok/s) | vLLM at depth 0 / target alone | MineDraft at depth 0 / target alone |",
             "|---|---|---|---|"]
    cell = {(r["engine"], r["requests"]): r for r in rows}
    twin = any(r["engine"] == "no_sd_twin" for r in rows)
    if twin:
        lines[-2] += " target alone again / target alone (min-max over rounds) |"
        lines[-1] += "---|"
    for n in sorted({r["requests"] for r in rows}):
        vllm = f"{cell['vllm_depth0', n]['vs_no_sd']:.2f}x" if ("vllm_depth0", n) in cell else "-"
        line = (f"| {n} | {cell['no_sd', n]['tok_s']:.0f} | {vllm} | "
                f"{cell['minedraft_depth0', n]['vs_no_sd']:.2f}x |")
        if twin:
            t = cell["no_sd_twin", n]
            line += f" {t['vs_no_sd']:.2f}x ({t['vs_no_sd_min']:.2f}x-{t['vs_no_sd_max']:.2f}x) |"
        lines.append(line)
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, device_label: str) -> Path:
    fig, ax = runner.pyplot().subplots(figsize=(6, 3.6))
    for engine, color in (("vllm_depth0", "tab:orange"), ("minedraft_depth0", "tab:green"),
                          ("no_sd_twin", "tab:gray")):
        mine = [r for r in rows if r["engine"] == engine]
        if not mine:
            continue
        x = [r["requests"] for r in mine]
        y = [r["vs_no_sd"] for r in mine]
        err = [[v - r["vs_no_sd_min"] for v, r in zip(y, mine)], [r["vs_no_sd_max"] - v for v, r in zip(y, mine)]]
        ax.errorbar(x, y, yerr=err, fmt="o-", ms=4, capsize=3, color=color, label=f"{engine} / target alone")
    runner.requests_axis(ax, "concurrent requests N")
    ax.set_ylabel("tok/s ratio (median, min-max)")
    ax.legend(fontsize=7)
    ax.set_title(f"Every step at depth 0 against the target alone, {device_label}", fontsize=8)
    return runner.save(fig, path)


def parse_args(argv=None):
    parser = runner.parser(__doc__, rounds=5)
    parser.add_argument("--draft", default="draft_perturbed")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--twin", action="store_true",
                        help="a second target-alone engine: what an identical engine's ratio reads here")
    parser.add_argument("--pair", type=Path, help="real-pair.sh's output folder: run the real pair (``--draft`` is ignored)")
    # The sweep's prompts and layout (engine core in its own process).
    return sweep.inherit_workload(parser.parse_args(argv))


def measure(args) -> dict:
    if args.pair is not None:
        if not (args.pair / "done").exists():
            sys.exit(f"depth_floor: no real pair in {args.pair}; build it with modelkit/real_pair.sh")
        setup = real_pair.setup_for(args.pair, args)
        prompts = real_pair.tokenized(args.pair / "target", "code", max(args.concurrency))
        log_dir = Path(sweep.tempfile.mkdtemp(prefix="minedraft-depth-floor-"))
    else:
        setup = sweep.cpu_setup(args, [args.draft])
        prompts, log_dir = sweep.prompts_and_log_dir(setup, args, args.draft, "depth-floor")
    started = time.perf_counter()
    samples = run(setup, args, prompts, log_dir)
    meta = runner.meta(setup.device_label, started, setup.engine, draft=args.draft, models=setup.meta.get("models"),
                       k=args.k, twin=args.twin, output_tokens=args.output_tokens, rounds=args.rounds,
                       prompt_tokens=args.prompt_tokens, engine_core=args.engine_core)
    return {"meta": meta, "rows": summarize(samples), "samples": samples}


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.pair is not None:
        args.draft = "real"
    stem = "depth_floor" if args.draft == "draft_perturbed" else f"depth_floor_{args.draft}"
    stem = "depth_floor_real_pair" if args.pair is not None else stem
    stem += "_twin" if args.twin else ""
    result = runner.run_or_replot(args, OUT / f"{stem}.json", lambda: measure(args))
    png = plot(result["rows"], OUT / f"{stem}.png", result["meta"]["device_label"])
    runner.report(png, markdown(result["rows"], result["meta"]))


if __name__ == "__main__":
    main()
