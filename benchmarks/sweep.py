"""Offline throughput sweep: no SD, stock SD and MineDraft through real vLLM engines.

Sweeps concurrency (running requests), k (num_speculative_tokens), the draft
and the output length (short and long runs), in four modes:

* ``no_sd``: the target alone;
* ``stock_sd``: vLLM's speculative decoding (``method="draft_model"``);
* ``minedraft_parallel``: the same speculative config with
  ``scheduler_cls="minedraft"`` and ``MINEDRAFT_MODE=parallel``: every step
  that can overlap does (the overlap itself);
* ``minedraft_auto``: the same with the default ``MINEDRAFT_MODE=auto`` (what
  users get).

Two comparisons: ``equal_concurrency`` (every mode runs N requests at once)
and ``paper`` (``minedraft_parallel`` runs 2N, so each of its two sub-batches
is as large as stock SD's batch of N).

Design. Each engine lives in a worker subprocess (``python -m benchmarks.sweep --worker SPEC``,
the child protocol of :mod:`harness.child`: JSON commands on stdin,
one JSON line back on a private pipe, vLLM's logs in a log file). Workers
stay up between runs, so an engine starts once per (draft, k, mode), not once
per measurement. On CPU the runs are interleaved: per (draft, k) the no_sd,
stock_sd and minedraft workers are all up, and each round (one repeat at one
N) runs every mode once, in an order that rotates from round to round, so
machine noise hits all modes alike and ``vs_stock_sd`` pairs runs of the same
repeat (the same round, except that MineDraft's 2N run is shared with the
round of N' = 2N when that is swept too). On CUDA only one engine fits the
GPU at a time: modes run one after the other, and no_sd runs once per target.

Workload: prompts of ``--prompt-tokens`` tokens cut from the kit's held-out
corpus (``modelkit.prompts.token_windows``), ``--output-tokens`` tokens
each, greedy, ``ignore_eos``, no detokenization (the engine is measured; the
serving benchmark measures the front end). Prefix caching is off so repeats do
the same work. TTFT and TPOT come from vLLM's per-request stats
(``RequestOutput.metrics``, filled offline when stats logging is on): TTFT is
``first_token_latency`` (arrival to first token, queueing included), TPOT is
``(last_token_ts - first_token_ts) / (tokens - 1)``.

Engine layout: vLLM's default, the engine core in its own process
(``--engine-core process``), which is what users get. ``--engine-core inproc``
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) starts workers faster (~12-18 s
instead of ~25-65 s) but is not neutral on 2 cores: with a separate
engine-core process the front end and the engine core compete for the
cores (stock SD measured 20-30 % slower); rows and meta carry the layout. ``--device cuda`` uses realistic shapes with dummy weights
(``modelkit.shapes``), bfloat16 and vLLM's synthetic rejection sampler.

    python -m benchmarks.sweep                       # the full CPU sweep
    python -m benchmarks.sweep --quick               # a smoke run (~3 min)
    python -m benchmarks.sweep --device cuda
    python -m benchmarks.sweep --replot --markdown   # redo plots and table from summary.json

Writes ``benchmarks/results/<device>/summary.json`` (a list of rows),
``summary_meta.json``, ``throughput_<draft>.png`` and
``ratio_<comparison>_<draft>.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from benchmarks import runner
from harness.child import Child, ChildError, serve
from harness.engine_args import Speculation, engine_kwargs
from harness.modes import BENCH_MODES as MODES, ENGINE_LAYOUTS, MINEDRAFT_MODE_OF, MODE_LABELS
from harness.sidebyside import DEPTH_STEPS, depth_key
from harness.sidebyside import steps_by_depth as sample_steps_by_depth
from minedraft.worker.target_cores import bind_to_named_cores

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"

COMPARISONS = ("equal_concurrency", "paper")
README_BEGIN, README_END = "<!-- sweep:begin -->", "<!-- sweep:end -->"

# Long runs cost 8x the tokens: fewer concurrencies and repeats (each run is longer, so less
# noisy), and no paper-setting runs (2N): they measure the overlap itself, which short runs show.
DEFAULTS = dict(ks=[1, 3, 5], concurrency=[1, 4, 8, 16, 32], repeats=5, output_tokens=[32, 256],
                long_concurrency=[1, 8, 32], long_repeats=2)
QUICK = dict(ks=[1, 3], concurrency=[1, 8], repeats=1, output_tokens=[32], long_concurrency=[8], long_repeats=1)
LONG_OUTPUT = 128  # output lengths above this are "long" runs
MAX_REQUESTS = 64  # 2N for N = 32: engines are sized for it
COMMAND_TIMEOUT_S = 900
SETTLE_S = 1.5  # > vLLM's 1 s shared-memory spin-wait after an engine's last step (see Worker.run)


# ---------------------------------------------------------------- worker side


def make_worker(spec: dict):
    """The worker's engine; each ``{"cmd": "run", ...}`` measures one batch."""
    bind_to_named_cores()  # stock engines too: vLLM 0.32.0 binds a one-worker engine to nothing
    from vllm import LLM

    llm = LLM(**spec["engine"])
    _generate(llm, spec["warmup_prompts"], output_tokens=8)  # first-call allocations

    def handle(command: dict):
        if "phases" in command:  # one after another, no pause: a load that moves (shifting.py)
            return {"phases": [measure(llm, **phase) for phase in command["phases"]]}
        return measure(llm, command["prompts"], command["output_tokens"])

    return handle


def _generate(llm, prompts: list[list[int]], output_tokens: int, temperature: float | list[float] = 0.0,
              max_concurrency: int | None = None):
    """``temperature``: one for every request, or one per request (a sampled one seeded by its index).
    ``max_concurrency``: at most that many requests running at once, the others queued (:func:`_generate_queued`)."""
    from vllm import SamplingParams

    if isinstance(temperature, list):
        params = [SamplingParams(temperature=t, max_tokens=output_tokens, ignore_eos=True, detokenize=False,
                                 seed=i if t > 0 else None) for i, t in enumerate(temperature)]
    else:
        params = SamplingParams(temperature=temperature, max_tokens=output_tokens, ignore_eos=True, detokenize=False)
    if max_concurrency is not None and max_concurrency < len(prompts):
        return _generate_queued(llm, prompts, params if isinstance(params, list) else [params] * len(prompts),
                                max_concurrency)
    return llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)


