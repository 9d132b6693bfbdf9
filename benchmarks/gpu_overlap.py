"""Overlap physics on one GPU, torch only: verify group A on the main stream while a side stream
runs k draft forwards for group B, through MineDraft's own CudaStreamLane.

Models are decoder stacks of the published shapes (``modelkit.shapes``: Llama-3.1-8B with a
Llama-3.2-1B draft, Qwen3-32B with Qwen3-1.7B if memory allows), bf16, random weights: per layer
the QKV, output and gated-MLP matmuls plus attention over the layer's own KV cache of ``--context``
tokens (``scaled_dot_product_attention``), then the LM head. Each (B, k) runs twice: ``eager``
(PyTorch launches every kernel from the host, as vLLM with ``enforce_eager``) and ``graph`` (each
lane's work captured once as a CUDA graph and replayed, as vLLM's default for decode). Per batch B
(each group has B requests) and k it measures, with CUDA events, medians over ``--iters``:

* ``t_verify``: the target's forward over B x (k + 1) tokens, alone;
* ``t_draft``: k draft forwards over B tokens each, alone;
* ``t_serial``: one after the other on one stream (plain SD's step for 2B requests in two halves);
* ``t_overlapped``: the verify on the main stream, the drafts on the lane's side stream.

Gain = t_serial / t_overlapped (ideal: (t_verify + t_draft) / max(t_verify, t_draft)); the
interference ``i`` = (t_overlapped - max) / min is the simulator's same-device parameter
(``analysis/cost_model/profile.py``: 0 ideal overlap, 1 as serial). ``host_verify_ms`` and
``host_draft_ms`` are the host's time to enqueue each lane (eager: the launch cost the simulator
models per layer). Needs no vLLM (runs where torch has CUDA): ``python -m benchmarks.gpu_overlap``
writes ``benchmarks/results/<gpu name>/gpu_overlap.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks import runner
from minedraft.worker.in_process.lanes import CudaStreamLane
from modelkit.shapes import PAIRS, SHAPES

HERE = Path(__file__).resolve().parent


class Stack:
    """A decoder stack of one published shape with random bf16 weights and a KV cache."""

    def __init__(self, name: str, max_batch: int, max_tokens: int, context: int, device: torch.device):
        c = SHAPES[name]
        self.layers, h = c["num_hidden_layers"], c["hidden_size"]
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or h // self.heads
        inter, vocab = c["intermediate_size"], c["vocab_size"]
        w = lambda *shape: torch.randn(*shape, device=device, dtype=torch.bfloat16) * 0.02  # noqa: E731
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.weights = [(w(h, qkv), w(self.heads * self.head_dim, h), w(h, 2 * inter), w(inter, h))
                        for _ in range(self.layers)]
        self.lm_head = w(h, vocab)
        # One cache per layer, as a real model's: a shared one would sit in L2 at small batches.
        self.kv = [w(2, max_batch, self.kv_heads, context, self.head_dim) for _ in range(self.layers)]
        self.hidden = h
        self.x = torch.zeros(max_batch * max_tokens, h, device=device, dtype=torch.bfloat16)  # static (graphs)

    def forward(self, batch: int, tokens: int) -> torch.Tensor:
        x = self.x[: batch * tokens]
        for (wqkv, wo, wup, wdown), kv in zip(self.weights, self.kv):
            q = (x @ wqkv)[:, : self.heads * self.head_dim].view(batch, tokens, self.heads, self.head_dim)
            k, v = kv[0, :batch], kv[1, :batch]
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, enable_gqa=self.heads != self.kv_heads)
            x = x + a.transpose(1, 2).reshape(batch * tokens, -1) @ wo
            gate, up = (x @ wup).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ wdown
        return (x @ self.lm_head).argmax(-1)


def timed(fn, iters: int) -> tuple[float, float]:
    """Medians of ``fn``'s device time between CUDA events on the current stream and of the host's
    time to enqueue it, both in ms."""
    times, host = [], []
    for _ in range(iters + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times[2:]), statistics.median(host[2:])


def as_graph(fn, stream: torch.cuda.Stream):
    """``fn`` captured once as a CUDA graph on ``stream``: the returned callable replays it on the
    current stream.

    Each lane's graph is captured on its own stream. PyTorch bakes into a graph the cuBLAS
    workspace of (handle, capture stream) (pytorch/pytorch#193402), so two graphs captured on one
    stream and replayed at once on two streams share one workspace. Captured that way (torch
    2.11, H200, 2026-11-26), 4 of the 10 graph rows attempted never finished: the host waited in
    the lane's join for an event the side stream never reached. The shared workspace is the
    likely cause: captured on separate streams, none of 33 graph rows hung on an H100
    (2026-11-26). MineDraft's GPU path plans the same separation (RFC.md §4: the drafter's
    graphs captured on the lane's stream; today the in-process drafter runs eager on GPU).
    """
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up outside the capture (allocator, cuBLAS workspaces)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    return graph.replay


def measure(target: Stack, draft: Stack, batch: int, k: int, iters: int, device, mode: str) -> dict:
    lane = CudaStreamLane(device)

    def verify():
        target.forward(batch, k + 1)

    def drafts():
        for _ in range(k):
            draft.forward(batch, 1)

    if mode == "graph":
        verify, drafts = as_graph(verify, torch.cuda.Stream(device)), as_graph(drafts, lane.stream)

    def overlapped():
        lane.captured()
        lane.submit(lambda: (["b"], drafts()))
        verify()
        lane.wait()

    (t_verify, host_verify), (t_draft, host_draft) = timed(verify, iters), timed(drafts, iters)
    t_serial, _ = timed(lambda: (verify(), drafts()), iters)
    t_overlapped, _ = timed(overlapped, iters)
    longer, shorter = max(t_verify, t_draft), min(t_verify, t_draft)
    return {"mode": mode, "batch": batch, "k": k, "t_verify_ms": round(t_verify, 3),
            "t_draft_ms": round(t_draft, 3), "t_serial_ms": round(t_serial, 3),
            "t_overlapped_ms": round(t_overlapped, 3), "gain": round(t_serial / t_overlapped, 3),
            "ideal_gain": round((t_verify + t_draft) / longer, 3),
            "interference": round((t_overlapped - longer) / shorter, 3),
            "host_verify_ms": round(host_verify, 3), "host_draft_ms": round(host_draft, 3)}


def start_gpu_run(script: str, args: argparse.Namespace, argv: list[str] | None) -> tuple[torch.device, Path, dict]:
    """The GPU, the results folder (``args.out`` or ``benchmarks/results/<gpu name>/``, created) and the
    run's metadata for ``benchmarks/<script>.py``; exits with one line where no GPU is visible."""
    if not torch.cuda.is_available():
        sys.exit(f"{script}: no CUDA device visible")
    name = torch.cuda.get_device_name(0)
    out = args.out or HERE / "results" / re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": name, "dtype": "bfloat16", "context": args.context, "iters": args.iters,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "measured": runner.minute(),
            "command": f"python -m benchmarks.{script} " + " ".join(argv if argv is not None else sys.argv[1:])}
    return torch.device("cuda"), out, meta


