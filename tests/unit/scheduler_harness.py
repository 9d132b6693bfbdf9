"""A scheduler over a fake KV cache, after vLLM's tests/v1/core/utils.py.

No model runs: the test plays the worker, feeding back sampled tokens and
drafts the way MineDraft's runner does (drafts of a deferred step arrive one
step later).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from pathlib import Path

import torch
from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

BLOCK_SIZE = 16


def fake_model_dir(tmp: Path) -> str:
    (tmp / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1,
        "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 4096,
    }))
    return str(tmp)


def engine_args(model_dir: str, **kw):
    """vLLM's EngineArgs for the fake model, with ngram speculation (k = 3) unless ``kw`` says otherwise."""
    from vllm.engine.arg_utils import EngineArgs

    kw.setdefault("speculative_config", {"method": "ngram", "num_speculative_tokens": 3,
                                         "prompt_lookup_max": 3})
    return EngineArgs(model=model_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=512, **kw)


def make_scheduler(model_dir: str, scheduler_cls: type[Scheduler], *, k: int | None = 3,
                   num_blocks: int = 10000, max_num_seqs: int = 64,
                   max_num_batched_tokens: int = 2048, enable_prefix_caching: bool = False,
                   max_model_len: int | None = None, draft_model: bool = False,
                   vllm_config: VllmConfig | None = None) -> Scheduler:
    """``vllm_config``: an engine's own (e.g. ``engine_args(...).create_engine_config()``) instead.
    ``max_model_len``: ``max_num_batched_tokens`` unless given; ``draft_model``: the fake model
    drafts for itself (``method: draft_model``) instead of ngram. The policy fits every timed step
    (``warm_up_steps=0``): no fake step pays an engine's start (tests/unit/policy/test_warm_up.py tests the rule)."""
    if vllm_config is None:
        max_model_len = max_model_len or max_num_batched_tokens
        model_config = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="float32",
                                   max_model_len=max_model_len, seed=0)
        scheduler_config = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                           max_model_len=max_model_len, enable_chunked_prefill=True,
                                           is_encoder_decoder=False, watermark=0.0)
        cache_config = CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=enable_prefix_caching)
        spec = None
        if k:
            spec = (SpeculativeConfig(model=model_dir, method="draft_model", num_speculative_tokens=k,
                                      target_model_config=model_config, target_parallel_config=ParallelConfig())
                    if draft_model else SpeculativeConfig(model="ngram", num_speculative_tokens=k))
        vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                                 cache_config=cache_config, speculative_config=spec)
    cache_config = vllm_config.cache_config
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32))])
    cache_config.num_gpu_blocks = num_blocks
    scheduler = scheduler_cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config, block_size=BLOCK_SIZE,
                              hash_block_size=BLOCK_SIZE, log_stats=True,
                              structured_output_manager=StructuredOutputManager(vllm_config))
    if getattr(scheduler, "speculation", None) is not None:
        scheduler.speculation.tuning = dataclasses.replace(scheduler.speculation.tuning, warm_up_steps=0)
    return scheduler


def _hash(value) -> bytes:
    return hashlib.sha256(pickle.dumps(value)).digest()


def make_request(req_id: str, prompt_len: int, max_tokens: int, prefix: list[int] | None = None) -> Request:
    init_none_hash(_hash)
    prompt = (prefix or []) + [(hash((req_id, i)) % 900) + 10 for i in range(prompt_len)]
    return Request(request_id=req_id, prompt_token_ids=prompt,
                   sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                   pooling_params=None,
                   block_hasher=get_request_block_hasher(BLOCK_SIZE, _hash))


class FakeWorker:
    """Plays MineDraft's runner: drafts for a deferred step arrive one step later, as many as the step's
    depth (vLLM's drafter drafts at ``num_spec_tokens_to_schedule``)."""

    def __init__(self, k: int, accept: callable):
        self.k = k
        self.accept = accept  # (req_id, num_drafts) -> num accepted
        self.deferred: list[str] = []

    def step(self, scheduler, output):
        req_ids = list(output.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            if scheduler.requests[rid].is_prefill_chunk:  # vLLM's runner samples nothing for a partial prefill
                sampled.append([])
                continue
            n_drafts = len(output.scheduled_spec_decode_tokens.get(rid, []))
            sampled.append([1] * (1 + min(self.accept(rid, n_drafts), n_drafts)))
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                pooler_output=[])
        outputs = scheduler.update_from_output(output, mro)
        depth = min(self.k, output.num_spec_tokens_to_schedule)  # the step's depth: k, or the controller's
        drafts = list(self.deferred)  # the lane's job from the previous step
        self.deferred = [(rid, depth) for rid in req_ids] if getattr(output, "defer_drafts", False) else []
        if not getattr(output, "defer_drafts", False):
            drafts += [(rid, depth) for rid in req_ids]
        if output.total_num_scheduled_tokens > 0 and drafts:
            scheduler.update_draft_token_ids(DraftTokenIds([rid for rid, _ in drafts], [[2] * n for _, n in drafts]))
        return outputs


def prefilled(model_dir: str, scheduler_cls: type[Scheduler], num_requests: int, prompt_len: int,
              max_tokens: int, accept: callable = lambda rid, n: n) -> tuple[Scheduler, FakeWorker]:
    """A scheduler whose ``num_requests`` requests are past their prefill, and the fake worker (k = 3)."""
    sched = make_scheduler(model_dir, scheduler_cls)
    for i in range(num_requests):
        sched.add_request(make_request(f"r{i}", prompt_len, max_tokens))
    worker = FakeWorker(3, accept)
    worker.step(sched, sched.schedule())  # prefill
    return sched, worker
