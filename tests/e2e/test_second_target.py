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

import pytest

from modelkit.second_target import build_second_target
from tests.e2e.method_runs import HAS_SUFFIX, METHODS, mismatched, run_spec, run_specs, target_and_spec

PROCESS_DRAFTER = {"drafter": "process", "drafter_device": "cpu:1"}


@pytest.fixture(scope="module")
def second():
    return build_second_target()


@pytest.fixture(scope="module")
def runs(second):
    cases = {name: target_and_spec(second, name) for name in METHODS if name != "suffix" or HAS_SUFFIX}
    jobs = {name: {"mode": "minedraft_parallel", "target": target, "spec": spec} for name, (target, spec) in cases.items()}
    for target in {target for target, _ in cases.values()}:
        jobs[target] = {"mode": "no_sd", "target": target, "spec": None}
    results = run_specs(jobs)
    # Alone: it places the target and the draft engine on cores itself.
    results["pard_process"] = run_spec("minedraft_parallel", *target_and_spec(second, "pard"),
                                       minedraft=PROCESS_DRAFTER)
    return results


@pytest.mark.parametrize("name", [*METHODS, "pard_process"])
def test_minedraft_is_exact_with_parallel_steps(second, runs, name):
    method = name.removesuffix("_process")
    if method == "suffix" and not HAS_SUFFIX:
        pytest.skip("the suffix extra (make setup installs it)")
    result = runs[name]
    differ = mismatched(runs[target_and_spec(second, method)[0]], result)
    assert not differ, f"{name}: requests {differ} differ from the target alone"
    m = result["metrics"]
    assert m["minedraft:parallel_steps"] > 0 and m["minedraft:draft_only_requests"] > 0, m
    assert m["vllm:spec_decode_num_draft_tokens"] > 0, m
    if method == "pard":  # the draft is the target: its first draft token is right
        assert m["vllm:spec_decode_num_accepted_tokens"] > 0, m
