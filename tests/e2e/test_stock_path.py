"""Drafters MineDraft's overlap does not cover yet run on its stock path, exact, never refused.

Each speculative configuration below is one that stock vLLM 0.32 runs on this CPU; under
``--scheduler-cls minedraft`` (mode ``parallel`` pinned or the default ``auto``) it takes MineDraft's
stock path (minedraft/config/stock_path.py): vLLM's worker and drafter, MineDraft's scheduler in mode
``stock``. On the 24-request mix (chunked prefill, prefix caching, a KV cache small enough to preempt)
greedy output must equal the target alone's, the engine log must say why in one INFO line, vLLM must
have drafted, and MineDraft must have counted the steps, none of them parallel. The checkpoints are the
model kit's tiny ones for each method (modelkit/method_checkpoints.py).
"""

from __future__ import annotations

import pytest

from harness.sidebyside import run_mode
from modelkit import build_kit
from modelkit.method_checkpoints import build_method_checkpoints

K = 3
N_REQUESTS = 24
STOCK_PATH_LINE = "MineDraft runs its stock path"
# name -> (MineDraft's mode row, k, the reason the INFO line gives).
CASES = {
    "pard": ("minedraft_parallel", K, "parallel drafting"),
    "peagle": ("minedraft_parallel", K, "parallel drafting"),
    "medusa": ("minedraft_auto", 2, "speculative method 'medusa'"),
    "probabilistic": ("minedraft_auto", K, "draft_sample_method 'probabilistic'"),
    "mtp": ("minedraft_auto", 1, "speculative method 'mtp'"),
    "dflash": ("minedraft_parallel", K, "speculative method 'dflash'"),
}


@pytest.fixture(scope="module")
def checkpoints():
    return build_method_checkpoints()


def _run(mode: str, target: str, spec: dict | None, log_dir=None) -> dict:
    spec = dict(spec or {"method": "draft_model", "num_speculative_tokens": K})
    method, draft, k = spec.pop("method"), spec.pop("model", None), spec.pop("num_speculative_tokens")
    return run_mode(mode, target, draft, method=method, k=k, speculation_extra=spec, num_requests=N_REQUESTS,
                    log_dir=log_dir)


@pytest.fixture(scope="module")
def targets_alone(checkpoints):
    """The target alone's output, once per target the cases share."""
    cache: dict[str, dict] = {}

    def alone(target: str) -> dict:
        if target not in cache:
            cache[target] = _run("no_sd", target, None)
        return cache[target]

    return alone


def _spec(checkpoints, name: str, k: int) -> dict:
    if name == "probabilistic":  # the kit's perturbed draft, sampling its drafts
        return {"method": "draft_model", "model": build_kit().draft_perturbed, "num_speculative_tokens": k,
                "draft_sample_method": "probabilistic"}
    return checkpoints.speculative_config(name, k)


@pytest.mark.parametrize("name", list(CASES))
def test_the_stock_path_is_exact_and_says_why(checkpoints, targets_alone, tmp_path, name):
    mode, k, reason = CASES[name]
    target = checkpoints.target if name == "probabilistic" else checkpoints.target_for(name)
    result = _run(mode, target, _spec(checkpoints, name, k), log_dir=tmp_path)
    alone = targets_alone(target)
    mismatched = [i for i, (a, b) in enumerate(zip(alone["tokens"], result["tokens"], strict=True)) if a != b]
    assert not mismatched, f"{name}: requests {mismatched} differ from the target alone"
    said = [line for line in (tmp_path / f"{mode}.log").read_text().splitlines() if STOCK_PATH_LINE in line]
    assert len(said) == 1 and reason in said[0], said
    m = result["metrics"]
    assert m["vllm:spec_decode_num_draft_tokens"] > 0, f"{name}: vLLM drafted nothing"
    assert m["minedraft:fallback_steps"] > 0 and m.get("minedraft:parallel_steps", 0) == 0, m
