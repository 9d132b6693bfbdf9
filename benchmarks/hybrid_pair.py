"""The best drafter for each request, on the real pair: suffix decoding beside the draft model (``hybrid``).

Loads, each at N = 1, 4, 16 requests, every request ``--output-tokens`` long:

* edit: the prompt holds a function of Python's standard library (110-920 tokens) and asks for it back
  renamed, greedy: the answer copies its prompt, which suffix decoding drafts deep and almost free;
* code: a function written from a one-line task, greedy (the draft model predicts it; little to copy);
* prose: a short story sampled at temperature 1 (neither may pay);
* mixed: the three in turn in one batch (edit, code, prose, edit, ...), each at its own temperature;
* mixed_queued: the same turn of kinds, ``QUEUED_PER_SLOT`` x N requests queued with at most N running (as
  ``vllm bench serve --max-concurrency N`` loads a server): a request that finishes early makes room for the
  next, where a closed batch lasts as long as its slowest request (not run by default).

Engines, alive two at a time (group A: ``no_sd``, the target alone, and ``hybrid``, MineDraft's default at
k = 3 with ``hybrid: {"method": "suffix", "num_speculative_tokens": 16}``; every other group one static
choice beside a twin of the target alone that scales its rates to group A's, phase by phase and round by
round, as in real_pair.py): stock SD with the draft model at k = 1 and k = 3, with suffix decoding (k = 16)
and with n-gram matching (k = 3); group F, ``hybrid_ngram``, the default with n-gram matching as the second
source (not by default). Reported, medians over rounds: each engine's tok/s per load and N; each hybrid
against the best single-method static choice there.

Every round sends the same prompts, and the loads share them (a mixed batch's edit requests are the edit
load's). Suffix decoding keeps finished requests' outputs in a global tree and would draft an identical
prompt's earlier answer back (stock suffix decoding read 21 tok/s on round 1's code, accepting 57 of 58
drafts), so both engines that run it keep prompts and running outputs only
(``suffix_decoding_max_cached_requests: 0``); ``--cached-outputs`` keeps vLLM's default (10000).

    python -m benchmarks.hybrid_pair                   # ~2.5 h on 2 cores (bf16 where native)
    python -m benchmarks.hybrid_pair --groups ABDE --concurrency 1,4 --output-tokens 64   # ~30 min
    python -m benchmarks.hybrid_pair --groups AD --loads edit,mixed --concurrency 1,4   # the suffix side
    python -m benchmarks.hybrid_pair --groups ACD --loads mixed_queued --concurrency 4   # a server's steady mix
    python -m benchmarks.hybrid_pair --replot

Writes ``benchmarks/results/cpu/real_pair/hybrid_pair.json`` and ``hybrid_pair.png``.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks import runner, sweep
from benchmarks.real_pair import PAIR_DIR, prompt_texts, run_group, setup_for

HYBRID = {"hybrid": {"method": "suffix", "num_speculative_tokens": 16}}
# Group F: n-gram matching as the second source, matching as stock SD's n-gram (group E) does.
HYBRID_NGRAM = {"hybrid": {"method": "ngram", "num_speculative_tokens": 16, "prompt_lookup_min": 2,
                           "prompt_lookup_max": 5}}
NO_CACHED_OUTPUTS = {"suffix_decoding_max_cached_requests": 0}  # a repeated prompt must not draft its old answer
GROUPS = {"A": {"no_sd": ("no_sd", None), "hybrid": ("minedraft_auto", 3)},
          "B": {"stock_sd_k1": ("stock_sd", 1), "no_sd_B": ("no_sd", None)},
          "C": {"stock_sd_k3": ("stock_sd", 3), "no_sd_C": ("no_sd", None)},
          "D": {"stock_suffix": ("stock_sd", 16), "no_sd_D": ("no_sd", None)},
          "E": {"stock_ngram": ("stock_sd", 3), "no_sd_E": ("no_sd", None)},
          "F": {"hybrid_ngram": ("minedraft_auto", 3), "no_sd_F": ("no_sd", None)}}
OTHER_METHODS = {"stock_suffix": {"method": "suffix", "model": None},
                 "stock_ngram": {"method": "ngram", "model": None, "prompt_lookup_min": 2, "prompt_lookup_max": 5}}
GROUP_OF = {engine: group for group, engines in GROUPS.items() for engine in engines}
STATIC = ("no_sd", "stock_sd_k1", "stock_sd_k3", "stock_suffix", "stock_ngram")
ENGINES = (*STATIC, "hybrid", "hybrid_ngram")
LOADS = ("edit", "code", "prose", "mixed", "mixed_queued")
DEFAULT_LOADS = LOADS[:4]
QUEUED_PER_SLOT = 4  # mixed_queued: requests per running slot (N = 4: 16 requests, 6 of them edits)
CONCURRENCY = (1, 4, 16)
TEMPERATURE = {"edit": 0.0, "code": 0.0, "prose": 1.0}
OUT = runner.CPU_RESULTS / "real_pair"
MAX_MODEL_LEN = 2048  # the longest edit prompt (920 tokens) with its answer and 16 drafts

# Functions of Python's standard library whose source the edit prompts quote.
_EDITED = ("textwrap.TextWrapper._wrap_chunks", "textwrap.dedent", "urllib.parse.urlsplit",
           "shlex.split", "fnmatch.translate", "heapq.merge", "ipaddress.ip_address", "statistics.median",
           "string.capwords", "glob.glob", "difflib.get_close_matches", "base64.b64encode",
           "calendar.monthcalendar", "colorsys.rgb_to_hls", "html.escape", "copy.deepcopy")


def _source(dotted: str) -> tuple[str, str]:
    import importlib

    module, *attrs = dotted.split(".")
    obj = importlib.import_module(module)
    for i, attr in enumerate(attrs):
        try:
            obj = getattr(obj, attr)
        except AttributeError:  # a submodule (json.encoder)
            obj = importlib.import_module(".".join([module, *attrs[:i + 1]]))
    return obj.__name__, inspect.getsource(obj)


def edit_texts(n: int) -> list[str]:
    texts = []
    for i in range(n):
        name, source = _source(_EDITED[i % len(_EDITED)])
        texts.append(f"# Request {i}.\n```python\n{source}```\n\nRename the function `{name}` to `{name}_v2` and "
                     "change nothing else. Return the whole function.\n\n```python\n")
    return texts


def workload(target: Path, output_tokens: int, concurrency: tuple[int, ...] = CONCURRENCY,
             loads: tuple[str, ...] = DEFAULT_LOADS) -> list[dict]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target))
    n = max(concurrency) * (QUEUED_PER_SLOT if "mixed_queued" in loads else 1)
    texts = {"edit": edit_texts(n), "code": prompt_texts("code", n), "prose": prompt_texts("prose", n)}
    prompts = {kind: [tokenizer(t)["input_ids"] for t in ts] for kind, ts in texts.items()}
    plan = []
    for load in loads:
        for requests in concurrency:
            queued = requests * QUEUED_PER_SLOT if load == "mixed_queued" else requests
            kinds = [("edit", "code", "prose")[i % 3] if load.startswith("mixed") else load for i in range(queued)]
            # A mixed batch takes each kind's prompts in order: no two of its requests share text.
            seen = {kind: 0 for kind in TEMPERATURE}
            batch = []
            for kind in kinds:
                batch.append(prompts[kind][seen[kind]])
                seen[kind] += 1
            command = {"prompts": batch, "output_tokens": output_tokens, "temperature": [TEMPERATURE[k] for k in kinds]}
            if load == "mixed_queued":
                command["max_concurrency"] = requests
            plan.append({"index": len(plan), "part": load, "text": load, "requests": requests, "command": command})
    return plan


def summarize(samples: list[dict]) -> dict:
    """Per round, each group's rates on group A's scale (times the ratio of the two targets alone); then, per
    load and N, medians over rounds of each engine's tok/s and of the hybrid / the best static choice."""
    by = {(s["engine"], s["round"], s["phase"]): s for s in samples}
    engines = sorted({s["engine"] for s in samples if not s["engine"].startswith("no_sd_")})
    static = [e for e in STATIC if e in engines]
    rows = {}
    for phase in sorted({s["phase"] for s in samples}):
        first = next(s for s in samples if s["phase"] == phase)
        rates = {e: [] for e in engines}
        ratios, best, ngram_ratios = [], [], []
        for r in sorted({s["round"] for s in samples if s["phase"] == phase and s["engine"] == "no_sd"}):
            tokens = by[("no_sd", r, phase)]["generated_tokens"]

            def seconds(engine: str) -> float:
                group = GROUP_OF[engine]
                own = by[(engine, r, phase)]["elapsed_s"]
                if group == "A":
                    return own
                return own * by[("no_sd", r, phase)]["elapsed_s"] / by[(f"no_sd_{group}", r, phase)]["elapsed_s"]

            round_rates = {e: tokens / seconds(e) for e in engines if (e, r, phase) in by}
            for e, rate in round_rates.items():
                rates[e].append(rate)
            top = max((e for e in static if e in round_rates), key=round_rates.__getitem__)
            best.append(top)
            if "hybrid" in round_rates:
                ratios.append(round_rates["hybrid"] / round_rates[top])
            if "hybrid_ngram" in round_rates:
                ngram_ratios.append(round_rates["hybrid_ngram"] / round_rates[top])
        def counters(engine: str) -> list[dict]:
            return [s["counters"] for s in samples if s["engine"] == engine and s["phase"] == phase]

        rows[f"{first['text']} N={first['requests']}"] = {
            "load": first["text"], "requests": first["requests"],
            "tok_s": {e: statistics.median(v) for e, v in rates.items() if v},
            "best_static": best, "hybrid_vs_best_static": statistics.median(ratios) if ratios else None,
            "rounds": ratios,
            "hybrid_ngram_vs_best_static": statistics.median(ngram_ratios) if ngram_ratios else None,
            "hybrid_lookup_share": _share(counters("hybrid")),
            "hybrid_ngram_lookup_share": _share(counters("hybrid_ngram"))}
    return rows


