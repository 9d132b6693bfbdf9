"""Drafters MineDraft's overlap does not cover yet run on its stock path, exact, never refused.

Each speculative configuration below is one that stock vLLM 0.32 runs on this CPU; under
``--scheduler-cls minedraft`` (mode ``parallel`` pinned or the default ``auto``) it takes MineDraft's
stock path (minedraft/config/stock_path.py): vLLM's worker and drafter, MineDraft's scheduler in mode
``stock``. On the 24-request mix (method_runs.py) greedy output must equal the target alone's, the
engine log must say why in one INFO line, vLLM must have drafted, and MineDraft must have counted the
steps, none of them parallel. The checkpoints are the model kit's tiny ones for each method
(modelkit/method_checkpoints.py).
"""

from __future__ import annotations

import pytest

from tests.e2e.method_runs import mismatched, run_spec

STOCK_PATH_LINE = "MineDraft runs its stock path"
# name -> (MineDraft's mode row, k, the reason the INFO line gives).
CASES = {
    "dflash": ("minedraft_parallel", 3, "speculative method 'dflash'"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_stock_path_is_exact_and_says_why(method_checkpoints, targets_alone, tmp_path, name):
    mode, k, reason = CASES[name]
    target = method_checkpoints.target_for(name)
    result = run_spec(mode, target, method_checkpoints.speculative_config(name, k), log_dir=tmp_path)
    differ = mismatched(targets_alone(target), result)
    assert not differ, f"{name}: requests {differ} differ from the target alone"
    said = [line for line in (tmp_path / f"{mode}.log").read_text().splitlines() if STOCK_PATH_LINE in line]
    assert len(said) == 1 and reason in said[0], said
    m = result["metrics"]
    assert m["vllm:spec_decode_num_draft_tokens"] > 0, f"{name}: vLLM drafted nothing"
    assert m["minedraft:fallback_steps"] > 0 and m.get("minedraft:parallel_steps", 0) == 0, m
