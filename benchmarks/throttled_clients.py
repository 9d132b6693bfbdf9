"""Clients that throttle the load, on the real pair: does MineDraft's default lose by reading it as a closed batch?

A server whose clients keep ``--clients`` requests in flight (``vllm bench serve --max-concurrency``) has no
request waiting in its scheduler: MineDraft's scheduler then reads the batch as closed, one that ends with
its last request, and the default scores each depth by when the request with the most tokens left would
finish (policy/depth.py, ``closing``), not by the running requests' tokens per second. Under such clients
the batch never ends: a new request arrives as each one finishes. This runs that load on engines alive side
by side in this process, taking turns, the order alternating each round:

* ``default``: MineDraft's default (k = 3), as it runs;
* ``default_read_open``: the same, its scheduler told that requests are always waiting (``_closed``
  answers False: an override of MineDraft's own method on the instance, for this reading only), so every
  step is scored by the running requests' tokens per second;
* ``target``: the target alone, for scale.

The load: ``--requests`` requests, code decoded greedily and prose sampled at temperature 1 (seeded per
request) in turn, at most ``--clients`` in flight, a new one added as one finishes. Their lengths spread
from half to one and a half times ``--output-tokens`` (``lengths``): of one length, requests begun together
end together, and the clients would send batches in step, each a closed batch. Reported: each engine's
tok/s per round, and the default read open over the default per round.

    python -m benchmarks.throttled_clients              # ~12 min on 2 cores (4 rounds)
    python -m benchmarks.throttled_clients --replot     # plot and table from the JSON

Writes ``benchmarks/results/cpu/real_pair/throttled_clients.json`` and ``.png``.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path

from benchmarks import real_pair, runner, sweep

ENGINES = {"default": "minedraft_auto", "default_read_open": "minedraft_auto", "target": "no_sd"}
OUT = runner.CPU_RESULTS / "real_pair" / "throttled_clients.json"


def lengths(count: int, mean: int) -> list[int]:
    """Each request's output tokens, from mean / 2 up to 3 * mean / 2: a step of 17 or more through the
    mean + 1 offsets, prime to their count, so that no offset repeats within mean + 1 requests."""
    step = next(s for s in range(17, 2 * mean + 18) if math.gcd(s, mean + 1) == 1)
    return [mean // 2 + (i * step) % (mean + 1) for i in range(count)]


def requests(target: Path, count: int, output_tokens: int) -> list[tuple[list[int], float, int]]:
    """(prompt, temperature, output tokens) of each request: code and prose in turn."""
    temperature = real_pair.TEMPERATURE
    prompts = {kind: real_pair.tokenized(target, kind, count) for kind in temperature}
    kinds = list(temperature)
    return [(prompts[kinds[i % 2]][i], temperature[kinds[i % 2]], n)
            for i, n in zip(range(count), lengths(count, output_tokens))]


def run_clients(llm, load: list[tuple[list[int], float, int]], clients: int, tag: str) -> float:
    """The load through ``llm``'s engine, at most ``clients`` requests in flight: its output tokens per second."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    added, in_flight, tokens = 0, 0, 0

    def add() -> None:
        nonlocal added, in_flight
        prompt, temperature, output_tokens = load[added]
        engine.add_request(f"{tag}-{added}", {"prompt_token_ids": prompt},
                           SamplingParams(temperature=temperature, seed=added, max_tokens=output_tokens,
                                          ignore_eos=True, detokenize=False))
        added, in_flight = added + 1, in_flight + 1

    started = time.perf_counter()
    while added < min(clients, len(load)):
        add()
    while in_flight:
        for output in engine.step():
            if output.finished:
                in_flight, tokens = in_flight - 1, tokens + len(output.outputs[0].token_ids)
                if added < len(load):
                    add()
    return tokens / (time.perf_counter() - started)


def measure(args) -> dict:
    setup = real_pair.setup_for(args.pair, sweep.inherit_workload(args))
    # The engine cores, and their schedulers, in this process.
    os.environ.update({**setup.env, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    from vllm import LLM

    started = time.perf_counter()
    llms = {}
    for name, mode in ENGINES.items():
        spec, _ = sweep.worker_spec(setup, "real", mode, None if mode == "no_sd" else 3, [])
        llms[name] = LLM(**spec["engine"])
        if name == "default_read_open":
            llms[name].llm_engine.engine_core.engine_core.scheduler._closed = lambda: False
    load = requests(args.pair / "target", args.requests, args.output_tokens)
    rates: dict[str, list[float]] = {name: [] for name in llms}
    for r in range(args.rounds):
        for name in (list(llms) if r % 2 == 0 else list(llms)[::-1]):
            rates[name].append(round(run_clients(llms[name], load, args.clients, f"{name}{r}"), 3))
            print(f"round {r}, {name}: {rates[name][-1]:.1f} tok/s", flush=True)
    for llm in llms.values():
        llm.llm_engine.engine_core.shutdown()
    open_over_default = [round(o / d, 3) for o, d in zip(rates["default_read_open"], rates["default"])]
    meta = runner.meta(setup.device_label, started, setup.engine, models=setup.meta["models"], k=3,
                       clients=args.clients, requests=args.requests, output_tokens=args.output_tokens,
                       rounds=args.rounds)
    return {"meta": meta, "tok_s": rates, "median_tok_s": {n: statistics.median(x) for n, x in rates.items()},
            "read_open_over_default": open_over_default,
            "median_read_open_over_default": statistics.median(open_over_default)}


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [f"Real pair ({m['models']}), {m['device_label']}, {m['date']}: {m['requests']} requests of "
             f"{m['output_tokens']} tokens on average, code greedy and prose at temperature 1 in turn, "
             f"{m['clients']} in flight, {m['rounds']} rounds.", "", "| engine | tok/s by round | median |",
             "|---|---|---|"]
    for name, rates in result["tok_s"].items():
        lines.append(f"| {name} | {', '.join(f'{x:.1f}' for x in rates)} | {result['median_tok_s'][name]:.1f} |")
    lines.append(f"\nread open / as is, by round: {', '.join(f'{x:.2f}x' for x in result['read_open_over_default'])}"
                 f" (median {result['median_read_open_over_default']:.2f}x)")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    fig, ax = runner.pyplot().subplots(figsize=(6, 3.5))
    for name, style in (("target", "k-o"), ("default", "C3-o"), ("default_read_open", "C2--s")):
        ax.plot(range(len(result["tok_s"][name])), result["tok_s"][name], style, label=name)
    ax.set(xlabel="round", ylabel="output tok/s", ylim=(0, None),
           title=f"{result['meta']['clients']} clients, code and prose, real pair")
    ax.set_xticks(range(len(result["tok_s"]["default"])))
    ax.legend(fontsize=8)
    return runner.save(fig, path)


def main(argv=None) -> None:
    parser = runner.parser(__doc__, rounds=4)
    parser.add_argument("--pair", type=Path, default=real_pair.PAIR_DIR, help="real-pair.sh's output folder")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--output-tokens", type=int, default=64, help="the requests' mean length")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result = runner.run_or_replot(args, args.output, lambda: measure(args))
    runner.report(plot(result, args.output.with_suffix(".png")), markdown(result))


if __name__ == "__main__":
    main()
