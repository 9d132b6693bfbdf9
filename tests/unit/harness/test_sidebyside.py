"""Which cores two_at_a_time places engines on: a worker's share where ``make test`` bound its engines."""

import os
import threading

import pytest

from harness.sidebyside import engine_cores, two_at_a_time


@pytest.mark.parametrize(("bind", "cores"), [("1", [1]), ("0,2", [0, 2]), ("0-3,5", [0, 1, 2, 3, 5])])
def test_engine_cores_are_those_the_binding_lists(monkeypatch, bind, cores):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", bind)
    assert engine_cores() == cores


@pytest.mark.parametrize("bind", [None, "auto", "all", "0|1"])
def test_engine_cores_are_this_process_s_without_one_list(monkeypatch, bind):
    if bind is None:
        monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    else:
        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", bind)
    assert engine_cores() == sorted(os.sched_getaffinity(0))


def test_one_core_runs_one_engine_at_a_time_in_the_inherited_binding(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "1")
    assert two_at_a_time({"a": lambda env: env, "b": lambda env: env}) == {"a": {}, "b": {}}


def test_two_cores_run_two_engines_at_once_each_on_its_own(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "4,7")
    both = threading.Barrier(2, timeout=30)  # broken (an error) unless the two runs are in flight together

    def run(env: dict[str, str]) -> str:
        both.wait()
        return env["VLLM_CPU_OMP_THREADS_BIND"]

    assert sorted(two_at_a_time({"a": run, "b": run}).values()) == ["4", "7"]
