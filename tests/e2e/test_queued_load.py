"""The benchmarks' queued load (``benchmarks/sweep.py``, ``max_concurrency``) on a real engine: at most N
requests run, each queued one is admitted as one finishes, and the outputs come back in the prompts' order,
the same tokens as one closed batch."""

from __future__ import annotations

import pytest

from benchmarks.sweep import _generate
from harness.engine_args import engine_kwargs
from modelkit import build_kit

PROMPTS = [[11 + i, 12 + 2 * i, 13 + 3 * i, 14 + i] for i in range(5)]
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def llm():
    from vllm import LLM

    llm = LLM(**engine_kwargs("no_sd", str(build_kit().target), max_model_len=128))
    yield llm
    llm.llm_engine.engine_core.shutdown()  # its engine core process ends with the module, not the pytest worker


@pytest.mark.parametrize("max_concurrency", [1, 2])
def test_a_queued_batch_returns_the_closed_batchs_tokens_in_order(llm, max_concurrency):
    closed = _generate(llm, PROMPTS, MAX_TOKENS)
    queued = _generate(llm, PROMPTS, MAX_TOKENS, max_concurrency=max_concurrency)
    assert [list(o.outputs[0].token_ids) for o in queued] == [list(o.outputs[0].token_ids) for o in closed]
    assert [o.prompt_token_ids for o in queued] == PROMPTS


def test_a_queued_request_starts_after_the_one_before_it_finishes_at_concurrency_one(llm):
    outputs = _generate(llm, PROMPTS, MAX_TOKENS, max_concurrency=1)
    for before, after in zip(outputs, outputs[1:]):
        assert after.metrics.first_token_ts >= before.metrics.last_token_ts
    # A closed batch's requests run together: the second's first token comes before the first's last.
    closed = _generate(llm, PROMPTS[:2], MAX_TOKENS)
    assert closed[1].metrics.first_token_ts < closed[0].metrics.last_token_ts
