"""Where a step at depth 0 spends its time, against the target alone: per stage, in one process.

``depth_floor.py`` compares whole engines, each in its own process, and on this
machine its rounds spread by +-20 %: more than what is left to find. Here the
engines share one process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and run in
alternation, and each stage of a step is timed where vLLM calls it (the
scheduler's ``schedule`` and ``update_from_output``, the runner's input
preparation, model forward, sampling and ``propose_draft_token_ids``):

* ``no_sd``: the target alone;
* ``vllm_depth0``: stock vLLM with vLLM's depth table at 0 for every batch size
  (its drafter still runs a forward every step);
* ``minedraft_depth0``: MineDraft with vLLM's depth table at 0 for every batch
  size (as ``depth_floor.py``);
* ``minedraft_depth0_vllm_prep`` (EAGLE heads only): the same, with the runner's
  reduced depth-0 call turned off, so that vLLM prepares the head's inputs
  before the skip (what MineDraft did before 2026-11-26);
* ``minedraft_depth0_no_hidden`` (EAGLE-3 heads only): the same, with what the
  head's catch-up needs turned off: the target computes no auxiliary hidden
  states and the skipped calls keep none (what speculation off would cost if
  the head resumed without a catch-up; not a mode MineDraft offers);
* ``no_sd_twin`` (``--twin``): a second target alone, the measurement's own resolution;
* ``minedraft_auto`` (``--auto``): MineDraft's default, no depth table: its depth controller chooses
  each step's depth (where speculation loses, depth 0 on nearly every step, a re-check's few steps
  deeper), so its step against ``minedraft_depth0``'s is what the controller costs;
* ``minedraft_auto_viewed`` (``--viewed``): the same, each step planned from its view of every request
  where a depth 0 stands, as before 2026-12-06 (the policy's ``held_plan`` off): what planning such a
  step from its key alone saves.

    python -m benchmarks.depth0_stages --draft eagle3            # ~4 min on 2 idle cores
    python -m benchmarks.depth0_stages --draft draft_perturbed

Writes ``benchmarks/results/cpu/depth0_stages_<draft>.json`` and ``.png`` (each engine's step, its stages
stacked) and prints a table (ms per decode step, medians over rounds); ``--replot`` draws them from the JSON.
"""

from __future__ import annotations

import collections
import os
import random
import statistics
import time
from pathlib import Path

from benchmarks import runner
from benchmarks.sweep import cpu_label

OUT = runner.CPU_RESULTS

SCHEDULER_STAGES = ("schedule", "update_from_output")
RUNNER_STAGES = ("_prepare_inputs", "_model_forward", "_sample", "propose_draft_token_ids", "_bookkeeping_sync")
EXECUTOR_STAGES = ("execute_model", "sample_tokens", "take_draft_token_ids")


class StageTimer:
    """Seconds spent in, and calls of, each wrapped method since the last ``reset``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    def wrap(self, obj, name: str) -> None:
        if not hasattr(obj, name):
            return
        method = getattr(obj, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        setattr(obj, name, timed)  # on this instance only: vLLM calls it through self

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def build_engines(draft: str, k: int, max_num_seqs: int, twin: bool = False, auto: bool = False,
                  viewed: bool = False):
    from vllm import LLM

    from harness.engine_args import Speculation, engine_kwargs
    from modelkit import build_kit

    kit = build_kit()
    method = "eagle3" if draft == "eagle3" else "draft_model"
    speculation = Speculation(getattr(kit, draft), k, method,
                              extra={"num_speculative_tokens_per_batch_size": [[1, max_num_seqs, 0]]})
    common = dict(max_model_len=512, max_num_seqs=max_num_seqs)
    engines = {"no_sd": LLM(**engine_kwargs("no_sd", kit.target, **common)),
               "vllm_depth0": LLM(**engine_kwargs("stock_sd", kit.target, speculation, **common)),
               "minedraft_depth0": LLM(**engine_kwargs("minedraft_auto", kit.target, speculation, **common))}
    if twin:
        engines["no_sd_twin"] = LLM(**engine_kwargs("no_sd", kit.target, **common))
    for name in [name for name, wanted in (("minedraft_auto", auto), ("minedraft_auto_viewed", viewed)) if wanted]:
        engines[name] = LLM(**engine_kwargs("minedraft_auto", kit.target, Speculation(getattr(kit, draft), k, method),
                                            **common))
    if viewed:  # on this engine's policy only
        engines["minedraft_auto_viewed"].llm_engine.engine_core.engine_core.scheduler.speculation.held_plan = (
            lambda key: None)
    if method == "eagle3":
        engines["minedraft_depth0_vllm_prep"] = LLM(**engine_kwargs("minedraft_auto", kit.target, speculation,
                                                                    **common))
        runner_of(engines["minedraft_depth0_vllm_prep"])._skip_kwargs = lambda *args: None
        engines["minedraft_depth0_no_hidden"] = LLM(**engine_kwargs("minedraft_auto", kit.target, speculation,
                                                                    **common))
        without_hidden_states(runner_of(engines["minedraft_depth0_no_hidden"]))
    return engines


def without_hidden_states(runner) -> None:
    """The target's auxiliary hidden states off (vLLM's EAGLE-3 layers cleared, its runner reading one output),
    and the skipped calls keeping none: the head could not catch up, and at depth 0 it is never asked to."""
    runner.draft_catch_up.keeps_hidden_states = False
    runner.use_aux_hidden_state_outputs = False
    runner.get_model().model.aux_hidden_state_layers = ()


def runner_of(llm):
    return llm.llm_engine.model_executor.driver_worker.worker.model_runner


def instrument(llm) -> StageTimer:
    timer = StageTimer()
    core = llm.llm_engine.engine_core.engine_core
    for name in SCHEDULER_STAGES:
        timer.wrap(core.scheduler, name)
    for name in EXECUTOR_STAGES:
        timer.wrap(core.model_executor, name)
    for name in RUNNER_STAGES:
        timer.wrap(runner_of(llm), name)
    return timer


def run(args) -> dict:
    from vllm import SamplingParams

    engines = build_engines(args.draft, args.k, max(64, max(args.concurrency)), args.twin, args.auto, args.viewed)
    timers = {name: instrument(llm) for name, llm in engines.items()}
    rng = random.Random(0)
    params = SamplingParams(max_tokens=args.output_tokens, temperature=0, ignore_eos=True)
    rows = []
    for n in args.concurrency:
        prompts = [{"prompt_token_ids": [rng.randrange(3, 2040) for _ in range(args.prompt_tokens)]}
                   for _ in range(n)]
        for llm in engines.values():
            llm.generate(prompts, params, use_tqdm=False)  # warm-up
        rounds = collections.defaultdict(list)
        names = list(engines)
        for r in range(args.rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                timers[name].reset()
                started = time.perf_counter()
                engines[name].generate(prompts, params, use_tqdm=False)
                rounds[name].append({"step": time.perf_counter() - started, **timers[name].seconds})
        # One step per output token at depth 0 (the prefill's included).
        rows += summarize(rounds, n, steps=args.output_tokens)
    return {"rows": rows}


def summarize(rounds: dict[str, list[dict[str, float]]], requests: int, steps: int) -> list[dict]:
    """Per engine: each stage's ms per step (median over rounds) and the step time's ratio to the target
    alone's, paired by round (a round that ran slow for every engine cancels out)."""
    rows = []
    for name, per_round in rounds.items():
        stages = {stage: round(statistics.median(x.get(stage, 0.0) for x in per_round) * 1e3 / steps, 3)
                  for stage in per_round[0]}
        ratios = [x["step"] / y["step"] for x, y in zip(per_round, rounds["no_sd"])]
        rows.append({"engine": name, "requests": requests, "ms_per_step": stages,
                     "step_vs_no_sd": round(statistics.median(ratios), 3),
                     "step_vs_no_sd_rounds": [round(x, 3) for x in ratios]})
    return rows


