"""What a depth sweep's best-static column can resolve: an engine identical to the target alone, scored as
``minedraft_auto`` is.

    python -m analysis.sweep_resolution                      # benchmarks/results/cpu/depth_sweep/
    python -m analysis.sweep_resolution path/to/summary.json

``benchmarks/sweep.py`` scores ``minedraft_auto`` at each (draft, k, N) against ``vllm_best_static``: the
best of the target alone (the median of its runs over every block of the sweep) and stock SD at each
k' <= k (the median of its own block's runs). On CPU each block (one draft and k) runs the target alone
too, interleaved with the block's other engines, so the target alone's runs of one block are a twin of
the target alone measured exactly as ``minedraft_auto`` is: five runs in the same rounds. Where the
target alone is the best static choice, that twin's ratio is what an ``auto`` that ran the target alone's
steps at no cost at all would score; its spread is the column's resolution on that machine.

The target alone's runs are read in sweep order (blocks in the order of ``summary_meta.json``: drafts,
then k), as many per block as ``minedraft_auto`` ran there. A summary whose target-alone runs do not split
that way (one merged from two sweeps keeps the first sweep's) is refused.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cpu" / "depth_sweep" / "summary.json"


@dataclass(frozen=True)
class Cell:
    draft: str
    k: int
    requests: int
    best_static: str  # vllm_best_static: no_sd or stock_sd_k<k'>
    twin: float  # the target alone's runs of this block (median) / the best static's rate
    auto: float  # minedraft_auto / the best static's rate


def cells(summary: list[dict], meta: dict) -> list[Cell]:
    rows = [r for r in summary if r["comparison"] == "equal_concurrency"]
    blocks = [(draft, k) for draft in meta["drafts"] for k in meta["ks"]]
    no_sd = {(r["batch_size"], r["output_tokens"]): r["output_tokens_per_s_runs"] for r in rows if r["mode"] == "no_sd"}
    out = []
    for row in rows:
        if row["mode"] != "minedraft_auto" or "vllm_best_static" not in row:
            continue
        runs = no_sd[(row["batch_size"], row["output_tokens"])]
        repeats = len(row["output_tokens_per_s_runs"])  # one run of each engine per round
        if repeats * len(blocks) != len(runs):
            raise ValueError(f"N = {row['batch_size']}: {len(runs)} runs of the target alone, not {repeats} "
                             f"for each of {len(blocks)} blocks")
        block = blocks.index((row["draft"], row["k"]))
        twin = statistics.median(runs[block * repeats:(block + 1) * repeats])
        best = row["vllm_best_static_tok_s"]
        out.append(Cell(row["draft"], row["k"], row["batch_size"], row["vllm_best_static"], twin / best,
                        row["output_tokens_per_s"] / best))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("summary", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--bar", type=float, default=0.95)
    args = parser.parse_args(argv)
    meta = json.loads(args.summary.with_name("summary_meta.json").read_text())
    try:
        table = cells(json.loads(args.summary.read_text()), meta)
    except ValueError as error:
        raise SystemExit(f"{args.summary}: {error}") from None
    print(f"{args.summary}: N x draft x k, the best static choice; over it: the target alone's twin, auto")
    for c in sorted(table, key=lambda c: (c.requests, c.draft, c.k)):
        print(f"N={c.requests:<3d} {c.draft:16s} k={c.k}  best {c.best_static:11s} "
              f"twin {c.twin:.3f}  auto {c.auto:.3f}")
    alone = [c for c in table if c.best_static == "no_sd"]
    for name, values in (("twin", [c.twin for c in alone]), ("auto", [c.auto for c in alone])):
        below = sum(v < args.bar for v in values)
        print(f"where the target alone is best ({len(alone)} cells), {name}: {min(values):.3f}-{max(values):.3f}, "
              f"geometric mean {statistics.geometric_mean(values):.3f}, {below} below {args.bar}")
    every = [c.auto for c in table]
    print(f"auto over all {len(table)} cells: geometric mean {statistics.geometric_mean(every):.3f}, "
          f"{sum(v < args.bar for v in every)} below {args.bar}")


if __name__ == "__main__":
    main()
