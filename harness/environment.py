"""The environment tests and benchmarks run vLLM in by default, set in one place.

vLLM on its CPU platform with a 1 GiB KV cache, offline (the kit is local).
Tests run MineDraft's default (mode auto) wherever they do not set a mode: a test
about parallel steps pins them itself (``harness.engine_args.engine_kwargs``'s
``minedraft_parallel``). A variable already set is left as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
PYTEST_ENV = CPU_ENV


def set_defaults(env: Mapping[str, str] = CPU_ENV) -> None:
    """``os.environ.setdefault`` for each variable of ``env``."""
    for name, value in env.items():
        os.environ.setdefault(name, value)
