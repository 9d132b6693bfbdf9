"""This worker's place in the target's tensor-parallel group.

A worker-level fact, kept low in the layers (tests/unit/test_layering.py) because both the
worker (minedraft/worker/runner_mixin.py) and the process drafter's proposer, which vLLM builds
inside each worker, read it.
"""

from __future__ import annotations


def tensor_parallel_rank() -> int:
    """This worker's rank in the target's tensor-parallel group (0 where none is set up)."""
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank, model_parallel_is_initialized

    return get_tensor_model_parallel_rank() if model_parallel_is_initialized() else 0
