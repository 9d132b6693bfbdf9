"""MineDraft's CPU model runner: vLLM's ``CPUModelRunner`` with MineDraft's deferral logic
(``runner_mixin.py``) and the CPU lane parts of the in-process drafter: a thread lane, and vLLM's
CPU kernels serialised while a draft job runs beside the target."""

from __future__ import annotations

from vllm.config import CompilationMode
from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from minedraft.contract import DraftLaneError, LanePlanError
from minedraft.log import get_logger
from minedraft.monkeypatch import serialise_cpu_kernels
from minedraft.worker.in_process.lanes import Lane, ThreadLane, make_lane
from minedraft.worker.runner_mixin import MineDraftRunnerMixin

__all__ = ["DraftLaneError", "LanePlanError", "MineDraftCPUModelRunner"]

logger = get_logger(__name__)


class MineDraftCPUModelRunner(MineDraftRunnerMixin, CPUModelRunner):
    SUBMIT_BEFORE_TARGET = True  # the lane thread must be running before the target's forward starts

    def _make_draft_lane(self) -> Lane:
        return make_lane(self._lane_kind(), self.device, self.settings.lane_threads)

    def _lane_kind(self) -> str:
        kind = self.settings.lane
        if kind != "overlap":
            return kind
        if self.compilation_config.mode != CompilationMode.NONE:
            # A compiled graph calls the CPU kernels past the lock below.
            logger.warning(
                "MineDraft: the CPU overlap lane needs an eager model (--enforce-eager); "
                "drafting serially instead."
            )
            return "serial"
        return kind

    def _before_submit(self, lane: Lane, job_this_step: bool) -> None:
        """vLLM's CPU kernels need one lock while a draft job runs beside the target, and
        only then: the lane has just been joined, so nothing runs on it now."""
        if isinstance(lane, ThreadLane):
            serialise_cpu_kernels(job_this_step)
