"""modelkit/models.py: the kit's target recipe decodes greedily without degenerating."""

from __future__ import annotations


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