_QUEUED_IDS = itertools.count()


def _generate_queued(llm, prompts: list[list[int]], params: list, max_concurrency: int) -> list:
    """The requests admitted in order, each as soon as one of at most ``max_concurrency`` running finishes (as
    ``vllm bench serve --max-concurrency`` loads a server): a steady load, where a request that finishes
    early makes room for the next, unlike a closed batch, which lasts as long as its slowest request.
    Outputs in the prompts' order."""
    engine, outputs, index = llm.llm_engine, [None] * len(prompts), {}
    queue = iter(range(len(prompts)))

    def admit(i: int) -> None:
        request_id = f"queued-{next(_QUEUED_IDS)}"  # what its RequestOutput carries (vLLM's id adds a suffix)
        index[request_id] = i
        engine.add_request(request_id, {"prompt_token_ids": prompts[i]}, params[i])

    for i in itertools.islice(queue, max_concurrency):
        admit(i)
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                outputs[index[output.request_id]] = output
                if (i := next(queue, None)) is not None:
                    admit(i)
    return outputs


COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
            "minedraft:parallel_steps", "minedraft:fallback_steps", "minedraft:parallel_trial_steps", "minedraft:late_drafts",
            "minedraft:drafts_trimmed", "minedraft:first_measurements", "minedraft:lookup_requests",
            "minedraft:lookup_drafts", "minedraft:lookup_accepted", "minedraft:lookup_only_steps")


def counters(llm) -> dict[str, float]:
    """Current value of each counter in COUNTERS (summed over engine labels), and MineDraft's steps
    per speculation depth (keyed by ``harness.sidebyside.depth_key``)."""
    values = dict.fromkeys(COUNTERS, 0.0)
    for metric in llm.get_metrics():
        if metric.name in values:
            values[metric.name] += metric.value
        if metric.name == DEPTH_STEPS:
            key = depth_key(metric.labels["depth"])
            values[key] = values.get(key, 0.0) + metric.value
    return values


def measure(llm, prompts: list[list[int]], output_tokens: int, temperature: float | list[float] = 0.0,
            max_concurrency: int | None = None) -> dict:
    """One batch: tok/s, TTFT and TPOT medians, counter deltas; greedy batches also a digest of their tokens.
    ``max_concurrency``: the batch queued, at most that many running (TTFT from each request's admission)."""
    before = counters(llm)
    start = time.perf_counter()
    outputs = _generate(llm, prompts, output_tokens, temperature, max_concurrency)
    elapsed = time.perf_counter() - start
    after = counters(llm)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    greedy = not any(temperature) if isinstance(temperature, list) else temperature == 0
    digest = tokens_digest([o.outputs[0].token_ids for o in outputs]) if greedy else None
    ttft = [o.metrics.first_token_latency for o in outputs]
    tpot = [(o.metrics.last_token_ts - o.metrics.first_token_ts) / (o.metrics.num_generation_tokens - 1)
            for o in outputs if o.metrics.num_generation_tokens > 1]
    return {"elapsed_s": elapsed, "generated_tokens": tokens, "tok_s": tokens / elapsed,
            "ttft_ms_p50": 1e3 * statistics.median(ttft),
            "tpot_ms_p50": 1e3 * statistics.median(tpot) if tpot else None,
            "counters": {name: after[name] - before.get(name, 0.0) for name in after}, "tokens_digest": digest}


def tokens_digest(token_ids: list[list[int]]) -> str:
    """A short hash of a batch's output tokens: engines that generated the same tokens share it."""
    return hashlib.sha256(json.dumps([list(t) for t in token_ids]).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- parent side


class Worker(Child):
    """One engine subprocess of the sweep (:mod:`harness.child`)."""

    def __init__(self, name: str, spec: dict, env: dict, log_dir: Path) -> None:
        super().__init__(["-m", "benchmarks.sweep", "--worker"], spec, log_dir, env=env, name=name,
                         timeout_s=COMMAND_TIMEOUT_S)

    def wait_ready(self) -> dict:
        """Start-up times: ``engine_s`` for the engine and warm-up, ``ready_s`` with imports."""
        started = self.ready()
        return {"worker": self.name, "engine_s": started["start_s"], "ready_s": started["ready_s"]}

    def run(self, prompts: list[list[int]], output_tokens: int) -> dict:
        # vLLM's worker and engine core keep spin-waiting on their shared-memory queues for 1 s
        # after their last message (shm_broadcast.SpinCondition): an engine that has just run
        # still takes a core meanwhile. Let it go idle before the next engine is measured.
        time.sleep(SETTLE_S)
        return self.call({"cmd": "run", "prompts": prompts, "output_tokens": output_tokens})

    def run_phases(self, phases: list[dict]) -> list[dict]:
        """``phases`` (:func:`measure`'s keyword arguments each) back to back; one result per phase."""
        time.sleep(SETTLE_S)
        return self.call({"cmd": "run", "phases": phases})["phases"]


class Pool:
    """Workers by key; at most ``max_alive`` up at once (one engine per GPU)."""

    def __init__(self, max_alive: int, log_dir: Path) -> None:
        self.max_alive, self.log_dir = max_alive, log_dir
        self.workers: dict[tuple, Worker] = {}
        self.starts: list[dict] = []

    def launch(self, key: tuple, spec: dict, env: dict) -> None:
        """Start the worker for ``key`` unless it is up; stop the oldest when full."""
        if key in self.workers:
            return
        while len(self.workers) >= self.max_alive:
            self.stop(next(iter(self.workers)))
        name = "_".join(str(x) for x in key)
        say(f"  starting {name}")
        self.workers[key] = Worker(name, spec, env, self.log_dir)

    def get(self, key: tuple, spec: dict, env: dict) -> Worker:
        """The ready worker for ``key``, started if needed."""
        self.launch(key, spec, env)
        worker = self.workers[key]
        if worker.started is None:
            self.starts.append(worker.wait_ready())
        return worker

    def start_together(self, workers) -> None:
        """Launch every ``(key, spec, env)`` of ``workers``, then wait until each is ready: their
        single-threaded imports overlap, and nothing is measured before all are up."""
        workers = list(workers)
        for key, spec, env in workers:
            self.launch(key, spec, env)
        for key, spec, env in workers:
            self.get(key, spec, env)

    def stop(self, key: tuple) -> None:
        self.workers.pop(key).close()

    def stop_all(self, keep=lambda key: False) -> None:
        for key in [k for k in self.workers if not keep(k)]:
            self.stop(key)


@dataclass
class Setup:
    """Everything device-specific: models, engine arguments, run layout."""

    device: str  # "cpu" or a slug of the GPU's name
    device_label: str
    pairs: dict[str, tuple[str, str]]  # draft name -> (target path, draft path)
    target_names: dict[str, str]  # draft name -> target name
    engine: dict  # engine kwargs shared by every mode
    env: dict  # environment of every worker
    interleave: bool  # all modes up at once, round-robin
    speculative_extra: dict[str, dict] = field(default_factory=dict)  # per draft
    meta: dict = field(default_factory=dict)
    methods: dict[str, str] = field(default_factory=dict)  # draft name -> speculative method (default draft_model)
    default_drafts: list[str] | None = None  # swept without --drafts (default: every pair)


# vLLM's usage-stats thread runs py-cpuinfo (a CPU-bound subprocess) right after each engine
# starts: on 2 cores it slowed the first runs after a start several times over.
QUIET_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def engine_core_env(args) -> dict:
    """``inproc``: the engine core runs in the worker's process; ``process``: vLLM's
    default, a separate engine-core process (what serving always uses)."""
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if args.engine_core == "inproc" else "1"}


