"""What every benchmark does around its measurement, once: command line, run metadata, result JSON, figure.

A script measures, summarises and tables in its own way. Around that they all take ``--rounds`` and
``--replot``, either measure or read their committed JSON back (``--replot`` starts no engine), stamp
the run (date, machine, engine arguments, seconds), write the JSON, draw a PNG and print a markdown
table. Each script keeps its own JSON layout: keys, order and indent are the caller's, so committed
results still replot.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

CPU_RESULTS = Path(__file__).resolve().parent / "results" / "cpu"
REPLOT_HELP = "no runs: plot and table from the JSON"


def parser(doc: str, rounds: int | None = None, replot: str | None = REPLOT_HELP) -> argparse.ArgumentParser:
    """A script's parser, its docstring as help, with ``--rounds`` (default ``rounds``) and ``--replot``
    (help ``replot``) unless given None."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if rounds is not None:
        p.add_argument("--rounds", type=int, default=rounds)
    if replot is not None:
        p.add_argument("--replot", action="store_true", help=replot)
    return p


def date() -> str:
    """Now, as ``meta["date"]`` has it (UTC, ISO 8601, seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def minute() -> str:
    """Now, as the served, tensor-parallel and GPU results' ``measured`` has it."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def meta(device_label: str, started: float, engine: dict | None = None, **fields) -> dict:
    """A run's ``meta``: date and machine, then ``fields`` in their order, the engine arguments (less the
    model's path, which is this machine's) and the seconds since ``started`` (``time.perf_counter()``)."""
    out = {"date": date(), "device_label": device_label, **fields}
    if engine is not None:
        out["engine"] = {k: v for k, v in engine.items() if k != "model"}
    return {**out, "seconds": round(time.perf_counter() - started, 1)}


def write_result(path: Path, result, indent: int = 1) -> Path:
    """``result`` as JSON at ``path`` (its folder made), ending in a newline, indented as that file
    has always been (a rewrite then diffs by what was measured)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent) + "\n")
    return path


def run_or_replot(args: argparse.Namespace, path: Path, measure: Callable[[], dict], indent: int = 1) -> dict:
    """The result: ``path``'s with ``--replot``; else ``measure()``, written to ``path``."""
    if args.replot:
        return json.loads(path.read_text())
    result = measure()
    print(f"wrote {write_result(path, result, indent)}")
    return result


def report(figures: Path | list[Path], table: str) -> None:
    """Which figures were drawn, then the table after a blank line."""
    for figure in [figures] if isinstance(figures, Path) else figures:
        print(f"wrote {figure}")
    print("\n" + table)


def pyplot():
    """matplotlib's pyplot, drawing to files only (imported late: measuring needs no matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def requests_axis(ax, xlabel: str, ticks: list[int] | None = None, parity: bool = True, **font) -> None:
    """``ax``'s x axis as request counts: log 2, ``ticks`` written out (no minor ones between them); with
    ``parity`` (y is a ratio) a line at 1.0."""
    if parity:
        ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xscale("log", base=2)
    if ticks is not None:
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    ax.set_xlabel(xlabel, **font)


def save(fig, path: Path, dpi: int = 110) -> Path:
    """``fig`` laid out, written to ``path`` and closed (a sweep draws dozens)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
