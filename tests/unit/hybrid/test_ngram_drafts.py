"""minedraft/hybrid/ngram_drafts.py on vLLM's own n-gram matcher: a request's draft is what followed the
first occurrence of the longest n-gram ending its text, as vLLM's ``method: ngram`` drafts it, with the
source's limits; and through MineDraftScheduler, drafts deeper than K verified. Each check runs in a fresh
interpreter: the matcher imports numba, which this process must not (fresh_process.py)."""

from __future__ import annotations

import numpy as np
import pytest
from fresh_process import FreshProcess

FILE = list(range(100, 160))  # a "source file" of 60 tokens the prompt holds and the answer returns
PROMPT = [1, 2, 3] + FILE + [4, 5]


def _source(max_model_len: int = 512):
    from minedraft.config.hybrid import NgramLimits
    from minedraft.hybrid.ngram_drafts import NgramDrafts

    return NgramDrafts(NgramLimits(max_depth=16, prompt_lookup_min=2, prompt_lookup_max=4), max_model_len)


def _drafts_a_copy_to_the_source_s_depth() -> None:
    from minedraft.hybrid.ngram_drafts import SURVIVAL

    draft = _source().draft("r", PROMPT + FILE[:6], len(PROMPT))
    assert draft.token_ids == tuple(FILE[6:22])  # 16: the source's depth, past a model drafter's K
    assert draft.probs == pytest.approx([SURVIVAL ** j for j in range(1, 17)])  # a prior, falling
    assert draft.score == pytest.approx(sum(draft.probs))


def _drafts_what_vllm_s_ngram_proposer_drafts() -> int:
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

    source, rng, drafted = _source(), np.random.default_rng(0), 0
    for _ in range(40):
        tokens = [int(t) for t in rng.integers(0, 6, size=int(rng.integers(8, 60)))]
        ours = source.draft("r", tokens, 4, limit=5)
        vllm = _find_longest_matched_ngram_and_propose_tokens(np.asarray(tokens, dtype=np.int32), 2, 4, 512, 5)
        assert ours.token_ids == tuple(int(t) for t in vllm)
        drafted += bool(ours.token_ids)
    return drafted


def _limits() -> None:
    from minedraft.hybrid.draft import NO_DRAFT

    source = _source(max_model_len=len(PROMPT) + 10)
    assert source.draft("r", PROMPT, len(PROMPT)) == NO_DRAFT  # no output yet: its prompt computes
    assert source.draft("r", PROMPT + [7, 8], len(PROMPT)) == NO_DRAFT  # "5, 7, 8" seen nowhere before
    assert len(source.draft("r", PROMPT + FILE[:6], len(PROMPT), limit=3).token_ids) == 3
    # 65 + 6 tokens of 75: room for 3 more at most (vLLM's max_model_len - num_tokens - 1).
    assert len(source.draft("r", PROMPT + FILE[:6], len(PROMPT)).token_ids) == 3
    assert source.draft("r", PROMPT + FILE[:10], len(PROMPT)) == NO_DRAFT


def _through_the_scheduler(model_dir) -> tuple[int, int, int, int]:
    from test_hybrid_scheduler import repeats_itself

    return repeats_itself(model_dir, "ngram")


@pytest.fixture(scope="module")
def fresh():
    with FreshProcess() as process:
        yield process


def test_an_answer_that_returns_its_prompt_s_file_is_drafted_to_the_source_s_depth(fresh):
    fresh.run(_drafts_a_copy_to_the_source_s_depth)


def test_it_drafts_what_vllm_s_ngram_proposer_drafts_and_only_that(fresh):
    assert fresh.run(_drafts_what_vllm_s_ngram_proposer_drafts) >= 10  # matches found: not all empty


def test_limits_a_prompt_still_computing_no_match_and_the_model_length(fresh):
    fresh.run(_limits)


def test_a_request_that_repeats_itself_verifies_ngram_drafts_deeper_than_k(fresh, model_dir):
    """As suffix decoding's (test_hybrid_scheduler.py), with n-gram matching as the second source."""
    deepest, lookup_requests, lookup_accepted, accepted = fresh.run(_through_the_scheduler, model_dir)
    assert deepest == 8 and lookup_requests > 0
    assert accepted >= lookup_accepted > 3 * lookup_requests
