"""One workload through a real vLLM engine in one mode: target alone, stock SD
or MineDraft. Used by the demo and the end-to-end tests.

``python -m minedraft.sidebyside SPEC_JSON`` runs one mode and prints one
``RESULT {...}`` line; :func:`run_mode` runs it in a subprocess, so each
engine (which spawns its own engine-core process) is isolated.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def workload(seed: int, num_requests: int, vocab: int):
    """Mixed prompt lengths (1..~500), max_tokens 1..100, some shared prefixes."""
    rng = random.Random(seed)
    shared = [rng.randrange(3, vocab) for _ in range(96)]
    requests = []
    for i in range(num_requests):
        length = rng.choice([1, 2, 5, 17, 40, 90, 160, 300, 500]) if i % 3 else rng.randint(1, 500)
        prompt = [rng.randrange(3, vocab) for _ in range(length)]
        if i % 4 == 0:
            prompt = shared + prompt[: max(1, length - 96)]
        requests.append({"prompt_token_ids": prompt, "max_tokens": rng.randint(1, 100)})
    return requests


def engine_kwargs(mode: str, kit: dict, k: int) -> dict:
    kw = dict(
        model=kit["target"], dtype="float32", enforce_eager=True, max_model_len=1024, seed=0,
        disable_log_stats=False, enable_chunked_prefill=True, max_num_batched_tokens=128,
        enable_prefix_caching=True, block_size=32, num_gpu_blocks_override=48,
    )
    if mode != "target":
        kw["speculative_config"] = {"method": "draft_model", "model": kit["draft"], "num_speculative_tokens": k}
    if mode == "minedraft":
        kw["scheduler_cls"] = "minedraft"
    return kw


def main() -> None:
    spec = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_kwargs(spec["mode"], spec["kit"], spec["k"]))
    vocab = llm.get_tokenizer().vocab_size
    reqs = workload(spec["seed"], spec["num_requests"], vocab)
    params = [SamplingParams(temperature=0, max_tokens=r["max_tokens"], ignore_eos=True) for r in reqs]
    # Pass 1 is cold (the engine's first requests), later passes warm (same requests again).
    passes = []
    for _ in range(spec.get("passes", 1)):
        start = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": r["prompt_token_ids"]} for r in reqs], params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        tokens = [list(o.outputs[0].token_ids) for o in outs]
        passes.append({"tokens": tokens, "output_tokens_per_s": sum(map(len, tokens)) / elapsed,
                       "elapsed_s": elapsed})
    metrics = {}
    for m in llm.get_metrics():
        if hasattr(m, "value") and (m.name.startswith("minedraft") or m.name.startswith("vllm:spec_decode")
                                    or m.name == "vllm:num_preemptions"):
            metrics[m.name] = metrics.get(m.name, 0) + m.value
    result = {"mode": spec["mode"], "metrics": metrics, **passes[0],
              "warm": [{k: v for k, v in p.items() if k != "tokens"} for p in passes[1:]],
              "warm_tokens_equal": all(p["tokens"] == passes[0]["tokens"] for p in passes[1:])}
    print("RESULT " + json.dumps(result))


def run_mode(mode: str, target: str, draft: str, k: int = 3, num_requests: int = 48, seed: int = 0,
             env: dict | None = None, timeout: int = 600, passes: int = 1) -> dict:
    """Run one mode in a fresh engine; ``passes`` > 1 repeats the workload in the same
    engine (warm runs, under ``"warm"``)."""
    spec = {"mode": mode, "kit": {"target": target, "draft": draft}, "k": k,
            "num_requests": num_requests, "seed": seed, "passes": passes}
    proc = subprocess.run([sys.executable, "-m", "minedraft.sidebyside", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        # vLLM logs (worker tracebacks included) go to stdout.
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "Error" in line]
        raise RuntimeError(f"{mode} run failed (exit {proc.returncode}): " + " | ".join(errors[-12:]))
    return json.loads(lines[-1][len("RESULT "):])


if __name__ == "__main__":
    main()
