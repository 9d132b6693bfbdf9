"""Each step of MineDraft's default as it ran on the real pair: why a steady reading came out as it did.

``real_pair.py`` says how fast the default ran at each load; this says which depth each step ran at and
what the policy saw then. One engine (the default at k = 3, the engine core in this process) runs
``real_pair.py``'s warm-up and then its steady loads of code, ``--rounds`` times; for every step the
speculation policy observed, it records the decoding requests, the depth, whether the step was a re-check,
its seconds, the tokens the drafter caught up on (skipped ones, prompts) and each request's drafts
verified and accepted. ``--mode stock_sd`` or ``no_sd`` runs the same loads without the policy (phase
rates only), for a side-by-side reading on the same machine.

    python -m benchmarks.depth_trace                        # ~8 min on 2 cores (N = 1, 2, 4, 8, twice)
    python -m benchmarks.depth_trace --loads 1,4 --rounds 1 --mode stock_sd --k 1

Writes ``benchmarks/results/cpu/real_pair/depth_trace_<mode>.json`` and ``.png`` (each phase's depth step by
step) and prints a line per phase: tok/s and each step's depth in order. ``--replot --output FILE.json``
draws a trace's PNG again, no run.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks import real_pair, runner, sweep
from minedraft.config.settings import CONFIG_KEY
from minedraft.worker.target_cores import bind_to_named_cores

OUTPUT_TOKENS = 64  # real_pair.py's default


def step_record(result, rechecking: bool, catch_up: int, clock: float) -> dict:
    """One step as the policy observed it (``minedraft.policy.StepResult``), with the re-check flag its
    plan was made under and the drafter's catch-up tokens in it."""
    return {"t": round(clock, 3), "depth": result.plan.depth, "requests": result.num_decoding,
            "tokens": result.tokens, "prompt_tokens": result.prompt_tokens, "catch_up": catch_up,
            "seconds": None if result.seconds is None else round(result.seconds, 4), "recheck": rechecking,
            "unanswered": result.unanswered,
            "verified": [[v.drafts, v.accepted] for v in result.verified]}


def phase_line(phase: dict) -> str:
    """``N=4 round 1: 10.4 tok/s, 25 steps, depths 3311221...``, re-checks and catch-up tokens after."""
    steps = phase["steps"]
    depths = "".join(str(s["depth"]) for s in steps)
    return (f"N={phase['requests']} round {phase['round']}: {phase['tok_s']:.2f} tok/s, {len(steps)} steps, "
            f"depths {depths or '-'}, re-check steps {sum(s['recheck'] for s in steps)}, "
            f"catch-up {sum(s['catch_up'] for s in steps)} tokens")


@contextmanager
def recorded_steps() -> Iterator[list[dict]]:
    """Every step any speculation policy in this process observes while inside, appended to the list.
    (It wraps the policy's ``observe`` and the catch-up count ``observe`` makes: instruments, not patches.)"""
    from minedraft.policy.policy import SpeculationPolicy

    steps: list[dict] = []
    observe, count = SpeculationPolicy.observe, SpeculationPolicy._count_catch_up
    counted: list[int] = []

    def counting(policy, result):
        counted.append(count(policy, result))
        return counted[-1]

    def recording(policy, result):
        rechecking = bool(policy.depths is not None and policy.depths.rechecking)
        counted.clear()
        observe(policy, result)
        steps.append(step_record(result, rechecking, sum(counted), time.perf_counter()))

    SpeculationPolicy.observe, SpeculationPolicy._count_catch_up = recording, counting
    try:
        yield steps
    finally:
        SpeculationPolicy.observe, SpeculationPolicy._count_catch_up = observe, count


