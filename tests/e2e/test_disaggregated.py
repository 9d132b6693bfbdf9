"""Disaggregated prefill and decode on one host, MineDraft on the decode side (1P1D, vLLM's KV connector).

A prefill instance (stock SD with the same draft model, so that the draft layers' KV is stored with the
target's) computes the 24-request mix (method_runs.py) and stores every prompt's KV through vLLM's
``ExampleConnector`` (``kv_producer``, a folder on disk; with the fix of patches/0010 for prompts
shorter than a block, harness/example_connector_fix.py); then a decode instance with MineDraft pinned to
parallel mode (``kv_consumer``) serves the same requests, loading that KV instead of computing it. With a
KV connector MineDraft runs its stock path (minedraft/config/overlap_coverage.py: the connector stores a
prefill step's draft-layer KV in that step). Greedy output must equal the target alone's, the decode
instance must have loaded KV from the store, and it must accept about as many drafts as one stock SD
instance doing both (within 5 %): the prefill instance, which also decodes every request to its end.

Both instances run without prefix caching and preemption (see NO_PREFIX_CACHING, NO_PREEMPTION) and
keep the mix's chunked prefill (128 tokens a step): the prefill instance stores prompts computed in
chunks, which vLLM 0.32's ExampleConnector stored in part (its first step's blocks), the failure on CPU
that harness/example_connector_fix.py mends.
"""

from __future__ import annotations

import pytest

from harness.engine_args import example_connector
from harness.sidebyside import run_mode
from tests.e2e.method_runs import N_REQUESTS, mismatched

K = 3
CONNECTOR_HIT = "External Cache Hit"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
# Prefix caching stays off on both instances: what the decode instance does not compute comes from
# the connector alone.
NO_PREFIX_CACHING = {"enable_prefix_caching": False}
# A KV cache of the default size: ExampleConnector reloads a preempted request under the hash of its
# prompt and output so far, which nothing stored (vLLM 0.32).
NO_PREEMPTION = {"num_gpu_blocks_override": None}


@pytest.fixture(scope="module")
def runs(method_checkpoints, targets_alone, tmp_path_factory):
    from modelkit import build_kit

    target, draft = method_checkpoints.target, str(build_kit().draft_perturbed)
    store, logs = tmp_path_factory.mktemp("kv_store"), tmp_path_factory.mktemp("disaggregated")
    common = {"k": K, "num_requests": N_REQUESTS, "log_dir": logs}
    def engine(role: str) -> dict:
        return {"kv_transfer_config": example_connector(role, store), **NO_PREFIX_CACHING, **NO_PREEMPTION}

    prefill = run_mode("stock_sd", target, draft, name="prefill", **common, engine_extra=engine("kv_producer"))
    decode = run_mode("minedraft_parallel", target, draft, name="decode", **common, engine_extra=engine("kv_consumer"))
    return {"alone": targets_alone(target), "prefill": prefill, "decode": decode,
            "decode_log": (logs / "decode.log").read_text(errors="replace"), "stored": any(store.iterdir())}


def test_the_decode_instance_is_exact_on_kv_it_loaded(runs):
    assert runs["stored"], "the prefill instance stored nothing"
    assert CONNECTOR_HIT in runs["decode_log"], "the decode instance loaded no KV from the store"
    assert "MineDraft runs its stock path" in runs["decode_log"] and "KV connector WholeBlockExampleConnector" in runs["decode_log"]
    for name in ("prefill", "decode"):
        differ = mismatched(runs["alone"], runs[name])
        assert not differ, f"{name}: requests {differ} differ from the target alone"


def test_the_decode_instance_accepts_as_one_instance_doing_both(runs):
    """The prefill instance is that instance: stock SD, it also decoded every request to its end."""
    decode, single = runs["decode"]["metrics"], runs["prefill"]["metrics"]
    assert decode["minedraft:fallback_steps"] > 0 and decode.get("minedraft:parallel_steps", 0) == 0, decode
    assert single[ACCEPTED] > 0
    assert abs(decode[ACCEPTED] - single[ACCEPTED]) <= 0.05 * single[ACCEPTED], (decode[ACCEPTED], single[ACCEPTED])
