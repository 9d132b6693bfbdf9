"""A ``propose`` call cut to some of its rows: the drafter drafts for those requests alone.

Where a second draft source drafts some of a step's requests (hybrid/), the model drafter's drafts for them
would go unused; the scheduler names them (``MineDraftSchedulerOutput.undrafted_req_ids``), the catch-up
records their rows as skipped (draft_catch_up.py), and the drafter runs this call of the others' rows. Every
per-row and per-token input of vLLM's ``propose`` is taken at those rows: the tokens, positions and hidden
states of their queries (their rejected drafts' slots too, in vLLM's padded drafter batch), their next
tokens, rejected counts and sampled indices (renumbered), and the attention metadata's rows. The sampling
metadata stays whole: it is read only where drafts are sampled with probabilities, which the hybrid
refuses (config/validation.py) and the source does not cut (``DraftProbs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from vllm.v1.attention.backend import CommonAttentionMetadata

from minedraft.contract import ProposeCall

# The attention metadata's fields with one entry per row, and those with one per token.
_PER_ROW = ("seq_lens", "block_table_tensor", "is_prefilling", "seq_lens_cpu_upper_bound", "dcp_local_seq_lens",
            "dcp_local_seq_lens_cpu_upper_bound", "encoder_seq_lens", "encoder_seq_lens_cpu", "req_idx",
            "rswa_prefix_lens")
_PER_TOKEN = ("slot_mapping", "positions")


def cuttable(call: ProposeCall) -> bool:
    """Whether ``call``'s inputs are all ones this cut takes at rows (no multimodal embeddings, 1-D positions)."""
    kwargs = call.kwargs
    return (kwargs.get("mm_embed_inputs") is None and "common_attn_metadata" in kwargs
            and kwargs["target_positions"].dim() == 1)


def call_rows(call: ProposeCall, rows: Sequence[int]) -> ProposeCall:
    """``call`` with only ``rows`` of its batch (in their order)."""
    kwargs = call.kwargs
    cad: CommonAttentionMetadata = kwargs["common_attn_metadata"]
    device = cad.query_start_loc.device
    starts = cad.query_start_loc_cpu.tolist()
    lengths = [starts[r + 1] - starts[r] for r in rows]
    new_starts = torch.zeros(len(rows) + 1, dtype=cad.query_start_loc_cpu.dtype)
    new_starts[1:] = torch.tensor(lengths).cumsum(0)
    tokens = torch.cat([torch.arange(starts[r], starts[r + 1]) for r in rows])
    picked = torch.tensor(list(rows))

    def at(value, index: torch.Tensor):
        if value is None:
            return None
        if isinstance(value, tuple):
            return tuple(at(v, index) for v in value)
        return value[index.to(value.device)] if isinstance(value, torch.Tensor) else value[index.numpy()]

    cut = {name: at(getattr(cad, name), picked) for name in _PER_ROW}
    cut |= {name: at(getattr(cad, name), tokens) for name in _PER_TOKEN}
    seq_lens = cut["seq_lens"]
    cut_cad = dataclasses.replace(
        cad, **cut, query_start_loc=new_starts.to(device), query_start_loc_cpu=new_starts, num_reqs=len(rows),
        num_actual_tokens=int(new_starts[-1]), max_query_len=max(lengths), max_seq_len=int(seq_lens.max()),
        logits_indices_padded=None, num_logits_indices=None, max_logits_per_req=None, mm_req_doc_ranges=None)
    sample = kwargs.get("token_indices_to_sample")
    if sample is not None:  # a row's sampled index, moved with its query
        old = torch.tensor([starts[r] for r in rows], device=sample.device, dtype=sample.dtype)
        sample = sample[picked.to(sample.device)] - old + new_starts[:-1].to(sample.device, sample.dtype)
    cut_kwargs = {
        **kwargs,
        "target_token_ids": at(kwargs["target_token_ids"], tokens),
        "target_positions": at(kwargs["target_positions"], tokens),
        "target_hidden_states": at(kwargs.get("target_hidden_states"), tokens),
        "next_token_ids": at(kwargs["next_token_ids"], picked),
        "token_indices_to_sample": sample,
        "num_rejected_tokens_gpu": at(kwargs.get("num_rejected_tokens_gpu"), picked),
        "common_attn_metadata": cut_cad,
        "slot_mappings": None,  # the proposer computes them from the metadata's slot mapping
    }
    return ProposeCall([call.req_ids[r] for r in rows], call.args, cut_kwargs, call.depth,
                       undrafted=frozenset())
