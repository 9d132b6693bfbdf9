"""minedraft/worker/target_cores.py: the target's worker on the cores VLLM_CPU_OMP_THREADS_BIND names."""

from __future__ import annotations

import os
import threading

import pytest
import torch
from vllm.v1.worker.cpu_worker import CPUWorker

from minedraft.worker.cpu_worker import MineDraftCPUWorker
from minedraft.worker.target_cores import CoreBinding, bind_to_named_cores, target_cores


@pytest.fixture
def no_vllm_binding(monkeypatch):
    for name in ("OMP_PLACES", "KMP_AFFINITY", "GOMP_CPU_AFFINITY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("bind", "cores"), [("0", (0,)), ("0,2", (0, 2)), ("2-3", (2, 3))])
def test_the_target_takes_the_one_list_beside_a_drafter_on_other_cores(monkeypatch, no_vllm_binding, bind, cores):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", bind)
    assert target_cores({1}) == cores


@pytest.mark.parametrize("bind", [None, "auto", "nobind", "all", "0|1", "1", "0-1"])
def test_the_target_is_left_without_one_list_of_cores_of_its_own(monkeypatch, no_vllm_binding, bind):
    # No list, one per rank, or cores the drafter has too: bound, the target could not use the others.
    if bind is None:
        monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    else:
        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", bind)
    assert target_cores({1}) is None


def test_the_target_is_left_where_vllm_bound_its_worker_or_no_drafter_has_cpu_cores(monkeypatch, no_vllm_binding):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    assert target_cores(None) is None  # a drafter on a GPU, or none
    monkeypatch.setenv("OMP_PLACES", "{0}")  # vLLM's multiprocess executor started this worker bound
    assert target_cores({1}) is None


def _in_a_thread(body):
    """``body()`` in a fresh thread (its affinity and torch's pool size are restored by the test itself)."""
    out, errors = [], []

    def run():
        try:
            out.append(body())
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def test_a_binding_holds_the_calling_thread_and_torch_s_pool_until_restored():
    core = min(os.sched_getaffinity(0))
    threads = torch.get_num_threads()

    def bind_then_restore():
        before = os.sched_getaffinity(0)
        binding = CoreBinding((core,))
        binding.apply()
        bound = (os.sched_getaffinity(0), torch.get_num_threads())
        binding.restore()
        binding.restore()  # twice: nothing more
        return before, bound, (os.sched_getaffinity(0), torch.get_num_threads())

    try:
        before, bound, restored = _in_a_thread(bind_then_restore)
    finally:
        torch._C.set_num_threads(threads)
    assert bound == ({core}, 1)
    assert restored == (before, threads)


def test_a_benchmark_process_binds_where_the_variable_lists_cores(monkeypatch):
    core = min(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    assert bind_to_named_cores() is None
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", str(core))

    def bind():
        binding = bind_to_named_cores()
        try:
            return binding.cores, os.sched_getaffinity(0)
        finally:
            binding.restore()

    try:
        assert _in_a_thread(bind) == ((core,), {core})
    finally:
        torch._C.set_num_threads(threads)


def test_the_worker_undoes_its_binding_at_shutdown(monkeypatch):
    monkeypatch.setattr(CPUWorker, "shutdown", lambda self: None)
    restored = []
    worker = MineDraftCPUWorker.__new__(MineDraftCPUWorker)  # only its shutdown
    worker.model_runner = None
    worker._binding = type("Binding", (), {"restore": lambda self: restored.append(True)})()
    worker.shutdown()
    assert restored == [True]
