"""Batches that mix code and prose on a real pair: each request verifying the drafts worth their cost,
against one depth for the whole batch and every static choice.

In one batch the draft predicts code well and prose sampled at temperature 1 less well. MineDraft's
default cuts each request's verified drafts to those its own measured acceptance pays for and chooses
the step's depth with those cuts (``speculation_depth: auto``, policy/paying_drafts.py);
``speculation_depth: step`` keeps one depth for the batch from its one acceptance (the depth controller
alone). Engines, alive side by side in groups of two, each group with a twin of the target alone that
scales its rates to group A's (real_pair.py's scheme; an engine takes 6-8 GB, a third ran out of 24 GB):

* A: ``minedraft_auto`` (the default, k = 3) and ``no_sd`` (the target alone);
* S: ``minedraft_step`` (the depth controller alone, k = 3) and its twin;
* B, C: stock SD at k = 3 and k = 1, each with its twin.

The workload, run back to back by each engine, every request ``--output-tokens`` long: N = 1 (a code
request, then a prose one), 2, 4, 8, 16, 32 (code and prose in turn); code greedy, prose sampled at
temperature 1 (seeded per request). Reported, medians over rounds: each engine's tok/s per load on
group A's scale, the default against the depth controller alone and against the best static choice
(the target alone or stock SD at k = 1 or 3).

    python -m benchmarks.mixed_batches              # ~40 min on 2 idle cores
    python -m benchmarks.mixed_batches --replot     # plot and table from the JSON

Writes ``benchmarks/results/cpu/real_pair/mixed_batches.json`` and ``mixed_batches.png``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from benchmarks import real_pair, runner, sweep

GROUPS = {"A": {"minedraft_auto": ("minedraft_auto", 3), "no_sd": ("no_sd", None)},
          "S": {"minedraft_step": ("minedraft_auto", 3), "no_sd_S": ("no_sd", None)},
          "B": {"stock_sd_k3": ("stock_sd", 3), "no_sd_B": ("no_sd", None)},
          "C": {"stock_sd_k1": ("stock_sd", 1), "no_sd_C": ("no_sd", None)}}
SETTINGS = {"minedraft_step": {"speculation_depth": "step"}}
TWIN = {engine: f"no_sd_{group}" for group, engines in GROUPS.items() if group != "A" for engine in engines}
STATIC = ("no_sd", "stock_sd_k1", "stock_sd_k3")
LOADS = (1, 2, 4, 8, 16, 32)
TEMPERATURE = real_pair.TEMPERATURE  # code greedy, prose sampled
OUT = runner.CPU_RESULTS / "real_pair"


def workload(target: Path, output_tokens: int) -> list[dict]:
    """The phases: N = 1 as a code request then a prose one, larger N code and prose in turn."""
    prompts = {kind: real_pair.tokenized(target, kind, max(LOADS)) for kind in TEMPERATURE}
    plan = [{"requests": 1, "kinds": ["code"]}, {"requests": 1, "kinds": ["prose"]}]
    plan += [{"requests": n, "kinds": ["code", "prose"] * (n // 2)} for n in LOADS if n > 1]
    for i, phase in enumerate(plan):
        phase |= {"index": i, "part": "mixed", "text": "code" if phase["kinds"] == ["code"] else
                  "prose" if phase["kinds"] == ["prose"] else "code and prose"}
        phase["command"] = {"prompts": [prompts[kind][j] for j, kind in enumerate(phase["kinds"])],
                            "output_tokens": output_tokens,
                            "temperature": [TEMPERATURE[kind] for kind in phase["kinds"]]}
    return plan


def summarize(samples: list[dict]) -> dict:
    """Per round, every engine's seconds on group A's scale (times the ratio of the targets alone), the
    two N = 1 phases taken together; then medians over rounds."""
    by = {(s["engine"], s["round"], s["phase"]): s for s in samples}
    engines = sorted({s["engine"] for s in samples} - set(TWIN.values()))
    per_round = []
    for r in sorted({s["round"] for s in samples}):
        def seconds(engine: str, phase: int) -> float:
            own = by[(engine, r, phase)]["elapsed_s"]
            if engine in TWIN:
                own *= by[("no_sd", r, phase)]["elapsed_s"] / by[(TWIN[engine], r, phase)]["elapsed_s"]
            return own

        row = {}
        for n in LOADS:
            phases = sorted({s["phase"] for s in samples if s["requests"] == n and s["round"] == r})
            tokens = sum(by[("no_sd", r, p)]["generated_tokens"] for p in phases)
            rates = {e: tokens / sum(seconds(e, p) for p in phases) for e in engines}
            counters = {e: {k: sum(by[(e, r, p)]["counters"].get(k, 0) for p in phases)
                            for k in ("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
                                      "minedraft:drafts_trimmed", "minedraft:first_measurements")} for e in engines}
            row[n] = {"tok_s": rates, "counters": counters}
        per_round.append(row)
    static = [e for e in STATIC if e in engines]  # the groups run (--groups): B and C hold stock SD
    pairs = {"auto_vs_step": ("minedraft_auto", ["minedraft_step"]), "auto_vs_best_static": ("minedraft_auto", static),
             "step_vs_best_static": ("minedraft_step", static)}
    summary = {}
    for n in LOADS:
        rows = [row[n] for row in per_round]
        tok_s = {e: statistics.median(x["tok_s"][e] for x in rows) for e in engines}
        ratios = {name: [x["tok_s"][one] / max(x["tok_s"][e] for e in others) for x in rows]
                  for name, (one, others) in pairs.items() if one in engines and set(others) <= set(engines)}
        summary[str(n)] = {"tok_s": tok_s, **{k: statistics.median(v) for k, v in ratios.items()},
                           "rounds": ratios, "best_static": [max(static, key=x["tok_s"].__getitem__) for x in rows],
                           "counters_last_round": rows[-1]["counters"]}
    return summary


def markdown(summary: dict, meta: dict) -> str:
    lines = [f"Real pair ({meta['models']}), {meta['device_label']}, {meta['date']}, code greedy and prose at "
             f"temperature 1 in turn, {meta['output_tokens']} output tokens, medians of {meta['rounds']} rounds.", "",
             "| N | target alone | stock SD k=1 | k=3 | depth controller alone | default | default / controller alone "
             "| default / best static |", "|---|---|---|---|---|---|---|---|"]
    for n, row in summary.items():
        cells = [_cell(row["tok_s"].get(e), "") for e in ("no_sd", "stock_sd_k1", "stock_sd_k3", "minedraft_step",
                                                           "minedraft_auto")]
        cells += [_cell(row.get(k), "x", 2) for k in ("auto_vs_step", "auto_vs_best_static")]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if "stock_sd_k1" not in summary[str(LOADS[0])]["tok_s"]:
        lines.append("\nStock SD was not run (--groups): the best static choice is the target alone's rate.")
    return "\n".join(lines)


def _cell(value: float | None, unit: str, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def plot(summary: dict, path: Path) -> Path:
    fig, ax = runner.pyplot().subplots(figsize=(7, 4))
    loads = [int(n) for n in summary]
    for engine, style in (("no_sd", "k-o"), ("stock_sd_k1", "C0:^"), ("stock_sd_k3", "C0-v"),
                          ("minedraft_step", "C2--s"), ("minedraft_auto", "C3-o")):
        if engine in summary[str(loads[0])]["tok_s"]:  # its group was run
            ax.plot(loads, [summary[str(n)]["tok_s"][engine] for n in loads], style, label=engine)
    ax.set(xscale="log", xlabel="concurrent requests (code and prose in turn)", ylabel="output tok/s",
           title="mixed batches, real pair")
    ax.set_xticks(loads, [str(n) for n in loads])
    ax.legend(fontsize=8)
    return runner.save(fig, path, dpi=120)


def measure(args) -> dict:
    if not (args.pair / "done").exists():
        sys.exit(f"mixed_batches: no real pair in {args.pair}; build it with modelkit/real_pair.sh")
    setup = real_pair.setup_for(args.pair, args)
    plan = workload(args.pair / "target", args.output_tokens)
    log_dir = Path(sweep.tempfile.mkdtemp(prefix="minedraft-mixed-batches-"))
    print(f"worker logs: {log_dir}", flush=True)
    started, samples = time.perf_counter(), []
    for group in args.groups:
        samples += real_pair.run_group(setup, GROUPS[group], plan, args.rounds, log_dir, settings=SETTINGS)
    meta = runner.meta(setup.device_label, started, setup.engine, models=setup.meta["models"],
                       output_tokens=args.output_tokens, rounds=args.rounds, loads=LOADS, temperatures=TEMPERATURE)
    return {"meta": meta, "summary": summarize(samples), "samples": samples}


def main(argv=None) -> None:
    parser = runner.parser(__doc__, rounds=2)
    parser.add_argument("--pair", type=Path, default=real_pair.PAIR_DIR, help="real-pair.sh's output folder")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--groups", default="ASBC", help="which engine groups to run (A and any of S, B, C)")
    args = sweep.inherit_workload(parser.parse_args(argv))
    path = OUT / "mixed_batches.json"
    result = runner.run_or_replot(args, path, lambda: measure(args))
    runner.report(plot(result["summary"], OUT / "mixed_batches.png"), markdown(result["summary"], result["meta"]))


if __name__ == "__main__":
    main()