def common_engine_kwargs(args) -> dict:
    # max_num_batched_tokens: every prompt of a 2N = 64 batch prefills in one step.
    return dict(seed=0, max_model_len=512, block_size=32, max_num_seqs=MAX_REQUESTS,
                max_num_batched_tokens=max(4096, MAX_REQUESTS * args.prompt_tokens),
                enable_prefix_caching=False, disable_log_stats=False)


def cpu_setup(args, drafts=()) -> Setup:
    """The kit's pairs; ``drafts``: the drafts a run names (the other methods' checkpoints are built only
    when one of them is named)."""
    from modelkit import build_kit

    kit = build_kit()
    pairs = {name: (kit.target, getattr(kit, name)) for name in ("draft_perturbed", "draft_small", "eagle3")}
    setup = Setup(
        device="cpu", device_label=cpu_label(), pairs=pairs,
        target_names=dict.fromkeys(pairs, "target"),
        engine={**common_engine_kwargs(args), "dtype": "float32", "enforce_eager": True},
        # Four engines up at once: 1 GiB of KV each (vLLM's CPU default sizes it from free memory).
        env={**QUIET_ENV, **engine_core_env(args), "VLLM_TARGET_DEVICE": "cpu",
             "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")},
        interleave=True, methods={"eagle3": "eagle3"}, default_drafts=list(pairs),
        meta={"models": "the kit's tiny Llama target and drafts (float32); eagle3: the kit's EAGLE-3 head",
                               "draft_agreement": {n: kit.marker(n).get("agreement") for n in pairs}})
    if set(drafts) & set(OTHER_METHODS):
        add_other_methods(setup, kit)
    return setup


# Every other speculative method, each a "draft" of its own (--drafts only): the kit's tiny checkpoints
# (modelkit/method_checkpoints.py), and n-gram and suffix decoding, which need none.
OTHER_METHODS = ("ngram", "suffix", "mtp", "pard", "peagle", "medusa", "dflash")


def add_other_methods(setup: Setup, kit) -> None:
    from modelkit.method_checkpoints import build_method_checkpoints

    checkpoints = build_method_checkpoints()
    for name in OTHER_METHODS:
        if name in ("ngram", "suffix"):
            target, spec = kit.target, {"method": name}
        else:
            target, spec = checkpoints.target_for(name), checkpoints.speculative_config(name, 1)
        setup.pairs[name] = (target, spec.pop("model", None))
        setup.target_names[name] = "target" if target == kit.target else Path(target).name
        setup.methods[name] = spec.pop("method")
        spec.pop("num_speculative_tokens", None)
        setup.speculative_extra[name] = spec  # e.g. parallel_drafting


def cuda_setup(args) -> Setup:
    import torch

    if not torch.cuda.is_available():
        sys.exit("sweep: --device cuda, but no CUDA device is visible (torch.cuda.is_available() is False)")
    from modelkit.shapes import DEFAULT_ACCEPTANCE, PAIRS, build_shapes

    paths, name = build_shapes(), torch.cuda.get_device_name(0)
    total = torch.cuda.get_device_properties(0).total_memory
    pairs, targets, extra, skipped = {}, {}, {}, {}
    for pair, (target, draft) in PAIRS.items():
        reason = gpu_memory_shortfall(pair, total, args)
        if reason:
            print(f"sweep: skipping {pair}: {reason}", flush=True)
            skipped[pair] = reason
            continue
        pairs[draft], targets[draft] = (paths[target], paths[draft]), target
        alpha = args.acceptance or DEFAULT_ACCEPTANCE[pair]
        extra[draft] = {"alpha": alpha}
    return Setup(
        device=slug(name), device_label=name, pairs=pairs, target_names=targets,
        engine={**common_engine_kwargs(args), "dtype": "bfloat16", "load_format": "dummy",
                "gpu_memory_utilization": GPU_MEMORY_UTILIZATION},
        env={**QUIET_ENV, **engine_core_env(args), "VLLM_TARGET_DEVICE": "cuda"},
        interleave=False, speculative_extra=extra,
        meta={"models": "config-only shapes with dummy weights (modelkit.shapes), bfloat16",
              "acceptance": "synthetic rejection sampler: position i accepted with probability alpha^(i+1)",
              "alpha": {d: e["alpha"] for d, e in extra.items()}, "skipped_pairs": skipped,
              "gpu_memory_bytes": total})


GPU_MEMORY_UTILIZATION = 0.9
GPU_HEADROOM_BYTES = 6 << 30  # activations, CUDA graphs, allocator slack, torch context


