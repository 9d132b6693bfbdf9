"""Predict tokens/s of no SD, stock SD and MineDraft; check the model on measurements; compare with the paper.

    python -m analysis.simulator --profile cpu --k 3 --tau 2.4 --batch 4 8 16
    python -m analysis.simulator --profile h100-two-gpus --k 3 --alpha 0.7 --batch 8 16 32 64
    python -m analysis.simulator --check analysis/cost_model/calibration/cpu_step_overlap.json
    python -m analysis.simulator --check benchmarks/results/cpu/summary.json
    python -m analysis.simulator --paper
    python -m analysis.simulator --report benchmarks/results/simulator_report.md

Profiles: ``cpu`` (fitted on the committed CPU measurements), ``h100-same-gpu``,
``h100-two-gpus``, ``h100-paper`` (published figures and stated assumptions, see
analysis/cost_model/profile.py). Without ``--tau``/``--alpha`` the kit's acceptance
is used (τ = 2.40 at k = 3, α = 0.665).

``--check`` reads either a step_overlap.json or a sweep's summary.json (told apart
by content; see analysis/simulator/check.py). ``--paper`` prints the paper's
headline table next to the model; ``--report`` writes the full report.
"""

from __future__ import annotations

import argparse
import sys

from analysis.simulator.check import DRAFT_FIXED_SCALINGS, NO_DRAFT, check
from analysis.cost_model.calibrate import PROFILE_NAMES, profile_by_name
from analysis.cost_model.model import (
    COMPARISONS,
    KIT_AGREEMENT,
    KIT_TAU,
    KIT_TAU_K,
    Workload,
    acceptance,
    choose_mode,
    predict,
)
from analysis.cost_model.profile import ForwardCost, LatencyProfile

LABELS = {"equal_concurrency": "equal concurrency: every mode runs N requests",
          "paper": "paper setting: MineDraft runs 2N (two groups of N), stock SD and no SD run N"}


def formula(c: ForwardCost, t: str) -> str:
    if c.host_ms == 0 and c.floor_ms == 0:  # affine (CPU)
        return f"{c.fixed_ms:.3g} + {c.per_request_ms:.3g}*n + {c.per_token_ms:.3g}*n*{t}"
    return (f"{c.fixed_ms:.3g} + max({c.host_ms:.3g}, {c.per_request_ms:.3g}*n + "
            f"max({c.floor_ms:.3g}, {c.per_token_ms:.3g}*n*{t}))")


def describe(p: LatencyProfile, k: int) -> str:
    lines = [
        f"profile: {p.name}" + (f"  [{p.notes}]" if p.notes else ""),
        f"  target forward(n, t) = {formula(p.target, 't')} ms; verification adds {p.verify_fixed_ms:.3g} ms",
        f"  draft forward(n) = {formula(p.draft, '1')} ms, x k, + {p.propose_fixed_ms:.3g} + "
        f"{p.propose_per_request_ms:.3g}*n per propose",
        f"  engine overhead per step = {p.step_overhead_ms:.3g} + {p.step_overhead_per_request_ms:.3g}*n ms; "
        f"interference i = {p.interference:.3g} (overlapped step = max + i*min)",
        f"  e.g. k={k}: Tv(8) = {p.t_verify(8, k):.2f} ms, Td(8) = {p.t_draft(8, k):.2f} ms, "
        f"Tv(32) = {p.t_verify(32, k):.2f} ms, Td(32) = {p.t_draft(32, k):.2f} ms",
    ]
    if p.max_running:
        lines.append("  KV capacity (requests): " + ", ".join(f"{m} {n}" for m, n in p.max_running.items()))
    return "\n".join(lines)


