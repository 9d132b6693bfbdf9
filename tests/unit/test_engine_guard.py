"""The unit tier's guard (``engine_guard.py``, on for every unit test): no vLLM engine starts here."""

from __future__ import annotations

import pytest
from engine_guard import ENGINE_IN_UNIT_TEST
from scheduler_harness import fake_model_dir
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.core import EngineCore
from vllm.v1.engine.llm_engine import LLMEngine


@pytest.mark.parametrize("engine_cls", [LLMEngine, AsyncLLM, EngineCore])
def test_constructing_an_engine_fails_the_test(engine_cls):
    with pytest.raises(pytest.fail.Exception, match=f"{ENGINE_IN_UNIT_TEST}: {engine_cls.__qualname__}"):
        engine_cls(vllm_config=None, executor_class=None, log_stats=False)


def test_a_test_catching_exceptions_still_fails():
    with pytest.raises(pytest.fail.Exception, match=ENGINE_IN_UNIT_TEST):
        try:
            LLMEngine(vllm_config=None, executor_class=None, log_stats=False)
        except Exception:  # what a careless test might do; the guard is no Exception
            pass


def test_llm_fails_at_the_engine_once_its_config_is_built(tmp_path):
    from vllm import LLM

    with pytest.raises(pytest.fail.Exception, match=f"{ENGINE_IN_UNIT_TEST}: LLMEngine"):
        LLM(model=fake_model_dir(tmp_path), skip_tokenizer_init=True, dtype="float32", max_model_len=512)