def gpu_memory_shortfall(pair: str, total_bytes: int, args) -> str | None:
    """Why ``pair`` cannot run on this GPU at the sweep's largest batch, or None."""
    from modelkit.shapes import pair_memory_bytes

    kv_tokens = MAX_REQUESTS * (args.prompt_tokens + max(args.output_tokens) + 8)
    need = pair_memory_bytes(pair, kv_tokens) + GPU_HEADROOM_BYTES
    have = int(total_bytes * GPU_MEMORY_UTILIZATION)
    if need <= have:
        return None
    return f"needs ~{need / 2**30:.0f} GiB (weights, KV for {MAX_REQUESTS} requests, headroom), " \
           f"the GPU offers {have / 2**30:.0f} GiB"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_label() -> str:
    model = ""
    try:
        model = next(x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"cpu ({os.cpu_count()} cores, {platform.machine()}{', ' + model if model else ''})"


def worker_spec(setup: Setup, draft: str | None, mode: str, k: int | None, warmup: list) -> tuple[dict, dict]:
    """(spec, env) of the worker for ``mode``; ``draft`` picks the target too."""
    target, draft_path = setup.pairs[draft]
    speculation = speculation_of(setup, draft, draft_path, k) if mode != "no_sd" else None
    engine = engine_kwargs(mode, target, speculation, defaults={}, **setup.engine)
    return {"engine": engine, "warmup_prompts": warmup}, dict(setup.env)


def speculation_of(setup: Setup, draft: str, path: str, k: int) -> Speculation:
    extra = dict(setup.speculative_extra.get(draft, {}))
    alpha = extra.pop("alpha", None)
    if alpha is not None:  # dummy weights never agree: acceptance is drawn instead
        extra = {"rejection_sample_method": "synthetic",
                 "synthetic_acceptance_rates": [alpha ** (i + 1) for i in range(k)]}
    return Speculation(path, k, setup.methods.get(draft, "draft_model"), extra=extra)


# ---------------------------------------------------------------- the sweep


@dataclass
class Job:
    mode: str
    requests: int
    repeat: int
    output_tokens: int


PAPER_MODE = "minedraft_parallel"  # the paper's setting runs the overlap itself at 2N


def round_jobs(modes: list[str], n: int, concurrency: list[int], repeat: int, rotation: int,
               output_tokens: int) -> list[Job]:
    """One round at stock SD batch ``n``: each mode at n, parallel MineDraft also at 2n.

    The 2n run is skipped when 2n is itself a swept N (that round measures
    it); the order rotates so no mode always runs first.
    """
    jobs = [Job(mode, n, repeat, output_tokens) for mode in modes]
    if PAPER_MODE in modes and 2 * n not in concurrency and output_tokens <= LONG_OUTPUT:
        jobs.append(Job(PAPER_MODE, 2 * n, repeat, output_tokens))
    shift = rotation % len(jobs)
    return jobs[shift:] + jobs[:shift]


def plan(args, output_tokens: int) -> tuple[list[int], int]:
    """(concurrency, repeats) for runs of ``output_tokens``: long runs get their own."""
    if output_tokens > LONG_OUTPUT:
        return args.long_concurrency, args.long_repeats
    return args.concurrency, args.repeats


def block_jobs(modes: list[str], args, interleave: bool) -> list[Job]:
    """All jobs of one (draft, k): rounds interleaved, or one mode after another."""
    rounds = []
    for output_tokens in args.output_tokens:
        concurrency, repeats = plan(args, output_tokens)
        rounds += [round_jobs(modes, n, concurrency, r, r + i, output_tokens)
                   for r in range(repeats) for i, n in enumerate(concurrency)]
    jobs = [job for jobs in rounds for job in jobs]
    return jobs if interleave else sorted(jobs, key=lambda j: modes.index(j.mode))


def progress(total: int, desc: str) -> tqdm:
    """A bar of ``total`` runs on stderr: done, left, elapsed and ETA (engine starts included).

    Off where stderr is not a terminal (CI, pytest, a log file). Lines printed meanwhile go
    through :func:`say`, so that bar and lines do not garble each other.
    """
    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr, disable=None, smoothing=0, dynamic_ncols=True)


def say(line: str) -> None:
    """``line`` on stdout, the progress bar (if any) redrawn below it."""
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


def sweep_blocks(setup: Setup, args) -> list[tuple[str, int | None, list[str]]]:
    """(draft, k, modes) of every block, in run order."""
    blocks = []
    modes = [m for m in MODES if m in (args.modes or MODES)]
    for draft in args.drafts:
        if setup.interleave:
            blocks += [(draft, k, modes) for k in args.ks]
        else:  # no_sd does not depend on k: once per target
            blocks += [(draft, None, ["no_sd"])] + [(draft, k, [m for m in modes if m != "no_sd"]) for k in args.ks]
    return blocks


def run_sweep(setup: Setup, args, prompts: list[list[int]]) -> tuple[list[dict], Pool]:
    """Every block; returns one sample per run."""
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="minedraft-sweep-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"worker logs: {log_dir}", flush=True)
    pool = Pool(max_alive=len(MODES) if setup.interleave else 1, log_dir=log_dir)
    blocks = sweep_blocks(setup, args)
    samples: list[dict] = []
    total = sum(len(block_jobs(modes, args, setup.interleave)) for _, _, modes in blocks)
    try:
        with progress(total, "sweep") as bar:
            for draft, k, modes in blocks:
                samples += run_block(setup, args, pool, draft, k, modes, prompts, bar)
                pool.stop_all(keep=lambda key: key[0] == "no_sd")
    finally:
        pool.stop_all()
    return samples, pool


def run_block(setup, args, pool: Pool, draft: str, k, modes: list[str], prompts, bar: tqdm) -> list[dict]:
    """All runs of one (draft, k): workers started on first use, in job order; ``bar`` counts them."""
    say(f"{draft} k={k}: {', '.join(modes)}")
    bar.set_postfix_str(f"{draft} k={k}: starting engines")
    workers = {mode: ((worker_key(setup, draft, mode, k),) + worker_spec(setup, draft, mode, k, prompts[:4]))
               for mode in modes}
    if setup.interleave:
        # All up at once anyway: start them together (their single-threaded imports
        # overlap) and measure nothing until every one is ready.
        for key, spec, env in workers.values():
            pool.launch(key, spec, env)
        for worker in workers.values():
            ready_worker(setup, pool, *worker)
    samples, skipped = [], set()
    for job in block_jobs(modes, args, setup.interleave):
        bar.set_postfix_str(f"{draft} k={k} {job.mode} x{job.requests} out {job.output_tokens}")
        worker = None if job.mode in skipped else ready_worker(setup, pool, *workers[job.mode])
        if worker is None:
            skipped.add(job.mode)
            bar.update()
            continue
        result = worker.run(prompts[:job.requests], job.output_tokens)
        bar.update()
        samples.append({"draft": draft, "target": setup.target_names[draft], "k": k, "mode": job.mode,
                        "requests": job.requests, "repeat": job.repeat, "output_tokens": job.output_tokens,
                        **result})
    print_block(samples)
    return samples


