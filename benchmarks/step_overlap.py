"""Per-step lane timings and end-to-end tokens/s on this CPU (issue #4's report).

For each k, engines run uniform batches (prompt 32 tokens, 48 output tokens,
ignore_eos) at several concurrencies N, in these modes, interleaved per k:

* ``target``: no speculative decoding;
* ``stock_sd``: vLLM's speculative decoding (draft_model, the kit's perturbed draft);
* ``minedraft_serial``: MineDraft pinned to parallel mode, deferred drafts
  run inline (gives T_verify(A) alone and T_draft(B) alone per step);
* ``minedraft_overlap``: the same on the draft thread (gives T_step overlapped).

``equal_concurrency`` compares all modes at N; ``paper`` compares stock SD at N
with MineDraft at 2N (each MineDraft sub-batch as large as stock SD's batch).

    python -m benchmarks.step_overlap [--ks 1 3 5] [--concurrency 4 8 16]

Writes ``analysis/cost_model/calibration/cpu_step_overlap.json`` (the calibration ``auto`` ships with) and prints two tables.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

# Set before anything imports vLLM: it reads its device once.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

from benchmarks import runner  # noqa: E402
from harness.child import run_once, serve  # noqa: E402
from harness.engine_args import Speculation, engine_kwargs  # noqa: E402
from analysis.cost_model.calibrate import CPU_STEP_OVERLAP_JSON  # noqa: E402

PROMPT_TOKENS = 32
OUTPUT_TOKENS = 48
# name -> (mode, MineDraft lane)
MODES = {
    "target": ("no_sd", None),
    "stock_sd": ("stock_sd", None),
    "minedraft_serial": ("minedraft_parallel", "serial"),
    "minedraft_overlap": ("minedraft_parallel", "overlap"),
}


def make_child(spec: dict):
    from vllm import LLM, SamplingParams

    mode, lane = MODES[spec["name"]]
    speculation = Speculation(spec["draft"], spec["k"]) if mode != "no_sd" else None
    minedraft = {"lane": lane, "step_profile": spec["profile"]} if lane else None
    llm = LLM(**engine_kwargs(mode, spec["target"], speculation, minedraft=minedraft, max_model_len=512,
                              max_num_seqs=64, max_num_batched_tokens=2048))
    params = SamplingParams(temperature=0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
    llm.generate([{"prompt_token_ids": [5] * PROMPT_TOKENS}] * 2, params, use_tqdm=False)  # warm-up

    def run(command: dict) -> dict:
        rates = {}
        for n in spec["concurrency"]:
            prompts = [{"prompt_token_ids": [(7 * i + j) % 500 + 3 for j in range(PROMPT_TOKENS)]}
                       for i in range(n)]
            start = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=False)
            elapsed = time.perf_counter() - start
            rates[n] = sum(len(o.outputs[0].token_ids) for o in outs) / elapsed
        return rates

    return run


def run_child(mode: str, k: int, kit, concurrency: list[int]) -> tuple[dict, list[dict]]:
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as profile:
        spec = {"name": mode, "k": k, "target": str(kit.target), "draft": str(kit.draft_perturbed),
                "concurrency": concurrency, "profile": profile.name}
        rates = run_once(["-m", "benchmarks.step_overlap", "--child"], spec, timeout_s=900)
        rates = {int(n): r for n, r in rates.items()}
        steps = [json.loads(x) for x in Path(profile.name).read_text().splitlines() if x]
    return rates, steps


def step_table(steps_serial: list[dict], steps_overlap: list[dict]) -> list[dict]:
    """Median lane times of parallel steps, by (verify group, draft group) size."""
    groups: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in steps_serial:
        if s["parallel"] and s["num_draft_only"]:
            g = groups[(s["num_verified"], s["num_draft_only"])]
            g["t_verify_alone_ms"].append(1e3 * (s["main_s"] - s["draft_s"]))
            g["t_draft_alone_ms"].append(1e3 * s["draft_s"])
            g["t_step_serial_ms"].append(1e3 * s["step_s"])
    for s in steps_overlap:
        if s["parallel"] and s["num_draft_only"]:
            g = groups[(s["num_verified"], s["num_draft_only"])]
            g["t_step_overlap_ms"].append(1e3 * s["step_s"])
            g["t_draft_overlapped_ms"].append(1e3 * s["draft_s"])
    rows = []
    for (nv, nd), g in sorted(groups.items()):
        if min(len(v) for v in g.values()) < 5 or len(g) < 5:
            continue
        row = {"verify_group": nv, "draft_group": nd, "samples": min(len(v) for v in g.values())}
        row.update({name: round(statistics.median(v), 2) for name, v in g.items()})
        row["overlap_gain"] = round(row["t_step_serial_ms"] / row["t_step_overlap_ms"], 3)
        row["ideal_gain"] = round(row["t_step_serial_ms"] / max(row["t_verify_alone_ms"], row["t_draft_alone_ms"]), 3)
        rows.append(row)
    return rows


def main() -> None:
    parser = runner.parser(__doc__, replot="only redraw the plot from --out")
    parser.add_argument("--child")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--out", default=str(CPU_STEP_OVERLAP_JSON))
    args = parser.parse_args()
    if args.child:
        serve(make_child)
        return
    if args.replot:
        plot(json.loads(Path(args.out).read_text()), Path(args.out).with_suffix(".png"))
        return
    from modelkit import build_kit

    kit = build_kit()
    conc = sorted(set(args.concurrency) | {2 * n for n in args.concurrency})
    target_rates, _ = run_child("target", 0, kit, conc)
    result = {"device": f"cpu ({os.cpu_count()} cores, {platform.machine()})", "prompt_tokens": PROMPT_TOKENS,
              "output_tokens": OUTPUT_TOKENS, "draft": "draft_perturbed", "steps": {}, "e2e": []}
    for k in args.ks:
        rates, steps = {"target": target_rates}, {}
        for mode in ("stock_sd", "minedraft_serial", "minedraft_overlap"):
            rates[mode], steps[mode] = run_child(mode, k, kit, conc)
            print(f"k={k} {mode}: " + ", ".join(f"N={n}: {r:.0f} tok/s" for n, r in rates[mode].items()), flush=True)
        result["steps"][k] = step_table(steps["minedraft_serial"], steps["minedraft_overlap"])
        for n in args.concurrency:
            for mode in rates:
                result["e2e"].append({"comparison": "equal_concurrency", "k": k, "batch_size": n, "mode": mode,
                                      "output_tokens_per_s": round(rates[mode][n], 1)})
            for mode in ("minedraft_serial", "minedraft_overlap"):
                result["e2e"].append({"comparison": "paper", "k": k, "batch_size": n, "mode": mode,
                                      "total_requests": 2 * n, "output_tokens_per_s": round(rates[mode][2 * n], 1),
                                      "vs_stock_sd": round(rates[mode][2 * n] / rates["stock_sd"][n], 3)})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    plot(result, Path(args.out).with_suffix(".png"))
    print_tables(result)


def plot(result: dict, path: Path) -> None:
    """tok/s vs stock SD's batch size, one panel per k; paper rows dashed."""
    plt = runner.pyplot()
    ks = sorted({r["k"] for r in result["e2e"]})
    fig, axes = plt.subplots(1, len(ks), figsize=(4.2 * len(ks), 3.6), sharey=True, squeeze=False)
    for ax, k in zip(axes[0], ks):
        for (mode, comparison), style in {("target", "equal_concurrency"): "k-", ("stock_sd", "equal_concurrency"): "b-",
                                          ("minedraft_overlap", "equal_concurrency"): "r-",
                                          ("minedraft_serial", "equal_concurrency"): "y-",
                                          ("minedraft_overlap", "paper"): "r--"}.items():
            rows = sorted((r["batch_size"], r["output_tokens_per_s"]) for r in result["e2e"]
                          if r["k"] == k and r["mode"] == mode and r["comparison"] == comparison)
            ax.plot(*zip(*rows), style, marker="o", label=f"{mode} ({comparison})")
        ax.set_title(f"k={k}")
        ax.set_xlabel("stock SD batch N (paper: MineDraft runs 2N)")
    axes[0][0].set_ylabel("output tokens/s")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(result["device"], fontsize=9)
    runner.save(fig, path)


def print_tables(result: dict) -> None:
    print("\n| k | verify | draft | T_verify alone ms | T_draft alone ms | T_step serial ms | T_step overlap ms | gain | ideal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, rows in result["steps"].items():
        for r in rows:
            print(f"| {k} | {r['verify_group']} | {r['draft_group']} | {r['t_verify_alone_ms']} | {r['t_draft_alone_ms']} "
                  f"| {r['t_step_serial_ms']} | {r['t_step_overlap_ms']} | {r['overlap_gain']} | {r['ideal_gain']} |")
    print("\n| comparison | k | N (stock SD batch) | mode | tok/s | vs stock SD |")
    print("|---|---|---|---|---|---|")
    stock = {(r["k"], r["batch_size"]): r["output_tokens_per_s"] for r in result["e2e"]
             if r["mode"] == "stock_sd" and r["comparison"] == "equal_concurrency"}
    for r in result["e2e"]:
        ratio = r.get("vs_stock_sd", r["output_tokens_per_s"] / stock[(r["k"], r["batch_size"])])
        print(f"| {r['comparison']} | {r['k']} | {r['batch_size']} | {r['mode']} | {r['output_tokens_per_s']} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
