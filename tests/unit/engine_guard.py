"""The unit tier starts no vLLM engine: constructing one fails the test at once.

The unit tier must stay fast, so it drives configs, schedulers and KV
managers, never a model. ``refuse_engines`` replaces the constructors of
vLLM's engines: ``LLMEngine`` (behind ``LLM``), ``AsyncLLM`` (behind the
server) and ``EngineCore`` (which loads the model in process; the engine-core
child is started only by the first two). Configuration errors are raised
before any of them is built, so tests of bad configs still see their own
error. The failure is ``pytest.fail``, which ``except Exception`` does not
swallow. Child processes a test starts itself are not guarded.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

ENGINE_CLASSES = (
    ("vllm.v1.engine.llm_engine", "LLMEngine"),
    ("vllm.v1.engine.async_llm", "AsyncLLM"),
    ("vllm.v1.engine.core", "EngineCore"),
)
ENGINE_IN_UNIT_TEST = "unit tests start no vLLM engine"


def _refusing_init(cls: type):
    def __init__(self, *args, **kwargs):
        pytest.fail(f"{ENGINE_IN_UNIT_TEST}: {cls.__qualname__} was constructed; move the test to tests/e2e")

    return __init__


@contextmanager
def refuse_engines() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for module, name in ENGINE_CLASSES:
            cls = getattr(importlib.import_module(module), name)
            patch.setattr(cls, "__init__", _refusing_init(cls))
        yield
