"""The larger pair: the kit's target recipe at about eight times its compute, and a perturbed draft.

For the dedicated-drafter benchmark (``python -m benchmarks.dedicated --pair large``),
where the kit's tiny pair is mostly per-step overhead: this target's forward
is most of its step on one core. Built on demand by :func:`build_large_pair`
(well under a minute), never by ``build_kit()``, so no test loads it. The
recipe is the kit's (``models.py``): a random Llama whose scaled embedding and
LM head make greedy decoding local and peaky, and a draft that is the target
plus relative Gaussian noise, as large as the target. Cached under
``<kit dir>/large/`` with the kit's markers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from minedraft.config import environment
from modelkit import cache

LARGE_ARCH = {
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 1536,
    "initializer_range": 0.05,
}
LARGE_SEED = 0
# The wider, deeper target is more sensitive to noise than the kit's: 0.11 -> 0.35, 0.07 -> 0.51
# teacher-forced agreement (16 prompts).
LARGE_PERTURB_SCALE = 0.05
LARGE_PERTURB_SEED = 1
LARGE_VERSION = 1


@dataclass(frozen=True)
class LargePair:
    target: str
    draft: str

    def marker(self, name: str) -> dict:
        return cache.read_marker(getattr(self, name)) or {}


def build_large_pair(cache_dir: str | None = None) -> LargePair:
    """The pair under ``<cache_dir or the kit's directory>/large``, built if missing or stale."""
    root = os.path.join(os.path.abspath(cache_dir or environment.kit_dir()), "large")
    pair = LargePair(target=os.path.join(root, "target"), draft=os.path.join(root, "draft_perturbed"))
    hashes = _spec_hashes()
    if all(cache.is_complete(getattr(pair, n), hashes[n]) for n in hashes):
        return pair
    os.makedirs(root, exist_ok=True)
    with cache.build_lock(root):
        for name, builder in (("target", _build_target), ("draft", _build_draft)):
            if not cache.is_complete(getattr(pair, name), hashes[name]):
                staged = cache.staging_dir(root, name)
                extra = builder(pair, staged)
                cache.write_marker(staged, {"name": name, "spec_hash": hashes[name], **extra})
                cache.publish(staged, getattr(pair, name))
    return pair


def _spec_hashes() -> dict[str, str]:
    from modelkit.specs import EMBED_SCALE, HEAD_SCALE
    from modelkit.tokenizer import tokenizer_spec

    target = {"version": LARGE_VERSION, "tokenizer": tokenizer_spec(), "arch": LARGE_ARCH, "seed": LARGE_SEED,
              "embed_scale": EMBED_SCALE, "head_scale": HEAD_SCALE}
    target_hash = cache.spec_hash(target)
    draft = {"target": target_hash, "scale": LARGE_PERTURB_SCALE, "seed": LARGE_PERTURB_SEED}
    return {"target": target_hash, "draft": cache.spec_hash(draft)}


def _build_target(pair: LargePair, out: str) -> dict:
    from modelkit.models import make_target, quiet_transformers, save_model
    from modelkit.tokenizer import save_tokenizer

    save_tokenizer(out)
    with quiet_transformers():
        save_model(make_target(LARGE_ARCH, LARGE_SEED), out, tokenizer_dir=out)
    return {"arch": LARGE_ARCH}


def _build_draft(pair: LargePair, out: str) -> dict:
    from modelkit.agreement import model_agreement
    from modelkit.models import load_model, perturb, quiet_transformers, save_model
    from modelkit.windows import token_windows

    target = load_model(pair.target)
    draft = perturb(target, scale=LARGE_PERTURB_SCALE, seed=LARGE_PERTURB_SEED)
    with quiet_transformers():
        save_model(draft, out, tokenizer_dir=pair.target)
    prompts = token_windows(16, 32, 7, pair.target)
    return {"scale": LARGE_PERTURB_SCALE, "agreement": round(model_agreement(target, draft, prompts, 32), 4)}
