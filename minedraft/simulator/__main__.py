"""Predict tokens/s of no SD, stock SD and MineDraft; or check the model on measurements.

    python -m minedraft.simulator --profile cpu --k 3 --tau 2.4 --batch 4 8 16
    python -m minedraft.simulator --profile h100-two-gpus --k 3 --alpha 0.7 --batch 8 16 32 64
    python -m minedraft.simulator --check benchmarks/results/cpu/step_overlap.json

Profiles: ``cpu`` (fitted on the committed CPU measurements), ``h100-same-gpu``,
``h100-two-gpus``, ``h100-paper`` (published figures and stated assumptions, see
minedraft/simulator/profile.py). Without ``--tau``/``--alpha`` the kit's acceptance
is used (τ = 2.40 at k = 3, α = 0.665).
"""

from __future__ import annotations

import argparse
import sys

from minedraft.simulator.model import (
    COMPARISONS,
    KIT_AGREEMENT,
    KIT_TAU,
    KIT_TAU_K,
    Workload,
    acceptance,
    check,
    choose_mode,
    predict,
)
from minedraft.simulator.profile import PROFILE_NAMES, ForwardCost, LatencyProfile, profile_by_name

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
        no, st, md = pr["no_sd"], pr["stock_sd"], pr["minedraft"]
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


def run_check(path: str, tau: float, tau_k: int) -> int:
    result = check(path, tau=tau, tau_k=tau_k)
    print(f"check: {path}; acceptance alpha = {result.alpha:.3f} (tau = {tau} at k = {tau_k}, "
          "the same alpha for every k)")
    for k, p in result.profiles.items():
        print(f"  k={k}: interference i = {p.interference:.3f}")
    p0 = next(iter(result.profiles.values()))
    print(describe(p0, 3))
    print("\n| comparison | k | N | mode | measured tok/s | predicted tok/s | error |")
    print("|---|---|---|---|---|---|---|")
    for r in result.rows:
        print(f"| {r.comparison} | {r.k} | {r.batch_size} | {r.mode} | {r.measured:.0f} | {r.predicted:.0f} "
              f"| {100 * r.error:+.1f}% |")
    print("\nmean absolute percentage error (no_sd and stock_sd rows are in-sample for the engine overhead; "
          "MineDraft rows are out of sample):")
    for (comparison, mode), err in sorted(result.mape().items()):
        print(f"  {comparison:17s} {mode:18s} {err:5.1f} %")
    print(f"  {'all rows':36s} {result.overall_mape():5.1f} %")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minedraft.simulator", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=PROFILE_NAMES, default="cpu")
    ap.add_argument("--calibration", help="step_overlap.json for the cpu profile (default: the committed one)")
    ap.add_argument("--k", type=int, default=3, help="draft tokens per step")
    acc = ap.add_mutually_exclusive_group()
    acc.add_argument("--tau", type=float, help="mean tokens per verification at --k (acceptance length)")
    acc.add_argument("--alpha", type=float, help="per-token acceptance rate")
    ap.add_argument("--batch", type=int, nargs="+", default=[4, 8, 16], help="N, requests per mode (see comparisons)")
    ap.add_argument("--comparison", choices=COMPARISONS, nargs="+", default=list(COMPARISONS))
    ap.add_argument("--interference", type=float, help="override the profile's i")
    ap.add_argument("--target-weights", choices=("bf16", "fp8"), default="bf16", help="H100 profiles: target dtype")
    ap.add_argument("--workload", type=int, nargs=2, metavar=("PROMPT", "OUTPUT"),
                    help="finite requests (prefill and drain included); default: steady state")
    ap.add_argument("--check", metavar="STEP_OVERLAP_JSON", help="compare with the measured e2e rows")
    ap.add_argument("--tau-k", type=int, default=KIT_TAU_K, help="k at which --tau was measured (--check)")
    args = ap.parse_args(argv)
    if args.check:
        return run_check(args.check, args.tau if args.tau is not None else KIT_TAU, args.tau_k)
    profile = profile_by_name(args.profile, args.k, calibration=args.calibration,
                              target_bytes_per_param=1 if args.target_weights == "fp8" else 2)
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
