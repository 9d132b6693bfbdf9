"""One workload through a real vLLM engine in one mode: target alone, stock SD
or MineDraft. Used by the demo and the end-to-end tests.

:func:`run_mode` runs the mode's engine in a child process
(``python -m harness.sidebyside SPEC``, :mod:`harness.child`), so
each engine (which spawns its own engine-core process) is isolated.
"""

from __future__ import annotations

import os
import queue
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from harness.child import run_once, serve
from harness.engine_args import Speculation, engine_kwargs
from minedraft.config.drafter_device import index_list, named_cores
from minedraft.worker.target_cores import CoreBinding


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


def mixed_workload_kwargs(mode: str, target: str, draft: str, k: int, minedraft: dict | None = None,
                          method: str = "draft_model", speculation_extra: dict | None = None,
                          tensor_parallel_size: int = 1, engine_extra: dict | None = None) -> dict:
    """Chunked prefill (128 tokens), prefix caching and a 48-block KV cache that forces preemption;
    ``tensor_parallel_size`` > 1: vLLM's multiprocessing executor, a worker process per rank;
    ``engine_extra``: other engine arguments, over these (e.g. a KV connector)."""
    speculation = Speculation(draft, k, method, extra=speculation_extra or {})
    parallel = ({} if tensor_parallel_size == 1 else
                {"tensor_parallel_size": tensor_parallel_size, "distributed_executor_backend": "mp"})
    engine = {"max_model_len": 1024, "enable_chunked_prefill": True, "max_num_batched_tokens": 128,
              "enable_prefix_caching": True, "num_gpu_blocks_override": 48, **parallel, **(engine_extra or {})}
    return engine_kwargs(mode, target, speculation, minedraft=minedraft, **engine)


def uniform_workload(seed: int, num_requests: int, prompt_tokens: int, max_tokens: int, tokenizer_dir: str):
    """``num_requests`` prompts of ``prompt_tokens`` tokens (windows of text the kit's tokenizer did not train
    on), each generating ``max_tokens``: a decode-heavy load run at a concurrency of ``num_requests``."""
    from modelkit.prompts import token_windows

    return [{"prompt_token_ids": p, "max_tokens": max_tokens}
            for p in token_windows(num_requests, prompt_tokens, seed, tokenizer_dir)]


def make_handler(spec: dict):
    # Before the engine (vLLM 0.32.0 binds a one-worker engine to nothing); from the spec, not the variable, which
    # make test's workers set for every child they start (tests/conftest.py).
    if spec.get("cores"):
        CoreBinding(index_list(spec["cores"])).apply()
    from vllm import LLM, SamplingParams

    worker = {"worker_cls": spec["worker_cls"]} if spec.get("worker_cls") else {}
    loads = spec.get("loads")  # name -> {"num_requests", "prompt_tokens", "max_tokens"}; None: the mix
    if loads is None:
        kwargs = mixed_workload_kwargs(spec["mode"], spec["target"], spec["draft"], spec["k"], spec.get("minedraft"),
                                       spec.get("method", "draft_model"), spec.get("speculation_extra"),
                                       spec.get("tensor_parallel_size", 1), spec.get("engine_extra"))
    else:  # vLLM's defaults for the token budget and the KV cache
        speculation = Speculation(spec["draft"], spec["k"], spec.get("method", "draft_model"),
                                  extra=spec.get("speculation_extra") or {})
        kwargs = engine_kwargs(spec["mode"], spec["target"], speculation, minedraft=spec.get("minedraft"),
                               max_model_len=1024, **(spec.get("engine_extra") or {}))
    llm = LLM(**kwargs, **worker)
    if loads is None:
        workloads = {"mix": workload(spec["seed"], spec["num_requests"], llm.get_tokenizer().vocab_size)}
    else:
        workloads = {name: uniform_workload(spec["seed"], tokenizer_dir=spec["target"], **load)
                     for name, load in loads.items()}

    def run(command: dict) -> dict:
        # Pass 1 is cold (the engine's first requests), later passes warm (same requests again).
        reqs = workloads[command.get("load", next(iter(workloads)))]
        params = [SamplingParams(temperature=0, max_tokens=r["max_tokens"], ignore_eos=True) for r in reqs]
        passes = []
        for _ in range(command.get("passes", 1)):
            start = time.perf_counter()
            outs = llm.generate([{"prompt_token_ids": r["prompt_token_ids"]} for r in reqs], params,
                                use_tqdm=False)
            elapsed = time.perf_counter() - start
            tokens = [list(o.outputs[0].token_ids) for o in outs]
            passes.append({"tokens": tokens, "output_tokens_per_s": sum(map(len, tokens)) / elapsed,
                           "elapsed_s": elapsed})
        return {"mode": spec["mode"], "metrics": engine_counters(llm), **passes[0],
                "warm": [{k: v for k, v in p.items() if k != "tokens"} for p in passes[1:]],
                "warm_tokens_equal": all(p["tokens"] == passes[0]["tokens"] for p in passes[1:])}

    return run


DEPTH_STEPS = "minedraft:steps_by_depth"


def depth_key(depth: int | str) -> str:
    """The counters' key of the steps at one speculation depth: ``minedraft:steps_by_depth[3]``."""
    return f"{DEPTH_STEPS}[{depth}]"


ACCEPTED_AT = "vllm:spec_decode_num_accepted_tokens_per_pos"


def accepted_at_key(position: int) -> str:
    """The counters' key of the drafts accepted at one position (0: a request's first draft)."""
    return f"{ACCEPTED_AT}[{position}]"


