"""What a draft job costs in the draft engine: draft sessions against new requests per job.

The process drafter's engine answers one job per pipeline step: k greedy
draft tokens for each of N requests whose histories grew since their last
job. Two ways to run it, each in a fresh draft engine on one core (the
drafter's placement in ``dedicated.py``):

* ``sessions`` (the product): each request is a draft session whose KV stays
  between jobs and rolls back to the accepted tokens (minedraft/process_drafter/draft_engine/sessions.py);
* ``new_requests``: every job sends each whole history as a new request to an
  engine with prefix caching (the first version of the process drafter).

The target is scripted: each job it accepts a random number of each
request's drafts (seeded) and adds one token. Reported: median job time
after a warm-up, per (k, N).

    python -m benchmarks.draft_sessions        # ~4 min

Writes ``benchmarks/results/cpu/draft_sessions.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from benchmarks import runner
from harness.child import checkout_env

OUT = runner.CPU_RESULTS / "draft_sessions.json"
JOBS, WARMUP_JOBS, PROMPT_TOKENS = 40, 5, 64


def measure(method: str, k: int, concurrency: list[int]) -> dict[int, float]:
    """Median job seconds per N, for one method and k, in this process's engine."""
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    from minedraft.process_drafter.frontend import draft_engine_kwargs
    from minedraft.config.drafter_device import DrafterDevice
    from minedraft.process_drafter.draft_engine.sessions import DraftSessions
    from modelkit import build_kit

    kit = build_kit()
    args = EngineArgs(model=str(kit.target), dtype="float32", max_model_len=1024, enforce_eager=True,
                      max_num_seqs=max(concurrency))
    kwargs = draft_engine_kwargs(args, {"model": str(kit.draft_perturbed)}, DrafterDevice.parse("cpu:1"))
    if method == "new_requests":
        kwargs = {**kwargs, "enable_prefix_caching": True}
        del kwargs["scheduler_cls"]
    llm = LLM(**kwargs)
    params = SamplingParams(temperature=0, max_tokens=k, ignore_eos=True, detokenize=False)
    medians = {}
    for n in concurrency:
        rng = random.Random(n)
        histories = {f"n{n}-r{i}": [rng.randrange(3, 2000) for _ in range(PROMPT_TOKENS)] for i in range(n)}
        sessions = DraftSessions(llm, k) if method == "sessions" else None
        seconds = []
        for _ in range(JOBS):
            started = time.perf_counter()
            if sessions is not None:
                drafts = sessions.draft(histories)
            else:
                outputs = llm.generate([{"prompt_token_ids": h} for h in histories.values()], params,
                                       use_tqdm=False)
                drafts = {r: list(o.outputs[0].token_ids) for r, o in zip(histories, outputs)}
            seconds.append(time.perf_counter() - started)
            for req_id, draft in drafts.items():
                histories[req_id] += draft[: rng.randrange(0, k + 1)] + [rng.randrange(3, 2000)]
        if sessions is not None:
            sessions.release(list(histories))
        medians[n] = statistics.median(seconds[WARMUP_JOBS:])
    return medians


def child(method: str, k: int, concurrency: list[int]) -> None:
    print(json.dumps({str(n): s for n, s in measure(method, k, concurrency).items()}))


def main(argv=None) -> None:
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args(argv)
    env = checkout_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "1"})
    rows = []
    for k in args.ks:
        for method in ("new_requests", "sessions"):
            # One engine per process, bound to core 1 like the process drafter.
            result = subprocess.run(
                ["taskset", "-c", "1", sys.executable, "-m", "benchmarks.draft_sessions", "--child", method, str(k),
                 *map(str, args.concurrency)], env=env, capture_output=True, text=True, check=True)
            medians = json.loads(result.stdout.strip().splitlines()[-1])
            rows += [{"k": k, "n": int(n), "method": method, "job_ms": round(s * 1e3, 2)} for n, s in medians.items()]
            print(k, method, medians, flush=True)
    for row in rows:
        if row["method"] == "sessions":
            base = next(r for r in rows if (r["k"], r["n"], r["method"]) == (row["k"], row["n"], "new_requests"))
            row["speedup_vs_new_requests"] = round(base["job_ms"] / row["job_ms"], 2)
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "draft": "draft_perturbed",
            "prompt_tokens": PROMPT_TOKENS, "jobs": JOBS, "warmup_jobs": WARMUP_JOBS, "core": 1}
    runner.write_result(OUT, {"meta": meta, "rows": rows})
    print(markdown(rows))


def markdown(rows: list[dict]) -> str:
    lines = ["| k | N | new requests + prefix caching | draft sessions | speed-up |", "|---|---|---|---|---|"]
    for row in rows:
        if row["method"] == "sessions":
            base = next(r for r in rows if (r["k"], r["n"], r["method"]) == (row["k"], row["n"], "new_requests"))
            lines.append(f"| {row['k']} | {row['n']} | {base['job_ms']:.1f} ms | {row['job_ms']:.1f} ms | "
                         f"{row['speedup_vs_new_requests']:.1f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), [int(n) for n in sys.argv[4:]])
    else:
        main()
