"""The model kit: cached, complete, deterministic, and drafts in their bands.

Uses the cached kit (``build_kit()``); the first run on a machine builds it
(about half a minute on 2 idle cores), later runs only read markers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from modelkit import Kit, build_kit
from modelkit import cache
from modelkit.build import MODELS, spec_hashes
from modelkit.eagle3 import AUX_LAYER_IDS
from modelkit.specs import (
    EAGLE3_AGREEMENT_BAND,
    PERTURBED_AGREEMENT_BAND,
    SMALL_AGREEMENT_BAND,
    SMALL_ARCH,
    TARGET_ARCH,
)
from modelkit.tokenizer import TOKENIZER_FILES, VOCAB_SIZE

MODEL_FILES = ("config.json", "model.safetensors", "generation_config.json", cache.MARKER)


@pytest.fixture(scope="module")
def kit() -> Kit:
    return build_kit()


@pytest.fixture(scope="module")
def tokenizer(kit):
    from modelkit.tokenizer import load_tokenizer

    return load_tokenizer(kit.tokenizer)


def _config(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("name", MODELS)
def test_model_dirs_hold_what_vllm_loads(kit, name):
    model_dir = getattr(kit, name)
    for fname in MODEL_FILES + TOKENIZER_FILES:
        assert os.path.isfile(os.path.join(model_dir, fname)), fname


def test_tokenizer_dir_is_target_dir(kit):
    assert kit.tokenizer == kit.target


def test_configs_share_vocab_and_draft_small_is_smaller(kit):
    target, small = _config(kit.target), _config(kit.draft_small)
    perturbed = _config(kit.draft_perturbed)
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


@pytest.mark.parametrize(
    "text",
    ["def f(x):\n    return x + 1\n", "héllo wörld ✓ 日本語", " leading and trailing  ", "a"],
)
def test_tokenizer_round_trips(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert all(0 <= i < VOCAB_SIZE for i in ids)


def test_tokenizer_specials_and_chat_template(tokenizer):
    assert len(tokenizer) == VOCAB_SIZE
    specials = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert specials == (0, 1, 2)
    # Plain prompts get no BOS, so a one-token prompt is one token.
    assert tokenizer("x")["input_ids"] == tokenizer.convert_tokens_to_ids(["x"])
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<s>user: hi\nassistant:"


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


def test_cached_build_is_fast_and_needs_no_torch(kit):
    # A fresh interpreter shows the fast path neither builds nor imports torch.
    code = (
        "import sys, time; t = time.monotonic();"
        "from modelkit import build_kit; k = build_kit(sys.argv[1]);"
        "print(time.monotonic() - t, 'torch' in sys.modules, k.target)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, kit.root], capture_output=True, text=True, check=True
    ).stdout.split()
    assert float(out[0]) < 1.0
    assert out[1] == "False"
    assert out[2] == kit.target


def test_cache_dir_comes_from_env(kit, monkeypatch):
    monkeypatch.setenv("MINEDRAFT_KIT_DIR", kit.root)
    assert build_kit() == kit


def test_publish_replaces_outdated_dir(tmp_path):
    root = str(tmp_path)
    final = os.path.join(root, "m")
    for version in ("old", "new"):
        with cache.build_lock(root):
            staged = cache.staging_dir(root, "m")
            cache.write_marker(staged, {"spec_hash": version})
            cache.publish(staged, final)
    assert cache.is_complete(final, "new")
    assert not cache.is_complete(final, "old")
    assert sorted(os.listdir(root)) == [cache.LOCK, "m"]


def test_lock_clears_crashed_staging_dirs(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, cache.TMP_PREFIX + "target-crashed"))
    with cache.build_lock(root):
        assert os.listdir(root) == [cache.LOCK]


def test_mixed_prompts_are_deterministic_and_spread(kit, tokenizer):
    from modelkit.prompts import mixed_prompts

    prompts = mixed_prompts(24, seed=0, max_tokens=500, tokenizer_dir=kit.tokenizer)
    assert prompts == mixed_prompts(24, seed=0, max_tokens=500, tokenizer_dir=kit.tokenizer)
    assert prompts != mixed_prompts(24, seed=1, max_tokens=500, tokenizer_dir=kit.tokenizer)
    lengths = [len(tokenizer(p)["input_ids"]) for p in prompts]
    assert min(lengths) == 1
    assert max(lengths) <= 500
    assert max(lengths) > 300


def test_shared_prefix_prompts_share_prefix_tokens(kit, tokenizer):
    from modelkit.prompts import shared_prefix_prompts

    prompts = shared_prefix_prompts(
        6, seed=0, prefix_tokens=64, suffix_tokens=8, n_prefixes=2, tokenizer_dir=kit.tokenizer
    )
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    assert all(len(i) == 72 for i in ids)
    assert ids[0][:64] == ids[2][:64] == ids[4][:64]
    assert ids[1][:64] == ids[3][:64] == ids[5][:64]
    assert ids[0][:64] != ids[1][:64]
    assert len({tuple(i) for i in ids}) == 6


@pytest.fixture(scope="module")
def agreement_prompts(kit):
    from modelkit.prompts import mixed_prompts

    return mixed_prompts(16, seed=3, max_tokens=128, tokenizer_dir=kit.tokenizer)


def test_target_agrees_with_itself(kit, agreement_prompts):
    """Teacher-forced padded batches reproduce incremental greedy decoding."""
    from modelkit.agreement import greedy_agreement

    assert greedy_agreement(kit.target, kit.target, agreement_prompts[:8], 16) >= 0.99


@pytest.mark.parametrize(
    "name, band",
    [("draft_perturbed", PERTURBED_AGREEMENT_BAND), ("draft_small", SMALL_AGREEMENT_BAND)],
)
def test_draft_agreement_in_documented_band(kit, agreement_prompts, name, band):
    from modelkit.agreement import greedy_agreement

    agreement = greedy_agreement(kit.target, getattr(kit, name), agreement_prompts, 32)
    assert band[0] <= agreement <= band[1], agreement
    assert band[0] <= kit.marker(name)["agreement"] <= band[1]


def test_eagle3_head_is_what_vllm_loads_for_this_target(kit):
    """vLLM reads the aux layers from ``eagle_config`` (its default collapses to 2 layers for a
    4-layer target), sizes ``fc`` from them, and needs the target's width for the shared KV group."""
    head, target = _config(kit.eagle3), _config(kit.target)
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


