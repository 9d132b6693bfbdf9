"""MTP, parallel drafting (PARD, P-EAGLE), Medusa, DFlash and suffix decoding through MineDraft's overlap:
exact, drafting as stock SD does.

These methods run vLLM's EAGLE-family, draft-model, Medusa and DFlash proposers, whose ``propose`` call the deferred
job carries one step later (minedraft/config/overlap_coverage.py), and vLLM's suffix proposer, whose call carries a
view of its step's batch (minedraft/worker/suffix_batch.py; arctic-inference, the ``suffix`` extra). On
the 24-request mix (method_runs.py), with the kit's checkpoints (modelkit/method_checkpoints.py; suffix
decoding needs none): MineDraft pinned to parallel steps and its
default ``auto`` give the target alone's greedy output; the pinned run ran parallel steps; and it
accepted as many drafts as stock SD with the same config (within a tenth: batches differ, so float
rounding may move a tie), which a deferred call that fed the drafter stale or foreign inputs would not.
Under ``auto`` the depth controller moved the depth MTP drafts at; parallel drafting (DFlash's too), Medusa
and suffix decoding draft K every step and stay at K, and with ``speculation_depth: auto`` (run for P-EAGLE, whose draft
catch-up once crashed the worker) the controller moved the number of drafts verified. PARD's draft
model also runs in the process drafter's engine (one token per forward there), and the DFlash draft in
its own process with the target's hidden states sent to it (process_drafter/draft_engine/dflash_engine.py): exact,
parallel steps, and as many drafts accepted as stock SD (within a tenth), which a context with gaps
(prefix-cached prompts, preempted requests) would not give.
"""

from __future__ import annotations

import pytest

from harness.sidebyside import steps_by_depth
from tests.e2e.method_runs import HAS_SUFFIX, METHODS, mismatched, run_spec, target_and_spec

MODES = ("stock_sd", "minedraft_parallel", "minedraft_auto")
ACCEPTED_SHARE = 0.9  # of stock SD's accepted drafts
VERIFIED_DEPTH_RUN = {"peagle"}  # also run under auto with speculation_depth auto
PROCESS_DRAFTER_RUN = {"pard", "dflash"}  # also run pinned to parallel steps with the process drafter on core 1
PROCESS_DRAFTER = {"drafter": "process", "drafter_device": "cpu:1"}


@pytest.fixture(scope="module")
def every_method_run(method_checkpoints, targets_alone) -> dict[str, tuple[dict, dict[str, dict]]]:
    """Every case's runs, case -> (the target alone's, mode -> result): all engines two at a time in one pool
    (a case's three or four alone would leave a core idle while its last one runs), the process drafter's alone."""
    jobs, targets = {}, {}
    for name in METHODS:
        if name == "suffix" and not HAS_SUFFIX:
            continue
        target, spec = targets[name] = target_and_spec(method_checkpoints, name)
        jobs.update({(name, mode): {"mode": mode, "target": target, "spec": spec} for mode in MODES})
        if name in VERIFIED_DEPTH_RUN:
            jobs[name, "minedraft_auto_verified_depth"] = {"mode": "minedraft_auto", "target": target, "spec": spec,
                                                           "minedraft": {"speculation_depth": "auto"}}
    runs: dict[str, dict[str, dict]] = {name: {} for name in targets}
    for (name, mode), result in targets_alone.beside(jobs, [target for target, _ in targets.values()]).items():
        runs[name][mode] = result
    for name in PROCESS_DRAFTER_RUN & set(targets):  # alone: it places the target and the drafter on cores itself
        runs[name]["minedraft_parallel_process"] = run_spec("minedraft_parallel", *targets[name],
                                                            minedraft=PROCESS_DRAFTER)
    return {name: (targets_alone(targets[name][0]), runs[name]) for name in runs}


@pytest.fixture(params=list(METHODS))
def method_runs(request, every_method_run):
    name = request.param
    if name == "suffix" and not HAS_SUFFIX:
        pytest.skip("the suffix extra (make setup installs it)")
    return name, *every_method_run[name]


def test_every_mode_is_exact(method_runs):
    name, alone, runs = method_runs
    for mode, result in runs.items():
        differ = mismatched(alone, result)
        assert not differ, f"{name}, {mode}: requests {differ} differ from the target alone"


def test_parallel_steps_draft_as_stock_sd_does(method_runs):
    """Every pinned run (in the target's worker; PARD and DFlash in the process drafter too) ran parallel steps
    and accepted drafts as stock SD did; PARD's draft drafts one token a forward in its own engine, so there
    it accepts some."""
    name, _, runs = method_runs
    stock = runs["stock_sd"]["metrics"]
    accepted = "vllm:spec_decode_num_accepted_tokens"
    assert stock[accepted] > 0, f"{name}: the kit's checkpoint accepted nothing under stock SD"
    pinned = {mode: result["metrics"] for mode, result in runs.items() if mode.startswith("minedraft_parallel")}
    assert len(pinned) == 1 + (name in PROCESS_DRAFTER_RUN), pinned.keys()
    for mode, m in pinned.items():
        assert m["minedraft:parallel_steps"] > 0 and m["minedraft:draft_only_requests"] > 0, (mode, m)
        share = 0.0 if (name, mode) == ("pard", "minedraft_parallel_process") else ACCEPTED_SHARE
        assert m[accepted] > 0 and m[accepted] >= share * stock[accepted], (name, mode, m[accepted], stock[accepted])


def test_the_depth_controller_moves_where_it_chooses(method_runs):
    name, _, runs = method_runs
    depths = steps_by_depth(runs["minedraft_auto"]["metrics"])
    if name == "mtp":
        assert len(depths) >= 2, (name, depths)
    else:  # every step verified the K drafts made
        assert set(depths) == {METHODS[name]}, (name, depths)
    if "minedraft_auto_verified_depth" in runs:
        verified = steps_by_depth(runs["minedraft_auto_verified_depth"]["metrics"])
        assert len(verified) >= 2, (name, verified)