def worker_key(setup: Setup, draft: str, mode: str, k) -> tuple:
    # no_sd depends on the target only: one worker serves every draft and k of it.
    return ("no_sd", setup.target_names[draft]) if mode == "no_sd" else (mode, draft, f"k{k}")


def ready_worker(setup: Setup, pool: Pool, key: tuple, spec: dict, env: dict) -> Worker | None:
    """The worker for ``key``, or None where the device refuses its mode.

    On CPU any failure is fatal. On a GPU MineDraft may refuse the platform
    (its CUDA lane is unvalidated): that mode is skipped with one line.
    """
    try:
        return pool.get(key, spec, env)
    except ChildError as error:
        if setup.device == "cpu":
            raise
        pool.stop(key)
        say(f"sweep: skipping {key}: {str(error).splitlines()[-1]}")
        setup.meta.setdefault("skipped", []).append("_".join(key))
        return None


def print_block(samples: list[dict]) -> None:
    by = defaultdict(list)
    for s in samples:
        by[(s["output_tokens"], s["requests"], s["mode"])].append(s["tok_s"])
    for (out, n, mode), rates in sorted(by.items()):
        say(f"    out {out:<4} x{n:<3} {mode:>18} {statistics.median(rates):8.1f} tok/s "
            f"({min(rates):.0f}..{max(rates):.0f}, {len(rates)} runs)")


# ---------------------------------------------------------------- summary rows


def summarize(samples: list[dict], device: str, engine_core: str) -> list[dict]:
    """Rows of summary.json: per (comparison, output tokens, draft, k, N, mode)."""
    groups = defaultdict(list)
    for s in samples:
        groups[(s["mode"], s["output_tokens"], s["target"], s["draft"] if s["mode"] != "no_sd" else None,
                s["k"] if s["mode"] != "no_sd" else None, s["requests"])].append(s)
    rows = []
    drafts = sorted({(s["draft"], s["target"]) for s in samples if s["mode"] != "no_sd"})
    for comparison in COMPARISONS:
        for out in sorted({s["output_tokens"] for s in samples}):
            for n in sorted({s["requests"] for s in samples if s["mode"] == "stock_sd" and s["output_tokens"] == out}):
                at = (out, n)
                for target in sorted({t for _, t in drafts}):
                    base = groups.get(("no_sd", out, target, None, None, n))
                    if base:
                        rows.append(make_row(comparison, "no_sd", target, None, None, at, n, base, device))
                for draft, target in drafts:
                    for k in sorted({s["k"] for s in samples if s["draft"] == draft and s["mode"] == "stock_sd"}):
                        rows += comparison_rows(comparison, groups, device, target, draft, k, at)
    for row in rows:
        row["engine_core"] = engine_core
    return rows


def comparison_rows(comparison, groups, device, target, draft, k, at) -> list[dict]:
    out, n = at
    stock = groups.get(("stock_sd", out, target, draft, k, n))
    base = groups.get(("no_sd", out, target, None, None, n))
    rows = []
    if stock:
        rows.append(make_row(comparison, "stock_sd", target, draft, k, at, n, stock, device, base=base))
    for mode in MINEDRAFT_MODE_OF:
        total = 2 * n if comparison == "paper" else n
        if comparison == "paper" and mode != PAPER_MODE:
            continue
        mine = groups.get((mode, out, target, draft, k, total))
        if mine:
            row = make_row(comparison, mode, target, draft, k, at, total, mine, device, base=base, stock=stock)
            if comparison == "equal_concurrency":
                row.update(best_static(row, groups, target, draft, k, at))
            rows.append(row)
    return rows


def best_static(row: dict, groups, target, draft, k, at) -> dict:
    """``vllm_best_static``: the fastest of the target alone and stock SD at every k' <= k the sweep
    measured for this draft at this load (what a user who hand-tuned vLLM's depth table for exactly
    this load would get), and the row's ratio to it."""
    out, n = at
    static = {"no_sd": groups.get(("no_sd", out, target, None, None, n))}
    for (mode, o, t, d, k2, m), samples in groups.items():
        if (mode, o, t, d, m) == ("stock_sd", out, target, draft, n) and k2 <= k:
            static[f"stock_sd_k{k2}"] = samples
    rates = {name: statistics.median(s["tok_s"] for s in samples) for name, samples in static.items() if samples}
    if not rates:
        return {}
    best = max(rates, key=rates.get)
    return {"vllm_best_static": best, "vllm_best_static_tok_s": round(rates[best], 1),
            "vs_best_static": round(row["output_tokens_per_s"] / rates[best], 3)}


def make_row(comparison, mode, target, draft, k, at, total, samples, device, base=None, stock=None) -> dict:
    out, n = at
    rates = [s["tok_s"] for s in samples]
    row = {"comparison": comparison, "mode": mode, "device": device, "target": target, "draft": draft,
           "k": k, "batch_size": n, "total_requests": total, "output_tokens": out,
           "output_tokens_per_s": round(statistics.median(rates), 1),
           "output_tokens_per_s_min": round(min(rates), 1), "output_tokens_per_s_max": round(max(rates), 1),
           "output_tokens_per_s_runs": [round(r, 1) for r in rates],
           "mean_acceptance_length": acceptance_length(samples) if mode != "no_sd" else None,
           "ttft_ms_p50": median_of(samples, "ttft_ms_p50"), "tpot_ms_p50": median_of(samples, "tpot_ms_p50"),
           "parallel_step_fraction": parallel_fraction(samples) if mode in MINEDRAFT_MODE_OF else None}
    if mode in MINEDRAFT_MODE_OF:
        row["minedraft_mode"] = MINEDRAFT_MODE_OF[mode]
        row["parallel_trial_steps"] = int(sum(trial_steps(s["counters"]) for s in samples))
        row["steps_by_depth"] = steps_by_depth(samples)
        row.update(paired_ratio(samples, stock))
    if base and mode != "no_sd":
        row["vs_no_sd"] = round(row["output_tokens_per_s"] / statistics.median(s["tok_s"] for s in base), 3)
    return row


