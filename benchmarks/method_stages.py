"""MineDraft's default against stock SD with the same method, per stage, engines in one process.

The methods sweep (``python -m benchmarks.sweep --drafts ngram suffix ...``) runs each engine in
its own process, and on this machine its rounds spread by 10-30 %: five
rounds do not separate a 5 % difference. Here the engines share one process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and run in alternation, with the sweep's
engine settings, speculative configs (``sweep.cpu_setup``) and prompts, and each
stage of a step is timed where vLLM calls it (``depth0_stages.py``'s timer):

* ``stock_sd``: stock vLLM with the method, k = 2;
* ``minedraft_auto``: MineDraft's default with the same speculative config;
* ``stock_sd_twin``: stock SD again, the measurement's own resolution.

Besides the other methods, ``--method`` takes the kit's draft models
(``draft_small``, ``draft_perturbed``) and its EAGLE-3 head (``eagle3``): what drafting costs in a step
(``propose_draft_token_ids``) compares across methods.

    python -m benchmarks.method_stages --method suffix    # ~1-3 min on 2 idle cores
    python -m benchmarks.method_stages --plot             # every method's file: method_stages.png

One method per process (vLLM's CPU kernels are bound once per process; for
n-gram, see ``llvmlite_out_of_kernel_scan``).
Writes ``benchmarks/results/cpu/method_stages/<method>.json`` and prints a table: the run time
against stock SD's (paired by round, median), steps per run, and each stage in ms per step.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import runner, sweep
from benchmarks.depth0_stages import EXECUTOR_STAGES, RUNNER_STAGES, SCHEDULER_STAGES, instrument

OUT = runner.CPU_RESULTS
ENGINES = ("stock_sd", "minedraft_auto", "stock_sd_twin")
KIT_DRAFTS = ("draft_small", "draft_perturbed", "eagle3")
METHODS = (*sweep.OTHER_METHODS, *KIT_DRAFTS)


def engine_specs(args) -> tuple[str, dict[str, dict], dict[str, str]]:
    """The target of ``args.method``, each engine's ``LLM`` keyword arguments (the sweep's engine settings
    and speculative config) and the environment the sweep's engines run with."""
    from harness.engine_args import engine_kwargs

    setup = sweep.cpu_setup(args, [args.method])
    target, path = setup.pairs[args.method]
    speculation = sweep.speculation_of(setup, args.method, path, args.k)
    engines = {name: engine_kwargs(name.removesuffix("_twin"), target, speculation, defaults={}, **setup.engine)
               for name in ENGINES}
    return target, engines, setup.env


def measure(engines: dict, prompts: list[list[int]], output_tokens: int, rounds: int) -> dict[str, list[dict]]:
    """Per engine, per round: the run's seconds, its steps (schedule calls) and each stage's seconds."""
    from vllm import SamplingParams

    timers = {name: instrument(llm) for name, llm in engines.items()}
    params = SamplingParams(max_tokens=output_tokens, temperature=0, ignore_eos=True, detokenize=False)
    inputs = [{"prompt_token_ids": p} for p in prompts]
    for llm in engines.values():
        llm.generate(inputs, params, use_tqdm=False)  # warm-up
    per_round = collections.defaultdict(list)
    names = list(engines)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            timers[name].reset()
            started = time.perf_counter()
            engines[name].generate(inputs, params, use_tqdm=False)
            per_round[name].append({"run": time.perf_counter() - started,
                                    "steps": timers[name].calls["schedule"], **timers[name].seconds})
    return per_round


def summarize(per_round: dict[str, list[dict]], method: str, requests: int) -> list[dict]:
    """Per engine: the run time against stock SD's (paired by round), steps per run and each stage's ms
    per step (medians over rounds)."""
    rows = []
    for name, samples in per_round.items():
        ratios = [x["run"] / y["run"] for x, y in zip(samples, per_round["stock_sd"])]
        stages = {stage: round(statistics.median(x.get(stage, 0.0) / x["steps"] for x in samples) * 1e3, 3)
                  for stage in ("run", *SCHEDULER_STAGES, *EXECUTOR_STAGES, *RUNNER_STAGES) if stage in samples[0]}
        rows.append({"method": method, "engine": name, "requests": requests,
                     "run_vs_stock_sd": round(statistics.median(ratios), 3),
                     "run_vs_stock_sd_rounds": [round(x, 3) for x in ratios],
                     "steps_per_run": statistics.median(x["steps"] for x in samples), "ms_per_step": stages})
    return rows


