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

BATCH = 16


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int):
    """Ids, attention mask and position ids for a left-padded batch."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(list(seq))
            mask[row, width - len(seq) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def _batches(order: list[int], size: int):
    for i in range(0, len(order), size):
        yield order[i : i + size]


def _by_length(seqs: Sequence[Sequence[int]]) -> list[int]:
    """Indices sorted by length, so batches carry little padding."""
    return sorted(range(len(seqs)), key=lambda i: (len(seqs[i]), i))


@torch.inference_mode()
def greedy_continue(
    model, prompts: Sequence[Sequence[int]], n_tokens: int, batch: int = BATCH
) -> list[list[int]]:
    """``n_tokens`` greedy tokens after each prompt (KV-cached, no early stop)."""
    out: list[list[int]] = [[] for _ in prompts]
    for idx in _batches(_by_length(prompts), batch):
        gen = _greedy_batch(model, [prompts[i] for i in idx], n_tokens)
        for i, row in zip(idx, gen.tolist()):
            out[i] = row
    return out


def _greedy_batch(model, prompts: Sequence[Sequence[int]], n_tokens: int) -> torch.Tensor:
    ids, mask, pos = _left_pad(prompts, pad_id=0)
    res = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    tokens = [res.logits[:, -1].argmax(-1)]
    for _ in range(n_tokens - 1):
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        pos = pos[:, -1:] + 1
        res = model(
            input_ids=tokens[-1][:, None],
            attention_mask=mask,
            position_ids=pos,
            past_key_values=res.past_key_values,
            use_cache=True,
        )
        tokens.append(res.logits[:, -1].argmax(-1))
    return torch.stack(tokens, dim=1)


@torch.inference_mode()
def teacher_forced_argmax(
    model, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]],
    batch: int = BATCH,
) -> list[list[int]]:
    """The model's greedy guess for each continuation token, given all before it."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, continuations)]
    out: list[list[int]] = [[] for _ in seqs]
    for idx in _batches(_by_length(seqs), batch):
        ids, mask, pos = _left_pad([seqs[i] for i in idx], pad_id=0)
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
    from minedraft.kit.models import load_model
    from minedraft.kit.tokenizer import load_tokenizer

    tok = load_tokenizer(target_dir)
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    return model_agreement(load_model(target_dir), load_model(draft_dir), ids, n_tokens)