def table(p: LatencyProfile, k: int, batches: list[int], tau: float | None, alpha: float | None,
          comparison: str, workload: Workload | None) -> str:
    out = [f"\n{LABELS[comparison]}", "",
           "| N | no SD tok/s | stock SD tok/s | MineDraft tok/s (running) | MD / stock | MD / stock per device "
           "| MD / no SD | parallel pays at N (equal concurrency) |",
           "|---|---|---|---|---|---|---|---|"]
    for n in batches:
        pr = predict(p, n, k, tau=tau, alpha=alpha, comparison=comparison, workload=workload)
        no, st, md = pr["no_sd"], pr["stock_sd"], pr["minedraft_parallel"]
        flag = lambda x: "" if x.fits else " (KV cache too small)"  # noqa: E731
        choice = choose_mode(p, n, k, tau=tau, alpha=alpha, workload=workload)
        note = " (fallback: stock SD)" if md.fallback else ""
        out.append(
            f"| {n} | {no.tokens_per_s:.0f}{flag(no)} | {st.tokens_per_s:.0f}{flag(st)} "
            f"| {md.tokens_per_s:.0f} ({md.running}){note}{flag(md)} "
            f"| {md.tokens_per_s / st.tokens_per_s:.2f}x "
            f"| {md.tokens_per_s_per_device / st.tokens_per_s_per_device:.2f}x "
            f"| {md.tokens_per_s / no.tokens_per_s:.2f}x "
            f"| {'yes' if choice.parallel else 'no'} (best: {choice.best}) |")
    return "\n".join(out)


def run_check(path: str, tau: float, tau_k: int, *, calibration: str | None = None,
              workload: Workload | None = None, draft_fixed_scaling: str = "flops", worst: int = 5,
              fit_engine: bool = False) -> int:
    result = check(path, tau=tau, tau_k=tau_k, calibration=calibration, workload=workload,
                   draft_fixed_scaling=draft_fixed_scaling, fit_engine=fit_engine)
    print(f"check: {path} ({result.source} format, {len(result.rows)} rows)")
    for note in result.notes:
        print(f"  {note}")
    for k, p in result.profiles.items():
        print(f"  k={k}: interference i = {p.interference:.3f}")
    p0 = next(iter(result.profiles.values()))
    print(describe(p0, 3))
    summary = result.source == "summary"
    print("\n| comparison | k | N | mode | draft | tau | parallel steps | measured tok/s | predicted tok/s | error |"
          if summary else "\n| comparison | k | N | mode | measured tok/s | predicted tok/s | error |")
    print("|---|---|---|---|---|---|---|---|---|---|" if summary else "|---|---|---|---|---|---|---|")
    for r in result.rows:
        extra = ""
        if summary:
            tau_s = "-" if r.tau is None else f"{r.tau:.2f}"
            frac = "-" if r.parallel_step_fraction is None else f"{r.parallel_step_fraction:.2f}"
            extra = f" {r.draft} | {tau_s} | {frac} |"
        print(f"| {r.comparison} | {r.k} | {r.batch_size} | {r.mode} |{extra} {r.measured:.0f} | {r.predicted:.0f} "
              f"| {100 * r.error:+.1f}% |")
    if summary:
        print("\nmean absolute percentage error (every row out of sample: the profile is fitted on the calibration "
              "file):")
    else:
        print("\nmean absolute percentage error (no_sd and stock_sd rows are in-sample for the engine overhead; "
              "MineDraft rows are out of sample):")
    for (comparison, mode), err in sorted(result.mape().items()):
        print(f"  {comparison:17s} {mode:18s} {err:5.1f} %")
    drafts = result.mape(("draft",))
    if len(set(drafts) - {(NO_DRAFT,)}) > 1:
        for (draft,), err in sorted(drafts.items()):
            print(f"  {'draft ' + draft:36s} {err:5.1f} %")
    print(f"  {'all rows':36s} {result.overall_mape():5.1f} %")
    print(f"\nworst {worst} rows:")
    for r in result.worst(worst):
        print(f"  {r.comparison} k={r.k} N={r.batch_size} {r.mode} {r.draft}: measured {r.measured:.0f}, "
              f"predicted {r.predicted:.0f} ({100 * r.error:+.1f} %)")
    return 0


