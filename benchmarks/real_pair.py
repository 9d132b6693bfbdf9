"""A real pretrained pair on this CPU: steady loads and a load that moves, against every static choice.

The kit's tiny models have millisecond steps and no crossover (the target alone wins every load). A real
pair has one: Qwen2.5-Coder-1.5B-Instruct (target) and Qwen2.5-Coder-0.5B-Instruct (draft), built by
``modelkit/real_pair.sh`` (not in ``make test``), run in bf16 where the CPU computes it natively, else in
float32 (``native_dtype``; the meta says which). On two cores stock SD beats the target alone on
one request of code and loses at 32.

Engines, alive side by side in groups of two (an engine takes 6-8 GB of memory; a third ran out of 24 GB):

* group A: ``no_sd`` (the target alone) and ``minedraft_auto`` (MineDraft's default at k = 3: its depth
  controller picks k' in 0..3 each step);
* groups B and C (and D, asked for): stock SD (vLLM's speculative decoding) at k = 3 and 1 (and 2), each beside a twin of the
  target alone that scales its rates to group A's (a ratio across groups is taken against each group's
  own target alone, phase by phase and round by round; with ``--twin minedraft_auto`` the twin is a second
  default instead, so the default's ratio to each static engine is read inside that engine's group);
* group E (asked for): ``vllm_depth_table``, stock SD at k = 3 with vLLM's own depth table
  (``num_speculative_tokens_per_batch_size``: k' = 3 up to 8 running requests, 0 above; ``VLLM_TABLE``),
  beside its twin of the target alone. It is a row to compare with, not a static choice.

The workload, run back to back by each engine, every request ``--output-tokens`` long:

* steady: N = 1, 2, 4, 8, 16, 32 requests of code, greedy;
* moving: phases whose concurrency and text both change (``MOVING``): code prompts decoded greedily
  (the draft predicts them) and prose prompts sampled at temperature 1 (it predicts them less).

A round runs the workload once in every engine of a group, the order rotating from round to round.
Reported, medians over rounds: each engine's tok/s per steady load; ``minedraft_auto`` against the best
static choice at each load (the target alone or stock SD at the best k' <= 3); on the moving load against
the best single static setting and against the per-phase ceiling (each phase at its best static engine,
switched by hand, in the same round).

    python -m benchmarks.real_pair                      # ~45 min on 2 idle cores (groups A, B, C)
    python -m benchmarks.real_pair --groups A --merge   # MineDraft's group again, the others' samples kept
    python -m benchmarks.real_pair --parts steady --twin minedraft_auto --rounds 3  # default beside each
    python -m benchmarks.real_pair --replot             # plot and table from the JSON

Writes ``benchmarks/results/cpu/real_pair/real_pair.json`` and ``real_pair.png``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import runner, sweep  # the sweep's workers and engine settings

PAIR_DIR = Path.home() / ".cache" / "minedraft" / "real-pair"
GROUPS = {"A": {"no_sd": ("no_sd", None), "minedraft_auto": ("minedraft_auto", 3)},
          "B": {"stock_sd_k3": ("stock_sd", 3), "no_sd_B": ("no_sd", None)},
          "C": {"stock_sd_k1": ("stock_sd", 1), "no_sd_C": ("no_sd", None)},
          "D": {"stock_sd_k2": ("stock_sd", 2), "no_sd_D": ("no_sd", None)},
          "E": {"vllm_depth_table": ("stock_sd", 3), "no_sd_E": ("no_sd", None)}}
VLLM_TABLE = [[1, 8, 3], [9, 32, 0]]  # vLLM's per-batch-size depth: (lowest, highest running requests, k')
TWINS = ("no_sd", "minedraft_auto")  # what a group beside A may carry as its twin (--twin)
GROUP_OF = {engine: group for group, engines in GROUPS.items() for engine in engines}
GROUP_OF |= {f"minedraft_auto_{group}": group for group in GROUPS if group != "A"}
STATIC = ("no_sd", "stock_sd_k1", "stock_sd_k2", "stock_sd_k3")
COMPARED = ("minedraft_auto", "vllm_depth_table")  # engines read against the static choices
STEADY = (1, 2, 4, 8, 16, 32)
MOVING = ((1, "code"), (32, "code"), (4, "prose"), (1, "prose"), (16, "code"), (2, "code"), (32, "prose"), (8, "code"))
TEMPERATURE = {"code": 0.0, "prose": 1.0}
OUT = runner.CPU_RESULTS / "real_pair"

_FUNCTIONS = ("parse an ISO 8601 date string into a datetime", "merge two sorted lists into one sorted list",
              "compute the Levenshtein distance of two strings", "return the n-th Fibonacci number iteratively",
              "flatten a nested list of integers", "check whether a string is a palindrome, ignoring case",
              "count the words in a text file", "find the longest common prefix of a list of strings",
              "convert a Roman numeral to an integer", "group a list of dicts by the value of a key",
              "return the prime factors of an integer", "rotate a square matrix by 90 degrees",
              "validate an IPv4 address", "compute the median of a list of numbers",
              "remove duplicate items from a list, keeping their order", "transpose a CSV file's rows and columns")
_TOPICS = ("a lighthouse keeper who finds a message in a bottle", "the first morning of spring in a mountain village",
           "a market in an old harbour town at dawn", "a child who learns to play the violin from her grandfather",
           "two friends who cross a desert on foot", "a library that is open only at night",
           "the last day of summer at the seaside", "a baker who opens a shop in a new city")


def prompt_texts(kind: str, n: int) -> list[str]:
    """``n`` prompts of ``kind`` (code or prose), varied so that no two running requests share text."""
    texts = []
    for i in range(n):
        if kind == "code":
            task = _FUNCTIONS[i % len(_FUNCTIONS)]
            texts.append(f"# Python 3. Variant {i}.\n# Write a function to {task}, with type hints and a docstring.\n"
                         f"def ")
        else:
            topic = _TOPICS[i % len(_TOPICS)]
            texts.append(f"Story {i}. Write a short story about {topic}. Begin with the weather.\n\n")
    return texts


def tokenized(target: Path, kind: str, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target))
    return [tokenizer(text)["input_ids"] for text in prompt_texts(kind, n)]


def workload(target: Path, output_tokens: int, parts: str = "steady,moving") -> list[dict]:
    """Every phase of ``parts`` as :func:`sweep.measure` takes it, steady loads first, each with its ``part``
    and label."""
    prompts = {kind: tokenized(target, kind, max(STEADY)) for kind in TEMPERATURE}
    plan = [{"part": "steady", "requests": n, "text": "code"} for n in STEADY]
    plan += [{"part": "moving", "requests": n, "text": text} for n, text in MOVING]
    plan = [{**phase, "index": i} for i, phase in enumerate(plan) if phase["part"] in parts.split(",")]
    for phase in plan:
        phase["command"] = {"prompts": prompts[phase["text"]][:phase["requests"]], "output_tokens": output_tokens,
                            "temperature": TEMPERATURE[phase["text"]]}
    return plan


def native_dtype(cpuinfo: str | None = None) -> str:
    """bf16 where the CPU computes it natively (avx512_bf16 or amx_bf16), else float32: on an AVX2-only CPU a
    bf16 matmul runs about 30x slower than float32 (vLLM upcasts the bf16 weights at load)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags = set(cpuinfo.split())
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


