"""minedraft/hybrid/suffix_drafts.py against arctic-inference's real suffix cache: a request's draft and
score, its tree fed from its tokens once and in order however seldom it is asked, and its limits."""

from __future__ import annotations

import numpy as np
import pytest

from minedraft.hybrid.suffix_drafts import NO_DRAFT, SuffixDrafts, SuffixLimits

pytest.importorskip("arctic_inference.suffix_decoding")

FILE = list(range(100, 160))  # a "source file" of 60 tokens the prompt holds and the answer returns
PROMPT = [1, 2, 3] + FILE + [4, 5]


def tokens(*parts) -> np.ndarray:
    return np.array([t for part in parts for t in part], dtype=np.int32)


def drafts(max_depth: int = 16, max_model_len: int = 512, max_tree_depth: int = 24) -> SuffixDrafts:
    return SuffixDrafts(SuffixLimits(max_depth=max_depth, max_tree_depth=max_tree_depth), max_model_len)


def test_an_answer_that_returns_its_prompt_s_file_is_drafted_deep_with_a_high_score():
    source = drafts(max_tree_depth=64)  # vLLM's suffix_decoding_max_tree_depth: match and draft together
    draft = source.draft("r", tokens(PROMPT, FILE[:16]), len(PROMPT))
    assert draft.token_ids == tuple(FILE[16:32])  # the source's own depth, past a model drafter's K
    assert draft.match_len >= 16 and draft.score >= 0.5 * len(draft.token_ids)  # counts seen: a real estimate
    # vLLM's suffix_decoding_max_spec_factor (1.0): a draft at most as long as its match.
    assert source.draft("s", tokens(PROMPT, FILE[:6]), len(PROMPT)).token_ids == tuple(FILE[6:12])
    assert source.draft("other", tokens([7, 8, 9, 10], [11]), 4) == NO_DRAFT or \
        source.draft("other", tokens([7, 8, 9, 10], [11]), 4).score < 1


@pytest.mark.parametrize("asked_every", [1, 3, 7])
def test_a_request_asked_seldom_drafts_as_one_asked_every_step(asked_every):
    """Its tree is fed what its tokens gained since it was last asked, once, in order: the same tree as a
    request asked at every step (a request drafted by the model drafter meanwhile, or sitting out a step)."""
    every, seldom = drafts(), drafts()
    answer = FILE[:5] + [9, 9] + FILE[10:30]  # a change in the middle of the copy
    for n in range(1, len(answer) + 1):
        expected = every.draft("r", tokens(PROMPT, answer[:n]), len(PROMPT))
        if n % asked_every == 0:
            assert seldom.draft("r", tokens(PROMPT, answer[:n]), len(PROMPT)) == expected
    # The output fed once: a second ask at the same tokens changes nothing.
    assert seldom.draft("r", tokens(PROMPT, answer), len(PROMPT)) == every.draft("r", tokens(PROMPT, answer),
                                                                                  len(PROMPT))


def test_limits_a_prompt_still_computing_and_the_model_length():
    source = drafts(max_depth=16, max_model_len=len(PROMPT) + 10)
    assert source.draft("r", tokens(PROMPT), len(PROMPT)) == NO_DRAFT  # no output yet: its prompt computes
    assert len(source.draft("r", tokens(PROMPT, FILE[:6]), len(PROMPT), limit=3).token_ids) == 3
    # 71 + 6 tokens of 75: room for 3 more at most (vLLM's max_model_len - num_tokens - 1).
    assert len(source.draft("r", tokens(PROMPT, FILE[:6]), len(PROMPT)).token_ids) == 3
    assert source.draft("r", tokens(PROMPT, FILE[:10]), len(PROMPT)) == NO_DRAFT


def test_a_released_request_s_output_serves_later_requests_and_its_id_starts_afresh():
    source = drafts()
    answer = [50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61]
    source.draft("r", tokens([1, 2], answer), 2)
    source.release(["r", "never-seen"])
    later = source.draft("s", tokens([3, 4], answer[:4]), 2)  # another prompt, the same answer begins
    assert later.token_ids[:4] == tuple(answer[4:8])
    again = source.draft("r", tokens([5, 6, 7], [8]), 3)  # the id used again: a new request's tree
    assert 50 not in again.token_ids
