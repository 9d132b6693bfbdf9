"""modelkit/method_checkpoints.py: each method checkpoint holds the config keys and tensors its vLLM
loader needs, the MiMo target computes the kit target's function, the speculative configs name the
right directories, and the cache rebuilds only what is stale (no engine: the recipes were run with
stock vLLM separately; see the module doc)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from modelkit import cache
from modelkit.method_checkpoints import (
    CHECKPOINTS,
    DFLASH_TARGET_LAYER_IDS,
    MASK_TOKEN_ID,
    MEDUSA_HEADS,
    METHODS,
    build_method_checkpoints,
    spec_hashes,
)
from modelkit.specs import TARGET_ARCH
from modelkit.tokenizer import TOKENIZER_FILES, VOCAB_SIZE

H = TARGET_ARCH["hidden_size"]
N_LAYERS = TARGET_ARCH["num_hidden_layers"]
HEAD_DIM = H // TARGET_ARCH["num_attention_heads"]
DECODER_LAYER = {
    "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
    "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
}
QKV_BIAS = {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}
QK_NORM = {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}


@pytest.fixture(scope="module")
def root(kit):
    """The cached kit's directory: the checkpoints are built there once (the Medusa heads and the DFlash
    draft train for about two minutes) and the end-to-end tests read the same ones."""
    return kit.root


@pytest.fixture(scope="module")
def ckpts(root):
    return build_method_checkpoints(root)


def config(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def tensors(model_dir: str) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(model_dir, "model.safetensors"))


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_dirs_hold_weights_tokenizer_and_current_marker(ckpts, name):
    model_dir = getattr(ckpts, name)
    for fname in ("config.json", "model.safetensors", "generation_config.json", cache.MARKER,
                  *TOKENIZER_FILES):
        assert os.path.isfile(os.path.join(model_dir, fname)), fname
    marker = ckpts.marker(name)
    assert marker["spec_hash"] == spec_hashes()[name]
    assert marker["sha256"]["model.safetensors"] == cache.file_sha256(
        os.path.join(model_dir, "model.safetensors"))


@pytest.fixture(scope="module")
def windows(kit) -> list[list[int]]:
    from modelkit.prompts import token_windows

    return token_windows(16, 48, seed=5, tokenizer_dir=kit.tokenizer)


def test_mask_token_is_a_special_token_text_never_encodes_to(tokenizer, agreement_prompts, windows):
    assert 0 <= MASK_TOKEN_ID < VOCAB_SIZE
    assert tokenizer.convert_ids_to_tokens(MASK_TOKEN_ID) == "<pad>"
    encoded = [tokenizer.encode(p, add_special_tokens=False) for p in agreement_prompts]
    assert not any(MASK_TOKEN_ID in ids for ids in encoded + windows)


def test_pard_is_draft_perturbed_with_pard_token(ckpts, kit):
    cfg, base = config(ckpts.pard), config(kit.draft_perturbed)
    assert cfg.pop("pard_token") == MASK_TOKEN_ID
    assert cfg == base
    assert ckpts.marker("pard")["sha256"] == kit.marker("draft_perturbed")["sha256"]


def test_peagle_is_eagle3_with_ptd_token_and_mask_hidden(ckpts, kit):
    cfg, base = config(ckpts.peagle), config(kit.eagle3)
    assert cfg.pop("ptd_token_id") == MASK_TOKEN_ID
    assert cfg == base
    n_aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    weights, head = tensors(ckpts.peagle), tensors(kit.eagle3)
    assert weights.pop("mask_hidden").shape == (1, n_aux * cfg["target_hidden_size"])
    assert weights.keys() == head.keys()
    assert weights["fc.weight"].shape == (H, n_aux * H)


def test_medusa_heads_are_trained_over_the_target_head(ckpts, kit):
    cfg = config(ckpts.medusa)
    # MedusaConfig.from_pretrained renames every key holding "num" and "heads" to num_heads.
    assert [k for k in cfg if "num" in k and "heads" in k] == ["num_heads"]
    assert cfg["num_heads"] == MEDUSA_HEADS and cfg["num_hidden_layers"] == 1
    assert cfg["hidden_size"] == H and cfg["vocab_size"] == VOCAB_SIZE
    weights, lm_head = tensors(ckpts.medusa), tensors(kit.target)["lm_head.weight"]
    expected = {f"blocks.{h}.layers.0.weight" for h in range(MEDUSA_HEADS)}
    expected |= {f"lm_heads.{h}.weight" for h in range(MEDUSA_HEADS)}
    assert weights.keys() == expected
    for h in range(MEDUSA_HEADS):
        assert torch.equal(weights[f"lm_heads.{h}.weight"], lm_head)
        assert weights[f"blocks.{h}.layers.0.weight"].any(), h  # zero blocks repeat the sampled token
    # Held-out agreement per head, recorded at build: each head guesses a token further on, less often.
    agreement = ckpts.marker("medusa")["agreement_per_head"]
    assert len(agreement) == MEDUSA_HEADS and agreement[0] > 0.4, agreement
    assert agreement == sorted(agreement, reverse=True), agreement


def test_mtp_target_is_mimo_with_one_mtp_layer(ckpts, kit):
    cfg = config(ckpts.mtp_target)
    assert cfg["architectures"] == ["MiMoForCausalLM"] and cfg["model_type"] == "qwen2"
    assert cfg["num_nextn_predict_layers"] == 1
    weights, target = tensors(ckpts.mtp_target), tensors(kit.target)
    for name, value in target.items():
        assert torch.equal(weights[name], value), name
    for i in range(N_LAYERS):
        for bias in QKV_BIAS:
            assert not weights[f"model.layers.{i}.{bias}"].any()
    prefix = "model.mtp_layers.0."
    mtp = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    assert mtp.keys() == DECODER_LAYER | QKV_BIAS | {
        "token_layernorm.weight", "hidden_layernorm.weight", "input_proj.weight", "final_layernorm.weight"}
    assert mtp["input_proj.weight"].shape == (H, 2 * H)
    biases = {f"model.layers.{i}.{b}" for i in range(N_LAYERS) for b in QKV_BIAS}
    assert weights.keys() == target.keys() | biases | {prefix + k for k in mtp}


def test_mtp_target_computes_the_kit_target(ckpts, kit, windows):
    """Qwen2 with zero q/k/v biases is the kit's Llama: same logits (transformers drops mtp_layers)."""
    from transformers import Qwen2ForCausalLM

    from modelkit.models import load_model, quiet_transformers

    with quiet_transformers():
        qwen = Qwen2ForCausalLM.from_pretrained(ckpts.mtp_target, dtype=torch.float32).eval()
    llama = load_model(kit.target)
    ids = torch.tensor(windows[:4])
    with torch.inference_mode():
        torch.testing.assert_close(qwen(input_ids=ids).logits, llama(input_ids=ids).logits)