def steps_by_depth(counters: dict[str, float]) -> dict[int, int]:
    """The steps run at each speculation depth (those with any), from counters keyed by :func:`depth_key`."""
    prefix = DEPTH_STEPS + "["
    return dict(sorted((int(name[len(prefix):-1]), int(n)) for name, n in counters.items()
                       if name.startswith(prefix) and n))


def engine_counters(llm) -> dict[str, float]:
    """MineDraft's and vLLM's spec-decode counters, and preemptions, summed over labels; MineDraft's
    per-depth steps also by depth (:func:`depth_key`), vLLM's accepted drafts by position
    (:func:`accepted_at_key`)."""
    metrics = {}
    for m in llm.get_metrics():
        if m.name == ACCEPTED_AT:  # a Vector, one per engine
            for position, n in enumerate(m.values):
                metrics[accepted_at_key(position)] = metrics.get(accepted_at_key(position), 0) + n
        if hasattr(m, "value") and (m.name.startswith("minedraft") or m.name.startswith("vllm:spec_decode")
                                    or m.name == "vllm:num_preemptions"):
            metrics[m.name] = metrics.get(m.name, 0) + m.value
            if m.name == DEPTH_STEPS:
                metrics[depth_key(m.labels["depth"])] = m.value
    return metrics


CHILD = ["-m", "harness.sidebyside"]  # the child process that runs one mode

# vLLM's engine core in the child's own process (vLLM's ``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the same
# scheduler, worker and patches, without the engine-core process that imports vLLM a second time (stock SD on the
# 24-request mix, 2-core EPYC, 2026-12-03: 17-20 s an engine run against 33-37 s, the same tokens). For tests
# that compare tokens and counters; the runs that leave it out keep the path between processes (outputs
# serialised, the engine core's busy loop) covered. Not for an engine whose drafter runs in a process of its own.
IN_PROCESS_CORE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def mode_spec(mode: str, target: str, draft: str, k: int = 3, num_requests: int = 48, seed: int = 0,
              minedraft: dict | None = None, method: str = "draft_model", worker_cls: str | None = None,
              speculation_extra: dict | None = None, tensor_parallel_size: int = 1,
              engine_extra: dict | None = None, name: str | None = None) -> dict:
    """The spec of a child (``python -m harness.sidebyside``) that runs one mode: :func:`run_mode`'s
    arguments (``name``: the log's, the mode's by default)."""
    return {"name": name or mode, "mode": mode, "target": target, "draft": draft, "k": k,
            "num_requests": num_requests, "seed": seed, "minedraft": minedraft, "method": method,
            "worker_cls": worker_cls, "speculation_extra": speculation_extra,
            "tensor_parallel_size": tensor_parallel_size, "engine_extra": engine_extra}


def run_mode(mode: str, target: str, draft: str, *, env: dict | None = None, timeout: int = 600, passes: int = 1,
             log_dir=None, **spec: Any) -> dict:
    """Run one mode (:data:`harness.modes.BENCH_MODES`) in a fresh engine; ``passes`` > 1
    repeats the workload in the same engine (warm runs, under ``"warm"``). The engine's log
    is ``<log_dir>/<mode>.log`` (a new temporary directory by default). ``spec``: :func:`mode_spec`'s
    keywords: ``draft`` is the speculative config's model for ``method`` (``draft_model``, ``eagle3``,
    ...); ``worker_cls`` replaces MineDraft's worker (the tests' fault-injecting one);
    ``speculation_extra``: more keys of the speculative config; ``tensor_parallel_size``: the
    target's (a worker process per rank); ``engine_extra``: other engine arguments."""
    return run_once(CHILD, mode_spec(mode, target, draft, **spec), {"cmd": "run", "passes": passes}, env=env,
                    timeout_s=timeout, log_dir=log_dir)


Result = TypeVar("Result")


def engine_cores() -> list[int]:
    """The cores this process's engines may use: those ``VLLM_CPU_OMP_THREADS_BIND`` lists where it is one
    list of cores (``make test``'s workers each set their share: tests/conftest.py), else this process's."""
    return list(named_cores() or sorted(os.sched_getaffinity(0)))


def two_at_a_time(runs: dict[str, Callable[[dict[str, str]], Result]]) -> dict[str, Result]:
    """``runs[name](env)`` for each name, two at a time where this process's engines may use two cores
    (:func:`engine_cores`), ``env`` binding that engine's threads to a core of its own
    (``VLLM_CPU_OMP_THREADS_BIND``); one at a time, with ``env`` empty, on one core. For tests, not timings: an engine's start is mostly one thread's work,
    so two side by side take about the time of one (measured: 26 s against 50 s for two runs of the
    24-request mix), and greedy tokens do not depend on the core count (the same runs gave the same
    tokens on one core and on two). Not for an engine that places its own processes on cores (the
    process drafter)."""
    cores = engine_cores()[:2]
    if len(cores) < 2:
        return {name: run({}) for name, run in runs.items()}
    free: queue.Queue[int] = queue.Queue()
    for core in cores:
        free.put(core)

    def on_a_free_core(run: Callable[[dict[str, str]], Result]) -> Result:
        core = free.get()
        try:
            return run({"VLLM_CPU_OMP_THREADS_BIND": str(core)})
        finally:
            free.put(core)

    with ThreadPoolExecutor(len(cores)) as pool:
        futures = {name: pool.submit(on_a_free_core, run) for name, run in runs.items()}
        return {name: future.result() for name, future in futures.items()}


if __name__ == "__main__":
    serve(make_handler)