def _share(counters: list[dict]) -> dict | None:
    """A hybrid's requests verified with lookup drafts, and drafts accepted per source, over its rounds."""
    if not counters:
        return None
    # Counters named minedraft:suffix_* before 2026-12-03 11:10 UTC (commit e9b4d1f): read as lookup_*.
    counters = [{k.replace("minedraft:suffix_", "minedraft:lookup_"): v for k, v in c.items()} for c in counters]
    total = {k: sum(c.get(k, 0.0) for c in counters) for k in counters[0]}
    if "minedraft:lookup_drafts" not in total:  # a run before sweep.COUNTERS held the second source's counters
        return None
    drafts, accepted = total["vllm:spec_decode_num_draft_tokens"], total["vllm:spec_decode_num_accepted_tokens"]
    lookup_d, lookup_a = total.get("minedraft:lookup_drafts", 0.0), total.get("minedraft:lookup_accepted", 0.0)
    return {"lookup_requests": total.get("minedraft:lookup_requests", 0.0), "lookup_drafts": lookup_d,
            "lookup_accepted": lookup_a, "model_drafts": drafts - lookup_d, "model_accepted": accepted - lookup_a,
            "lookup_only_steps": total.get("minedraft:lookup_only_steps")}


def markdown(summary: dict, meta: dict) -> str:
    engines = [e for e in ENGINES if any(e in row["tok_s"] for row in summary.values())]
    lines = [f"{meta['device_label']}, {meta['models']}, {meta['output_tokens']} output tokens, medians of "
             f"{meta['rounds']} rounds (tok/s).", "",
             "| load | " + " | ".join(engines) + " | hybrid / best static | hybrid_ngram / best static |",
             "|---" * (len(engines) + 3) + "|"]
    for label, row in summary.items():
        ratios = [row["hybrid_vs_best_static"], row.get("hybrid_ngram_vs_best_static")]
        lines.append(f"| {label} | " + " | ".join(f"{row['tok_s'].get(e, float('nan')):.1f}" for e in engines)
                     + "".join(f" | {'-' if r is None else f'{r:.2f}x'}" for r in ratios) + " |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt

    loads = [load for load in LOADS if any(row["load"] == load for row in summary.values())]
    fig, axes = plt.subplots(1, len(loads), figsize=(4 * len(loads), 3.6), sharey=False, squeeze=False)
    axes = axes[0]
    engines = ENGINES
    for ax, load in zip(axes, loads):
        rows = [row for row in summary.values() if row["load"] == load]
        for i, engine in enumerate(engines):
            xs = [j + (i - 3) * 0.12 for j, row in enumerate(rows) if engine in row["tok_s"]]
            ax.bar(xs, [row["tok_s"][engine] for row in rows if engine in row["tok_s"]], width=0.12, label=engine,
                   color="C3" if engine == "hybrid" else "C1" if engine == "hybrid_ngram" else "k" if engine == "no_sd" else f"C{i + 3}")
        ax.set_xticks(range(len(rows)), [f"N={row['requests']}" for row in rows])
        ax.set(title=load, ylabel="output tok/s")
    axes[0].legend(fontsize=7)
    return runner.save(fig, path, dpi=120)


def measure(args) -> dict:
    if not (args.pair / "done").exists():
        sys.exit(f"hybrid_pair: no real pair in {args.pair}; build it with ../shared/tools/real-pair.sh")
    setup = setup_for(args.pair, args)
    setup.engine["max_model_len"] = MAX_MODEL_LEN
    plan = workload(args.pair / "target", args.output_tokens, args.concurrency, args.loads)
    log_dir = Path(sweep.tempfile.mkdtemp(prefix="minedraft-hybrid-pair-"))
    print(f"worker logs: {log_dir}", flush=True)
    started, samples = time.perf_counter(), []
    hybrid, methods = HYBRID, OTHER_METHODS
    if not args.cached_outputs:
        hybrid = {"hybrid": {**HYBRID["hybrid"], **NO_CACHED_OUTPUTS}}
        methods = {**OTHER_METHODS, "stock_suffix": {**OTHER_METHODS["stock_suffix"], **NO_CACHED_OUTPUTS}}
    for group in args.groups:
        samples += run_group(setup, GROUPS[group], plan, args.rounds, log_dir, settings={"hybrid": hybrid, "hybrid_ngram": HYBRID_NGRAM},
                             speculative=methods)
    meta = runner.meta(setup.device_label, started, setup.engine, models=setup.meta["models"],
                       output_tokens=args.output_tokens, rounds=args.rounds, loads=args.loads, concurrency=args.concurrency,
                       edited=_EDITED, groups=args.groups,
                       suffix_cached_outputs=args.cached_outputs)
    return {"meta": meta, "summary": summarize(samples), "samples": samples}


def main(argv=None) -> None:
    parser = runner.parser(__doc__, rounds=2)
    parser.add_argument("--pair", type=Path, default=PAIR_DIR, help="real-pair.sh's output folder")
    parser.add_argument("--output-tokens", type=int, default=96)
    parser.add_argument("--groups", default="ABCDE", help="which engine groups to run (A with any of B-F; F, "
                        "the hybrid with n-gram matching, not by default)")
    parser.add_argument("--concurrency", type=lambda text: tuple(int(n) for n in text.split(",")),
                        default=CONCURRENCY, help="the batch sizes N, comma-separated (default 1,4,16)")
    parser.add_argument("--cached-outputs", action="store_true",
                        help="suffix decoding keeps finished outputs (vLLM's default; the prompts repeat, so an "
                             "answer is drafted from its earlier copy)")
    parser.add_argument("--loads", type=lambda text: tuple(text.split(",")), default=DEFAULT_LOADS,
                        help=f"the loads, comma-separated (default {','.join(DEFAULT_LOADS)}; also mixed_queued)")
    args = sweep.inherit_workload(parser.parse_args(argv))
    if unknown := set(args.loads) - set(LOADS):
        parser.error(f"--loads: unknown {', '.join(sorted(unknown))}; the loads are {', '.join(LOADS)}")
    path = OUT / "hybrid_pair.json"
    result = runner.run_or_replot(args, path, lambda: measure(args))
    if args.replot:  # the summary as this version reads the samples
        result["summary"] = summarize(result["samples"])
        runner.write_result(path, result, 1)
    runner.report(plot(result["summary"], OUT / "hybrid_pair.png"), markdown(result["summary"], result["meta"]))


if __name__ == "__main__":
    main()