def gpu_parser(doc: str, script: str, iters: int) -> argparse.ArgumentParser:
    """A GPU script's parser with the flags the two share: pairs, KV context, timed runs per measurement,
    eager and graph modes, the results folder, and ``--replot``, which takes the JSON to redraw."""
    parser = runner.parser(doc, replot=None)
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS))
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--iters", type=int, default=iters)
    parser.add_argument("--modes", nargs="+", choices=["eager", "graph"], default=["eager", "graph"])
    parser.add_argument("--out", type=Path, help="results folder (default: benchmarks/results/<gpu name>/)")
    parser.add_argument("--replot", type=Path, help=f"only redraw the PNG beside this {script}.json")
    return parser


def replotted(args: argparse.Namespace, plot) -> bool:
    """With ``--replot JSON``: the PNG beside it redrawn (no GPU needed); whether it was."""
    if args.replot is None:
        return False
    data = json.loads(args.replot.read_text())
    plot(data["rows"], args.replot.with_suffix(".png"), data["meta"]["device"])
    return True


def main(argv=None) -> None:
    parser = gpu_parser(__doc__, "gpu_overlap", iters=10)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64, 128])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="per pair: skip its rows left once this many seconds have passed (listed as skipped)")
    parser.add_argument("--row-timeout-s", type=float, default=60,
                        help="a row still running after this long is recorded as hung and the run ends")
    parser.add_argument("--merge", action="store_true",
                        help="keep the folder's earlier rows that this run does not measure again")
    args = parser.parse_args(argv)
    if replotted(args, plot):
        return
    device, out, meta = start_gpu_run("gpu_overlap", args, argv)
    name = meta["device"]
    rows, skipped, earlier = [], {}, []
    if args.merge and (out / "gpu_overlap.json").exists():
        previous = json.loads((out / "gpu_overlap.json").read_text())
        earlier, meta["earlier_runs"] = previous["rows"], [previous["meta"], *previous["meta"].get("earlier_runs", [])]
        previous["meta"].pop("earlier_runs", None)

    def save() -> None:  # after every row: a run cut short keeps what it measured
        key = lambda r: (r["pair"], r["mode"], r["batch"], r["k"])  # noqa: E731
        fresh = {key(r) for r in rows}
        kept = sorted([r for r in earlier if key(r) not in fresh] + rows, key=key)
        runner.write_result(out / "gpu_overlap.json", {"meta": {**meta, "skipped": skipped}, "rows": kept})

    def hung(row_name: str, after_s: float) -> None:  # a device that never finishes cannot be joined
        skipped[row_name] = f"hung: not finished after {after_s:.0f} s; the run ended here"
        save()
        print(f"gpu_overlap: {row_name} {skipped[row_name]}", file=sys.stderr, flush=True)
        os._exit(2)

    for pair in args.pairs:
        started = time.monotonic()
        try:
            target, draft = (Stack(n, max(args.batches), max(args.ks) + 1, args.context, device)
                             for n in PAIRS[pair])
            torch.cuda.synchronize()
            print(f"{pair}: stacks built in {time.monotonic() - started:.1f} s", flush=True)
        except torch.OutOfMemoryError as e:
            skipped[pair] = f"out of memory building the stacks: {e}"
            torch.cuda.empty_cache()
            continue
        deadline = time.monotonic() + args.budget_s
        with torch.inference_mode():
            for k in args.ks:
                for b in args.batches:
                    for mode in args.modes:
                        row_name = f"{pair} {mode} batch={b} k={k}"
                        if time.monotonic() > deadline:
                            skipped[row_name] = f"past --budget-s {args.budget_s}"
                            continue
                        watchdog = threading.Timer(args.row_timeout_s, hung, (row_name, args.row_timeout_s))
                        watchdog.daemon = True
                        watchdog.start()
                        try:
                            row_started = time.monotonic()
                            row = measure(target, draft, b, k, args.iters, device, mode)
                            rows.append({"pair": pair, **row, "row_s": round(time.monotonic() - row_started, 1)})
                            print(rows[-1], flush=True)
                        except (RuntimeError, torch.OutOfMemoryError) as e:  # one failed row keeps the others
                            skipped[row_name] = f"{type(e).__name__}: {e}"[:300]
                            torch.cuda.synchronize()
                            torch.cuda.empty_cache()
                        finally:
                            watchdog.cancel()
                        save()
        del target, draft
        torch.cuda.empty_cache()
    save()
    plot(json.loads((out / "gpu_overlap.json").read_text())["rows"], out / "gpu_overlap.png", name)


