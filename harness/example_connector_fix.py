"""vLLM 0.32's ExampleConnector with patches/0010-example-connector-roles-and-short-prompts.patch.

Loaded by vLLM through ``kv_connector_module_path`` (``harness.example_connector_fix``) in the
disaggregated prefill/decode test and benchmark (tests/e2e/test_disaggregated.py,
benchmarks/disaggregated.py): 1P1D on CPU. Unpatched, the connector:

* stores a prompt with the blocks of its first step only, so a prompt computed in chunks is stored in
  part and its consumer fails on the shape of what it loads ("shape mismatch: value tensor of shape
  [640, 2, 64] cannot be broadcast to indexing result of shape [1408, 2, 64]" on CPU, where the
  server's 2,048-token budget cut the second of two prompts); here a store waits for the step that
  computes the prompt's last stored block and takes all of its blocks;
* answers a one-token prompt with -block_size tokens to load once anything was stored under the
  empty prefix, and tokens computed locally beyond what it stored with a negative count; vLLM's
  Prometheus counter of connector hits then ends the engine ("Counters can only be incremented by
  non-negative amounts");
* stores prompts as a consumer too: the decode instance of the test then ended on a layer file
  missing from a folder it had matched (2026-11-27).
"""

from __future__ import annotations

import dataclasses

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector, align_to_block_size


@dataclasses.dataclass
class _PendingStore:
    """A prompt a producer stores once its last stored block is computed."""

    token_ids: list[int]
    block_ids: list[int]
    mm_hashes: list[str]


class WholeBlockExampleConnector(ExampleConnector):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pending_stores: dict[str, _PendingStore] = {}

    def build_connector_meta(self, scheduler_output):
        if not self._kv_transfer_config.is_kv_producer:  # a consumer only loads what a producer stored
            meta = super().build_connector_meta(scheduler_output)
            meta.requests = [request for request in meta.requests if not request.is_store]
            return meta
        pending = self._pending_stores
        held = []
        for new in scheduler_output.scheduled_new_reqs:
            token_ids, mm_hashes = new.prompt_token_ids or [], [f.identifier for f in new.mm_features]
            if new.req_id in self._requests_need_load or self._found_match_for_prompt(token_ids, mm_hashes):
                continue
            pending[new.req_id] = _PendingStore(token_ids, list(new.block_ids[0]), mm_hashes)
            held.append(new.req_id)
        # vLLM's connector stores none of the held prompts; each is stored below once computed.
        unheld = [new for new in scheduler_output.scheduled_new_reqs if new.req_id not in held]
        meta = super().build_connector_meta(dataclasses.replace(scheduler_output, scheduled_new_reqs=unheld))
        computed = {new.req_id: new.num_computed_tokens for new in scheduler_output.scheduled_new_reqs}
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            if req_id in pending and cached.new_block_ids[i] is not None:
                blocks = list(cached.new_block_ids[i][0])
                if req_id in cached.resumed_req_ids:  # a resumed request's blocks are all new
                    pending[req_id].block_ids = blocks
                else:
                    pending[req_id].block_ids += blocks
            computed[req_id] = cached.num_computed_tokens[i]
        for req_id in [r for r in pending if r in computed]:
            store = pending[req_id]
            done = computed[req_id] + scheduler_output.num_scheduled_tokens.get(req_id, 0)
            if done >= align_to_block_size(len(store.token_ids), self._block_size):
                meta.add_request(token_ids=store.token_ids, block_ids=store.block_ids, block_size=self._block_size,
                                 is_store=True, mm_hashes=store.mm_hashes)
                del pending[req_id]
        for req_id in scheduler_output.finished_req_ids:
            pending.pop(req_id, None)
        return meta

    def _found_match_for_prompt(self, prompt_token_ids, mm_hashes) -> bool:
        if align_to_block_size(len(prompt_token_ids) - 1, self._block_size) <= 0:
            return False  # not one whole block before the last token: nothing was stored for it
        return super()._found_match_for_prompt(prompt_token_ids, mm_hashes)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        num_tokens, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return max(num_tokens, 0), load_async
