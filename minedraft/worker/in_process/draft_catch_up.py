"""The drafter at depth 0: skip its forward while speculation is off, catch it up when it resumes.

At depth 0 (the depth controller, or vLLM's ``num_speculative_tokens_per_batch_size``,
turned speculation off) vLLM's proposer still runs the draft model (or the EAGLE head)
over the step's tokens, only to keep its KV cache in step, and returns no drafts. With
a draft model that is not much smaller than the target that forward is most of what
speculation costs, paid in steps that speculate nothing; the kit's one-layer EAGLE-3
head took 3.5 ms of a 17 ms step at N = 8 (the target's forward: 6-8 ms).

Here such a call runs no forward: each request remembers the first position whose
draft KV is missing. When the request is next drafted at depth > 0, the skipped
tokens (all committed, in the runner's token table) are first fed to the proposer
in prefill-like passes at depth 0 (``propose`` with a batch of its own: each
request's missing span, the next token on the extra slot vLLM's draft-model pass
appends); then the real call runs unchanged. The draft's KV cache is then what it
would have been had every forward run, so acceptance does not dip; outputs never
depend on it (verification is exact).

EAGLE and EAGLE-3 (``keeps_hidden_states``): the head's pass over a position reads the
target's hidden state there, which exists only in the step that computed it. A skipped
call therefore keeps the hidden states it was given, per request (a copy: vLLM reuses
the buffer), and the catch-up feeds them with the tokens. They are kept up to
``max_hidden_bytes`` in all; a depth-0 call that would keep more is not skipped: its
requests are caught up and the call runs, as in vLLM. ngram and custom drafters have
no forward.

A call at depth > 0 is skipped the same way when a new request arrives while its step
runs (``InProcessDraftSource._skip_held``): its drafts are then never made, and the rows
of its hidden states past a request's accepted tokens (the rejected drafts') are not kept.

Rows of a call at depth > 0 are skipped the same way where the step does not want their
drafts (a second source drafts those requests: hybrid/); the call runs for the other rows
(``call_rows.py``).

One gap is known: a prompt block computed while its request skipped, and cached
for prefix sharing, keeps stale draft KV if that request ends before it resumes;
a later request that hits the block drafts worse there (never a wrong token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from vllm.v1.attention.backend import CommonAttentionMetadata

from minedraft.contract import ProposeCall


@dataclass(frozen=True)
class _Span:
    row: int  # the request's row in the call's batch
    start: int  # first position to feed
    end: int  # one past the last; the token at ``end`` goes on the extra slot
    hidden: torch.Tensor | None = None  # the target's hidden states at start..end-1 (EAGLE)

    def cut(self, start: int, end: int) -> _Span:
        hidden = None if self.hidden is None else self.hidden[start - self.start:end - self.start]
        return _Span(self.row, start, end, hidden)


class DraftCatchUp:
    """``token_ids(row)``: the runner's token table row of the batch's request ``row``;
    ``computed(row)``: its computed tokens at the start of the step (the first position the
    step's call feeds); ``block_size()``: the KV cache's block size; ``max_tokens``: the most
    tokens one pass may carry; ``keeps_hidden_states``: the drafter reads the target's hidden
    states (EAGLE), kept for the skipped tokens up to ``max_hidden_bytes``."""

    def __init__(self, token_ids: Callable[[int], np.ndarray], computed: Callable[[int], int],
                 block_size: Callable[[], int], max_tokens: int, device: torch.device, *,
                 keeps_hidden_states: bool = False, max_hidden_bytes: int = 0) -> None:
        self.token_ids, self.computed = token_ids, computed
        self.block_size, self.max_tokens, self.device = block_size, max_tokens, device
        self.keeps_hidden_states, self.max_hidden_bytes = keeps_hidden_states, max_hidden_bytes
        self.behind: dict[str, int] = {}  # request id -> first position without draft KV
        self.hidden: dict[str, list[torch.Tensor]] = {}  # request id -> hidden states from ``behind`` on
        self.hidden_bytes = 0
        self.skipped_calls = 0
        self.skipped_rows = 0  # rows skipped in calls that ran for the others
        self.caught_up_tokens = 0

    def can_skip(self, kwargs: dict) -> bool:
        """Whether ``skip`` would skip a call with these keyword arguments: its hidden states (all its
        rows, a verifying call's rejected drafts' too) fit ``max_hidden_bytes``."""
        return not self.keeps_hidden_states or self.hidden_bytes + self._hidden_nbytes(kwargs) <= self.max_hidden_bytes

    def skip(self, call: ProposeCall, rows: Sequence[int] | None = None) -> list[list[int]] | None:
        """A call not run (at depth 0, or held and its drafts not taken): no drafts, one empty list per
        request, as vLLM's runner takes them from its host-side drafters (an empty tensor would cost a
        device-to-host copy every step); None where the call must run (its hidden states would exceed
        ``max_hidden_bytes``). With ``rows``, only those rows are skipped (their drafts unused: the rest of
        the call runs, call_rows.py)."""
        if not self.can_skip(call.kwargs):
            return None
        hidden = self._hidden_rows(call) if self.keeps_hidden_states else None
        skipped = range(len(call.req_ids)) if rows is None else rows
        for row in skipped:
            req_id = call.req_ids[row]
            if req_id not in self.behind:
                self.behind[req_id] = self.computed(row)
            if hidden is not None:
                kept = hidden[row] if rows is None else hidden[row].clone()  # not a view keeping the others' rows
                self.hidden.setdefault(req_id, []).append(kept)
                self.hidden_bytes += kept.numel() * kept.element_size()
        if rows is None:
            self.skipped_calls += 1
        else:
            self.skipped_rows += len(rows)
        return [[] for _ in call.req_ids]

    def release(self, req_ids: set[str]) -> None:
        """Finished or preempted requests (a preempted one is computed again from its start)."""
        for req_id in req_ids:
            self.behind.pop(req_id, None)
            self._drop_hidden(req_id)

    def calls_before(self, call: ProposeCall, rows: Sequence[int] | None = None) -> Iterator[ProposeCall]:
        """The depth-0 passes that feed the requests of ``call`` (of its ``rows``) what their draft skipped."""
        spans = []
        for row in range(len(call.req_ids)) if rows is None else rows:
            req_id = call.req_ids[row]
            start = self.behind.pop(req_id, None)
            hidden = self._take_hidden(req_id)
            end = self.computed(row)
            if start is not None and start < end:
                spans.append(_Span(row, start, end, hidden))
        for batch in self._batches(spans):
            self.caught_up_tokens += sum(s.end - s.start for s in batch)
            yield self._call(call, batch)

    @staticmethod
    def _hidden_nbytes(kwargs: dict) -> int:
        hidden = kwargs["target_hidden_states"]
        parts = hidden if isinstance(hidden, tuple) else (hidden,)
        rows = int(kwargs["common_attn_metadata"].query_start_loc_cpu[-1])
        return rows * sum(h[0].numel() * h.element_size() for h in parts)

    def _hidden_rows(self, call: ProposeCall) -> list[torch.Tensor]:
        """The call's hidden states, one tensor per request: views of one copy, or, in a call that
        verified drafts (at depth > 0, or at depth 0 the second source's: hybrid/), each request's rows up to
        its last accepted token (copies: a rejected draft's row is no token's, and the rows of two skipped
        calls are joined by position). A tuple of EAGLE-3's auxiliary layers (a skipped depth-0 call's) is
        joined: that is the copy."""
        starts = call.kwargs["common_attn_metadata"].query_start_loc_cpu.tolist()
        lengths = [b - a for a, b in zip(starts, starts[1:])]
        hidden = call.kwargs["target_hidden_states"]
        joined = isinstance(hidden, tuple)
        if joined:
            hidden = torch.cat([h[:starts[-1]] for h in hidden], dim=-1)
        rejected = call.kwargs.get("num_rejected_tokens_gpu")
        if rejected is None:
            rows = hidden[:starts[-1]].split(lengths) if joined else hidden[:starts[-1]].clone().split(lengths)
            return list(rows)
        rows = hidden[:starts[-1]].split(lengths)
        return [row[:len(row) - n].clone() for row, n in zip(rows, rejected[:len(rows)].tolist())]

    def _take_hidden(self, req_id: str) -> torch.Tensor | None:
        parts = self._drop_hidden(req_id)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _drop_hidden(self, req_id: str) -> list[torch.Tensor]:
        parts = self.hidden.pop(req_id, [])
        self.hidden_bytes -= sum(h.numel() * h.element_size() for h in parts)
        return parts

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
                batch.append(span.cut(start, end))
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
            # The draft model reads tokens only; EAGLE the target's hidden states kept at each position.
            "target_hidden_states": torch.cat([s.hidden for s in spans]) if self.keeps_hidden_states else None,
            "next_token_ids": torch.tensor(next_tokens, dtype=torch.int32, device=self.device),
            "token_indices_to_sample": None,
            "common_attn_metadata": catch_up,
            "num_rejected_tokens_gpu": None,
            "slot_mappings": None,
            "mm_embed_inputs": None,
        }
        return ProposeCall([call.req_ids[s.row] for s in spans], (), kwargs, depth=0)