# Two float32 engines of a group, with the load's peak (the bf16 checkpoint upcast): on 23.5 GiB the second
# engine's worker was killed for memory at 11 GB, the first holding about 8 (2026-12-03, AVX2 EPYC).
FLOAT32_GROUP_GIB = 28


def group_fits(dtype: str, memory_gib: float) -> bool:
    """Whether a group of two engines fits in this machine's memory in ``dtype`` (bf16 groups ran in 24 GB)."""
    return dtype != "float32" or memory_gib >= FLOAT32_GROUP_GIB


def setup_for(pair: Path, args) -> sweep.Setup:
    pairs = {"real": (str(pair / "target"), str(pair / "draft"))}
    dtype = native_dtype()
    engine = {**sweep.common_engine_kwargs(args), "dtype": dtype, "enforce_eager": True, "max_num_seqs": 32}
    env = {**sweep.QUIET_ENV, **sweep.engine_core_env(args), "VLLM_TARGET_DEVICE": "cpu",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    return sweep.Setup(device="cpu", device_label=sweep.cpu_label(), pairs=pairs, target_names={"real": "target"},
                       engine=engine, env=env, interleave=True,
                       meta={"models": "Qwen2.5-Coder-1.5B-Instruct (target), Qwen2.5-Coder-0.5B-Instruct (draft), "
                                       f"{dtype} (modelkit/real_pair.sh)"})


def with_twin(engines: dict, twin: str) -> dict:
    """A group's engines with its twin of the target alone swapped for a twin of ``twin``'s engine in group A."""
    if twin == "no_sd":
        return engines
    return {(f"{twin}_{name[len('no_sd_'):]}" if name.startswith("no_sd_") else name):
            (GROUPS["A"][twin] if name.startswith("no_sd_") else spec) for name, spec in engines.items()}


def run_group(setup: sweep.Setup, engines: dict, plan: list[dict], rounds: int, log_dir: Path,
              settings: dict[str, dict] | None = None, speculative: dict[str, dict] | None = None) -> list[dict]:
    """``settings``: more MineDraft settings of some engines, by name; ``speculative``: their speculative
    config's fields over the draft model's (another method)."""
    warmup = plan[0]["command"]["prompts"][:1] * 2
    specs = {name: sweep.worker_spec(setup, "real", mode, k, warmup) for name, (mode, k) in engines.items()}
    for name, more in (settings or {}).items():
        if name in specs:
            specs[name][0]["engine"]["additional_config"]["minedraft"].update(more)
    for name, fields in {"vllm_depth_table": {"num_speculative_tokens_per_batch_size": VLLM_TABLE},
                         **(speculative or {})}.items():
        if name in specs:
            specs[name][0]["engine"]["speculative_config"].update(fields)
    pool = sweep.Pool(max_alive=len(specs), log_dir=log_dir)
    names, samples = list(specs), []
    try:
        for name, (spec, env) in specs.items():  # one at a time: three loading at once ran out of memory
            pool.get((name,), spec, env)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                results = pool.get((name,), *specs[name]).run_phases([p["command"] for p in plan])
                for phase, result in zip(plan, results):
                    samples.append({"engine": name, "round": r, "phase": phase["index"], "part": phase["part"],
                                    "text": phase["text"], "requests": phase["requests"], **result})
                sweep.say(f"  round {r} {name}: " + " ".join(f"{res['tok_s']:.0f}" for res in results))
    finally:
        pool.stop_all()
    return samples


def summarize(samples: list[dict]) -> dict:
    """Per round, group B's rates scaled by its twin (of the target alone, or of the default: then the
    default's ratio to each static engine is the one read side by side in that engine's group); then medians
    over rounds."""
    by = {(s["engine"], s["round"], s["phase"]): s for s in samples}
    twin_of = {GROUP_OF[s["engine"]]: base for s in samples for base in TWINS
               if s["engine"] == f"{base}_{GROUP_OF[s['engine']]}"}
    static = [e for e in STATIC if any(s["engine"] == e for s in samples)]  # a run of one group: its engines
    compared = [e for e in COMPARED if any(s["engine"] == e for s in samples)]
    rounds = sorted({s["round"] for s in samples})
    all_phases = sorted({(s["phase"], s["part"], s["text"], s["requests"]) for s in samples})
    rounds_of = {}  # (engine, phase) -> the rounds it ran
    for s in samples:
        rounds_of.setdefault((s["engine"], s["phase"]), set()).add(s["round"])
    per_round = []
    for r in rounds:
        # A merged run's parts can have different round counts: a round takes the phases it ran.
        phases = [phase for phase in all_phases if ("no_sd", r, phase[0]) in by]
        def seconds(engine: str, phase: int) -> float:
            group = GROUP_OF[engine]
            if group != "A":  # on group A's scale: times the ratio of group A's engine to its twin
                # A group run for fewer rounds than group A (merged): its rounds taken in turn.
                own = sorted(rounds_of[(engine, phase)])
                q = r if r in own else own[r % len(own)]
                twin = twin_of[group]
                return by[(engine, q, phase)]["elapsed_s"] * (by[(twin, r, phase)]["elapsed_s"]
                                                              / by[(f"{twin}_{group}", q, phase)]["elapsed_s"])
            return by[(engine, r, phase)]["elapsed_s"]

        tokens = {p: by[("no_sd", r, p)]["generated_tokens"] for p, *_ in phases}
        row = {"steady": {}, "moving": {}}
        for p, part, text, n in phases:
            rates = {e: tokens[p] / seconds(e, p) for e in (*static, *compared)}
            best = max(static, key=rates.__getitem__)
            if part == "steady":
                row["steady"][n] = {"tok_s": rates, "best_static": best,
                                    "auto_vs_best_static": rates["minedraft_auto"] / rates[best]}
        moving = [(p, n) for p, part, _, n in phases if part == "moving"]
        if not moving:
            per_round.append(row)
            continue
        total = sum(tokens[p] for p, _ in moving)
        whole = {e: total / sum(seconds(e, p) for p, _ in moving) for e in (*static, *compared)}
        ceiling = total / sum(min(seconds(e, p) for e in static) for p, _ in moving)
        best = max(static, key=whole.__getitem__)
        row["moving"] = {"tok_s": whole, "per_phase_ceiling_tok_s": ceiling, "best_static": best,
                         "auto_vs_best_static": whole["minedraft_auto"] / whole[best],
                         "auto_vs_ceiling": whole["minedraft_auto"] / ceiling,
                         "phase_best": {str(p): min(static, key=lambda e: seconds(e, p)) for p, _ in moving}}
        per_round.append(row)
    med = statistics.median
    steady = {}
    for n in STEADY:
        rows = [row["steady"][n] for row in per_round if n in row["steady"]]
        if rows:
            steady[str(n)] = {"tok_s": {e: med(x["tok_s"][e] for x in rows) for e in rows[0]["tok_s"]},
                              "auto_vs_best_static": med(x["auto_vs_best_static"] for x in rows),
                              "best_static": [x["best_static"] for x in rows]}
    moving = [row["moving"] for row in per_round if row["moving"]]
    if not moving:
        return {"steady": steady, "moving": None}
    return {"steady": steady, "moving": {
        "tok_s": {e: med(x["tok_s"][e] for x in moving) for e in moving[0]["tok_s"]},
        "per_phase_ceiling_tok_s": med(x["per_phase_ceiling_tok_s"] for x in moving),
        "auto_vs_best_static": med(x["auto_vs_best_static"] for x in moving),
        "auto_vs_ceiling": med(x["auto_vs_ceiling"] for x in moving),
        "best_static": [x["best_static"] for x in moving], "phase_best": [x["phase_best"] for x in moving],
        "rounds": per_round and [{"auto_vs_best_static": x["auto_vs_best_static"], "auto_vs_ceiling": x["auto_vs_ceiling"]}
                                 for x in moving]}}


def markdown(summary: dict, meta: dict) -> str:
    rounds = meta["rounds"] if isinstance(meta["rounds"], dict) else {"every part": meta["rounds"]}
    lines = [f"Real pair ({meta['models']}), {meta['device_label']}, {meta['date']}, {meta['output_tokens']} output "
             f"tokens, medians of rounds (" + ", ".join(f"{part}: {n}" for part, n in rounds.items()) + ").", "",
             "| load | target alone | stock SD k'=1 | k'=3 | vLLM's depth table | MineDraft default | default / best static |",
             "|---|---|---|---|---|---|---|"]
    for n, row in summary["steady"].items():
        t = {e: float("nan") for e in (*STATIC, *COMPARED)} | row["tok_s"]
        lines.append(f"| N = {n}, code | {t['no_sd']:.1f} | {t['stock_sd_k1']:.1f} | {t['stock_sd_k3']:.1f} | "
                     f"{t['vllm_depth_table']:.1f} | {t['minedraft_auto']:.1f} | {row['auto_vs_best_static']:.2f}x |")
    m = summary["moving"]
    if m is None:
        return "\n".join(lines)
    t = {e: float("nan") for e in (*STATIC, *COMPARED)} | m["tok_s"]
    lines.append(f"| moving (per-phase ceiling {m['per_phase_ceiling_tok_s']:.1f}; default / ceiling "
                 f"{m['auto_vs_ceiling']:.2f}x) | {t['no_sd']:.1f} | {t['stock_sd_k1']:.1f} | "
                 f"{t['stock_sd_k3']:.1f} | {t['vllm_depth_table']:.1f} | {t['minedraft_auto']:.1f} | "
                 f"{m['auto_vs_best_static']:.2f}x |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> Path:
    fig, (left, right) = runner.pyplot().subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    loads = list(summary["steady"])
    for engine, style in (("no_sd", "k-o"), ("stock_sd_k1", "C0:^"), ("stock_sd_k2", "C0--s"),
                          ("stock_sd_k3", "C0-v"), ("vllm_depth_table", "C2-.d"), ("minedraft_auto", "C3-o")):
        if not loads or engine not in summary["steady"][loads[0]]["tok_s"]:
            continue  # the steady loads or the engine's group not run (--parts, --groups)
        left.plot([int(n) for n in loads], [summary["steady"][n]["tok_s"][engine] for n in loads], style, label=engine)
    left.set(xscale="log", xlabel="concurrent requests (code, greedy)", ylabel="output tok/s",
             title="steady loads")
    left.set_xticks([int(n) for n in loads], loads)
    left.legend(fontsize=8)
    m = summary["moving"]
    if m is None:
        right.set_visible(False)
        return runner.save(fig, path, dpi=120)
    labels = {"no_sd": "alone", "stock_sd_k1": "k'=1", "stock_sd_k2": "k'=2", "stock_sd_k3": "k'=3",
              "vllm_depth_table": "vLLM table", "minedraft_auto": "default"}
    colors = {"minedraft_auto": "C3", "no_sd": "k", "vllm_depth_table": "C2"}
    names = [e for e in labels if e in m["tok_s"]]
    right.bar(range(len(names) + 1), [m["tok_s"][e] for e in names] + [m["per_phase_ceiling_tok_s"]],
              color=[colors.get(e, "C0") for e in names] + ["0.6"])
    right.set_xticks(range(len(names) + 1), [labels[e] for e in names] + ["ceiling"], rotation=45)
    right.set(title="a load that moves", ylabel="output tok/s")
    return runner.save(fig, path, dpi=120)


def parse_args(argv=None):
    parser = runner.parser(__doc__, rounds=2)
    parser.add_argument("--pair", type=Path, default=PAIR_DIR, help="real-pair.sh's output folder")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--groups", default="ABC",
                        help="which engine groups to run (A with any of B, C, D, E; D, stock SD at k = 2, and E, "
                             "vLLM's depth table, not by default)")
    parser.add_argument("--parts", default="steady,moving", choices=("steady,moving", "steady", "moving"),
                        help="the steady loads, the load that moves, or both")
    parser.add_argument("--twin", default="no_sd", choices=TWINS,
                        help="each group beside A carries a twin of this engine of group A: the target alone "
                             "(absolute rates on one scale) or the default (its ratio to each static engine "
                             "read side by side, which tells a few per cent where groups differ by more)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the committed JSON's samples of the groups not named in --groups (and of "
                             "the parts not named in --parts)")
    return sweep.inherit_workload(parser.parse_args(argv))


def measure(args, path: Path) -> dict:
    if not (args.pair / "done").exists():
        sys.exit(f"real_pair: no real pair in {args.pair}; build it with modelkit/real_pair.sh")
    setup = setup_for(args.pair, args)
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    if not group_fits(setup.engine["dtype"], memory_gib):
        sys.exit(f"real_pair: this CPU computes no bf16, and two float32 engines of a group need about "
                 f"{FLOAT32_GROUP_GIB} GiB, more than this machine's {memory_gib:.0f}; benchmarks.depth_trace "
                 "runs one engine at a time")
    plan = workload(args.pair / "target", args.output_tokens, args.parts)
    log_dir = Path(sweep.tempfile.mkdtemp(prefix="minedraft-real-pair-"))
    print(f"worker logs: {log_dir}", flush=True)
    started, samples = time.perf_counter(), []
    if args.merge and path.exists():  # the groups not run now, from the committed JSON
        samples = [s for s in json.loads(path.read_text())["samples"]
                   if GROUP_OF[s["engine"]] not in args.groups or s["part"] not in args.parts]
    for group in args.groups:
        samples += run_group(setup, with_twin(GROUPS[group], args.twin if group != "A" else "no_sd"), plan,
                             args.rounds, log_dir)
    rounds = {part: len({s["round"] for s in samples if s["part"] == part and s["engine"] == "no_sd"})
              for part in ("steady", "moving") if any(s["part"] == part for s in samples)}
    meta = runner.meta(setup.device_label, started, setup.engine, models=setup.meta["models"],
                       output_tokens=args.output_tokens, rounds=rounds, twin=args.twin, steady=STEADY, moving=MOVING,
                       temperatures=TEMPERATURE)
    return {"meta": meta, "summary": summarize(samples), "samples": samples}


def main(argv=None) -> None:
    args = parse_args(argv)
    path = OUT / "real_pair.json"
    result = runner.run_or_replot(args, path, lambda: measure(args, path))
    runner.report(plot(result["summary"], OUT / "real_pair.png"), markdown(result["summary"], result["meta"]))


if __name__ == "__main__":
    main()
