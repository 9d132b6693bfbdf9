"""modelkit/build.py: the cached kit is complete, its markers current, its models' configs as
specified, and its fast path needs no torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from modelkit import build_kit, cache
from modelkit.build import MODELS, spec_hashes
from modelkit.specs import SMALL_ARCH, TARGET_ARCH
from modelkit.tokenizer import TOKENIZER_FILES, VOCAB_SIZE

MODEL_FILES = ("config.json", "model.safetensors", "generation_config.json", cache.MARKER)


@pytest.mark.parametrize("name", MODELS)
def test_model_dirs_hold_what_vllm_loads(kit, name):
    model_dir = getattr(kit, name)
    for fname in MODEL_FILES + TOKENIZER_FILES:
        assert os.path.isfile(os.path.join(model_dir, fname)), fname


def test_tokenizer_dir_is_target_dir(kit):
    assert kit.tokenizer == kit.target


def test_configs_share_vocab_and_draft_small_is_smaller(kit, model_config):
    target, small = model_config(kit.target), model_config(kit.draft_small)
    perturbed = model_config(kit.draft_perturbed)
    for cfg in (target, small, perturbed):
        assert cfg["architectures"] == ["LlamaForCausalLM"]
        assert cfg["vocab_size"] == VOCAB_SIZE
        assert cfg["dtype"] == "float32"
        assert cfg["tie_word_embeddings"] is False
    for key, value in TARGET_ARCH.items():
        assert target[key] == perturbed[key] == value
    assert small["num_hidden_layers"] == SMALL_ARCH["num_hidden_layers"]
    assert small["hidden_size"] < target["hidden_size"]
    assert os.path.getsize(os.path.join(kit.draft_small, "model.safetensors")) < (
        os.path.getsize(os.path.join(kit.target, "model.safetensors")) / 4
    )


@pytest.mark.parametrize("name", MODELS)
def test_marker_records_current_spec_hash_and_weights(kit, name):
    marker = kit.marker(name)
    assert marker["spec_hash"] == spec_hashes()[name]
    weights = os.path.join(getattr(kit, name), "model.safetensors")
    assert marker["sha256"]["model.safetensors"] == cache.file_sha256(weights)


def test_drafts_depend_on_this_target(kit):
    target_hash = kit.marker("target")["spec_hash"]
    for name in MODELS[1:]:
        assert kit.marker(name)["spec"]["target"] == target_hash


def test_a_cached_build_reads_only_markers_and_needs_no_torch(kit):
    # A fresh interpreter shows the fast path neither builds (no marker is rewritten) nor imports torch.
    before = {n: os.stat(os.path.join(getattr(kit, n), cache.MARKER)).st_mtime_ns for n in MODELS}
    code = (
        "import sys;"
        "from modelkit import build_kit; k = build_kit(sys.argv[1]);"
        "print('torch' in sys.modules, k.target)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, kit.root], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", kit.target]
    assert {n: os.stat(os.path.join(getattr(kit, n), cache.MARKER)).st_mtime_ns for n in MODELS} == before


def test_cache_dir_comes_from_env(kit, monkeypatch):
    monkeypatch.setenv("MINEDRAFT_KIT_DIR", kit.root)
    assert build_kit() == kit