def test_target_greedy_output_is_not_degenerate(kit, agreement_prompts):
    """Random init alone repeats one token; the kit's target must not."""
    from modelkit.greedy import greedy_continue
    from modelkit.models import load_model
    from modelkit.tokenizer import load_tokenizer

    tok = load_tokenizer(kit.target)
    ids = [tok(p)["input_ids"] for p in agreement_prompts]
    conts = greedy_continue(load_model(kit.target), ids, 32)
    distinct = [len(set(c)) for c in conts]
    assert sum(d >= 16 for d in distinct) >= 0.8 * len(conts), distinct


def test_large_pair_spec_is_larger_and_its_draft_hash_follows_its_target(monkeypatch):
    """The larger pair (benchmarks only) is built on demand; its cache key covers what its weights
    depend on, and its target has several times the kit target's compute per token."""
    from modelkit import large

    def per_token(arch):  # weights touched per token, embeddings aside
        h, f, layers = arch["hidden_size"], arch["intermediate_size"], arch["num_hidden_layers"]
        kv = h * arch["num_key_value_heads"] // arch["num_attention_heads"]
        return layers * (2 * h * h + 2 * h * kv + 3 * h * f)

    assert per_token(large.LARGE_ARCH) >= 5 * per_token(TARGET_ARCH)
    hashes = large._spec_hashes()
    monkeypatch.setattr(large, "LARGE_SEED", large.LARGE_SEED + 1)
    moved = large._spec_hashes()
    assert moved["target"] != hashes["target"] and moved["draft"] != hashes["draft"]
