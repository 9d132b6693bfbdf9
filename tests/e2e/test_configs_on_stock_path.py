"""A configuration MineDraft's overlap does not cover yet runs on its stock path, exact, never refused.

The configuration is one that stock vLLM 0.32 runs on this CPU and the overlap does not carry: the
kit's EAGLE-3 head with ``disable_padded_drafter_batch`` (that drafter path reads the runner's
host-side sampled tokens of its own step; vLLM refuses the option for draft models and parallel
drafting, so EAGLE is where it can be asked for). Under ``--scheduler-cls minedraft``, pinned to
parallel steps, it takes MineDraft's stock path (minedraft/config/overlap_coverage.py): vLLM's worker and
drafter, MineDraft's scheduler in mode ``stock``. On the 24-request mix (method_runs.py) greedy output
must equal the target alone's, the engine log must say why in one INFO line, vLLM must have drafted,
and MineDraft must have counted the steps, none of them parallel. Every speculative method vLLM 0.32
runs on CPU overlaps (tests/e2e/test_overlapped_methods.py); a custom proposer (``custom_class``
naming the user's class) also takes this path.
"""

from __future__ import annotations

import pytest

from modelkit import build_kit
from tests.e2e.method_runs import mismatched

STOCK_PATH_LINE = "MineDraft runs its stock path"
MODE = "minedraft_parallel"


@pytest.fixture(scope="module")
def kit():
    return build_kit()


def test_the_stock_path_is_exact_and_says_why(kit, targets_alone, tmp_path):
    spec = {"method": "eagle3", "model": kit.eagle3, "num_speculative_tokens": 3,
            "disable_padded_drafter_batch": True}
    jobs = {"stock_path": {"mode": MODE, "target": kit.target, "spec": spec, "log_dir": tmp_path}}
    result = targets_alone.beside(jobs, [kit.target])["stock_path"]  # a core each
    differ = mismatched(targets_alone(kit.target), result)
    assert not differ, f"requests {differ} differ from the target alone"
    said = [line for line in (tmp_path / f"{MODE}.log").read_text().splitlines() if STOCK_PATH_LINE in line]
    assert len(said) == 1 and "disable_padded_drafter_batch" in said[0], said
    m = result["metrics"]
    assert m["vllm:spec_decode_num_draft_tokens"] > 0, "vLLM drafted nothing"
    assert m["minedraft:fallback_steps"] > 0 and m.get("minedraft:parallel_steps", 0) == 0, m