def acceptance_length(samples: list[dict]) -> float | None:
    drafts = sum(s["counters"]["vllm:spec_decode_num_drafts"] for s in samples)
    accepted = sum(s["counters"]["vllm:spec_decode_num_accepted_tokens"] for s in samples)
    return round(1 + accepted / drafts, 3) if drafts else None


def steps_by_depth(samples: list[dict]) -> dict[str, int]:
    """The steps each speculation depth ran, over the row's runs (the depth controller's choices)."""
    steps: dict[int, int] = {}
    for sample in samples:
        for depth, n in sample_steps_by_depth(sample["counters"]).items():
            steps[depth] = steps.get(depth, 0) + n
    return {str(depth): n for depth, n in sorted(steps.items())}


def trial_steps(counters: dict) -> float:
    """Steps auto allowed parallel mode only to measure it (``minedraft:probe_steps`` in runs before 2026-12-02)."""
    return counters.get("minedraft:parallel_trial_steps", counters.get("minedraft:probe_steps", 0))


def parallel_fraction(samples: list[dict]) -> float | None:
    parallel = sum(s["counters"]["minedraft:parallel_steps"] for s in samples)
    steps = parallel + sum(s["counters"]["minedraft:fallback_steps"] for s in samples)
    return round(parallel / steps, 3) if steps else None


def median_of(samples: list[dict], key: str) -> float | None:
    values = [s[key] for s in samples if s[key] is not None]
    return round(statistics.median(values), 2) if values else None


def paired_ratio(mine: list[dict], stock: list[dict] | None) -> dict:
    """MineDraft / stock SD per repeat (same round when interleaved): median, min, max."""
    if not stock:
        return {"vs_stock_sd": None}
    stock_by_repeat = {s["repeat"]: s["tok_s"] for s in stock}
    ratios = [m["tok_s"] / stock_by_repeat[m["repeat"]] for m in mine if m["repeat"] in stock_by_repeat]
    if not ratios:
        return {"vs_stock_sd": None}
    stock_median = statistics.median(s["tok_s"] for s in stock)
    return {"vs_stock_sd": round(statistics.median(ratios), 3),
            "vs_stock_sd_min": round(min(ratios), 3), "vs_stock_sd_max": round(max(ratios), 3),
            # The ratio of the two medians (robust to one slow repeat on either side).
            "vs_stock_sd_of_medians": round(statistics.median(m["tok_s"] for m in mine) / stock_median, 3)}


# ---------------------------------------------------------------- reports


def markdown(rows: list[dict], meta: dict) -> str:
    """Per mode, comparison and output length: MineDraft / stock SD by (draft, k) x N."""
    out = [f"Sweep on {meta.get('device_label', '?')}, {meta.get('date', '?')[:10]}: prompt "
           f"{meta.get('prompt_tokens')} tokens, outputs of {' and '.join(map(str, meta.get('output_tokens', [])))} "
           f"tokens (short: {meta.get('repeats')} repeats, long: {meta.get('long_repeats')}), engine core "
           f"{meta.get('engine_core', '?')}. Cells: MineDraft / stock SD tok/s, median of per-repeat ratios "
           "(min-max).", ""]
    for mode in MINEDRAFT_MODE_OF:
        for comparison in COMPARISONS:
            for length in sorted({r["output_tokens"] for r in rows}):
                mine = [r for r in rows if r["comparison"] == comparison and r["mode"] == mode
                        and r["output_tokens"] == length and r.get("vs_stock_sd") is not None]
                if mine:
                    out += ratio_table(mine, f"**{mode}**, {comparison} "
                                             f"({'at 2N vs stock SD at N' if comparison == 'paper' else 'all at N'}), "
                                             f"{length} output tokens")
    return "\n".join(out).rstrip() + "\n"


def ratio_table(mine: list[dict], heading: str) -> list[str]:
    ns = sorted({r["batch_size"] for r in mine})
    out = [heading, "", "| draft | k | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
    cells = {(r["draft"], r["k"], r["batch_size"]): r for r in mine}
    for draft, k in sorted({(r["draft"], r["k"]) for r in mine}):
        out.append(f"| {draft} | {k} | " + " | ".join(ratio_cell(cells.get((draft, k, n))) for n in ns) + " |")
    best = max(mine, key=lambda r: r["vs_stock_sd"])
    worst = min(mine, key=lambda r: r["vs_stock_sd"])
    return out + ["", f"Best {best['vs_stock_sd']:.2f}x ({describe(best)}), "
                      f"worst {worst['vs_stock_sd']:.2f}x ({describe(worst)}).", ""]


def ratio_cell(row: dict | None) -> str:
    if row is None:
        return ""
    return f"{row['vs_stock_sd']:.2f}x ({row['vs_stock_sd_min']:.2f}-{row['vs_stock_sd_max']:.2f})"


def describe(row: dict) -> str:
    return f"{row['draft']}, k={row['k']}, N={row['batch_size']}"


def update_readme(text: str, path: Path = README, begin: str = README_BEGIN, end: str = README_END) -> None:
    """Replace what lies between the markers (the sweep's by default; appending them if absent)."""
    readme = path.read_text()
    block = f"{begin}\n{text}{end}"
    if begin in readme and end in readme:
        head, rest = readme.split(begin, 1)
        readme = head + block + rest.split(end, 1)[1]
    else:
        readme = readme.rstrip() + "\n\n" + block + "\n"
    path.write_text(readme)


def plot(rows: list[dict], out_dir: Path, device_label: str) -> list[Path]:
    paths = []
    for length in sorted({r["output_tokens"] for r in rows}):
        at = [r for r in rows if r["output_tokens"] == length]
        for draft in sorted({r["draft"] for r in at if r["draft"]}):
            paths.append(plot_throughput(at, draft, out_dir / f"throughput_{draft}_out{length}.png", device_label))
            for mode in MINEDRAFT_MODE_OF:
                for comparison in COMPARISONS:
                    name = f"ratio_{mode}_{comparison}_{draft}_out{length}.png"
                    paths.append(plot_ratio(at, draft, mode, comparison, out_dir / name, device_label))
    return [p for p in paths if p]


COLORS = {"no_sd": "k", "stock_sd": "tab:blue", "minedraft_parallel": "tab:red", "minedraft_auto": "tab:green"}


def plot_throughput(rows: list[dict], draft: str, path: Path, device_label: str) -> Path:
    """tok/s vs running requests, one panel per k; bars span min..max."""
    equal = [r for r in rows if r["comparison"] == "equal_concurrency"]
    target = next(r["target"] for r in rows if r["draft"] == draft)
    ks = sorted({r["k"] for r in equal if r["draft"] == draft})
    fig, axes = runner.pyplot().subplots(1, len(ks), figsize=(max(3.6 * len(ks), 6), 3.6), sharey=True, squeeze=False)
    for ax, k in zip(axes[0], ks):
        for mode in MODES:
            if mode == "no_sd":
                series = [r for r in equal if r["mode"] == "no_sd" and r["target"] == target]
            elif mode == PAPER_MODE:  # also at 2N: the paper setting's points
                series = unique_totals([r for r in rows if r["mode"] == mode and r["draft"] == draft and r["k"] == k])
            else:
                series = [r for r in equal if r["mode"] == mode and r["draft"] == draft and r["k"] == k]
            series = sorted(series, key=lambda r: r["total_requests"])
            if series:
                x = [r["total_requests"] for r in series]
                y = [r["output_tokens_per_s"] for r in series]
                err = [[v - r["output_tokens_per_s_min"] for v, r in zip(y, series)],
                       [r["output_tokens_per_s_max"] - v for v, r in zip(y, series)]]
                ax.errorbar(x, y, yerr=err, color=COLORS[mode], marker="o", ms=3, capsize=2, label=MODE_LABELS[mode])
        totals = sorted({r["total_requests"] for r in rows if r["draft"] in (draft, None)})
        runner.requests_axis(ax, "running requests", ticks=totals, parity=False)
        ax.set_title(f"k={k}")
    axes[0][0].set_ylabel("output tokens/s")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"{draft}, {rows[0]['output_tokens']} output tokens, {device_label}\n"
                 "parallel MineDraft also at 2N (paper setting)", fontsize=8)
    return runner.save(fig, path)