def test_dflash_target_is_qwen3_with_unit_qk_norms(ckpts, kit):
    cfg = config(ckpts.dflash_target)
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["model_type"] == "qwen3"
    assert cfg["head_dim"] == HEAD_DIM and cfg["attention_bias"] is False
    weights, target = tensors(ckpts.dflash_target), tensors(kit.target)
    extra = {f"model.layers.{i}.{n}" for i in range(N_LAYERS) for n in QK_NORM}
    assert weights.keys() == target.keys() | extra
    for name in extra:
        assert torch.equal(weights[name], torch.ones(HEAD_DIM))


def test_dflash_draft_config_and_weights(ckpts):
    cfg, target_cfg = config(ckpts.dflash), config(ckpts.dflash_target)
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["num_hidden_layers"] == 1
    assert cfg["dflash_config"] == {"mask_token_id": MASK_TOKEN_ID,
                                    "target_layer_ids": list(DFLASH_TARGET_LAYER_IDS)}
    assert all(0 <= i < target_cfg["num_hidden_layers"] for i in DFLASH_TARGET_LAYER_IDS)
    for key in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"):
        assert cfg[key] == target_cfg[key], key
    weights = tensors(ckpts.dflash)
    assert weights.keys() == {f"layers.0.{n}" for n in DECODER_LAYER | QK_NORM} | {
        "fc.weight", "hidden_norm.weight", "norm.weight"}  # no mask_hidden: vLLM's DFlash asserts on it
    assert weights["fc.weight"].shape == (H, len(DFLASH_TARGET_LAYER_IDS) * H)
    # vLLM's override of the mask token's embedding (DFlashQwen3ForCausalLM._read_mask_embedding).
    mask = torch.load(os.path.join(ckpts.dflash, "mask_embedding.pt"), weights_only=True)
    assert mask["mask_token_id"] == MASK_TOKEN_ID and mask["embedding"].shape == (H,) and mask["embedding"].any()
    # Held-out agreement per mask, recorded at build (trained: the untrained recipe accepted nothing).
    agreement = ckpts.marker("dflash")["agreement_per_mask"]
    assert len(agreement) == 3 and min(agreement) > 0.1, agreement