def markdown(rows: list[dict]) -> str:
    stages = ["run", *SCHEDULER_STAGES, *EXECUTOR_STAGES, *RUNNER_STAGES]
    lines = ["| method | N | engine | run time / stock SD | steps | " + " | ".join(stages) + " |",
             "|---|---|---|---|---|" + "---|" * len(stages)]
    for row in rows:
        cells = [f"{row['ms_per_step'].get(s, 0.0):.3f}" for s in stages]
        lines.append(f"| {row['method']} | {row['requests']} | {row['engine']} | {row['run_vs_stock_sd']:.3f}x | "
                     f"{row['steps_per_run']:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(directory: Path) -> Path:
    """Every method's file in ``directory``: the default's and the twin's run time against stock SD's,
    per N (median, min-max over rounds), one panel per method."""
    files = sorted(directory.glob("*.json"))
    fig, axes = runner.pyplot().subplots(1, len(files), figsize=(2.4 * len(files), 2.8), sharey=True, squeeze=False)
    for ax, path in zip(axes[0], files):
        rows = json.loads(path.read_text())["rows"]
        for engine, color in (("minedraft_auto", "tab:green"), ("stock_sd_twin", "tab:gray")):
            mine = [r for r in rows if r["engine"] == engine]
            y = [r["run_vs_stock_sd"] for r in mine]
            err = [[v - min(r["run_vs_stock_sd_rounds"]) for v, r in zip(y, mine)],
                   [max(r["run_vs_stock_sd_rounds"]) - v for v, r in zip(y, mine)]]
            ax.errorbar([r["requests"] for r in mine], y, yerr=err, fmt="o-", ms=4, capsize=3, color=color,
                        label=engine)
        runner.requests_axis(ax, "N", fontsize=8)
        ax.set_title(path.stem, fontsize=8)
    axes[0][0].set_ylabel("run time / stock SD's", fontsize=8)
    axes[0][0].legend(fontsize=6)
    return runner.save(fig, directory / "method_stages.png")


@contextlib.contextmanager
def llvmlite_out_of_kernel_scan():
    """While engines start, hide llvmlite's modules from vLLM 0.32's CPU kernel overrides.

    Every engine's worker registers the overrides (``register_triton_kernel_overrides``),
    which scans each module's namespace for references to the kernels. Once the n-gram
    proposer has imported numba, that scan reaches llvmlite's ``ffi.lib``, whose
    ``__dict__`` is a ``_lib_fn_wrapper``, and fails ("'_lib_fn_wrapper' object has no
    attribute 'get'"): a second n-gram engine in one process cannot start. llvmlite holds
    no vLLM kernel and the registration imports nothing of it, so its modules are taken
    out of ``sys.modules`` for that call only (not for the engine's start, which may
    compile with numba).
    """
    from vllm.platforms import current_platform

    platform = type(current_platform)
    register = platform.__dict__["register_triton_kernel_overrides"]

    def without_llvmlite(cls) -> None:
        hidden = {n: sys.modules.pop(n) for n in [n for n in sys.modules if n.split(".")[0] == "llvmlite"]}
        try:
            register.__func__(cls)
        finally:
            sys.modules.update(hidden)

    platform.register_triton_kernel_overrides = classmethod(without_llvmlite)
    try:
        yield
    finally:
        platform.register_triton_kernel_overrides = register


def run(args) -> list[dict]:
    target, specs, env = engine_specs(args)
    os.environ.update(env)  # the in-process engine core (engine_core inproc), vLLM's usage stats off
    from vllm import LLM

    from modelkit.prompts import token_windows

    with llvmlite_out_of_kernel_scan():
        engines = {name: LLM(**kwargs) for name, kwargs in specs.items()}
    prompts = token_windows(max(args.concurrency), args.prompt_tokens, seed=0, tokenizer_dir=target)
    rows = []
    for n in args.concurrency:
        rows += summarize(measure(engines, prompts[:n], args.output_tokens, args.rounds), args.method, n)
        print(markdown(rows[-len(ENGINES):]), flush=True)
    return rows


def parse_args(argv=None):
    parser = runner.parser(__doc__, rounds=10, replot=None)
    parser.add_argument("--method", default="suffix", choices=METHODS)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, help="default: results/cpu/method_stages/<method>.json")
    parser.add_argument("--plot", action="store_true",
                        help="only plot the files in results/cpu/method_stages/ (method_stages.png)")
    # The sweep's engine settings (sweep.cpu_setup) with the engine core in this process: stages timed in place.
    parser.set_defaults(engine_core="inproc")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.plot:
        print(f"wrote {plot(OUT / 'method_stages')}")
        return
    started = time.perf_counter()
    rows = run(args)
    meta = runner.meta(
        sweep.cpu_label(), started, method=args.method, k=args.k, concurrency=args.concurrency,
        prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens, rounds=args.rounds,
        unit="ms per step: a stage's time over a run divided by the run's steps; medians of rounds")
    out = runner.write_result(args.out or OUT / "method_stages" / f"{args.method}.json", {"rows": rows, "meta": meta})
    print(f"wrote {out}\n\n" + markdown(rows))


if __name__ == "__main__":
    main()
