"""Let CPUWorker.init_device build MineDraft's model runner.

``CPUWorker.init_device`` constructs ``CPUModelRunner`` by its module-global
name. While MineDraft's worker runs ``super().init_device()`` that name points
at ``MineDraftCPUModelRunner``; it is restored right after.

Upstream diff: ``patches/0004-cpu-worker-make-model-runner.patch``.
"""

from __future__ import annotations

from minedraft.monkeypatch.patching import Patch


def make_patches() -> list[Patch]:
    import vllm.v1.worker.cpu_worker as cpu_worker

    from minedraft.worker.model_runner import MineDraftCPUModelRunner

    return [Patch(cpu_worker, {"CPUModelRunner": lambda original: MineDraftCPUModelRunner})]
