"""MineDraftCPUWorker: vLLM's CPU worker with MineDraft's model runner."""

from __future__ import annotations

from minedraft._version import require_supported_vllm

# Before vLLM's imports, as in scheduling/scheduler.py: ``--worker-cls`` naming this
# class on another vLLM must fail in one line, not run without its patches.
require_supported_vllm()

from vllm.v1.worker.cpu_worker import CPUWorker

from minedraft.lifetime import end_with_vllm_parent
from minedraft.monkeypatch import apply_worker_patches, scoped_patch
from minedraft.worker.cpu_model_runner import MineDraftCPUModelRunner


class MineDraftCPUWorker(CPUWorker):
    def init_device(self) -> None:
        # A worker process (vLLM's multiprocessing executor: tensor parallelism) ends with its engine
        # core even while its main thread is stuck in a collective: vLLM's own watcher only asks that
        # thread to stop, which it cannot do from inside the collective.
        end_with_vllm_parent()
        apply_worker_patches()
        if self.use_v2_model_runner:
            raise RuntimeError(
                "minedraft: the CPU V2 model runner is not supported; "
                "set VLLM_USE_V2_MODEL_RUNNER=0."
            )
        # CPUWorker builds its runner inside init_device (it has no
        # _make_model_runner hook like the GPU worker): swap the class it uses.
        with scoped_patch("cpu_worker_runner", MineDraftCPUModelRunner):
            super().init_device()
        assert isinstance(self.model_runner, MineDraftCPUModelRunner)

    def shutdown(self) -> None:
        runner = getattr(self, "model_runner", None)
        if isinstance(runner, MineDraftCPUModelRunner):
            runner.draft_source.shutdown()
        super().shutdown()
