"""MineDraft's GPU model runner: vLLM's V1 (MRV1) ``GPUModelRunner`` with MineDraft's deferral
logic (``runner_mixin.py``) and the GPU lane parts of the in-process drafter: a side CUDA stream,
submitted after the target's forward is enqueued and gated by the event recorded at capture.

NOT VALIDATED INSIDE vLLM ON A GPU YET: the front end says so in one WARNING line. The lane's
ordering and memory rules are unit-tested with a recording fake of ``torch.cuda``
(``tests/unit/worker/test_lanes.py``) and torch-level on a GPU where one is present (``tests/gpu``).
"""

from __future__ import annotations

from minedraft._version import require_supported_vllm

require_supported_vllm()

from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from minedraft.config.methods import method_of
from minedraft.worker.in_process.lanes import CudaStreamLane, InlineLane, Lane
from minedraft.worker.runner_mixin import MineDraftRunnerMixin


class MineDraftGPUModelRunner(MineDraftRunnerMixin, GPUModelRunner):
    # The target's forward is launched first: the drafter's host-side launches then hide under the
    # target's GPU time, and the side stream waits only for the capture event, not the target.
    SUBMIT_BEFORE_TARGET = False

    def _make_draft_lane(self) -> Lane:
        # A drafter in host code (n-gram's numba): run inline right after the target's launch, which
        # overlaps the target's GPU time without a stream.
        if self.settings.lane == "serial" or method_of(self.speculative_config).host_code:
            return InlineLane()
        return CudaStreamLane(self.device)

    def _on_captured(self, lane: Lane) -> None:
        if isinstance(lane, CudaStreamLane):
            lane.captured()
