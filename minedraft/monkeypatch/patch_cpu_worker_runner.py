"""Let CPUWorker.init_device build MineDraft's model runner.

``CPUWorker.init_device`` constructs ``CPUModelRunner`` by its module-global
name. While MineDraft's worker runs ``super().init_device()`` that name points
at the runner class the worker passes in; it is restored right after. The
class comes in as an argument so this module imports nothing from
``minedraft.worker`` (the worker imports the patches, not the other way round).

Upstream diff: ``patches/0004-cpu-worker-make-model-runner.patch``.
"""

from __future__ import annotations

from minedraft.monkeypatch.patching import Patch, is_class


def make_patches(runner_cls: type) -> list[Patch]:
    import vllm.v1.worker.cpu_worker as cpu_worker

    if not issubclass(runner_cls, cpu_worker.CPUModelRunner):
        raise TypeError(f"{runner_cls.__qualname__} must subclass vLLM's CPUModelRunner")
    return [
        Patch(cpu_worker, {"CPUModelRunner": lambda original: runner_cls},
              guards={"CPUModelRunner": is_class("CPUModelRunner")})
    ]
