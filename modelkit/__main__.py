"""``python -m modelkit [--cache-dir D] [--measure]``: build or reuse the kit."""

from __future__ import annotations

import argparse
import time

from modelkit import build_kit
from modelkit.build import MODELS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m modelkit", description=__doc__)
    parser.add_argument("--cache-dir",
                        help="default: $MINEDRAFT_KIT_DIR or ~/.cache/minedraft/kit-v1")
    parser.add_argument("--measure", action="store_true",
                        help="measure greedy agreement of both drafts on mixed prompts")
    parser.add_argument("--prompts", type=int, default=64, help="prompts for --measure")
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt")
    args = parser.parse_args(argv)

    start = time.monotonic()
    kit = build_kit(args.cache_dir)
    print(f"kit ready in {time.monotonic() - start:.1f}s: {kit.root}")
    for name in MODELS:
        marker = kit.marker(name)
        recorded = marker.get("agreement")
        note = f"  (build agreement {recorded:.3f})" if recorded is not None else ""
        print(f"  {name:16s} {getattr(kit, name)}  spec {marker.get('spec_hash')}{note}")
    print(f"  {'tokenizer':16s} {kit.tokenizer}")
    if args.measure:
        _measure(kit, args.prompts, args.tokens)


def _measure(kit, n_prompts: int, n_tokens: int) -> None:
    from modelkit.agreement import greedy_agreement
    from modelkit.prompts import mixed_prompts

    prompts = mixed_prompts(n_prompts, seed=0, tokenizer_dir=kit.tokenizer)
    print(f"greedy agreement, teacher-forced on the target's continuation "
          f"({n_prompts} mixed prompts of 1-500 tokens, {n_tokens} tokens each):")
    for name in MODELS[1:]:
        start = time.monotonic()
        a = greedy_agreement(kit.target, getattr(kit, name), prompts, n_tokens)
        # Expected accepted tokens per step at k=3 if positions were independent.
        k3 = a + a**2 + a**3
        print(f"  {name:16s} {a:.3f}  (~{k3:.2f} accepted/step at k=3; "
              f"{time.monotonic() - start:.1f}s)")


if __name__ == "__main__":
    main()
