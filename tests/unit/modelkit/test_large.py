"""modelkit/large.py: the larger pair (benchmarks only), checked without building it."""

from __future__ import annotations

from modelkit.specs import TARGET_ARCH


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
