"""modelkit/second_target.py: the second target's checkpoints have shapes and weights that are not the kit's,
each with the config keys its vLLM loader reads, and a second build reads only markers (no engine here:
tests/e2e/test_second_target.py runs them; this module is named apart from it, as pytest needs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from modelkit import cache
from modelkit.method_checkpoints import MASK_TOKEN_ID, MEDUSA_HEADS
from modelkit.second_target import ARCH, DFLASH_LAYER_IDS, NAMES, build_second_target
from modelkit.specs import TARGET_ARCH


@pytest.fixture(scope="module")
def second(kit):
    return build_second_target(kit.root)


def config(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def tensors(model_dir: str) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(model_dir, "model.safetensors"))


def test_the_targets_are_not_the_kit_s(second, kit):
    kit_cfg = config(kit.target)
    for target, arch in ((second.target, "Qwen2ForCausalLM"), (second.dflash_target, "Qwen3ForCausalLM")):
        cfg = config(target)
        assert cfg["architectures"] == [arch] != kit_cfg["architectures"]
        assert cfg["hidden_size"] == ARCH["hidden_size"] != TARGET_ARCH["hidden_size"]
        assert cfg["num_hidden_layers"] == ARCH["num_hidden_layers"] != TARGET_ARCH["num_hidden_layers"]
    qwen2 = tensors(second.target)
    assert qwen2["model.layers.0.self_attn.q_proj.bias"].any()  # random biases, not zeros


def test_mtp_target_is_the_target_as_mimo_with_a_random_mtp_layer(second):
    cfg = config(second.mtp_target)
    assert cfg["architectures"] == ["MiMoForCausalLM"] and cfg["num_nextn_predict_layers"] == 1
    weights, target = tensors(second.mtp_target), tensors(second.target)
    for name, value in target.items():
        assert torch.equal(weights[name], value), name
    h = ARCH["hidden_size"]
    assert weights["model.mtp_layers.0.input_proj.weight"].shape == (h, 2 * h)


def test_each_draft_has_the_layout_its_loader_reads(second):
    assert config(second.pard)["pard_token"] == MASK_TOKEN_ID
    peagle = config(second.peagle)
    assert peagle["ptd_token_id"] == MASK_TOKEN_ID and peagle["target_hidden_size"] == ARCH["hidden_size"]
    n_aux = len(peagle["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    assert tensors(second.peagle)["mask_hidden"].shape == (1, n_aux * ARCH["hidden_size"])
    medusa = tensors(second.medusa)
    assert config(second.medusa)["num_heads"] == MEDUSA_HEADS
    assert all(medusa[f"blocks.{h}.layers.0.weight"].any() for h in range(MEDUSA_HEADS))
    dflash = config(second.dflash)
    assert dflash["dflash_config"] == {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": list(DFLASH_LAYER_IDS)}
    h = ARCH["hidden_size"]
    assert tensors(second.dflash)["fc.weight"].shape == (h, len(DFLASH_LAYER_IDS) * h)
    mask = torch.load(os.path.join(second.dflash, "mask_embedding.pt"), weights_only=True)
    assert mask["mask_token_id"] == MASK_TOKEN_ID and mask["embedding"].shape == (ARCH["hidden_size"],)


def test_a_second_build_reads_only_markers(second, kit):
    root = os.path.join(kit.root, "second_target")
    before = {n: os.stat(os.path.join(root, n, cache.MARKER)).st_mtime_ns for n in NAMES}
    code = ("import sys;"
            "from modelkit.second_target import build_second_target as b; c = b(sys.argv[1]);"
            "print('torch' in sys.modules, c.dflash)")
    out = subprocess.run([sys.executable, "-c", code, kit.root], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", second.dflash]
    assert {n: os.stat(os.path.join(root, n, cache.MARKER)).st_mtime_ns for n in NAMES} == before
