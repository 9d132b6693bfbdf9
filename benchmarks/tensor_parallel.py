"""A tensor-parallel target on this CPU: the target alone, stock SD and MineDraft at TP 2, side by side.

The target at TP 2 (vLLM's multiprocessing executor, a worker process per rank, rank r on core r:
``VLLM_CPU_OMP_THREADS_BIND=0|1``), the kit's draft as large as the target, k = 3, the kit's
48-request mix (``harness.sidebyside``: prompts of 1-500 tokens, chunked prefill, prefix caching, a
KV cache small enough to preempt). Engines:

* ``no_sd``: the target alone; ``stock_sd``: vLLM's speculative decoding;
* ``minedraft_auto``: MineDraft's default with the in-process drafter, which drafts on the serial
  lane under tensor parallelism (RFC §7);
* ``minedraft_auto_process``: the same with the process drafter on core 1 (shared with rank 1: on
  two cores there is no core of its own to give it).

All four engines stay up; each round runs the mix once per engine, the order rotating, and the
result is each engine's median output tokens/s over rounds, with every run's tokens checked against
the target alone's first run. A correctness setting measured, not a speed one: two cores for two
ranks and a drafter.

    python -m benchmarks.tensor_parallel [--rounds 3]

Writes ``benchmarks/results/cpu/tensor_parallel.json`` and ``.png``.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from benchmarks import runner
from benchmarks.serving import rotated  # the serving benchmark's rotating engine order
from harness.child import Child
from harness.engine_args import PROCESS_DRAFTER_ON_CORE_1
from harness.sidebyside import CHILD, mode_spec

TP = 2
ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
ENGINES = {  # name -> (harness mode, MineDraft settings)
    "no_sd": ("no_sd", None),
    "stock_sd": ("stock_sd", None),
    "minedraft_auto": ("minedraft_auto", None),
    "minedraft_auto_process": ("minedraft_auto", PROCESS_DRAFTER_ON_CORE_1),
}
OUT = runner.CPU_RESULTS / "tensor_parallel.json"


def start(kit, log_dir: Path) -> dict[str, Child]:
    children = {}
    for name, (mode, minedraft) in ENGINES.items():
        spec = {**mode_spec(mode, str(kit.target), str(kit.draft_perturbed), minedraft=minedraft,
                            tensor_parallel_size=TP), "name": name}
        children[name] = Child(CHILD, spec, log_dir, env=ENV)
    for child in children.values():
        child.ready()
    return children


def measure(rounds: int) -> dict:
    from modelkit import build_kit

    kit = build_kit()
    log_dir = Path(tempfile.mkdtemp(prefix="minedraft-tp-"))
    print(f"engine logs: {log_dir}", flush=True)
    names = tuple(ENGINES)
    runs: list[dict] = []
    children = start(kit, log_dir)
    try:
        for r in range(rounds):
            for name in rotated(names, r):
                result = children[name].call({"cmd": "run"})
                runs.append({"engine": name, "round": r, "output_tokens_per_s": round(result["output_tokens_per_s"], 1),
                             "tokens": result["tokens"], "metrics": result["metrics"]})
                print(f"round {r} {name:>24}: {runs[-1]['output_tokens_per_s']:7.1f} tok/s", flush=True)
    finally:
        for child in children.values():
            child.close()
    reference = next(x["tokens"] for x in runs if x["engine"] == "no_sd")
    medians = {n: statistics.median(x["output_tokens_per_s"] for x in runs if x["engine"] == n) for n in names}
    summary = {n: {"output_tokens_per_s": medians[n], "vs_target_alone": round(medians[n] / medians["no_sd"], 3),
                   "vs_stock_sd": round(medians[n] / medians["stock_sd"], 3),
                   "identical_to_target_alone": all(x["tokens"] == reference for x in runs if x["engine"] == n)}
               for n in names}
    for x in runs:
        del x["tokens"]
    return {"measured": runner.minute(),
            "device": "cpu (2 cores), target at tensor parallelism 2, rank r on core r",
            "workload": "harness.sidebyside's 48-request mix (prompts 1-500 tokens, max_tokens 1-100, chunked "
                        "prefill 128, prefix caching, 48 KV blocks: preemption), greedy, k=3, the kit's "
                        "draft_perturbed (as large as the target), float32",
            "rounds": rounds, "summary": summary, "runs": runs}


def plot(result: dict, path: Path) -> None:
    names = list(result["summary"])
    values = [result["summary"][n]["output_tokens_per_s"] for n in names]
    fig, ax = runner.pyplot().subplots(figsize=(7, 3.5))
    ax.bar(names, values, color=["#888", "#c66", "#36c", "#3a6"])
    for i, n in enumerate(names):
        ax.text(i, values[i], f"{result['summary'][n]['vs_target_alone']:.2f}x", ha="center", va="bottom")
    ax.set_ylabel("output tokens/s (median)")
    ax.set_title(f"TP 2 target on 2 CPU cores, k=3 ({result['measured']}); label: / target alone", fontsize=9)
    runner.save(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    args = runner.parser(__doc__, rounds=3, replot="no runs: redraw the plot from the JSON").parse_args(argv)
    result = runner.run_or_replot(args, OUT, lambda: measure(args.rounds), indent=2)
    plot(result, OUT.with_suffix(".png"))
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
