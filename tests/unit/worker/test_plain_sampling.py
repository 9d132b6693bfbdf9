"""A step without drafts samples as the target alone does (minedraft/worker/plain_sampling.py).

The shortcut relies on vLLM 0.32.0's rejection sampler, at zero draft tokens, sampling
each request's bonus token with the same ``Sampler`` over the same logits: checked here on
vLLM's own classes, greedy and seeded random.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from minedraft.worker.plain_sampling import samples_as_target_alone

VOCAB, BATCH = 64, 5


@pytest.fixture(scope="module")
def samplers():
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()  # what every vLLM worker does first
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    sampler = Sampler()
    return sampler, RejectionSampler(sampler)


def _sampling_metadata(greedy: bool, seed: int, max_num_logprobs=None):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    return SamplingMetadata(
        temperature=None if greedy else torch.full((BATCH,), 0.8), all_greedy=greedy, all_random=not greedy,
        top_p=None, top_k=None,
        generators={} if greedy else {i: torch.Generator().manual_seed(seed + i) for i in range(BATCH)},
        max_num_logprobs=max_num_logprobs, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(BATCH), presence_penalties=torch.zeros(BATCH),
        repetition_penalties=torch.ones(BATCH), output_token_ids=[[] for _ in range(BATCH)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors(),
        spec_token_ids=[[] for _ in range(BATCH)])


def _zero_draft_metadata():
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    dummy = SpecDecodeMetadata.make_dummy([[] for _ in range(BATCH)], torch.device("cpu"))
    rows = torch.arange(BATCH, dtype=torch.int32)
    return dataclasses.replace(dummy, bonus_logits_indices=rows, logits_indices=rows)


@pytest.mark.parametrize("greedy", [True, False])
def test_vllm_samples_a_zero_draft_step_as_its_plain_sampler_does(samplers, greedy):
    sampler, rejection_sampler = samplers
    logits = torch.randn(BATCH, VOCAB, generator=torch.Generator().manual_seed(3))
    for seed in range(5):
        plain = sampler(logits.clone(), _sampling_metadata(greedy, seed)).sampled_token_ids
        spec = rejection_sampler(_zero_draft_metadata(), None, logits.clone(),
                                 _sampling_metadata(greedy, seed)).sampled_token_ids
        assert plain.shape == spec.shape == (BATCH, 1) and plain.dtype == spec.dtype == torch.int32
        assert plain.tolist() == spec.tolist()


def test_only_a_step_without_drafts_logprobs_or_thinking_budget_skips_the_rejection_sampler():
    zero = _zero_draft_metadata()
    plain = _sampling_metadata(True, 0)
    assert samples_as_target_alone(zero, plain)
    assert not samples_as_target_alone(None, plain)  # no speculative config: vLLM's plain path already
    assert not samples_as_target_alone(SimpleNamespace(max_spec_len=1), plain)
    assert not samples_as_target_alone(zero, _sampling_metadata(True, 0, max_num_logprobs=2))
    assert not samples_as_target_alone(zero, dataclasses.replace(plain, logprob_token_ids={0: [1]}))
    tracked = SimpleNamespace(has_tracked_requests=lambda: True)
    assert not samples_as_target_alone(zero, dataclasses.replace(plain, thinking_budget_state_holder=tracked))
    idle = SimpleNamespace(has_tracked_requests=lambda: False)
    assert samples_as_target_alone(zero, dataclasses.replace(plain, thinking_budget_state_holder=idle))