def test_speculative_configs_and_targets(ckpts, kit):
    expected = {
        "pard": ({"method": "draft_model", "model": ckpts.pard, "num_speculative_tokens": 3,
                  "parallel_drafting": True}, kit.target),
        "peagle": ({"method": "eagle3", "model": ckpts.peagle, "num_speculative_tokens": 3,
                    "parallel_drafting": True}, kit.target),
        "medusa": ({"method": "medusa", "model": ckpts.medusa, "num_speculative_tokens": 3}, kit.target),
        "mtp": ({"method": "mtp", "num_speculative_tokens": 3}, ckpts.mtp_target),
        "dflash": ({"method": "dflash", "model": ckpts.dflash, "num_speculative_tokens": 3},
                   ckpts.dflash_target),
    }
    assert set(expected) == set(METHODS)
    for name, (spec, target) in expected.items():
        assert ckpts.speculative_config(name, 3) == spec
        assert os.path.realpath(ckpts.target_for(name)) == os.path.realpath(target)
    with pytest.raises(ValueError):
        ckpts.speculative_config("medusa", MEDUSA_HEADS + 1)
    with pytest.raises(ValueError):
        ckpts.speculative_config("eagle", 1)


def test_second_build_is_a_marker_hit_without_torch(ckpts, root):
    before = {n: os.stat(os.path.join(getattr(ckpts, n), cache.MARKER)).st_mtime_ns for n in CHECKPOINTS}
    code = (
        "import sys;"
        "from modelkit.method_checkpoints import build_method_checkpoints as b; c = b(sys.argv[1]);"
        "print('torch' in sys.modules, c.dflash)"
    )
    out = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", ckpts.dflash]
    assert build_method_checkpoints(root) == ckpts
    after = {n: os.stat(os.path.join(getattr(ckpts, n), cache.MARKER)).st_mtime_ns for n in CHECKPOINTS}
    assert after == before


def test_a_stale_checkpoint_alone_is_rebuilt(ckpts, root):
    # PARD's recipe is a copy: rebuilding it costs nothing, and it rebuilds to the same bytes.
    marker = ckpts.marker("pard")
    cache.write_marker(ckpts.pard, {**marker, "spec_hash": "stale"})
    stamps = {n: os.stat(os.path.join(getattr(ckpts, n), cache.MARKER)).st_mtime_ns for n in CHECKPOINTS}
    build_method_checkpoints(root)
    assert ckpts.marker("pard")["spec_hash"] == spec_hashes()["pard"]
    assert ckpts.marker("pard")["sha256"] == marker["sha256"]
    for name in CHECKPOINTS:
        changed = os.stat(os.path.join(getattr(ckpts, name), cache.MARKER)).st_mtime_ns != stamps[name]
        assert changed == (name == "pard"), name
