"""vLLM 0.32's ExampleConnector with patches/0010-example-connector-roles-and-short-prompts.patch, for the tests.

Loaded by vLLM through ``kv_connector_module_path`` (``tests.e2e.example_connector_fix``) in the
disaggregated prefill/decode test. Unpatched, the connector answers a one-token prompt with
-block_size tokens to load once anything was stored under the empty prefix, and tokens computed
locally beyond what it stored with a negative count; vLLM's Prometheus counter of connector hits then
ends the engine ("Counters can only be incremented by non-negative amounts"). And a consumer stores
prompts too: the decode instance of the test then ended on a layer file missing from a folder it had
matched (2026-11-27).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector, align_to_block_size


class WholeBlockExampleConnector(ExampleConnector):
    def build_connector_meta(self, scheduler_output):
        meta = super().build_connector_meta(scheduler_output)
        if not self._kv_transfer_config.is_kv_producer:  # a consumer only loads what a producer stored
            meta.requests = [request for request in meta.requests if not request.is_store]
        return meta

    def _found_match_for_prompt(self, prompt_token_ids, mm_hashes) -> bool:
        if align_to_block_size(len(prompt_token_ids) - 1, self._block_size) <= 0:
            return False  # not one whole block before the last token: nothing was stored for it
        return super()._found_match_for_prompt(prompt_token_ids, mm_hashes)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        num_tokens, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return max(num_tokens, 0), load_async
