"""The target's worker on the cores ``VLLM_CPU_OMP_THREADS_BIND`` names, beside a process drafter on CPU.

vLLM 0.32.0 applies ``VLLM_CPU_OMP_THREADS_BIND`` only in its multiprocess executor: it sets ``OMP_NUM_THREADS``
and ``OMP_PLACES`` for each worker process it starts (``vllm/utils/ompmultiprocessing.py``). A one-worker engine
(tensor parallel size 1, vLLM's uni-process executor) computes in a process whose OpenMP pool torch made at
import, one thread per core of the machine, and binds nothing: ``VLLM_CPU_OMP_THREADS_BIND=0`` leaves the
target's forwards on every core. Beside a process drafter on core 1 the pool's second thread shares the
drafter's core and every parallel region waits for it. The real pair's target (bf16, N = 1, 96 tokens;
2026-12-06, a 2-core Xeon VM) ran 6.38 tok/s alone on "core 0" (in fact both cores) and 1.08 beside the draft
model decoding on core 1; bound to core 0, 3.69 alone and 3.78 beside it: the two cores share nothing a decode
needs (``benchmarks/README.md``).

So where the drafter is a process on CPU cores, MineDraft's worker binds the thread that runs the target's
forwards (vLLM's engine core and worker share it in a one-worker engine) to the named cores and sizes torch's
pool to them, and undoes both at shutdown (an engine built in a test's process leaves it as it was). Not where
vLLM's executor bound the worker itself (its OpenMP variables are set), nor for a mask of several ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from minedraft.config.drafter_device import named_cores
from minedraft.config.environment import inherited

# The OpenMP variables vLLM's multiprocess executor sets for the workers it binds (ompmultiprocessing.py).
_VLLM_BOUND = ("OMP_PLACES", "KMP_AFFINITY", "GOMP_CPU_AFFINITY")


def target_cores(drafter_cores: set[int] | None) -> tuple[int, ...] | None:
    """The cores to bind the target's worker to: ``VLLM_CPU_OMP_THREADS_BIND``'s one list, where the drafter is
    a process on other CPU cores (``drafter_cores``) and vLLM did not bind the worker; None: leave it (bound to
    cores it shares with the drafter, it could not use the others)."""
    if not drafter_cores or any(inherited(name) for name in _VLLM_BOUND):
        return None
    cores = named_cores()
    return None if cores is None or drafter_cores.intersection(cores) else cores


@dataclass
class CoreBinding:
    """The calling thread bound to ``cores`` and torch's pool sized to them, until ``restore``."""

    cores: tuple[int, ...]
    _affinity: set[int] | None = None
    _threads: int | None = None

    def apply(self) -> None:
        import torch

        self._affinity, self._threads = os.sched_getaffinity(0), torch.get_num_threads()
        os.sched_setaffinity(0, self.cores)  # this thread: the one that runs the forwards
        # vLLM's CPU worker replaces torch.set_num_threads with a function that refuses; torch's own is here.
        torch._C.set_num_threads(len(self.cores))

    def restore(self) -> None:
        if self._affinity is None:
            return
        import torch

        os.sched_setaffinity(0, self._affinity)
        torch._C.set_num_threads(self._threads)
        self._affinity = None


def bind_to_named_cores() -> CoreBinding | None:
    """The calling thread on ``VLLM_CPU_OMP_THREADS_BIND``'s one list, for an engine of any kind built in it next
    (the benchmarks' processes: a stock engine "on core 0" would otherwise compute on every core)."""
    cores = named_cores()
    if cores is None:
        return None
    binding = CoreBinding(cores)
    binding.apply()
    return binding
