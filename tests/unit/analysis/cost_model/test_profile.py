"""analysis/cost_model/profile.py: the overlap limits, the published GPU profiles, model shapes,
draft scaling and KV capacity (no engine)."""

from __future__ import annotations

import pytest
from synthetic_profiles import make_profile

from analysis.cost_model import ModelShape, predict
from analysis.cost_model.calibrate import profile_by_name
from analysis.cost_model.profile import H100_SXM, QWEN3_8B, QWEN3_32B, kv_capacity


@pytest.mark.parametrize("tv, td", [(10.0, 4.0), (3.0, 9.0), (5.0, 5.0)])
def test_overlap_limits(tv, td):
    assert make_profile(i=1.0).t_overlap(tv, td) == pytest.approx(tv + td)  # fully serial
    assert make_profile(i=0.0).t_overlap(tv, td) == pytest.approx(max(tv, td))  # separate hardware
    assert max(tv, td) < make_profile(i=0.5).t_overlap(tv, td) < tv + td


def test_draft_scale_keeps_the_proposer():
    p = make_profile()
    assert p.with_draft_scale(1.0).t_draft(8, 3) == pytest.approx(p.t_draft(8, 3))
    half = p.with_draft_scale(0.5, 1.0)
    assert half.draft.per_token_ms == p.draft.per_token_ms / 2 and half.draft.fixed_ms == p.draft.fixed_ms
    assert half.propose_fixed_ms == p.propose_fixed_ms and half.t_verify(8, 3) == p.t_verify(8, 3)
    with pytest.raises(ValueError):
        p.with_draft_scale(0.0)


def test_model_shape_from_config():
    q32 = ModelShape.from_config("Qwen3-32B", {
        "hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936})
    assert q32.params_b == pytest.approx(QWEN3_32B.params_b, rel=0.01)  # the model card: 32.8B, 31.2B
    assert q32.non_embedding_params_b == pytest.approx(QWEN3_32B.non_embedding_params_b, rel=0.01)
    assert q32.kv_bytes_per_token == QWEN3_32B.kv_bytes_per_token
    assert q32.flops_per_token(512) > q32.flops_per_token(0) == pytest.approx(2e9 * q32.read_params_b)


# --- published GPU profiles --------------------------------------------------------------------------


def test_published_layouts():
    same, two, paper = (profile_by_name(n) for n in ("h100-same-gpu", "h100-two-gpus", "h100-paper"))
    # Measured on an H100 in eager mode: sharing one GPU hides almost nothing (i near 1).
    assert 0.5 < same.interference <= 1.1 and two.interference == 0.0 and paper.interference == 0.0
    assert (same.devices("minedraft_parallel"), two.devices("minedraft_parallel"), paper.devices("minedraft_parallel")) == (1, 2, 5)
    assert paper.devices("stock_sd") == 4
    # BF16 Qwen3-32B plus its drafter leave almost no KV cache on one 80 GB H100.
    assert same.max_running["stock_sd"] < 8 < paper.max_running["stock_sd"]
    fp8 = profile_by_name("h100-same-gpu", target_bytes_per_param=1)
    assert fp8.t_verify(8, 3) < same.t_verify(8, 3) and fp8.max_running["stock_sd"] > 64
    for k in (1, 3, 5):
        pr = predict(paper, 16, k, alpha=0.7, comparison="paper")
        assert 1.0 < pr["minedraft_parallel"].tokens_per_s / pr["stock_sd"].tokens_per_s < 2.0


def test_kv_capacity_puts_the_drafter_on_the_first_gpu():
    cap = kv_capacity(QWEN3_32B, QWEN3_8B, H100_SXM, 4, True, gpu_memory_utilization=0.65, tokens_per_request=384)
    assert cap["stock_sd"] < cap["minedraft_parallel"] < cap["no_sd"]
    assert kv_capacity(QWEN3_32B, QWEN3_8B, H100_SXM, 1, False, gpu_memory_utilization=0.65)["stock_sd"] == 0
