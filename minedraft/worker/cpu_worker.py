"""MineDraftCPUWorker: vLLM's CPU worker with MineDraft's model runner."""

from __future__ import annotations

from minedraft._version import require_supported_vllm

# Before vLLM's imports, as in scheduling/scheduler.py: ``--worker-cls`` naming this
# class on another vLLM must fail in one line, not run without its patches.
require_supported_vllm()

from vllm.v1.worker.cpu_worker import CPUWorker

from minedraft.config.drafter_device import DrafterDevice
from minedraft.config.settings import MineDraftSettings
from minedraft.lifetime import end_with_vllm_parent
from minedraft.log import get_logger
from minedraft.monkeypatch import apply_worker_patches, scoped_patch
from minedraft.worker.cpu_model_runner import MineDraftCPUModelRunner
from minedraft.worker.target_cores import CoreBinding, target_cores

logger = get_logger(__name__)


class MineDraftCPUWorker(CPUWorker):
    _binding: CoreBinding | None = None

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
        self._bind_beside_process_drafter()

    def _bind_beside_process_drafter(self) -> None:
        """The target on the cores VLLM_CPU_OMP_THREADS_BIND names, where a process drafter has cores of its own
        and vLLM did not bind this worker (target_cores.py)."""
        settings = MineDraftSettings.of(self.vllm_config)
        if settings.drafter != "process" or self.vllm_config.speculative_config is None:
            return
        cores = target_cores(DrafterDevice.parse(settings.drafter_device, "drafter_device").cpu_affinity())
        if cores is None:
            return
        self._binding = CoreBinding(cores)
        self._binding.apply()
        logger.info("MineDraft: the target's worker bound to core(s) %s (VLLM_CPU_OMP_THREADS_BIND; vLLM 0.32.0 "
                    "binds only the workers of its multiprocess executor), the draft engine on %s.",
                    ",".join(map(str, cores)), settings.drafter_device)

    def shutdown(self) -> None:
        runner = getattr(self, "model_runner", None)
        if isinstance(runner, MineDraftCPUModelRunner):
            runner.draft_source.shutdown()
        if self._binding is not None:
            self._binding.restore()
        super().shutdown()
