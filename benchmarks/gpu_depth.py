"""What each speculation depth costs on one GPU, torch only: the depth controller's questions at
published shapes (issue 24).

For a pair of ``modelkit.shapes`` (bf16 decoder stacks with random weights, ``gpu_overlap.Stack``),
per batch B and mode (``eager``: PyTorch launches each kernel; ``graph``: one CUDA graph per call),
medians of CUDA-event times over ``--iters``:

* ``verify_ms[d]``: the target's forward over B x (d + 1) tokens, d = 0..``--max-depth``
  (``verify_ms[0]`` is the target alone's decode step);
* ``draft_ms``: one draft forward over B tokens: one draft step, and the forward vLLM keeps at
  depth 0 to hold the draft's KV cache in step;
* ``catch_up_ms[n]``: one draft forward over B x n tokens: catching a draft up on n tokens per
  request that it skipped while speculation was off (``minedraft/worker/in_process/draft_catch_up.py``).

From these, per row: the depth-0 forward's share of the target's step (the controller skips it
when it costs more than about 5 %); the catch-up's cost per skipped token against a draft step;
each depth's serial step ``verify_ms[d] + d * draft_ms`` against the prior's bound
``(d + 1) / (1 + d c)`` on its gain over depth 0 (``minedraft/policy/weight_bound.py``: it
rules depths out, so it must never be below what the device gives with every draft accepted);
and, per acceptance rate a, the best depth and its gain over the target alone.

``python -m benchmarks.gpu_depth`` writes ``benchmarks/results/<gpu name>/gpu_depth.json`` and
``.png``. Needs no vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from benchmarks import runner
from benchmarks.gpu_overlap import Stack, as_graph, gpu_parser, replotted, start_gpu_run, timed
from analysis.cost_model.profile import ModelShape, draft_cost_ratio
from minedraft.policy.acceptance import geometric_tokens as expected_tokens
from minedraft.policy.weight_bound import max_gain
from modelkit.shapes import PAIRS, SHAPES

ACCEPTANCE = (0.5, 0.6, 0.7, 0.8, 0.9)


def measure(target: Stack, draft: Stack, batch: int, max_depth: int, catch_ups: list[int],
            iters: int, device: torch.device, mode: str) -> dict:
    def call(stack: Stack, tokens: int):
        fn = lambda: stack.forward(batch, tokens)  # noqa: E731
        return as_graph(fn, torch.cuda.Stream(device)) if mode == "graph" else fn

    verify = [timed(call(target, d + 1), iters)[0] for d in range(max_depth + 1)]
    draft_ms = timed(call(draft, 1), iters)[0]
    catch_up = {n: timed(call(draft, n), iters)[0] for n in catch_ups}
    return {"mode": mode, "batch": batch, "verify_ms": [round(t, 3) for t in verify],
            "draft_ms": round(draft_ms, 3), "catch_up_ms": {str(n): round(t, 3) for n, t in catch_up.items()}}


def derive(row: dict, cost_ratio: float) -> dict:
    """What the controller and its prior read from a row (module docstring)."""
    verify, draft = row["verify_ms"], row["draft_ms"]
    step = [v + d * draft for d, v in enumerate(verify)]
    best = {}
    for a in ACCEPTANCE:
        rates = [expected_tokens(a, d) / s for d, s in enumerate(step)]
        rates[0] = 1 / verify[0]  # depth 0 skips the draft forward
        d = max(range(len(rates)), key=rates.__getitem__)
        best[str(a)] = {"depth": d, "gain_over_target_alone": round(rates[d] * verify[0], 3)}
    return {"depth0_draft_share": round(draft / verify[0], 3),
            "catch_up_per_token_over_draft_step": {n: round(t / int(n) / draft, 3)
                                                   for n, t in row["catch_up_ms"].items()},
            "all_accepted_gain": [round((d + 1) * verify[0] / s, 3) for d, s in enumerate(step)],
            "prior_bound": [round(max_gain(d, cost_ratio), 3) for d in range(len(step))],
            "best_depth": best}


def main(argv=None) -> None:
    parser = gpu_parser(__doc__, "gpu_depth", iters=20)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--max-depth", type=int, default=5)
    parser.add_argument("--catch-ups", type=int, nargs="+", default=[4, 16, 64])
    args = parser.parse_args(argv)
    if replotted(args, plot):
        return
    device, out, meta = start_gpu_run("gpu_depth", args, argv)
    rows, skipped = [], {}

    def save() -> None:  # after every row: a run cut short keeps what it measured
        runner.write_result(out / "gpu_depth.json", {"meta": {**meta, "skipped": skipped}, "rows": rows})

    for pair in args.pairs:
        target_name, draft_name = PAIRS[pair]
        c = draft_cost_ratio(*(ModelShape.from_config(n, SHAPES[n]) for n in (draft_name, target_name)))
        try:
            target = Stack(target_name, max(args.batches), args.max_depth + 1, args.context, device)
            draft = Stack(draft_name, max(args.batches), max(args.catch_ups), args.context, device)
        except torch.OutOfMemoryError as e:
            skipped[pair] = f"out of memory building the stacks: {e}"[:300]
            torch.cuda.empty_cache()
            continue
        with torch.inference_mode():
            for b in args.batches:
                for mode in args.modes:
                    try:
                        row = measure(target, draft, b, args.max_depth, args.catch_ups, args.iters, device, mode)
                    except (RuntimeError, torch.OutOfMemoryError) as e:  # one failed row keeps the others
                        skipped[f"{pair} {mode} batch={b}"] = f"{type(e).__name__}: {e}"[:300]
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                        continue
                    rows.append({"pair": pair, "cost_ratio": round(c, 4), **row, **derive(row, c)})
                    print(json.dumps(rows[-1]), flush=True)
                    save()
        del target, draft
        torch.cuda.empty_cache()
    save()
    plot(rows, out / "gpu_depth.png", meta["device"])


def plot(rows: list[dict], path: Path, device: str) -> None:
    plt = runner.pyplot()
    pairs, modes = sorted({r["pair"] for r in rows}), sorted({r["mode"] for r in rows})
    fig, axes = plt.subplots(len(modes), 2 * len(pairs), figsize=(4.2 * 2 * len(pairs), 3.3 * len(modes)),
                             squeeze=False)
    for row_axes, mode in zip(axes, modes):
        for i, pair in enumerate(pairs):
            series = [r for r in rows if r["pair"] == pair and r["mode"] == mode]
            bound_ax, best_ax = row_axes[2 * i], row_axes[2 * i + 1]
            for r in series:
                line, = bound_ax.plot(r["all_accepted_gain"], "o-", ms=3, label=f"B={r['batch']}")
            if series:
                bound_ax.plot(series[0]["prior_bound"], "k:", label="prior bound")
            bound_ax.set(title=f"{pair}, {mode}: gain over depth 0, all accepted", xlabel="depth",
                         ylabel="tokens/s over depth 0")
            for r in series:
                best_ax.plot(ACCEPTANCE, [r["best_depth"][str(a)]["gain_over_target_alone"] for a in ACCEPTANCE],
                             "o-", ms=3, label=f"B={r['batch']}")
                for a in ACCEPTANCE:
                    best = r["best_depth"][str(a)]
                    best_ax.annotate(str(best["depth"]), (a, best["gain_over_target_alone"]), fontsize=6)
            best_ax.axhline(1.0, color="k", lw=0.6)
            best_ax.set(title=f"{pair}, {mode}: best depth (labels)", xlabel="acceptance per draft",
                        ylabel="over the target alone")
            for ax in (bound_ax, best_ax):
                ax.title.set_fontsize(7)
                ax.legend(fontsize=6)
    fig.suptitle(f"Serial speculative steps by depth, {device}", fontsize=8)
    runner.save(fig, path)


if __name__ == "__main__":
    main()
