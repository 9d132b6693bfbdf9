"""modelkit/eagle3.py: the EAGLE-3 head is a checkpoint vLLM loads for the kit's target, within its band."""

from __future__ import annotations

import os

from modelkit.eagle3 import AUX_LAYER_IDS
from modelkit.specs import EAGLE3_AGREEMENT_BAND


def test_eagle3_head_is_what_vllm_loads_for_this_target(kit, model_config):
    """vLLM reads the aux layers from ``eagle_config`` (its default collapses to 2 layers for a
    4-layer target), sizes ``fc`` from them, and needs the target's width for the shared KV group."""
    head, target = model_config(kit.eagle3), model_config(kit.target)
    assert head["num_hidden_layers"] == 1 and head["vocab_size"] == target["vocab_size"]
    assert head["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == list(AUX_LAYER_IDS)
    assert all(0 < i < target["num_hidden_layers"] for i in AUX_LAYER_IDS)
    for key in ("hidden_size", "num_attention_heads", "num_key_value_heads"):
        assert head[key] == target[key], key
    from safetensors import safe_open

    with safe_open(os.path.join(kit.eagle3, "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert f.get_slice("fc.weight").get_shape() == [head["hidden_size"], 3 * target["hidden_size"]]
    assert {"midlayer.self_attn.q_proj.weight", "midlayer.hidden_norm.weight", "norm.weight", "lm_head.weight"} <= names


def test_eagle3_agreement_in_documented_band(kit):
    """First draft token against the target's greedy token, teacher-forced (recorded at build)."""
    band = EAGLE3_AGREEMENT_BAND
    assert band[0] <= kit.marker("eagle3")["agreement"] <= band[1]