def markdown(result: dict) -> str:
    stages = ["step", *SCHEDULER_STAGES, *EXECUTOR_STAGES, *RUNNER_STAGES]
    lines = ["| N | engine | step time / target alone | " + " | ".join(stages) + " |",
             "|---|---|---|" + "---|" * len(stages)]
    for row in result["rows"]:
        cells = [f"{row['ms_per_step'].get(s, 0.0):.2f}" for s in stages]
        lines.append(f"| {row['requests']} | {row['engine']} | {row['step_vs_no_sd']:.3f}x | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """Per load, each engine's step as its top-level stages stacked (the runner's stages are inside
    ``execute_model`` and ``sample_tokens``), the rest of the step on top."""
    plt = runner.pyplot()
    loads = sorted({row["requests"] for row in result["rows"]})
    fig, axes = plt.subplots(1, len(loads), figsize=(4.5 * len(loads), 3.8), squeeze=False)
    parts = [*SCHEDULER_STAGES, *EXECUTOR_STAGES]
    for ax, n in zip(axes[0], loads):
        rows = [row for row in result["rows"] if row["requests"] == n]
        bottoms = [0.0] * len(rows)
        for part in [*parts, "rest of the step"]:
            values = [row["ms_per_step"].get(part, 0.0) if part in parts else
                      row["ms_per_step"]["step"] - sum(row["ms_per_step"].get(p, 0.0) for p in parts) for row in rows]
            ax.bar(range(len(rows)), values, bottom=bottoms, label=part)
            bottoms = [b + v for b, v in zip(bottoms, values)]
        ax.set_xticks(range(len(rows)), [f"{row['engine']}\n{row['step_vs_no_sd']:.3f}x" for row in rows],
                      fontsize=7, rotation=25, ha="right")
        ax.set(title=f"N = {n}", ylabel="ms per output token")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"depth0_stages, {result['meta']['draft']}, {result['meta']['date']}", fontsize=9)
    return runner.save(fig, path)


def parse_args(argv=None):
    parser = runner.parser(__doc__, rounds=6)
    parser.add_argument("--draft", default="eagle3", choices=("eagle3", "draft_perturbed", "draft_small"))
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--twin", action="store_true", help="also a second target alone (no_sd_twin)")
    parser.add_argument("--auto", action="store_true", help="also MineDraft's default, its depth chosen (minedraft_auto)")
    parser.add_argument("--viewed", action="store_true",
                        help="also MineDraft's default planning every step from its view (minedraft_auto_viewed)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine cores in this process: stages timed in place
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    path = OUT / f"depth0_stages_{args.draft}.json"
    result = runner.run_or_replot(args, path, lambda: measure(args))
    runner.report(plot(result, path.with_suffix(".png")), markdown(result))


def measure(args) -> dict:
    started = time.perf_counter()
    result = run(args)
    result["meta"] = runner.meta(
        cpu_label(), started, draft=args.draft, k=args.k, prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens, rounds=args.rounds, twin=args.twin, auto=args.auto,
        viewed=args.viewed,
        unit="ms per step: a stage's time over a round divided by its output tokens; medians of rounds")
    return result


if __name__ == "__main__":
    main()
