"""Is core 1 hardware of the drafter's own? The real pair's target alone on core 0, core 1 idle or decoding.

The drafter on its own core (``dedicated_real.py``: the target on core 0, the draft engine on core 1) can hide
its drafting only where the draft's forwards do not slow the target's. This runs ``depth_trace.py``'s target
alone (N = 1, greedy code) on core 0, each run in a fresh process, alternating: with core 1 idle, and with the
draft model decoding there (a vLLM engine of it in a process bound to core 1, generating until stopped). It
reports the target's tok/s each way (medians of ``--cycles`` runs), their ratio, and the draft's own tok/s while
it decoded beside the target (its time from its first token to its stop, the target's engine start included).
On a machine whose cores share nothing a decode needs, the ratio is about 1.

    python -m benchmarks.core_contention              # ~6 min on 2 cores in bf16

Writes ``benchmarks/results/cpu/real_pair/core_contention.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import real_pair, runner
from minedraft.lifetime import end_with_parent

SETTINGS = ("alone", "beside")
DRAFT_MAX_TOKENS = 64  # a generate call of the draft load: its count is written after each


def draft_load(pair: Path, core: int) -> None:
    """The draft model decoding on ``core`` until stopped: "ready" once built, then after each generate call
    a line of the tokens made and the seconds since the first call began."""
    end_with_parent(os.getppid(), "the draft load")
    os.sched_setaffinity(0, {core})
    os.environ.update(VLLM_CPU_OMP_THREADS_BIND=str(core), VLLM_ENABLE_V1_MULTIPROCESSING="0", OMP_NUM_THREADS="1")
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(pair / "draft"), dtype=real_pair.native_dtype(), enforce_eager=True, max_model_len=512,
              block_size=32)
    prompt = {"prompt_token_ids": real_pair.tokenized(pair / "target", "code", 1)[0]}
    params = SamplingParams(temperature=0, max_tokens=DRAFT_MAX_TOKENS, ignore_eos=True)
    print("ready", flush=True)
    started, tokens = time.perf_counter(), 0
    while True:
        tokens += len(llm.generate([prompt], params, use_tqdm=False)[0].outputs[0].token_ids)
        print(json.dumps({"tokens": tokens, "seconds": round(time.perf_counter() - started, 3)}), flush=True)


def draft_rate(lines: list[str]) -> float | None:
    """The draft load's tok/s from its output lines (its last count); None where it made none."""
    counts = [json.loads(line) for line in lines if line.startswith("{")]
    return round(counts[-1]["tokens"] / counts[-1]["seconds"], 3) if counts and counts[-1]["seconds"] > 0 else None


def target_run(args, path: Path) -> tuple[float, dict]:
    """The target alone on core 0 in a fresh process: its tok/s and its trace's meta."""
    command = [sys.executable, "-m", "benchmarks.depth_trace", "--mode", "no_sd", "--rounds", "1", "--loads", "1",
               "--pair", str(args.pair), "--output", str(path), "--output-tokens", str(args.output_tokens)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        raise RuntimeError(f"the target's run failed:\n{done.stdout[-3000:]}")
    trace = json.loads(path.read_text())
    return trace["phases"][0]["tok_s"], trace["meta"]


def run_beside(args, path: Path) -> tuple[float, dict, float | None]:
    """The target's run with the draft load decoding on core 1 from before it starts to after it ends."""
    command = [sys.executable, "-m", "benchmarks.core_contention", "--draft-load", "--pair", str(args.pair)]
    load = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in load.stdout:  # vLLM may print to stdout before it
            if line.strip() == "ready":
                break
        else:
            raise RuntimeError("the draft load ended before it was ready")
        tok_s, meta = target_run(args, path)
    finally:
        load.terminate()
        rest, _ = load.communicate(timeout=60)
    return tok_s, meta, draft_rate(rest.splitlines())


def summary(runs: list[dict]) -> dict:
    """Medians of each setting's runs, the target beside the draft load over alone, and the draft's tok/s."""
    medians = {s: statistics.median(r["tok_s"] for r in runs if r["setting"] == s) for s in SETTINGS
               if any(r["setting"] == s for r in runs)}
    drafts = [r["draft_tok_s"] for r in runs if r.get("draft_tok_s")]
    out = {"tok_s": medians, "draft_tok_s": statistics.median(drafts) if drafts else None}
    if len(medians) == len(SETTINGS):
        out["beside_over_alone"] = round(medians["beside"] / medians["alone"], 3)
    return out


def measure(args) -> dict:
    started, runs, trace_meta = time.perf_counter(), [], {}
    with tempfile.TemporaryDirectory() as folder:
        for cycle in range(args.cycles):
            for setting in SETTINGS if cycle % 2 == 0 else SETTINGS[::-1]:
                path = Path(folder) / f"{len(runs)}.json"
                if setting == "alone":
                    tok_s, trace_meta = target_run(args, path)
                    runs.append({"setting": setting, "tok_s": tok_s})
                else:
                    tok_s, trace_meta, draft = run_beside(args, path)
                    runs.append({"setting": setting, "tok_s": tok_s, "draft_tok_s": draft})
                print(f"{setting}: {tok_s:.2f} tok/s" + (f", the draft beside it {draft} tok/s"
                                                         if setting == "beside" else ""), flush=True)
    meta = runner.meta(trace_meta["device_label"], started, trace_meta["engine"], models=trace_meta["models"],
                       target_core=0, draft_core=1, cycles=args.cycles, order="alternating, mirrored per cycle",
                       output_tokens=args.output_tokens)
    return {"meta": meta, "summary": summary(runs), "runs": runs}


def plot(result: dict, path: Path) -> Path:
    plt = runner.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    for i, setting in enumerate(SETTINGS):
        rates = [r["tok_s"] for r in result["runs"] if r["setting"] == setting]
        ax.scatter([i] * len(rates), rates, label=setting)
    ax.set(xticks=range(len(SETTINGS)), xticklabels=["core 1 idle", "the draft decoding on core 1"],
           ylabel="the target's tok/s, core 0", title=f"core contention, {result['meta']['date']}")
    return runner.save(fig, path)


def parse_args(argv=None):
    parser = runner.parser(__doc__)
    parser.add_argument("--pair", type=Path, default=real_pair.PAIR_DIR, help="real-pair.sh's output folder")
    parser.add_argument("--cycles", type=int, default=2, help="runs of each setting, alternating")
    parser.add_argument("--output-tokens", type=int, default=96)
    parser.add_argument("--output", type=Path, default=runner.CPU_RESULTS / "real_pair" / "core_contention.json")
    parser.add_argument("--draft-load", action="store_true", help=argparse.SUPPRESS)  # the child's own mode
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.draft_load:
        draft_load(args.pair, core=1)
        return
    result = runner.run_or_replot(args, args.output, lambda: measure(args))
    table = json.dumps(result["summary"])
    runner.report(plot(result, args.output.with_suffix(".png")), table)


if __name__ == "__main__":
    main()
