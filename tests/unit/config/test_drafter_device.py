"""The process drafter's device strings (minedraft/config/drafter_device.py): parsed, bound to cores or GPUs."""

from __future__ import annotations

import pytest

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.drafter_device import DrafterDevice


@pytest.mark.parametrize(("text", "kind", "indices", "tp"), [
    ("cpu:1", "cpu", (1,), 1), ("cpu:2-3", "cpu", (2, 3), 1), ("cpu:4,6", "cpu", (4, 6), 1),
    ("cuda:1", "cuda", (1,), 1), ("cuda:4,5", "cuda", (4, 5), 2),
])
def test_device_strings(text, kind, indices, tp):
    device = DrafterDevice.parse(text)
    assert (device.kind, device.indices, device.tensor_parallel_size) == (kind, indices, tp)


@pytest.mark.parametrize("text", ["cpu", "gpu:1", "cuda:", "cpu:3-1", "cpu:a", "cuda:1:2"])
def test_bad_device_strings_are_one_line(text):
    with pytest.raises(MineDraftConfigError, match="expected cpu:<cores>") as err:
        DrafterDevice.parse(text)
    assert "\n" not in str(err.value)


def test_cpu_drafter_binds_its_process_and_threads_and_keeps_its_engine_in_process():
    env = DrafterDevice.parse("cpu:1").process_env({})
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert DrafterDevice.parse("cpu:1").cpu_affinity() == {1}
    # torch's OpenMP pool, made at import before the binding: one thread per core of the drafter's
    assert env["OMP_NUM_THREADS"] == "1" and DrafterDevice.parse("cpu:2-4").process_env({})["OMP_NUM_THREADS"] == "3"


def test_cuda_drafter_indices_are_relative_to_the_visible_devices():
    env = DrafterDevice.parse("cuda:1").process_env({"CUDA_VISIBLE_DEVICES": "4,5,6"})
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert DrafterDevice.parse("cuda:0,2").process_env({})["CUDA_VISIBLE_DEVICES"] == "0,2"
