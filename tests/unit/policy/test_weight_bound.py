"""minedraft/policy/weight_bound.py: the depths a draft's cost rules out, on vLLM's own configs."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from scheduler_harness import engine_args, fake_model_dir, make_scheduler

from transformers import PretrainedConfig

from minedraft.policy.weight_bound import (
    draft_cost,
    engine_draft_cost,
    layer_weights,
    max_gain,
    ruled_out_depths,
    weights_per_token,
)
from minedraft.scheduling.scheduler import MineDraftScheduler

LLAMA = dict(hidden_size=256, num_hidden_layers=4, intermediate_size=768, vocab_size=2048,
             num_attention_heads=4, num_key_value_heads=2)
TOKENS_LEFT = 1000  # a typical request's tokens left: weighed only against a catch-up


def config(**hf):
    return SimpleNamespace(dtype="bfloat16", quantization=None, hf_text_config=PretrainedConfig(**{**LLAMA, **hf}))


def test_the_weights_a_token_multiplies_through():
    # per layer: q, o 256x256 each; k, v 256x128 each; MLP 3 x 256x768; LM head 256x2048
    assert layer_weights(LLAMA) == 2 * 65536 + 2 * 32768 + 3 * 196608
    assert weights_per_token(LLAMA) == 4 * (2 * 65536 + 2 * 32768 + 3 * 196608) + 524288


@pytest.mark.parametrize("hf", [{"num_local_experts": 8}, {"intermediate_size": None}, {"hidden_size": 0}])
def test_a_shape_it_cannot_count_gives_no_cost(hf):
    assert draft_cost(config(), config(**hf)) is None


def test_the_kit_s_drafts():
    assert draft_cost(config(), config()) == 1.0  # the perturbed draft: the target's shape
    small = draft_cost(config(), config(hidden_size=128, num_hidden_layers=1, intermediate_size=384,
                                        num_attention_heads=2))
    assert 0.1 < small < 0.2


@pytest.mark.parametrize("other", [{"dtype": "float32"}, {"quantization": "fp8"}])
def test_another_dtype_or_quantization_gives_no_cost(other):
    assert draft_cost(config(), SimpleNamespace(**{**vars(config()), **other})) is None


def test_the_bound_and_what_it_rules_out():
    assert max_gain(3, 1.0) == 1.0 and max_gain(3, 0.0) == 4.0
    assert ruled_out_depths(3, 1.0, margin=0.03) == {1, 2, 3}
    assert ruled_out_depths(3, 0.95, margin=0.03) == {1}  # deeper drafts amortise the verification
    assert ruled_out_depths(3, 0.13, margin=0.03) == set()
    assert ruled_out_depths(3, None, margin=0.03) == set()


@pytest.fixture(scope="module")
def draft_model_config(tmp_path_factory):
    """vLLM's engine config for a draft model as large as the target, and one a quarter its layers."""
    target = fake_model_dir(tmp_path_factory.mktemp("target"))
    small = tmp_path_factory.mktemp("small")
    hf = json.loads((Path(fake_model_dir(small)) / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**hf, "hidden_size": 16, "intermediate_size": 32}))

    def build(draft: str):
        spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": 3}
        return engine_args(target, speculative_config=spec).create_engine_config()

    return target, build(target), build(str(small))


def test_only_an_in_process_draft_model_has_a_cost(draft_model_config):
    target, same, small = draft_model_config
    assert engine_draft_cost(same, dedicated=False) == 1.0
    assert engine_draft_cost(same, dedicated=True) is None  # its forwards leave the target's hardware
    assert engine_draft_cost(small, dedicated=False) < 0.5
    assert engine_draft_cost(engine_args(target).create_engine_config(), dedicated=False) is None  # ngram


def test_the_scheduler_starts_a_same_sized_draft_at_depth_zero(draft_model_config, monkeypatch, caplog):
    monkeypatch.setenv("MINEDRAFT_SPECULATION_DEPTH", "auto")
    monkeypatch.setenv("MINEDRAFT_MODE", "auto")
    target, same, small = draft_model_config
    with caplog.at_level(logging.INFO, logger="vllm.minedraft"):
        sched = make_scheduler(target, MineDraftScheduler, vllm_config=same)
    assert sched.speculation.depths.draft_cost == 1.0 and sched.speculation.depth == 0
    assert sched.speculation.depths.depth(4, TOKENS_LEFT) == 0
    said = [r.getMessage() for r in caplog.records if "multiplies" in r.getMessage()]
    assert said == ["MineDraft auto: a draft forward multiplies 1.00x the target's weights: the step-cost model "
                    "starts from that, and the depth at 0 (policy/weight_bound.py)."]
    sched = make_scheduler(target, MineDraftScheduler, vllm_config=small)
    assert sched.speculation.depths.draft_cost < 0.5 and sched.speculation.depth == 3
    assert sched.speculation.depths.depth(4, TOKENS_LEFT) == 3
    monkeypatch.setenv("MINEDRAFT_MODE", "parallel")  # its steps overlap draft forwards with verification
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vllm.minedraft"):
        sched = make_scheduler(target, MineDraftScheduler, vllm_config=same)
    assert sched.speculation.depths.draft_cost is None and sched.speculation.depth == 3
    assert sched.speculation.depths.depth(4, TOKENS_LEFT) == 3
    assert not [r for r in caplog.records if "multiplies" in r.getMessage()]  # no bound: no line about it


def test_no_gpu_measurement_beats_the_bound():
    """The bound rules depths out, so it must hold on real hardware: benchmarks/gpu_depth.py's
    committed H200 and H100 rows (published pairs, B = 1 to 128, depths 0 to 5, eager and graphs)
    never give, with every draft accepted, more over depth 0 than ``max_gain`` allows."""
    results = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
    paths = sorted(results.glob("nvidia-*/gpu_depth*.json"))
    assert len(paths) >= 3
    for path in paths:
        rows = json.loads(path.read_text())["rows"]
        assert rows
        for row in rows:
            verify, draft = row["verify_ms"], row["draft_ms"]
            for depth, ms in enumerate(verify):
                measured = (depth + 1) * verify[0] / (ms + depth * draft)
                assert measured <= max_gain(depth, row["cost_ratio"]) + 1e-9, (path.name, row["pair"], depth)
