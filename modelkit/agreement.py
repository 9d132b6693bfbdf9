"""How often a draft's greedy token matches the target's, measured offline.

Agreement is taken along the *target's own* greedy continuation (the draft is
teacher-forced on it), which is what greedy speculative decoding verifies: at
each position the draft is shown exactly the tokens the target produced. With
k speculative tokens and per-token agreement ``a`` (roughly independent), the
expected number of accepted draft tokens per step is ``a + a^2 + ... + a^k``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from modelkit.greedy import BATCH, batches, by_length, greedy_continue, left_pad
from modelkit.models import load_model
from modelkit.tokenizer import load_tokenizer


@torch.inference_mode()
def teacher_forced_argmax(
    model, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]],
    batch: int = BATCH,
) -> list[list[int]]:
    """The model's greedy guess for each continuation token, given all before it."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, continuations)]
    out: list[list[int]] = [[] for _ in seqs]
    for idx in batches(by_length(seqs), batch):
        ids, mask, pos = left_pad([seqs[i] for i in idx], pad_id=0)
        guess = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.argmax(-1)
        for row, i in enumerate(idx):
            n = len(continuations[i])
            # Logits at position t predict token t + 1: the last n predict the
            # continuation only when the final token is dropped.
            out[i] = guess[row, -n - 1 : -1].tolist()
    return out


def model_agreement(
    target, draft, prompts: Sequence[Sequence[int]], n_tokens: int
) -> float:
    """Greedy agreement of two loaded models on token-id prompts."""
    conts = greedy_continue(target, prompts, n_tokens)
    guesses = teacher_forced_argmax(draft, prompts, conts)
    hits = sum(g == c for gs, cs in zip(guesses, conts) for g, c in zip(gs, cs))
    return hits / sum(len(c) for c in conts)


def greedy_agreement(
    target_dir: str, draft_dir: str, prompts: Sequence[str], n_tokens: int
) -> float:
    """Fraction of the target's greedy tokens the draft predicts exactly.

    ``prompts`` are text, encoded with the target's tokenizer (no special
    tokens, as vLLM does for this tokenizer).
    """
    tok = load_tokenizer(target_dir)
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    return model_agreement(load_model(target_dir), load_model(draft_dir), ids, n_tokens)
