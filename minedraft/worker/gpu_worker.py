"""MineDraftGPUWorker: vLLM's GPU worker building MineDraft's MRV1 runner through its
``_make_model_runner`` hook (no patch needed, unlike the CPU worker)."""

from __future__ import annotations

from minedraft._version import require_supported_vllm

require_supported_vllm()

from vllm.v1.worker.gpu_worker import Worker

from minedraft.lifetime import end_with_vllm_parent
from minedraft.worker.gpu_model_runner import MineDraftGPUModelRunner


class MineDraftGPUWorker(Worker):
    def init_device(self) -> None:
        end_with_vllm_parent()  # as MineDraftCPUWorker's: no worker outlives its engine core
        super().init_device()

    def _make_model_runner(self) -> MineDraftGPUModelRunner:
        if self.use_v2_model_runner:  # the front end forces MRV1; checked again in this process
            raise RuntimeError("minedraft: MineDraft runs on vLLM's V1 model runner; "
                               "unset VLLM_USE_V2_MODEL_RUNNER (MineDraft sets it to 0).")
        return MineDraftGPUModelRunner(self.vllm_config, self.device)

    def shutdown(self) -> None:
        runner = getattr(self, "model_runner", None)
        if isinstance(runner, MineDraftGPUModelRunner):
            runner.draft_source.shutdown()
        super().shutdown()