def unique_totals(rows: list[dict]) -> list[dict]:
    """MineDraft rows by total requests; the equal_concurrency row wins a tie."""
    by_total = {}
    for r in sorted(rows, key=lambda r: r["comparison"] != "equal_concurrency"):
        by_total.setdefault(r["total_requests"], r)
    return list(by_total.values())


def plot_ratio(rows: list[dict], draft: str, mode: str, comparison: str, path: Path,
               device_label: str) -> Path | None:
    """Heat map of MineDraft / stock SD over k x N; 1.0 is white, the scale is logarithmic
    (0.5x and 2x get opposite colours of the same depth)."""
    import math

    plt = runner.pyplot()
    from matplotlib.colors import LogNorm

    mine = [r for r in rows if r["mode"] == mode and r["draft"] == draft
            and r["comparison"] == comparison and r.get("vs_stock_sd") is not None]
    if not mine:
        return None
    ks, ns = sorted({r["k"] for r in mine}), sorted({r["batch_size"] for r in mine})
    grid = [[next((r["vs_stock_sd"] for r in mine if r["k"] == k and r["batch_size"] == n), float("nan"))
             for n in ns] for k in ks]
    spread = max([abs(math.log(v)) for line in grid for v in line if v == v] + [math.log(1.05)])
    fig, ax = plt.subplots(figsize=(1.1 * len(ns) + 2.4, 0.6 * len(ks) + 1.6))
    image = ax.imshow(grid, cmap="RdBu", norm=LogNorm(math.exp(-spread), math.exp(spread)), aspect="auto")
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            if v == v:  # not NaN
                dark = abs(math.log(v)) > 0.6 * spread
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8, color="w" if dark else "k")
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("N, stock SD batch" + (" (MineDraft runs 2N)" if comparison == "paper" else ""))
    ax.set_ylabel("k")
    ax.set_title(f"{MODE_LABELS[mode]} / stock SD, {comparison}, {draft}, "
                 f"{mine[0]['output_tokens']} output tokens\n{device_label}", fontsize=8)
    ticks = [math.exp(spread * f) for f in (-1, -0.5, 0, 0.5, 1)]
    bar = fig.colorbar(image, ax=ax)
    bar.ax.minorticks_off()
    bar.set_ticks(ticks, labels=[f"{t:.2f}x" for t in ticks])
    return runner.save(fig, path)


def inherit_workload(args, names=("prompt_tokens", "engine_core")):
    """Set ``names`` on ``args`` to the sweep's defaults: the benchmarks beside it run its workload and layout."""
    defaults = parse_args([])
    for name in names:
        setattr(args, name, getattr(defaults, name))
    return args


