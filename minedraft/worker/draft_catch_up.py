"""The draft model at depth 0: skip its forward while speculation is off, catch it up when it resumes.

At depth 0 (the depth controller, or vLLM's ``num_speculative_tokens_per_batch_size``,
turned speculation off) vLLM's proposer still runs the draft model over the step's
tokens, only to keep its KV cache in step, and returns no drafts. With a draft model
that is not much smaller than the target that forward is most of what speculation
costs, paid in steps that speculate nothing.

Here such a call runs no forward: each request remembers the first position whose
draft KV is missing. When the request is next drafted at depth > 0, the skipped
tokens (all committed, in the runner's token table) are first fed to the proposer
in prefill-like passes at depth 0 (``propose`` with a batch of its own: each
request's missing span, the next token on the extra slot vLLM's draft-model pass
appends); then the real call runs unchanged. The draft's KV cache is then what it
would have been had every forward run, so acceptance does not dip; outputs never
depend on it (verification is exact).

Only for the draft-model method: EAGLE's pass also needs the target's hidden states
of the skipped tokens, which are gone; ngram and custom drafters have no forward.
One gap is known: a prompt block computed while its request skipped, and cached
for prefix sharing, keeps stale draft KV if that request ends before it resumes;
a later request that hits the block drafts worse there (never a wrong token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from vllm.v1.attention.backend import CommonAttentionMetadata

from minedraft.worker.draft_source import ProposeCall


@dataclass(frozen=True)
class _Span:
    row: int  # the request's row in the call's batch
    start: int  # first position to feed
    end: int  # one past the last; the token at ``end`` goes on the extra slot


class DraftCatchUp:
    """``token_ids(row)``: the runner's token table row of the batch's request ``row``;
    ``computed(row)``: its computed tokens at the start of the step (the first position the
    step's call feeds); ``block_size()``: the KV cache's block size; ``max_tokens``: the most
    tokens one pass may carry."""

    def __init__(self, token_ids: Callable[[int], np.ndarray], computed: Callable[[int], int],
                 block_size: Callable[[], int], max_tokens: int, device: torch.device) -> None:
        self.token_ids, self.computed = token_ids, computed
        self.block_size, self.max_tokens, self.device = block_size, max_tokens, device
        self.behind: dict[str, int] = {}  # request id -> first position without draft KV
        self.skipped_calls = 0
        self.caught_up_tokens = 0

    def skip(self, call: ProposeCall) -> torch.Tensor:
        """A depth-0 call, not run: what vLLM's proposer returns for it (no drafts)."""
        for row, req_id in enumerate(call.req_ids):
            self.behind.setdefault(req_id, self.computed(row))
        self.skipped_calls += 1
        return torch.empty(len(call.req_ids), 0, dtype=torch.int64, device=self.device)

    def release(self, req_ids: set[str]) -> None:
        """Finished or preempted requests (a preempted one is computed again from its start)."""
        for req_id in req_ids:
            self.behind.pop(req_id, None)

    def calls_before(self, call: ProposeCall) -> Iterator[ProposeCall]:
        """The depth-0 passes that feed the requests of ``call`` what their draft skipped."""
        spans = []
        for row, req_id in enumerate(call.req_ids):
            start = self.behind.pop(req_id, None)
            end = self.computed(row)
            if start is not None and start < end:
                spans.append(_Span(row, start, end))
        for batch in self._batches(spans):
            self.caught_up_tokens += sum(s.end - s.start for s in batch)
            yield self._call(call, batch)

    def _batches(self, spans: list[_Span]) -> Iterator[list[_Span]]:
        """Spans cut to passes of at most ``max_tokens`` tokens (one extra slot per request)."""
        batch, size = [], 0
        for span in spans:
            start = span.start
            while start < span.end:
                room = self.max_tokens - size - 1
                if room <= 0:
                    yield batch
                    batch, size = [], 0
                    continue
                end = min(span.end, start + room)
                batch.append(_Span(span.row, start, end))
                size += end - start + 1
                start = end
        if batch:
            yield batch

    def _call(self, call: ProposeCall, spans: list[_Span]) -> ProposeCall:
        cad: CommonAttentionMetadata = call.kwargs["common_attn_metadata"]
        tokens = np.concatenate([self.token_ids(s.row)[s.start:s.end] for s in spans])
        positions = np.concatenate([np.arange(s.start, s.end, dtype=np.int64) for s in spans])
        lengths = np.array([s.end - s.start for s in spans])
        rows = torch.tensor([s.row for s in spans], device=cad.block_table_tensor.device)
        block_table = cad.block_table_tensor[rows]
        query_start_loc = torch.zeros(len(spans) + 1, dtype=torch.int32)
        query_start_loc[1:] = torch.from_numpy(np.cumsum(lengths))
        seq_lens = torch.tensor([s.end for s in spans], dtype=torch.int32)
        positions_t = torch.from_numpy(positions).to(self.device)
        owner = torch.repeat_interleave(torch.arange(len(spans)), torch.from_numpy(lengths)).to(self.device)
        block_size = self.block_size()
        slots = block_table[owner, positions_t // block_size] * block_size + positions_t % block_size
        catch_up = CommonAttentionMetadata(
            query_start_loc=query_start_loc.to(self.device), query_start_loc_cpu=query_start_loc,
            seq_lens=seq_lens.to(self.device), num_reqs=len(spans), num_actual_tokens=int(lengths.sum()),
            max_query_len=int(lengths.max()), max_seq_len=int(seq_lens.max()),
            block_table_tensor=block_table, slot_mapping=slots)
        next_tokens = [int(self.token_ids(s.row)[s.end]) for s in spans]
        kwargs = {
            **call.kwargs,
            "num_speculative_tokens": 0,
            "target_token_ids": torch.from_numpy(tokens).to(self.device, torch.int32),
            "target_positions": positions_t,
            "target_hidden_states": None,  # the draft model reads tokens only
            "next_token_ids": torch.tensor(next_tokens, dtype=torch.int32, device=self.device),
            "token_indices_to_sample": None,
            "common_attn_metadata": catch_up,
            "num_rejected_tokens_gpu": None,
            "slot_mappings": None,
            "mm_embed_inputs": None,
        }
        return ProposeCall([call.req_ids[s.row] for s in spans], (), kwargs, depth=0)
