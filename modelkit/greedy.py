"""Batched greedy decoding of a kit model with transformers, no vLLM.

Shared by the small draft's distillation (``models``: it learns from the
target's greedy text) and the agreement measurement (``agreement``: the
draft is teacher-forced on that text). Batches are left-padded and sorted by
length so they carry little padding.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

BATCH = 16


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int):
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


def batches(order: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(order), size):
        yield order[i : i + size]


def by_length(seqs: Sequence[Sequence[int]]) -> list[int]:
    """Indices sorted by length, so batches carry little padding."""
    return sorted(range(len(seqs)), key=lambda i: (len(seqs[i]), i))


@torch.inference_mode()
def greedy_continue(
    model, prompts: Sequence[Sequence[int]], n_tokens: int, batch: int = BATCH
) -> list[list[int]]:
    """``n_tokens`` greedy tokens after each prompt (KV-cached, no early stop)."""
    out: list[list[int]] = [[] for _ in prompts]
    for idx in batches(by_length(prompts), batch):
        gen = _greedy_batch(model, [prompts[i] for i in idx], n_tokens)
        for i, row in zip(idx, gen.tolist()):
            out[i] = row
    return out


def _greedy_batch(model, prompts: Sequence[Sequence[int]], n_tokens: int) -> torch.Tensor:
    ids, mask, pos = left_pad(prompts, pad_id=0)
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
