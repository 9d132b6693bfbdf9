"""Disaggregated prefill and decode (1P1D) beside one instance, served: TTFT and TPOT as a client sees them.

Five servers up together on 127.0.0.1, the kit's target, k = 3 drafts from the kit's perturbed draft
(as large as the target), prefix caching off on all (what a decode instance does not compute comes
from the connector alone, as in tests/e2e/test_disaggregated.py), in three topologies:

* ``single``: one stock SD instance doing both prefill and decode;
* ``1p1d``: a prefill instance (stock SD) storing each prompt's KV, target and draft layers, through
  vLLM's ExampleConnector (``kv_producer``, a folder on disk; with patches/0010's fix:
  harness/example_connector_fix.py), and a decode instance with MineDraft's default
  (``--scheduler-cls minedraft``, ``auto``) loading it (``kv_consumer``). With a KV connector
  MineDraft runs its stock path (RFC §7);
* ``1p1d_stock``: the same pair, with a folder of its own, and stock SD on the decode side, so that
  what 1P1D costs here and what MineDraft on the decode side costs are told apart. (One prefill
  instance for both would bias the order: a producer loads a prompt it finds stored instead of
  computing it.)

A 1P1D request goes as vLLM's disaggregated-serving proxy sends it: to the prefill instance with
max_tokens 1, then, once answered, to the decode instance, streamed; its TTFT runs from before the
first call to the decode instance's first streamed token. A ``single`` request is streamed from that
instance alone. TPOT = (end - first token) / (output tokens - 1), per request. Each scenario (max
concurrency 1 and 4, 8 requests of 64-512 prompt and 32-64 output tokens, every one in flight as
concurrency allows) runs the three topologies in a rotating order, three rounds, each round and scenario
with prompts of its own (nothing stored or cached serves a later one); the table gives the median of
the rounds' medians and the median of the rounds' ratios. Every 1P1D answer is checked token for token
against the single instance's.

Cores (``VLLM_CPU_OMP_THREADS_BIND``): the single and the prefill instances on core 0, the decode
instances on core 1, so 1P1D has two cores where the single instance has one: extra hardware, as
disaggregation is (prefill and decode on hardware of their own). Unbound, every instance on both
cores, a request's first token and the tokens after it waited for the other instance's threads:
right after one instance answered, the other's next step took up to 0.7 s longer (2026-11-27; with
a second's pause between the prefill answer and the decode request that cost was gone). The store is a folder on
the same disk: the numbers say what the connector's round trip costs a request here, not what NIXL
between GPUs costs.

    python -m benchmarks.disaggregated [--rounds 3] [--replot]

Writes ``benchmarks/results/cpu/disaggregated.json`` and ``.png``.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import runner
from benchmarks.serving import rotated  # the serving benchmark's rotating order
from harness import server as launch_server
from harness.engine_args import Speculation, engine_kwargs, example_connector

K = 3
CONCURRENCIES = (1, 4)
REQUESTS_PER_SCENARIO = 8
PROMPT_TOKENS = (64, 512)
OUTPUT_TOKENS = (32, 64)
# topology -> (the server that streams the answer, the prefill server called first or None)
TOPOLOGIES = {"single": ("single", None), "1p1d": ("decode", "prefill"), "1p1d_stock": ("decode_stock", "prefill_stock")}
SERVER_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
MODEL_NAME = "kit-target"
CORE_OF = {"single": "0", "prefill": "0", "decode": "1", "prefill_stock": "0", "decode_stock": "1"}
STARTUP_TIMEOUT_S = 600
ACCEPTED, DRAFTED = "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"
LABELS = {"single": "one stock SD instance", "1p1d": "1P1D, MineDraft decode", "1p1d_stock": "1P1D, stock SD decode"}
METRICS = ("ttft_s", "tpot_s")
RATIOS = {"1p1d_vs_single": ("1p1d", "single"), "1p1d_vs_1p1d_stock": ("1p1d", "1p1d_stock")}
OUT = runner.CPU_RESULTS / "disaggregated.json"


def start_servers(kit, log_dir: Path) -> dict[str, launch_server.Server]:
    speculation = Speculation(str(kit.draft_perturbed), K)
    stock, minedraft = (engine_kwargs(mode, str(kit.target), speculation, max_model_len=1024)
                        for mode in ("stock_sd", "minedraft_auto"))
    stores = {pair: Path(tempfile.mkdtemp(prefix=f"kv-store-{pair}-")) for pair in ("1p1d", "1p1d_stock")}
    engines = {
        "single": stock,
        "prefill": {**stock, "kv_transfer_config": example_connector("kv_producer", stores["1p1d"])},
        "decode": {**minedraft, "kv_transfer_config": example_connector("kv_consumer", stores["1p1d"])},
        "prefill_stock": {**stock, "kv_transfer_config": example_connector("kv_producer", stores["1p1d_stock"])},
        "decode_stock": {**stock, "kv_transfer_config": example_connector("kv_consumer", stores["1p1d_stock"])},
    }
    servers = {}
    for name, engine in engines.items():
        env = {**SERVER_ENV, "VLLM_CPU_OMP_THREADS_BIND": CORE_OF[name]}
        servers[name] = launch_server.start(name, engine, log_dir, env=env,
                                            extra_args=("--no-enable-prefix-caching", "--served-model-name", MODEL_NAME))
    for server in servers.values():
        server.wait_ready(STARTUP_TIMEOUT_S)
    return servers


def requests_for(seed: int, vocab: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt": [rng.randrange(vocab) for _ in range(rng.randint(*PROMPT_TOKENS))],
             "max_tokens": rng.randint(*OUTPUT_TOKENS)} for _ in range(REQUESTS_PER_SCENARIO)]


def client(server: launch_server.Server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="none", timeout=600, max_retries=0)


def streamed(server: launch_server.Server, req: dict, started: float) -> dict:
    """One greedy completion streamed from ``server``: first-token and end times from ``started``, its tokens."""
    tokens, first = [], None
    stream = client(server).completions.create(
        model=MODEL_NAME, prompt=req["prompt"], max_tokens=req["max_tokens"], temperature=0, stream=True,
        extra_body={"ignore_eos": True, "return_token_ids": True})
    for chunk in stream:
        if chunk.choices and (ids := chunk.choices[0].model_dump().get("token_ids")):
            first = first if first is not None else time.perf_counter()
            tokens += ids
    end = time.perf_counter()
    return {"ttft_s": first - started, "tpot_s": (end - first) / max(len(tokens) - 1, 1), "tokens": tokens}


def one_request(topology: str, servers: dict, req: dict) -> dict:
    answering, prefill = TOPOLOGIES[topology]
    started = time.perf_counter()
    if prefill:  # as vLLM's disaggregated-serving proxy: prefill with max_tokens 1, then decode
        client(servers[prefill]).completions.create(model=MODEL_NAME, prompt=req["prompt"], max_tokens=1,
                                                    temperature=0)
    return streamed(servers[answering], req, started)


def run_scenario(topology: str, servers: dict, reqs: list[dict], concurrency: int) -> list[dict]:
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(lambda req: one_request(topology, servers, req), reqs))


def acceptance(metrics: dict[str, float]) -> float:
    return metrics.get(ACCEPTED, 0.0) / max(metrics.get(DRAFTED, 0.0), 1.0)


def measure(rounds: int) -> dict:
    from transformers import AutoConfig

    from modelkit import build_kit

    kit = build_kit()
    vocab = AutoConfig.from_pretrained(str(kit.target)).vocab_size
    log_dir = Path(tempfile.mkdtemp(prefix="minedraft-1p1d-"))
    print(f"server logs: {log_dir}", flush=True)
    runs = []
    servers = start_servers(kit, log_dir)
    try:
        for r in range(rounds):
            for concurrency in CONCURRENCIES:
                reqs = requests_for(1000 * r + concurrency, vocab)
                answers = {}
                for topology in rotated(tuple(TOPOLOGIES), r):
                    answers[topology] = run_scenario(topology, servers, reqs, concurrency)
                for topology, answered in answers.items():
                    runs.append({"topology": topology, "round": r, "concurrency": concurrency,
                                 "ttft_s": [a["ttft_s"] for a in answered], "tpot_s": [a["tpot_s"] for a in answered],
                                 "identical_to_single": [a["tokens"] for a in answered]
                                 == [a["tokens"] for a in answers["single"]]})
                    print(f"round {r} c={concurrency} {topology:>10}: TTFT p50 "
                          f"{1e3 * statistics.median(runs[-1]['ttft_s']):7.1f} ms  TPOT p50 "
                          f"{1e3 * statistics.median(runs[-1]['tpot_s']):6.1f} ms", flush=True)
        metrics = {name: server.metrics() for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    return {"measured": runner.minute(),
            "device": "cpu (2 cores): single and prefill instances on core 0, decode instances on core 1; KV store: "
                      "a folder on local disk per prefill/decode pair",
            "workload": f"{REQUESTS_PER_SCENARIO} requests per scenario, prompts of {PROMPT_TOKENS[0]}-{PROMPT_TOKENS[1]} "
                        f"random tokens, {OUTPUT_TOKENS[0]}-{OUTPUT_TOKENS[1]} output tokens (ignore_eos), greedy, "
                        f"k={K}, the kit's draft_perturbed (as large as the target), float32, prefix caching off",
            "rounds": rounds, "summary": summarise(runs),
            "acceptance": {name: round(acceptance(metrics[name]), 3) for name in ("single", "decode", "decode_stock")},
            "decode_minedraft_steps": {k: metrics["decode"].get(f"minedraft:{k}_total", 0)
                                       for k in ("parallel_steps", "fallback_steps")},
            "runs": runs}


def summarise(runs: list[dict]) -> dict:
    """Per concurrency and topology: the median over rounds of each round's median TTFT and TPOT (ms), and
    the ratios that say what 1P1D costs (against the single instance) and what MineDraft's decode costs
    (against stock SD's decode): each the median over rounds of the round's ratio (the topologies of a
    round ran back to back, so a round's noise hits both sides of its ratio)."""
    summary = {}
    for concurrency in sorted({x["concurrency"] for x in runs}):
        of = {(x["topology"], x["round"]): x for x in runs if x["concurrency"] == concurrency}
        rounds = sorted({r for _, r in of})
        row = {topology: {m: round(1e3 * statistics.median(statistics.median(of[topology, r][m]) for r in rounds), 1)
                          for m in METRICS} for topology in TOPOLOGIES}
        for name, (num, den) in RATIOS.items():
            row[name] = {m: round(statistics.median(statistics.median(of[num, r][m]) / statistics.median(of[den, r][m])
                                                    for r in rounds), 2) for m in METRICS}
        row["identical"] = all(x["identical_to_single"] for x in runs if x["concurrency"] == concurrency)
        summary[str(concurrency)] = row
    return summary


def markdown(result: dict) -> str:
    lines = ["| max concurrency | metric (p50, ms) | single | 1P1D, stock decode | 1P1D, MineDraft decode "
             "| 1P1D / single | MineDraft decode / stock decode | identical |", "|---|---|---|---|---|---|---|---|"]
    for c, row in result["summary"].items():
        for metric, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
            lines.append(f"| {c} | {label} | {row['single'][metric]} | {row['1p1d_stock'][metric]} | {row['1p1d'][metric]} "
                         f"| {row['1p1d_vs_single'][metric]}x | {row['1p1d_vs_1p1d_stock'][metric]}x "
                         f"| {'yes' if row['identical'] else 'NO'} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    concurrencies = list(result["summary"])
    fig, axes = runner.pyplot().subplots(1, 2, figsize=(8, 3.5))
    for ax, metric, label in zip(axes, ("ttft_s", "tpot_s"), ("TTFT p50 (ms)", "TPOT p50 (ms)")):
        for i, topology in enumerate(TOPOLOGIES):
            values = [result["summary"][c][topology][metric] for c in concurrencies]
            ax.bar([j + 0.27 * i for j in range(len(concurrencies))], values, width=0.27, label=LABELS[topology],
                   color=["#888", "#c66", "#36c"][i])
        ax.set_xticks([j + 0.27 for j in range(len(concurrencies))], [f"c={c}" for c in concurrencies])
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"1P1D through ExampleConnector (prefill core 0, decode core 1) vs one instance (core 0), k={K}\n"
                 f"served, streamed, median of {result['rounds']} rounds' medians ({result['measured']})", fontsize=9)
    runner.save(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    args = runner.parser(__doc__, rounds=3, replot="no runs: redraw the plot and table from the JSON").parse_args(argv)
    result = runner.run_or_replot(args, OUT, lambda: measure(args.rounds), indent=2)
    plot(result, OUT.with_suffix(".png"))
    print(markdown(result))
    print(json.dumps({k: result[k] for k in ("acceptance", "decode_minedraft_steps")}))


if __name__ == "__main__":
    main()
