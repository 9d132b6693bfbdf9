"""The drafter's process for a DFlash draft: vLLM's DFlash proposer, its context fed from the target.

A DFlash draft (vLLM's ``DFlashProposer``) drafts a request's next k tokens
in one forward: the bonus token and k mask tokens attend, non-causally, to
the request's context, whose K/V each draft layer holds. That context is not
made from tokens but projected from the target's hidden states of several
layers (``precompute_and_store_context_kv``). In the target's worker vLLM
writes it under the target's block table; here the draft engine keeps its
own blocks per request, and the target sends, with each job, the hidden-state
rows of the tokens it has computed and accepted since the last
(``context_channel.py``).

The engine is vLLM's: ``LLM`` of the target's config with its layers left out
(``dflash_host.py``: the embeddings and LM head a DFlash draft shares) and the
user's DFlash speculative config, so vLLM loads the draft, sizes and binds its
KV cache and builds its attention backend. Its scheduler never gets a
request; each job calls the proposer directly.

A request's context K/V depends only on each token's hidden states and
position, so nothing rolls back: rejected tokens are never sent, and the
slots the k + 1 query tokens wrote are overwritten by the context that
follows. A job line::

    {"job": 7, "release": [ids], "context": {"shm": ..., "seq": 3, "shape": [rows, width],
     "dtype": "bfloat16", "entries": [[id, first position, rows], ...]},
     "draft": [ids], "next": [the token each drafts after], "k": 2}

and its reply::

    {"job": 7, "drafts": [[...], ...], "resync": [ids whose context was lost], "draft_s": 0.004}

A request whose context has a gap (rows overwritten in the shared segment,
blocks run out) is reported in ``resync`` and dropped: the target drafts no
more for it until it is released and starts again from its first token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from minedraft.process_drafter.draft_engine.context_blocks import ContextBlocks, RequestBlocks
from minedraft.process_drafter.context_channel import ContextReader


@dataclass
class _Context(RequestBlocks):
    """One request's context in the draft's KV cache: positions 0..length-1."""

    length: int = 0
    last_row: torch.Tensor | None = None  # the hidden states of position length - 1


class DFlashDraftEngine:
    """Jobs for vLLM's DFlash proposer in this process, its KV cache in blocks of ours."""

    def __init__(self, llm, k: int) -> None:
        from vllm.v1.attention.backend import CommonAttentionMetadata

        self._metadata = CommonAttentionMetadata
        self.llm = llm  # kept: its engine core owns the KV cache, unbound when the engine is collected
        core = llm.llm_engine.engine_core.engine_core  # this process's engine core
        self.runner = core.model_executor.driver_worker.worker.model_runner
        self.proposer = self.runner.drafter
        self.device = self.runner.device  # the rows and the proposer's inputs go there (untried on a GPU)
        self.dtype = self.runner.model_config.dtype  # the rows arrive in the target's
        self.k = k
        self.max_model_len = self.runner.max_model_len
        self.block_size = self.proposer.block_size
        self.max_blocks = -(-self.max_model_len // self.block_size)
        # The scheduler, which never runs a request here, owns no block.
        self.blocks = ContextBlocks(self.runner.kv_cache_config.num_blocks, self.block_size)
        self.requests: dict[str, _Context] = {}
        self.reader = ContextReader()
        self.context_layers = list(self.runner._get_eagle3_aux_layers_from_config() or ())

    def warm_up(self) -> None:
        """The first calls' allocations, before the target waits on this engine."""
        rows = torch.zeros(4, self.proposer.model.model.fc.input_size, dtype=self.runner.model_config.dtype)
        self._ensure({"warmup": len(rows) + self.k + 1})
        self.requests["warmup"].length, self.requests["warmup"].last_row = len(rows), rows[-1:]
        self._precompute({"warmup": (0, rows)})
        self._draft([("warmup", 1)], self.k)
        self.release(["warmup"])

    # -------------------------------------------------------------- jobs
    def handle(self, job: dict) -> dict:
        started = time.perf_counter()
        self.release(job.get("release", ()))
        lost: list[str] = []
        fresh = self._take_context(job.get("context"), lost)
        self.release(lost)
        full = self._precompute(fresh)
        self.release(full)
        lost += full
        depth = job.get("k", self.k)
        wanted = [(r, t) for r, t in zip(job.get("draft", ()), job.get("next", ())) if r in self.requests
                  and self.requests[r].length > 0 and self.requests[r].length + depth + 1 <= self.max_model_len]
        room = self._ensure({r: self.requests[r].length + depth + 1 for r, _ in wanted})
        drafted = [(r, t) for r, t in wanted if room[r]]  # the others: no blocks for their queries now
        drafts = self._draft(drafted, depth) if drafted and depth > 0 else {}
        return {"job": job["job"], "drafts": [drafts.get(r, []) for r in job.get("draft", ())],
                "resync": sorted(set(lost)), "draft_s": round(time.perf_counter() - started, 6)}

    def release(self, req_ids) -> None:
        for req_id in req_ids:
            context = self.requests.pop(req_id, None)
            if context is not None:
                self.blocks.release(context)

    # -------------------------------------------------------------- context
    def _take_context(self, where: dict[str, Any] | None, lost: list[str]) -> dict[str, tuple[int, torch.Tensor]]:
        """Per request, the first position and rows this job brings; requests with a gap go to ``lost``."""
        if not where:
            return {}
        rows = self.reader.read(where)
        fresh: dict[str, tuple[int, torch.Tensor]] = {}
        offset = 0
        for req_id, start, count, tokens, prefix in where["entries"]:
            part, offset = (None if rows is None else rows[offset:offset + count]), offset + count
            context = self.requests.get(req_id)
            if context is None:  # after a prefix the target took from its cache: ours, or a gap
                context = self.requests[req_id] = _Context()
                if start and prefix is not None and len(prefix) == start and self.blocks.share(context, prefix):
                    context.length = start
            if part is None or start > context.length or req_id in lost:
                lost.append(req_id)
                continue
            context.tokens[start:] = tokens
            # A copy: a view would keep the job's whole buffer alive for as long as the request.
            context.length, context.last_row = start + count, part[-1:].clone()
            if req_id in fresh:  # a second step's rows of the same request, in order
                first, earlier = fresh[req_id]
                part, start = torch.cat([earlier[: start - first], part]), first
            fresh[req_id] = (start, part)
        for req_id in lost:
            fresh.pop(req_id, None)
        return fresh

    def _ensure(self, lengths: dict[str, int]) -> dict[str, bool]:
        """Blocks for each request's first ``lengths`` positions; False where they ran out."""
        return {r: self.blocks.grow(self.requests.setdefault(r, _Context()), n) for r, n in lengths.items()}

    def _slots(self, req_id: str, positions: torch.Tensor) -> torch.Tensor:
        blocks = torch.tensor(self.requests[req_id].blocks, dtype=torch.int64)
        return blocks[positions // self.block_size] * self.block_size + positions % self.block_size

    @torch.inference_mode()
    def _precompute(self, fresh: dict[str, tuple[int, torch.Tensor]]) -> list[str]:
        """Context K/V of requests this job does not draft for (their rows came all the same); the
        requests it found no blocks for (their context now has a gap)."""
        room = self._ensure({r: s + len(rows) for r, (s, rows) in fresh.items()})
        items = [(r, s, rows) for r, (s, rows) in fresh.items() if room[r]]
        if not items:
            return [r for r, ok in room.items() if not ok]
        positions = [torch.arange(s, s + len(rows)) for _, s, rows in items]
        slots = torch.cat([self._slots(r, p) for (r, _, _), p in zip(items, positions)])
        model, device = self.proposer.model, self.device
        model.precompute_and_store_context_kv(
            model.combine_hidden_states(torch.cat([rows for _, _, rows in items]).to(device, self.dtype)),
            torch.cat(positions).to(device), slots.to(device))
        for req_id, _, _ in items:
            self.blocks.register(self.requests[req_id], self.requests[req_id].length)
        return [r for r, ok in room.items() if not ok]

    # -------------------------------------------------------------- drafts
    @torch.inference_mode()
    def _draft(self, drafted: list[tuple[str, int]], depth: int) -> dict[str, list[int]]:
        """One DFlash forward for ``drafted`` (request, the token after its context), each request's
        context in the KV cache already: vLLM's proposer is given its last row again (rewriting that
        slot changes nothing), from which it places the queries."""
        contexts = [self.requests[r] for r, _ in drafted]
        seq_lens = torch.tensor([c.length for c in contexts], dtype=torch.int32)
        query_start = torch.arange(len(drafted) + 1, dtype=torch.int32)
        block_table = torch.zeros(len(drafted), self.max_blocks, dtype=torch.int32)
        for row, context in enumerate(contexts):
            block_table[row, : len(context.blocks)] = torch.tensor(context.blocks, dtype=torch.int32)
        device, n = self.device, len(drafted)
        metadata = self._metadata(
            query_start_loc=query_start.to(device), query_start_loc_cpu=query_start, seq_lens=seq_lens.to(device),
            seq_lens_cpu_upper_bound=seq_lens, num_reqs=n, num_actual_tokens=n, max_query_len=1,
            max_seq_len=int(seq_lens.max()), block_table_tensor=block_table.to(device),
            slot_mapping=torch.zeros(n, dtype=torch.int64, device=device), causal=True)
        drafts = self.proposer.propose(
            num_speculative_tokens=depth, target_token_ids=torch.zeros(n, dtype=torch.int32, device=device),
            target_positions=(seq_lens - 1).to(device, torch.int64),
            target_hidden_states=torch.cat([c.last_row for c in contexts]).to(device, self.dtype),
            next_token_ids=torch.tensor([t for _, t in drafted], dtype=torch.int32, device=device),
            token_indices_to_sample=None, common_attn_metadata=metadata, sampling_metadata=None)
        return {req_id: row for (req_id, _), row in zip(drafted, drafts.tolist())}


def dflash_engine_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    """``LLM`` keyword arguments: the target's config without its layers, the user's DFlash draft."""
    from minedraft.process_drafter.draft_engine.dflash_host import ARCHITECTURE

    return {**spec["engine"], "hf_overrides": {"architectures": [ARCHITECTURE]}}


def start_dflash(spec: dict[str, Any]) -> DFlashDraftEngine:
    from vllm import LLM, ModelRegistry

    from minedraft.process_drafter.draft_engine.dflash_host import ARCHITECTURE, DFlashTargetHead

    ModelRegistry.register_model(ARCHITECTURE, DFlashTargetHead)
    engine = DFlashDraftEngine(LLM(**dflash_engine_kwargs(spec)), spec["k"])
    engine.warm_up()
    return engine
