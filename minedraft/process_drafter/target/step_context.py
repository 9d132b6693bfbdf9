"""A step's context for a DFlash draft in its own process: which of the target's hidden states it keeps.

vLLM's DFlash drafter, in the target's worker, projects the target's hidden
states (auxiliary layers side by side) of every token the target computed and
kept into its context K/V. For the process drafter the runner copies those
rows out each step and the proposer sends them with its next job
(process_drafter/target/context_queue.py). Per request of the step, in the batch's
row order (the order of the step's tokens):

* a prompt chunk: all its tokens (a chunk that ends the prompt also samples
  the first output token, which is not context yet: it has no hidden state);
* a decode: the token it was given and the drafts the target accepted, not
  the rejected ones (``len(sampled) - 1`` of its drafts were accepted).
"""

from __future__ import annotations

import torch


def step_context(req_ids: list[str], scheduler_output, sampled_token_ids: list[list[int]],
                 aux_hidden_states: list[torch.Tensor], token_ids) -> tuple[list[list], list[torch.Tensor]]:
    """Per request computed in the step: ``[request id, position of its first token, rows, their
    tokens, the prefix]`` and its rows of the auxiliary hidden states (side by side), on the CPU.
    ``token_ids``: the batch's token table (rows as ``req_ids``). The prefix is the tokens before the
    first row of a request new or resumed in this step, whose prompt prefix came from the target's
    prefix cache (None otherwise): the drafter finds that context in a prefix cache of its own
    (process_drafter/draft_engine/context_blocks.py)."""
    computed = _computed_before(scheduler_output)
    starting = {r.req_id for r in scheduler_output.scheduled_new_reqs} | set(
        scheduler_output.scheduled_cached_reqs.resumed_req_ids)
    entries, spans, start = [], [], 0
    for row, req_id in enumerate(req_ids):
        scheduled = scheduler_output.num_scheduled_tokens.get(req_id, 0)
        if not scheduled:
            continue
        drafts = len(scheduler_output.scheduled_spec_decode_tokens.get(req_id, ()))
        sampled = len(sampled_token_ids[row]) if row < len(sampled_token_ids) else 0
        count = scheduled if not sampled else scheduled - drafts + sampled - 1
        first = computed[req_id]
        prefix = token_ids[row, :first].tolist() if req_id in starting and first else None
        entries.append([req_id, first, count, token_ids[row, first:first + count].tolist(), prefix])
        spans.append((start, count))
        start += scheduled
    if not entries:
        return [], []
    index = torch.cat([torch.arange(s, s + c) for s, c in spans]).to(aux_hidden_states[0].device)
    rows = torch.cat([h.index_select(0, index) for h in aux_hidden_states], dim=-1).to("cpu")
    return entries, list(rows.split([c for _, c in spans]))


def _computed_before(scheduler_output) -> dict[str, int]:
    """Each scheduled request's computed tokens before the step: the position of its first token."""
    computed = {r.req_id: r.num_computed_tokens for r in scheduler_output.scheduled_new_reqs}
    cached = scheduler_output.scheduled_cached_reqs
    computed.update(zip(cached.req_ids, cached.num_computed_tokens))
    return computed
