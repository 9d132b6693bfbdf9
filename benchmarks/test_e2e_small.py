"""Small end-to-end runs through a real engine: no SD, stock SD, MineDraft.

8 requests x 32 greedy tokens on the kit's pair, k = 3. One round is one
``LLM.generate`` call. In ``make test`` each runs once (``--benchmark-disable``);
``make bench-check`` compares them with the committed baseline.
"""

from __future__ import annotations

import pytest

from modelkit import build_kit
from harness.engine_args import Speculation, engine_kwargs

MODES = ["no_sd", "stock_sd", "minedraft_parallel"]


@pytest.fixture(scope="module", params=MODES)
def engine(request):
    from vllm import LLM

    kit = build_kit()
    speculation = Speculation(str(kit.draft_perturbed), 3) if request.param != "no_sd" else None
    llm = LLM(**engine_kwargs(request.param, str(kit.target), speculation, max_model_len=512))
    yield request.param, llm
    llm.llm_engine.engine_core.shutdown()


def test_generate_8x32(benchmark, engine):
    from vllm import SamplingParams

    mode, llm = engine
    prompts = [{"prompt_token_ids": [(13 * i + j) % 500 + 3 for j in range(24)]} for i in range(8)]
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    outs = benchmark.pedantic(lambda: llm.generate(prompts, params, use_tqdm=False), rounds=3, warmup_rounds=1)
    assert [len(o.outputs[0].token_ids) for o in outs] == [32] * 8