def measure(args) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core, and its policy, in this process
    bind_to_named_cores()  # stock engines too: vLLM 0.32.0 binds a one-worker engine to nothing
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    setup = real_pair.setup_for(args.pair, sweep.inherit_workload(args))
    started = time.perf_counter()
    spec, _ = sweep.worker_spec(setup, "real", args.mode, None if args.mode == "no_sd" else args.k, [])
    if args.minedraft:  # more MineDraft settings, e.g. the process drafter's
        spec["engine"]["additional_config"][CONFIG_KEY].update(args.minedraft)
    prompts = real_pair.tokenized(args.pair / "target", "code", max(args.loads))
    params = SamplingParams(temperature=0, max_tokens=args.output_tokens, ignore_eos=True, detokenize=False)
    phases = []
    with recorded_steps() as steps:
        llm = LLM(**spec["engine"])
        llm.generate([TokensPrompt(prompt_token_ids=prompts[0])] * 2, params, use_tqdm=False)  # the warm-up
        for r in range(args.rounds):
            for n in args.loads:
                first, t0 = len(steps), time.perf_counter()
                llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts[:n]], params, use_tqdm=False)
                elapsed = time.perf_counter() - t0
                phases.append({"round": r, "requests": n, "tok_s": round(n * args.output_tokens / elapsed, 3),
                               "steps": steps[first:]})
                print(phase_line(phases[-1]), flush=True)
        llm.llm_engine.engine_core.shutdown()  # now, while logging works: a process drafter logs its job counts
    meta = runner.meta(setup.device_label, started, setup.engine, models=setup.meta["models"], mode=args.mode,
                       k=None if args.mode == "no_sd" else args.k, output_tokens=args.output_tokens, loads=args.loads,
                       rounds=args.rounds, minedraft=args.minedraft,
                       target_cores=os.environ.get("VLLM_CPU_OMP_THREADS_BIND"))
    return {"meta": meta, "phases": phases}


def plot(result: dict, path: Path) -> Path:
    """Each phase's depth step by step, one panel per load, the rounds side by side (nothing where the
    engine ran without the policy)."""
    plt = runner.pyplot()
    loads = sorted({p["requests"] for p in result["phases"]})
    fig, axes = plt.subplots(len(loads), 1, figsize=(8, 1.6 * len(loads)), sharex=True, squeeze=False)
    for ax, n in zip(axes[:, 0], loads):
        for phase in (p for p in result["phases"] if p["requests"] == n):
            ax.step(range(len(phase["steps"])), [s["depth"] for s in phase["steps"]], where="post",
                    label=f"round {phase['round']}: {phase['tok_s']:.1f} tok/s")
        ax.set(ylabel=f"N = {n}", ylim=(-0.3, 3.3), yticks=range(4))
        ax.legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("step (depth per step)")
    fig.suptitle(f"{result['meta']['mode']}, {result['meta']['date']}", fontsize=9)
    return runner.save(fig, path)


def parse_args(argv=None):
    parser = runner.parser(__doc__, rounds=2)
    parser.add_argument("--pair", type=Path, default=real_pair.PAIR_DIR, help="real-pair.sh's output folder")
    parser.add_argument("--mode", default="minedraft_auto", choices=("minedraft_auto", "stock_sd", "no_sd"))
    parser.add_argument("--k", type=int, default=3, help="the speculative config's K (stock SD's depth)")
    parser.add_argument("--loads", type=lambda s: [int(n) for n in s.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--output-tokens", type=int, default=OUTPUT_TOKENS)
    parser.add_argument("--minedraft", type=json.loads, default=None,
                        help='more MineDraft settings as JSON, e.g. {"drafter": "process", "drafter_device": "cpu:1"}')
    parser.add_argument("--output", type=Path, help="the JSON (default: results/cpu/real_pair/depth_trace_<mode>."
                        "json; with --replot: the one read)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    path = args.output or runner.CPU_RESULTS / "real_pair" / f"depth_trace_{args.mode}.json"
    result = runner.run_or_replot(args, path, lambda: measure(args))
    runner.report(plot(result, path.with_suffix(".png")), "\n".join(phase_line(p) for p in result["phases"]))


if __name__ == "__main__":
    main()