def plot(rows: list[dict], path: Path, device: str) -> None:
    plt = runner.pyplot()
    pairs = sorted({r["pair"] for r in rows})
    modes = sorted({r["mode"] for r in rows})
    fig, axes = plt.subplots(max(1, len(modes)), max(1, len(pairs)), figsize=(5 * max(1, len(pairs)),
                             3.4 * max(1, len(modes))), squeeze=False)
    for row_axes, mode in zip(axes, modes):
        for ax, pair in zip(row_axes, pairs):
            ax.set_title(f"{pair}, {mode}", fontsize=8)
            if not any(r["pair"] == pair and r["mode"] == mode for r in rows):
                ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
                continue
            for k in sorted({r["k"] for r in rows}):
                series = [r for r in rows if r["pair"] == pair and r["mode"] == mode and r["k"] == k]
                line, = ax.plot([r["batch"] for r in series], [r["gain"] for r in series], "o-",
                                label=f"k={k} measured")
                ax.plot([r["batch"] for r in series], [r["ideal_gain"] for r in series], ":",
                        color=line.get_color(), label=f"k={k} ideal")
            runner.requests_axis(ax, "requests per group")
            ax.set_ylabel("serial / overlapped step")
            ax.legend(fontsize=6)
    fig.suptitle(f"Verify on the main stream, k drafts on the side stream, {device}", fontsize=8)
    runner.save(fig, path)


if __name__ == "__main__":
    main()
