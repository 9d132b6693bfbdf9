"""GPU benchmark shapes (modelkit/shapes.py): what can be checked without a GPU.

The directories must load as the right transformers configs, their arithmetic
must match the published parameter counts, each pair must share a vocabulary
(``draft_model`` requires it) and the build must be deterministic.
"""

from __future__ import annotations

import os

import pytest

from modelkit.shapes import (
    PAIRS,
    SHAPES,
    build_shapes,
    config_dict,
    kv_cache_bytes_per_token,
    pair_memory_bytes,
    parameter_count,
)

# Model cards: Llama-3.1-8B 8.03B, Llama-3.2-1B 1.24B, Qwen3-32B 32.8B,
# Qwen3-1.7B 1.7B (2.03B on its Hub page, where the checkpoint stores the tied
# LM head a second time; both are checked below).
PUBLISHED_BILLIONS = {"llama-3.1-8b": 8.03, "llama-3.2-1b": 1.24, "qwen3-32b": 32.8, "qwen3-1.7b": 1.72}


@pytest.fixture(scope="module")
def shape_dirs(tmp_path_factory, kit_tokenizer_dir):
    return build_shapes(str(tmp_path_factory.mktemp("shapes")), tokenizer_dir=kit_tokenizer_dir)


@pytest.fixture(scope="module")
def kit_tokenizer_dir(tmp_path_factory):
    """A stand-in tokenizer directory: shapes only copy its files."""
    from modelkit.tokenizer import TOKENIZER_FILES

    path = tmp_path_factory.mktemp("tokenizer")
    for name in TOKENIZER_FILES:
        (path / name).write_text(f"{name} stand-in\n")
    return str(path)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_config_loads_with_transformers(shape_dirs, name):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(shape_dirs[name])
    published = SHAPES[name]
    assert config.model_type == published["model_type"]
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "tie_word_embeddings", "head_dim"):
        assert getattr(config, key) == published[key], key
    rope = getattr(config, "rope_parameters", None) or {"rope_theta": config.rope_theta}
    assert rope["rope_theta"] == published["rope_theta"]
    if published.get("rope_scaling"):
        assert rope["rope_type"] == "llama3"
        assert rope["factor"] == published["rope_scaling"]["factor"]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_parameter_count_matches_published(name):
    billions = parameter_count(SHAPES[name]) / 1e9
    assert billions == pytest.approx(PUBLISHED_BILLIONS[name], rel=0.01)


def test_qwen3_1_7b_as_stored_counts_the_tied_head_twice():
    untied = {**SHAPES["qwen3-1.7b"], "tie_word_embeddings": False}
    assert parameter_count(untied) / 1e9 == pytest.approx(2.03, rel=0.01)


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_pairs_share_vocabulary_and_special_tokens(pair):
    target, draft = (config_dict(name) for name in PAIRS[pair])
    assert target["vocab_size"] == draft["vocab_size"]
    assert parameter_count(SHAPES[PAIRS[pair][1]]) < parameter_count(SHAPES[PAIRS[pair][0]]) / 4
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert target[key] == draft[key]


def test_directories_hold_config_and_tokenizer(shape_dirs, kit_tokenizer_dir):
    for path in shape_dirs.values():
        for name in os.listdir(kit_tokenizer_dir):
            with open(os.path.join(path, name)) as copy, open(os.path.join(kit_tokenizer_dir, name)) as src:
                assert copy.read() == src.read()
        assert os.path.exists(os.path.join(path, "config.json"))
        assert not any(name.endswith(".safetensors") for name in os.listdir(path))


def test_build_is_deterministic_and_idempotent(tmp_path, kit_tokenizer_dir):
    first = build_shapes(str(tmp_path / "a"), tokenizer_dir=kit_tokenizer_dir)
    mtimes = {n: os.stat(os.path.join(p, "config.json")).st_mtime_ns for n, p in first.items()}
    again = build_shapes(str(tmp_path / "a"), tokenizer_dir=kit_tokenizer_dir)
    other = build_shapes(str(tmp_path / "b"), tokenizer_dir=kit_tokenizer_dir)
    for name in SHAPES:
        assert os.stat(os.path.join(again[name], "config.json")).st_mtime_ns == mtimes[name]
        with open(os.path.join(first[name], "config.json")) as a, open(os.path.join(other[name], "config.json")) as b:
            assert a.read() == b.read()


def test_memory_estimate():
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes = 128 KiB per token.
    assert kv_cache_bytes_per_token(SHAPES["llama-3.1-8b"]) == 128 * 1024
    weights_only = pair_memory_bytes("llama-3.1-8b/llama-3.2-1b", kv_tokens=0)
    assert weights_only / 2**30 == pytest.approx((8.03 + 1.24) * 2e9 / 2**30, rel=0.01)
    # The Qwen pair's bf16 weights alone (~64 GiB) leave an 80 GB GPU too little room.
    assert pair_memory_bytes("qwen3-32b/qwen3-1.7b", kv_tokens=0) > 60 * 2**30
