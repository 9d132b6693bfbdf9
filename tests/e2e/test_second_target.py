"""Every method on checkpoints unrelated to the kit's (modelkit/second_target.py): a Qwen2 target with
q/k/v biases and a Qwen3 one, both of another width and depth than the kit's Llama, every weight random.

Pinned to parallel steps on the 24-request mix (method_runs.py), MineDraft gives each target alone's
greedy output and runs parallel steps with drafts, for each method: PARD (its draft is the target's own
weights, so drafts are accepted), P-EAGLE, Medusa, MTP and DFlash (random drafts, mostly rejected), and
suffix decoding on the same target (it needs no checkpoint). PARD's draft also runs in the process
drafter's engine. That drafts are accepted as often as stock SD's is shown on the kit's checkpoints
(test_overlapped_methods.py).
"""

from __future__ import annotations

import importlib.util

import pytest

from modelkit.second_target import build_second_target
from tests.e2e.method_runs import mismatched, run_spec, run_specs

CASES = {"pard": 3, "peagle": 3, "medusa": 3, "mtp": 2, "dflash": 3, "suffix": 3}
HAS_SUFFIX = importlib.util.find_spec("arctic_inference") is not None
PROCESS_DRAFTER = {"drafter": "process", "drafter_device": "cpu:1"}


def _spec(ckpts, name: str) -> dict:
    if name == "suffix":
        return {"method": "suffix", "num_speculative_tokens": CASES[name]}
    return ckpts.speculative_config(name, CASES[name])


def _target(ckpts, name: str) -> str:
    return ckpts.target if name == "suffix" else ckpts.target_for(name)


@pytest.fixture(scope="module")
def second():
    return build_second_target()


@pytest.fixture(scope="module")
def runs(second):
    names = [n for n in CASES if n != "suffix" or HAS_SUFFIX]
    jobs = {name: {"mode": "minedraft_parallel", "target": _target(second, name), "spec": _spec(second, name)}
            for name in names}
    for target in {_target(second, name) for name in names}:
        jobs[target] = {"mode": "no_sd", "target": target, "spec": None}
    results = run_specs(jobs)
    # Alone: it places the target and the draft engine on cores itself.
    results["pard_process"] = run_spec("minedraft_parallel", second.target, _spec(second, "pard"),
                                       minedraft=PROCESS_DRAFTER)
    return results


@pytest.mark.parametrize("name", [*CASES, "pard_process"])
def test_minedraft_is_exact_with_parallel_steps(second, runs, name):
    method = name.removesuffix("_process")
    if method == "suffix" and not HAS_SUFFIX:
        pytest.skip("the suffix extra (make setup installs it)")
    result = runs[name]
    differ = mismatched(runs[_target(second, method)], result)
    assert not differ, f"{name}: requests {differ} differ from the target alone"
    m = result["metrics"]
    assert m["minedraft:parallel_steps"] > 0 and m["minedraft:draft_only_requests"] > 0, m
    assert m["vllm:spec_decode_num_draft_tokens"] > 0, m
    if method == "pard":  # the draft is the target: its first draft token is right
        assert m["vllm:spec_decode_num_accepted_tokens"] > 0, m