def prompts_and_log_dir(setup: Setup, args, draft: str, name: str) -> tuple[list[list[int]], Path]:
    """The sweep's prompts (windows in ``draft``'s target's tokens) and a new folder for ``name``'s worker logs."""
    from modelkit.prompts import token_windows

    prompts = token_windows(MAX_REQUESTS, args.prompt_tokens, seed=0, tokenizer_dir=setup.pairs[draft][0])
    log_dir = Path(tempfile.mkdtemp(prefix=f"minedraft-{name}-"))
    print(f"worker logs: {log_dir}", flush=True)
    return prompts, log_dir


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    parser = runner.parser(__doc__, replot="no runs: plots and table from --out-dir's summary")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--ks", type=int, nargs="+")
    parser.add_argument("--modes", nargs="+", choices=MODES, help="rows to run (default: all four)")
    parser.add_argument("--concurrency", type=int, nargs="+", help="stock SD batch sizes N (MineDraft also runs 2N)")
    parser.add_argument("--drafts", nargs="+", help="draft names (cpu: draft_perturbed draft_small eagle3; "
                        f"the other methods: {' '.join(OTHER_METHODS)})")
    parser.add_argument("--repeats", type=int, help="repeats of short runs")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, nargs="+", help=f"output lengths (> {LONG_OUTPUT}: long runs)")
    parser.add_argument("--long-concurrency", type=int, nargs="+", help="N of long runs")
    parser.add_argument("--long-repeats", type=int, help="repeats of long runs")
    parser.add_argument("--engine-core", choices=ENGINE_LAYOUTS, default="process",
                        help="where vLLM's engine core runs (default: its own process, vLLM's default; "
                             "see the module docstring: on 2 cores the choice changes the ratios)")
    parser.add_argument("--acceptance", type=float, help="cuda: per-token synthetic acceptance (default per pair)")
    parser.add_argument("--quick", action="store_true", help="smoke run: k 1 3, N 1 8, one draft, 1 repeat, "
                                                             "written under a temporary directory")
    parser.add_argument("--out-dir", help="default benchmarks/results/<device>")
    parser.add_argument("--merge", action="store_true",
                        help="add this run's drafts to --out-dir's summary (replacing their rows) instead of "
                             "writing a new one")
    parser.add_argument("--log-dir", help="worker logs (default: a new temporary directory)")
    parser.add_argument("--markdown", action="store_true", help="print the ratio table")
    parser.add_argument("--update-readme", action="store_true", help=f"write the table into {README.name}")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick and args.update_readme and not args.replot:
        parser.error("--update-readme takes a full sweep's table, not --quick's")
    if max(args.concurrency + args.long_concurrency) * 2 > MAX_REQUESTS:
        parser.error(f"--concurrency: 2N must stay <= {MAX_REQUESTS}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        serve(make_worker)
        return
    if args.replot:
        out_dir = Path(args.out_dir or HERE / "results" / args.device)
        rows = json.loads((out_dir / "summary.json").read_text())
        meta = json.loads((out_dir / "summary_meta.json").read_text())
        report(rows, meta, out_dir, args)
        return
    setup = cpu_setup(args, args.drafts or ()) if args.device == "cpu" else cuda_setup(args)
    args.drafts = select_drafts(args, setup)
    out_dir = Path(args.out_dir or (Path(tempfile.gettempdir()) / "minedraft-sweep-quick" / setup.device
                                    if args.quick else HERE / "results" / setup.device))
    rows, meta = sweep(setup, args)
    if args.merge:
        rows, meta = merge_summary(out_dir, rows, meta, args.drafts)
    runner.write_result(out_dir / "summary.json", rows)
    runner.write_result(out_dir / "summary_meta.json", meta)
    print(f"\nwrote {out_dir / 'summary.json'} ({len(rows)} rows) and summary_meta.json")
    report(rows, meta, out_dir, args)


def merge_summary(out_dir: Path, rows: list[dict], meta: dict, drafts: list[str]) -> tuple[list[dict], dict]:
    """This run's rows of ``drafts`` added to the summary in ``out_dir``, replacing its rows of
    those drafts. The summary's own target-alone (``no_sd``) rows are kept and this run's dropped,
    so each configuration keeps one; ``meta["merged"]`` records what came from which run."""
    old_rows = json.loads((out_dir / "summary.json").read_text())
    old_meta = json.loads((out_dir / "summary_meta.json").read_text())
    kept = [r for r in old_rows if r.get("draft") not in drafts]
    added = [r for r in rows if r["mode"] != "no_sd"]
    merged_meta = {**old_meta, "drafts": [*[d for d in old_meta["drafts"] if d not in drafts], *drafts],
                   "draft_agreement": {**old_meta.get("draft_agreement", {}), **meta.get("draft_agreement", {})},
                   "merged": [*old_meta.get("merged", []),
                              {"drafts": drafts, "date": meta["date"], "rows": len(added),
                               "note": "no_sd rows of this run dropped: the summary keeps its first run's"}]}
    return kept + added, merged_meta


def select_drafts(args, setup: Setup) -> list[str]:
    if not setup.pairs:
        sys.exit("sweep: no model pair fits this device")
    defaults = setup.default_drafts or list(setup.pairs)
    drafts = args.drafts or (defaults[:1] if args.quick else defaults)
    unknown = [d for d in drafts if d not in setup.pairs]
    if unknown:
        sys.exit(f"sweep: unknown draft(s) {unknown}; choose from {sorted(setup.pairs)}")
    return drafts


def sweep(setup: Setup, args) -> tuple[list[dict], dict]:
    from modelkit.prompts import token_windows

    tokenizer = setup.pairs[args.drafts[0]][0]  # every model directory holds the kit's tokenizer
    prompts = token_windows(MAX_REQUESTS, args.prompt_tokens, seed=0, tokenizer_dir=tokenizer)
    started = time.perf_counter()
    samples, pool = run_sweep(setup, args, prompts)
    meta = run_meta(setup, args, pool, time.perf_counter() - started)
    return summarize(samples, setup.device, args.engine_core), meta


def run_meta(setup: Setup, args, pool: Pool, elapsed: float) -> dict:
    from importlib.metadata import packages_distributions, version

    vllm_dist = packages_distributions().get("vllm", ["vllm"])[0]  # vllm-cpu on CPU
    return {"device": setup.device, "device_label": setup.device_label, "cpu_count": os.cpu_count(),
            "date": runner.date(),
            "vllm_version": f"{vllm_dist} {version(vllm_dist)}",
            "ks": args.ks, "concurrency": args.concurrency, "drafts": args.drafts, "repeats": args.repeats,
            "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
            "long_concurrency": args.long_concurrency, "long_repeats": args.long_repeats,
            "sampling": "temperature 0, ignore_eos, no detokenization",
            "interleaved": setup.interleave, "engine_core": args.engine_core,
            "modes": {m: MINEDRAFT_MODE_OF.get(m) for m in MODES},
            "engine": {k: v for k, v in setup.engine.items() if k != "model"},
            "worker_env": setup.env, "engine_starts": pool.starts,
            # MineDraft settings the workers inherit from this run's environment (e.g. MINEDRAFT_SPECULATION_DEPTH).
            "minedraft_env": {k: v for k, v in os.environ.items() if k.startswith("MINEDRAFT_")},
            "sweep_seconds": round(elapsed, 1), **setup.meta}


def report(rows: list[dict], meta: dict, out_dir: Path, args) -> None:
    for path in plot(rows, out_dir, meta["device_label"]):
        print(f"wrote {path}")
    table = markdown(rows, meta)
    if args.markdown or not args.replot:
        print("\n" + table)
    if args.update_readme:
        update_readme(table)
        print(f"updated {README}")


if __name__ == "__main__":
    main()