def run_paper() -> int:
    from analysis.simulator.paper import compare_headlines
    from analysis.simulator.report import paper_section

    rows = compare_headlines()
    print("The paper's headline table (minedraft-paper.md §1.5) next to the model: MineDraft at 2m over stock SD at "
          "m, best k of 1..5, prefill included; verdict on the paper's layout (target TP 4 + a drafter GPU, H100 "
          "assumed). See --report for the assumptions.\n")
    print("\n".join(paper_section(rows)))
    print(f"\n{sum(c.verdict == 'agrees' for c in rows)} of {len(rows)} claims agree.")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.simulator", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=PROFILE_NAMES, default="cpu")
    ap.add_argument("--calibration", help="step_overlap.json for the cpu profile, the check of a summary and the "
                    "report (default: the committed one)")
    ap.add_argument("--k", type=int, default=3, help="draft tokens per step")
    acc = ap.add_mutually_exclusive_group()
    acc.add_argument("--tau", type=float, help="mean tokens per verification at --k (acceptance length)")
    acc.add_argument("--alpha", type=float, help="per-token acceptance rate")
    ap.add_argument("--batch", type=int, nargs="+", default=[4, 8, 16], help="N, requests per mode (see comparisons)")
    ap.add_argument("--comparison", choices=COMPARISONS, nargs="+", default=list(COMPARISONS))
    ap.add_argument("--interference", type=float, help="override the profile's i")
    ap.add_argument("--target-weights", choices=("bf16", "fp8", "int4"), default="bf16",
                    help="H100 profiles: target weights")
    ap.add_argument("--workload", type=int, nargs=2, metavar=("PROMPT", "OUTPUT"),
                    help="finite requests (prefill and drain included); default: steady state. --check of a "
                    "summary: overrides the tokens per request (default: summary_meta.json beside it)")
    ap.add_argument("--check", metavar="JSON", help="compare with measurements: a step_overlap.json or a sweep's "
                    "summary.json (format detected by content)")
    ap.add_argument("--tau-k", type=int, default=KIT_TAU_K, help="k at which --tau was measured (--check of a "
                    "step_overlap.json; a summary's rows carry their own)")
    ap.add_argument("--draft-fixed-scaling", choices=DRAFT_FIXED_SCALINGS, default="flops",
                    help="--check of a summary: how an uncalibrated drafter's fixed cost per forward scales from the "
                    "calibrated one's (its batch-dependent cost scales with FLOPs per token)")
    ap.add_argument("--fit-engine", action="store_true",
                    help="--check/--report of a summary: refit the engine overhead per step on its own no-SD and "
                    "stock-SD rows of the calibrated draft (those rows in sample, MineDraft's out)")
    ap.add_argument("--paper", action="store_true", help="the paper's headline table next to the model")
    ap.add_argument("--report", metavar="MD", help="write the report (CPU check, paper comparison, H100 predictions)")
    ap.add_argument("--summary", metavar="JSON", help="--report: the sweep's summary.json (default: "
                    "benchmarks/results/cpu/summary.json when it exists)")
    args = ap.parse_args(argv)
    if args.report:
        from analysis.simulator.report import write_report

        kw = {"step_overlap": args.calibration} if args.calibration else {}
        write_report(args.report, summary=args.summary, draft_fixed_scaling=args.draft_fixed_scaling,
                     fit_engine=args.fit_engine, **kw)
        print(f"wrote {args.report}")
        return 0
    if args.paper:
        return run_paper()
    if args.check:
        return run_check(args.check, args.tau if args.tau is not None else KIT_TAU, args.tau_k,
                         calibration=args.calibration,
                         workload=Workload(*args.workload) if args.workload else None,
                         draft_fixed_scaling=args.draft_fixed_scaling, fit_engine=args.fit_engine)
    profile = profile_by_name(args.profile, args.k, calibration=args.calibration,
                              target_bytes_per_param={"bf16": 2, "fp8": 1, "int4": 0.5}[args.target_weights])
    if args.interference is not None:
        profile = profile.with_interference(args.interference)
    alpha, tau = acceptance(args.k, args.tau, args.alpha)
    print(describe(profile, args.k))
    source = ("given" if args.tau is not None or args.alpha is not None else
              f"kit: tau {KIT_TAU} at k={KIT_TAU_K}; the kit's measured agreement is about {KIT_AGREEMENT}")
    print(f"acceptance: alpha = {alpha:.3f}, tau = {tau:.2f} tokens per verification at k = {args.k} ({source})")
    workload = Workload(*args.workload) if args.workload else None
    print("workload: " + (f"prompt {workload.prompt_tokens}, output {workload.output_tokens} tokens (prefill + drain)"
                          if workload else "steady state decode"))
    for comparison in args.comparison:
        print(table(profile, args.k, args.batch, args.tau, args.alpha, comparison, workload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
