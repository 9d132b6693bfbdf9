"""modelkit/prompts.py: prompt sets are deterministic, spread in length, and share prefixes on request."""

from __future__ import annotations


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
