"""Build the kit once, then hand out its cached paths in milliseconds.

Each model directory's marker records the hash of everything its weights
depend on (kit version, tokenizer corpus and settings, architecture, seeds,
and the upstream target's hash), so changing any of them rebuilds exactly
the affected models and an unchanged kit is never rebuilt. The fast path only
reads three small JSON files: no torch import, no lock.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from minedraft.config import environment
from modelkit import cache

KIT_VERSION = 1
MODELS = ("target", "draft_perturbed", "draft_small", "eagle3")

# Held-out prompts for the agreement recorded in each draft's marker.
AGREEMENT_PROMPTS = {"n": 32, "n_tokens": 32, "seed": 7}
AGREEMENT_TOKENS = 64


@dataclass(frozen=True)
class Kit:
    """Paths of a built kit. Every model directory also holds the tokenizer."""

    root: str
    target: str
    draft_perturbed: str
    draft_small: str
    eagle3: str  # an EAGLE-3 head for the target: --speculative-config method "eagle3"
    tokenizer: str

    def marker(self, name: str) -> dict:
        """Build record of model ``name``: spec, hashes, measured agreement."""
        return cache.read_marker(getattr(self, name)) or {}


def kit_paths(root: str) -> Kit:
    root = os.path.abspath(root)
    paths = {name: os.path.join(root, name) for name in MODELS}
    return Kit(root=root, tokenizer=paths["target"], **paths)


def build_kit(cache_dir: str | None = None) -> Kit:
    """Return the kit under ``cache_dir``, building whatever is missing or stale.

    ``cache_dir`` defaults to ``$MINEDRAFT_KIT_DIR`` or
    ``~/.cache/minedraft/kit-v1``. Safe to call from several processes at once.
    """
    kit = kit_paths(cache_dir or environment.kit_dir())
    hashes = spec_hashes()
    if all(cache.is_complete(getattr(kit, n), hashes[n]) for n in MODELS):
        return kit
    with cache.build_lock(kit.root):
        for name in MODELS:
            if not cache.is_complete(getattr(kit, name), hashes[name]):
                _build_one(kit, name, hashes[name])
    return kit


def model_specs() -> dict[str, dict]:
    """The full spec of each model, upstream hashes included."""
    from modelkit.specs import model_spec
    from modelkit.tokenizer import tokenizer_spec

    target = {"kit_version": KIT_VERSION, "tokenizer": tokenizer_spec(),
              "model": model_spec("target")}
    target_hash = cache.spec_hash(target)
    specs = {"target": target}
    for name in MODELS[1:]:
        specs[name] = {"kit_version": KIT_VERSION, "target": target_hash,
                       "model": model_spec(name), "agreement": AGREEMENT_PROMPTS}
    return specs


def spec_hashes() -> dict[str, str]:
    return {name: cache.spec_hash(spec) for name, spec in model_specs().items()}


def _build_one(kit: Kit, name: str, expected_hash: str) -> None:
    """Build ``name`` in a staging directory, mark it complete, move it in place."""
    from modelkit.models import quiet_transformers

    staged = cache.staging_dir(kit.root, name)
    start = time.monotonic()
    with quiet_transformers():
        extra = _BUILDERS[name](kit, staged)
    marker = {
        "name": name,
        "spec_hash": expected_hash,
        "spec": model_specs()[name],
        "sha256": {"model.safetensors": cache.file_sha256(
            os.path.join(staged, "model.safetensors"))},
        "build_seconds": round(time.monotonic() - start, 1),
        "versions": _versions(),
        **extra,
    }
    cache.write_marker(staged, marker)
    cache.publish(staged, getattr(kit, name))


def _build_target(kit: Kit, out: str) -> dict:
    from modelkit.models import make_target, save_model
    from modelkit.tokenizer import save_tokenizer

    save_tokenizer(out)
    save_model(make_target(), out, tokenizer_dir=out)
    return {}


def _build_perturbed(kit: Kit, out: str) -> dict:
    from modelkit.models import load_model, perturb, save_model

    target = load_model(kit.target)
    draft = perturb(target)
    save_model(draft, out, tokenizer_dir=kit.target)
    return {"agreement": _agreement(kit, target, draft)}


def _build_small(kit: Kit, out: str) -> dict:
    from modelkit.models import distill_small, load_model, save_model

    target = load_model(kit.target)
    draft = distill_small(target, kit.target)
    save_model(draft, out, tokenizer_dir=kit.target)
    return {"agreement": _agreement(kit, target, draft)}


def _build_eagle3(kit: Kit, out: str) -> dict:
    from modelkit.eagle3 import first_token_agreement, save_eagle3, train_eagle3
    from modelkit.models import distill_data, load_model, teacher_logprobs

    target = load_model(kit.target)
    seqs = distill_data(target, kit.target)
    head = train_eagle3(target, seqs, teacher_logprobs(target, seqs))
    save_eagle3(head, out, tokenizer_dir=kit.target)
    return {"agreement": first_token_agreement(head, target, _agreement_sequences(kit, target))}


_BUILDERS = {
    "target": _build_target,
    "draft_perturbed": _build_perturbed,
    "draft_small": _build_small,
    "eagle3": _build_eagle3,
}


def _agreement(kit: Kit, target, draft) -> float:
    """Teacher-forced greedy agreement on held-out prompts, for the marker."""
    from modelkit.agreement import model_agreement

    return round(model_agreement(target, draft, _agreement_prompts(kit), AGREEMENT_TOKENS), 4)


def _agreement_prompts(kit: Kit) -> list[list[int]]:
    from modelkit.windows import token_windows

    p = AGREEMENT_PROMPTS
    return token_windows(p["n"], p["n_tokens"], p["seed"], kit.tokenizer)


def _agreement_sequences(kit: Kit, target):
    """Held-out prompts with the target's greedy continuation, as one tensor."""
    import torch

    from modelkit.greedy import greedy_continue

    prompts = _agreement_prompts(kit)
    conts = greedy_continue(target, prompts, AGREEMENT_TOKENS)
    return torch.tensor([p + c for p, c in zip(prompts, conts)])


def _versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__}
