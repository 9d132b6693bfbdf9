"""The GPU path's parts a CPU can check (issue #15): the V1 runner forced, the GPU worker picked
with its WARNING line, the configurations the side-stream lane does not cover refused in one line,
class composition, and where each runner submits the step's draft job. The CUDA lane's ordering is
in test_lanes.py (a recording fake of torch.cuda); on a GPU, tests/gpu."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from minedraft import registry, selection
from minedraft.config.validation import _check_gpu_config, _keep_gpu_drafter_eager
from minedraft.config.errors import MineDraftConfigError
from minedraft.worker.cpu_model_runner import MineDraftCPUModelRunner
from minedraft.worker.gpu_model_runner import MineDraftGPUModelRunner
from minedraft.worker.gpu_worker import MineDraftGPUWorker
from minedraft.worker.lanes import CudaStreamLane, InlineLane
from minedraft.worker.runner_mixin import MineDraftRunnerMixin


def test_v1_model_runner_is_forced_and_a_v2_request_refused(monkeypatch):
    monkeypatch.delenv(selection.V2_RUNNER_ENV, raising=False)
    selection.force_v1_model_runner()
    import os

    import vllm.envs as envs

    assert os.environ[selection.V2_RUNNER_ENV] == "0" and envs.VLLM_USE_V2_MODEL_RUNNER is False
    monkeypatch.setenv(selection.V2_RUNNER_ENV, "1")
    with pytest.raises(MineDraftConfigError, match="VLLM_USE_V2_MODEL_RUNNER='1'"):
        selection.force_v1_model_runner()


def test_cuda_gets_the_gpu_worker_and_one_warning(monkeypatch, caplog):
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: False)
    monkeypatch.setattr(type(current_platform), "is_cuda", lambda self: True)
    with caplog.at_level(logging.WARNING):
        assert selection._default_worker_qualname() == registry.GPU_WORKER_QUALNAME
    warnings = [r for r in caplog.records if "MineDraft on CUDA" in r.getMessage()]
    assert len(warnings) == 1 and "not yet run inside vLLM on a GPU" in warnings[0].getMessage()


def _gpu_config(**changes) -> SimpleNamespace:
    config = SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=1, enable_dbo=False),
        kv_transfer_config=None, attention_config=SimpleNamespace(backend=None),
        model_config=SimpleNamespace(is_hybrid=False))
    for path, value in changes.items():
        holder, name = path.split(".") if "." in path else (None, path)
        setattr(getattr(config, holder) if holder else config, name, value)
    return config


@pytest.mark.parametrize(("change", "message"), [
    ({"parallel_config.tensor_parallel_size": 2}, "tensor parallelism > 1"),
    ({"parallel_config.enable_dbo": True}, "dual-batch overlap"),
    ({"kv_transfer_config": SimpleNamespace(kv_connector="NixlConnector")}, "KV connectors"),
    ({"attention_config.backend": "FLASHINFER"}, "FlashInfer"),
    ({"model_config.is_hybrid": True}, "hybrid"),
])
def test_what_the_gpu_lane_does_not_cover_is_refused_in_one_line(change, message):
    _check_gpu_config(_gpu_config())  # the covered configuration passes
    with pytest.raises(MineDraftConfigError, match=message) as err:
        _check_gpu_config(_gpu_config(**change))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("method", "eager_after"), [
    ("draft_model", True), ("eagle", True), ("eagle3", True), ("ngram", False)])
def test_the_in_process_drafter_runs_eager_on_gpu(method, eager_after):
    """Its CUDA graphs would share the target's graph pool while both lanes replay."""
    config = SimpleNamespace(speculative_config=SimpleNamespace(method=method, enforce_eager=None))
    _keep_gpu_drafter_eager(config)
    assert bool(config.speculative_config.enforce_eager) is eager_after


def test_runners_share_the_mixin_and_differ_in_submission_order():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    for runner, base in ((MineDraftCPUModelRunner, CPUModelRunner), (MineDraftGPUModelRunner, GPUModelRunner)):
        mro = runner.__mro__
        assert mro.index(MineDraftRunnerMixin) < mro.index(base)
    assert MineDraftCPUModelRunner.SUBMIT_BEFORE_TARGET and not MineDraftGPUModelRunner.SUBMIT_BEFORE_TARGET


class _Target:
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        self.log.append("target forward")
        return "output"


class _Runner(MineDraftRunnerMixin, _Target):
    def __init__(self, submit_before_target: bool):  # no vLLM runner behind it: only the step order
        self.SUBMIT_BEFORE_TARGET = submit_before_target
        self.log, self.step_profiler, self.remote_drafter = [], None, None

    def _submit_deferred_job(self, planned):
        self.log.append("submit job")

    def _collect_stale_job(self):
        self.log.append("drop stale drafts")


@pytest.mark.parametrize(("before", "order"), [
    (True, ["submit job", "target forward"]),  # CPU: the lane thread runs beside the forward
    (False, ["drop stale drafts", "target forward", "submit job"]),  # GPU: the target's launch first
])
def test_where_the_job_is_submitted(before, order):
    from vllm.v1.core.sched.output import SchedulerOutput

    from minedraft.scheduling.output import MineDraftSchedulerOutput

    runner = _Runner(before)
    plan = MineDraftSchedulerOutput.extend(SchedulerOutput.make_empty(), [], True)
    assert runner.execute_model(plan) == "output"
    assert runner.log == order


def test_gpu_runner_lanes(monkeypatch):
    made = []
    monkeypatch.setattr("minedraft.worker.gpu_model_runner.CudaStreamLane",
                        lambda device: made.append(device) or "cuda lane")

    def lane(lane_setting, method):
        stub = SimpleNamespace(settings=SimpleNamespace(lane=lane_setting), device="cuda:0",
                               speculative_config=SimpleNamespace(method=method))
        return MineDraftGPUModelRunner._make_draft_lane(stub)

    assert lane("overlap", "draft_model") == "cuda lane" and made == ["cuda:0"]
    assert isinstance(lane("serial", "draft_model"), InlineLane)
    assert isinstance(lane("overlap", "ngram"), InlineLane)  # host code: inline after the target's launch


def test_gpu_worker_refuses_the_v2_runner():
    stub = SimpleNamespace(use_v2_model_runner=True)
    with pytest.raises(RuntimeError, match="V1 model runner"):
        MineDraftGPUWorker._make_model_runner(stub)


def test_gpu_runner_announces_captures_to_its_cuda_lane():
    lane = CudaStreamLane.__new__(CudaStreamLane)
    calls = []
    lane.captured = lambda: calls.append("captured")
    MineDraftGPUModelRunner._on_captured(SimpleNamespace(draft_lane=lane), job=None)
    MineDraftGPUModelRunner._on_captured(SimpleNamespace(draft_lane=InlineLane()), job=None)
    assert calls == ["captured"]
