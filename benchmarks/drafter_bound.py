"""Is the drafter on its own core fast enough? A draft job against the target's verification, per pair.

With the drafter on hardware of its own and drafting ahead (docs/process-drafter.md), a step that follows
the path needs, beside the target's verification of k drafts a request, k + 1 draft tokens from the draft
engine: its guess of the target's next token and k drafts after it. The pipeline runs at the slower of the
two. Each is timed here alone, in a fresh engine bound to one core, as the dedicated layout places them:

* ``draft_job``: the draft engine (the process drafter's, with its draft sessions: sessions.py) drafting
  k + 1 tokens for each of N requests whose histories grew by those tokens since the last job (the path
  followed: the KV holds all but the last);
* ``verify``: the target computing k + 1 new tokens of each of N requests and sampling one (the work of a
  verification step at depth k), through the same sessions on the target's model.

``draft_job / verify`` above 1: the draft engine sets the pace; each step that follows the path takes the
draft job's time, and the most the layout can give over stock SD on the target's core is about
(verify + k draft forwards in the target's worker) / draft_job at as many tokens a step (less for every
draft rejected). A pair whose draft job fits within the verification leaves the target setting the pace.

    python -m benchmarks.drafter_bound                 # the kit's target and its 1-layer draft, ~1 min
    python -m benchmarks.drafter_bound --pair real     # the real pair (modelkit/real_pair.sh), ~3 min

Writes ``benchmarks/results/cpu/drafter_bound_<pair>.json`` and ``.png`` and prints a table (median ms).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import runner
from benchmarks.sweep import cpu_label
from harness.child import checkout_env

JOBS, WARMUP_JOBS, PROMPT_TOKENS = 24, 4, 64


def pair_models(pair: str) -> tuple[str, str, str]:
    """(target, draft, dtype) of ``pair``."""
    if pair == "kit":
        from modelkit import build_kit

        kit = build_kit()
        return str(kit.target), str(kit.draft_small), "float32"
    from benchmarks.real_pair import PAIR_DIR, native_dtype

    return str(PAIR_DIR / "target"), str(PAIR_DIR / "draft"), native_dtype()


def measure(model: str, dtype: str, tokens: int, sampled: int, concurrency: list[int]) -> dict[int, float]:
    """Median seconds of a job that feeds each of N sessions ``tokens`` new tokens in all (``sampled`` of them
    sampled by the engine itself, the rest given) and samples ``sampled``, per N."""
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    from minedraft.config.drafter_device import DrafterDevice
    from minedraft.process_drafter.draft_engine.sessions import DraftSessions
    from minedraft.process_drafter.frontend import draft_engine_kwargs

    args = EngineArgs(model=model, dtype=dtype, max_model_len=1024, enforce_eager=True, max_num_seqs=max(concurrency))
    llm = LLM(**draft_engine_kwargs(args, {"model": model}, DrafterDevice.parse("cpu:0")))
    medians = {}
    for n in concurrency:
        rng = random.Random(n)
        histories = {f"n{n}-r{i}": [rng.randrange(3, 2000) for _ in range(PROMPT_TOKENS)] for i in range(n)}
        sessions = DraftSessions(llm, sampled)
        sessions.draft(histories)
        seconds = []
        for _ in range(JOBS):
            for req_id in histories:  # the tokens the last job sampled are kept; the rest arrive with this one
                given = [rng.randrange(3, 2000) for _ in range(tokens - sampled)]
                histories[req_id] = histories[req_id] + given
            started = time.perf_counter()
            drafts = sessions.draft(histories)
            seconds.append(time.perf_counter() - started)
            for req_id, draft in drafts.items():
                histories[req_id] = histories[req_id] + draft
        sessions.release(list(histories))
        medians[n] = statistics.median(seconds[WARMUP_JOBS:])
    return medians


def child(argv: list[str]) -> None:
    model, dtype, tokens, sampled, *concurrency = argv
    print(json.dumps({str(n): s for n, s in measure(model, dtype, int(tokens), int(sampled),
                                                    [int(c) for c in concurrency]).items()}))


def run_child(model: str, dtype: str, tokens: int, sampled: int, concurrency: list[int], core: int) -> dict[str, float]:
    """One engine in its own process on ``core`` (its OpenMP threads there too), as the layout places it."""
    env = checkout_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": str(core),
                        "OMP_NUM_THREADS": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"})
    done = subprocess.run(["taskset", "-c", str(core), sys.executable, "-m", "benchmarks.drafter_bound", "--child",
                           model, dtype, str(tokens), str(sampled), *map(str, concurrency)],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"drafter_bound child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows_of(draft_job: dict[str, float], verify: dict[str, float], k: int) -> list[dict]:
    return [{"k": k, "n": int(n), "draft_job_ms": round(draft_job[n] * 1e3, 2), "verify_ms": round(verify[n] * 1e3, 2),
             "draft_job_over_verify": round(draft_job[n] / verify[n], 2)} for n in verify]


def markdown(rows: list[dict]) -> str:
    lines = ["| k | N | draft job, k + 1 tokens (core 1) | target's verification, k + 1 tokens (core 0) | "
             "draft job / verification |", "|---|---|---|---|---|"]
    lines += [f"| {r['k']} | {r['n']} | {r['draft_job_ms']:.1f} ms | {r['verify_ms']:.1f} ms | "
              f"{r['draft_job_over_verify']:.2f} |" for r in rows]
    return "\n".join(lines)


def plot(rows: list[dict], meta: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["draft_job_ms"] for r in rows], width=0.4, color="#dd8452",
           label="draft job, k + 1 tokens (core 1)")
    ax.bar([i + 0.2 for i in x], [r["verify_ms"] for r in rows], width=0.4, color="#4c72b0",
           label="target's verification (core 0)")
    ax.set_xticks(list(x), [f"N = {r['n']}" for r in rows])
    ax.set_ylabel("ms (median)")
    ax.set_ylim(top=1.35 * max(max(r["draft_job_ms"], r["verify_ms"]) for r in rows))
    ax.set_title(f"{meta['pair']} pair, {meta['dtype']}, k = {rows[0]['k']}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", choices=("kit", "real"), default="kit")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args(argv)
    target, draft, dtype = pair_models(args.pair)
    # The draft engine samples k + 1 tokens a job, each fed back at the next (the path followed); the target is
    # given k + 1 tokens a request (its last token and k drafts) and samples one.
    draft_job = run_child(draft, dtype, args.k + 1, args.k + 1, args.concurrency, core=1)
    verify = run_child(target, dtype, args.k + 1, 1, args.concurrency, core=0)
    rows = rows_of(draft_job, verify, args.k)
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pair": args.pair, "dtype": dtype,
            "device_label": cpu_label(),
            "prompt_tokens": PROMPT_TOKENS, "jobs": JOBS, "warmup_jobs": WARMUP_JOBS}
    path = runner.write_result(runner.CPU_RESULTS / f"drafter_bound_{args.pair}.json", {"meta": meta, "rows": rows})
    plot(rows, meta, path.with_suffix(".png"))
    print(markdown(rows))
    print(f"Wrote {path} and its .png")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
