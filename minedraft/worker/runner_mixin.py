"""MineDraft's model-runner logic shared by the CPU and GPU runners: verify on the main lane, draft on the draft lane.

In a parallel step (``scheduler_output.defer_drafts``) the runner does
everything vLLM's runner does except the drafter's forward: the call to
``drafter.propose`` is captured with copies of its inputs (``DraftJob``) and
answered with placeholders that never reach the scheduler. At the start of
the next step the job is submitted to the draft lane, where it runs while the
target verifies the other group; ``take_draft_token_ids`` joins the lane and
returns the job's drafts. The drafter therefore sees exactly the calls stock
speculative decoding makes, in the same order, one step later: its KV cache
catches up on every accepted token before it drafts.

In a fallback step ``propose`` runs inline as in vLLM, after any job still on
the lane has finished (the drafter's buffers belong to one call at a time).
So does a deferred call whose copy would exceed ``capture_max_mib`` (EAGLE's
hidden states of a long prefill chunk): its drafts are made at capture and
the next step's job only hands them over.

The contract with the scheduler is typed: every step brings a
``MineDraftSchedulerOutput`` (``defer_drafts``: capture this step's propose;
``draft_only_req_ids``: the requests whose drafts the job submitted this step
must deliver). The runner checks that the job covers every one of them.
The drafter is routed through one proxy, installed once on the drafter at
start-up (``drafter.propose``), that captures or runs the call per step.

The platform runners (``cpu_model_runner.py``, ``gpu_model_runner.py``) add
only their lane and platform parts through three hooks: ``_make_draft_lane``,
``_before_submit`` (the CPU kernel lock) and ``_on_captured`` (the CUDA
lane's capture event); ``SUBMIT_BEFORE_TARGET`` says whether a step's job
is submitted before the target's forward (a CPU thread must be running
first) or after it is enqueued (a CUDA stream: the target's launch first).
"""

from __future__ import annotations

import time

from vllm.v1.outputs import DraftTokenIds

from minedraft.config import environment
from minedraft.scheduling.output import MineDraftDraftTokenIds, MineDraftSchedulerOutput
from minedraft.process_drafter.proposer import RemoteDraftProposer
from minedraft.log import get_logger
from minedraft.config.settings import MineDraftSettings
from minedraft.worker.draft_job import DraftJob, as_lists, placeholder_drafts, snapshot_nbytes
from minedraft.worker.lanes import Lane, RemoteLane
from minedraft.worker.step_profile import StepProfiler

logger = get_logger(__name__)


class DraftLaneError(RuntimeError):
    """The draft lane failed; the engine stops with this error."""


class LanePlanError(RuntimeError):
    """The worker got a step the scheduler did not plan for MineDraft."""


class MineDraftRunnerMixin:
    """Mixed in before vLLM's runner class (``class R(MineDraftRunnerMixin, GPUModelRunner)``)."""

    SUBMIT_BEFORE_TARGET = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.settings = MineDraftSettings.of(self.vllm_config)
        self.remote_drafter = getattr(self, "drafter", None)
        if not isinstance(self.remote_drafter, RemoteDraftProposer):
            self.remote_drafter = None
        self.draft_lane: Lane = (RemoteLane(on_shutdown=self.remote_drafter.shutdown) if self.remote_drafter
                                 else self._make_draft_lane())
        self._captured_job: DraftJob | None = None
        self._lane_drafts: DraftTokenIds | None = None
        self._defer_this_step = False
        self.inline_drafts = 0  # deferred calls drafted at capture (capture_max_mib)
        profile_path = self.settings.step_profile
        self.step_profiler = StepProfiler(profile_path) if profile_path else None
        self._install_propose_proxy()
        logger.info("MineDraft draft lane: %s", type(self.draft_lane).__name__)

    # -------------------------------------------------------------- platform hooks
    def _make_draft_lane(self) -> Lane:
        raise NotImplementedError

    def _before_submit(self, job_this_step: bool) -> None:
        """Called at the start of every step, with no job on the lane."""

    def _on_captured(self, job: DraftJob) -> None:
        """Called right after a deferred ``propose`` was captured (its inputs copied)."""

    # -------------------------------------------------------------- step
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        plan = _lane_plan(scheduler_output)
        self._defer_this_step = plan.defer_drafts
        if self.step_profiler is not None:
            self.step_profiler.begin(
                len(scheduler_output.num_scheduled_tokens), len(plan.draft_only_req_ids), plan.defer_drafts
            )
        if self.remote_drafter is not None:
            self.remote_drafter.release(
                scheduler_output.finished_req_ids | (scheduler_output.preempted_req_ids or set()))
        if self.SUBMIT_BEFORE_TARGET:
            self._submit_deferred_job(plan.draft_only_req_ids)
            return super().execute_model(scheduler_output, intermediate_tensors)
        self._collect_stale_job()
        output = super().execute_model(scheduler_output, intermediate_tensors)
        self._submit_deferred_job(plan.draft_only_req_ids)
        return output

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        if self.step_profiler is not None:
            self.step_profiler.main_lane_done()
        self._collect_lane()
        lane, self._lane_drafts = self._lane_drafts, None
        inline = None if self._defer_this_step else super().take_draft_token_ids()
        if self.step_profiler is not None:
            self.step_profiler.end()
        drafts = _merge(lane, inline)
        late = self.remote_drafter.take_late() if self.remote_drafter is not None else []
        if late:
            drafts = MineDraftDraftTokenIds(drafts.req_ids, drafts.draft_token_ids, late_req_ids=late)
        return drafts

    # -------------------------------------------------------------- lane
    def _collect_stale_job(self) -> None:
        # Drafts of a job whose step had no take_draft_token_ids (an empty
        # step) are stale: drop them. The drafter's KV cache was still updated.
        self._collect_lane()
        self._lane_drafts = None

    def _submit_deferred_job(self, planned: list[str]) -> None:
        self._collect_stale_job()
        job, self._captured_job = self._captured_job, None
        missing = set(planned) - set(job.req_ids if job is not None else ())
        if missing:
            raise LanePlanError(
                f"minedraft: the scheduler planned drafts for {sorted(missing)} in this step, but the "
                "deferred draft job does not cover them (scheduler and worker disagree on the lane plan)."
            )
        self._before_submit(job is not None)
        if job is None:
            return
        if isinstance(self.draft_lane, RemoteLane):  # the job runs in the drafter's process
            self.draft_lane.submit(job)
            return
        job = _inject_fault(job, environment.injected_faults())
        run = job.run if self.step_profiler is None else self.step_profiler.timed(job.run)
        self.draft_lane.submit(run)

    def _collect_lane(self) -> None:
        """Join the lane; keep its drafts for ``take_draft_token_ids``."""
        if not self.draft_lane.busy:
            return
        try:
            result = self.draft_lane.wait()
        except Exception as e:
            raise DraftLaneError(f"minedraft draft lane failed: {e!r}") from e
        req_ids, drafts = result
        self._lane_drafts = DraftTokenIds(req_ids, as_lists(drafts))

    def _install_propose_proxy(self) -> None:
        """Route the drafter's ``propose`` through :meth:`_propose` (once, at start-up).

        vLLM's runner calls ``self.drafter.propose(...)`` from its sampling
        step; the proxy on this runner's own drafter instance decides per step
        whether the call runs now or is captured for the draft lane.
        """
        drafter = getattr(self, "drafter", None)
        if drafter is None:
            return
        real_propose = drafter.propose  # the bound method of the drafter's class

        def propose(*args, **kwargs):
            return self._propose(real_propose, args, kwargs)

        drafter.propose = propose

    def _propose(self, real_propose, args: tuple, kwargs: dict):
        if self.remote_drafter is not None:
            # The process drafter's job holds only the tokens new since its last job.
            job = self.remote_drafter.prepare(list(self.input_batch.req_ids), *args, **kwargs)
        if not self._defer_this_step:
            self._collect_lane()  # the drafter's buffers belong to one call at a time
            return real_propose(*args, **kwargs) if self.remote_drafter is None else job.run()[1]
        if self.remote_drafter is None:
            job = self._capture_or_draft_now(real_propose, args, kwargs)
            self._on_captured(job)
        self._captured_job = job
        num_reqs = self.input_batch.num_reqs
        if self.speculative_config.method in ("ngram", "custom_class"):
            return [[] for _ in range(num_reqs)]
        return placeholder_drafts(num_reqs, self.speculative_config.num_speculative_tokens, self.device)

    def _capture_or_draft_now(self, real_propose, args: tuple, kwargs: dict) -> DraftJob:
        """The deferred call with its inputs copied, or, when the copy would exceed
        ``capture_max_mib`` (EAGLE's hidden states of a long prefill chunk), its drafts
        made now, after the lane's job: the next step's job only hands them over."""
        req_ids = self.input_batch.req_ids
        nbytes = snapshot_nbytes((args, kwargs))
        if nbytes <= self.settings.capture_max_mib * 2**20:
            return DraftJob.capture(req_ids, real_propose, args, kwargs)
        if not self.inline_drafts:
            logger.info("MineDraft: a deferred draft call would copy %.1f MiB (capture_max_mib=%s); "
                        "steps like it draft inline.", nbytes / 2**20, self.settings.capture_max_mib)
        self.inline_drafts += 1
        self._collect_lane()  # the drafter's buffers belong to one call at a time
        return DraftJob.completed(req_ids, real_propose(*args, **kwargs))


def _lane_plan(scheduler_output) -> MineDraftSchedulerOutput:
    """The step's lane plan. Only an empty step (vLLM's dummy and idle paths) may
    come without one; anything else means MineDraft's scheduler is not the one
    scheduling for this worker."""
    if isinstance(scheduler_output, MineDraftSchedulerOutput):
        return scheduler_output
    if scheduler_output.total_num_scheduled_tokens == 0:
        return MineDraftSchedulerOutput.extend(scheduler_output, [], False)
    raise LanePlanError(
        f"minedraft: the worker got a {type(scheduler_output).__name__} without MineDraft's lane plan; "
        "MineDraft's worker needs MineDraft's scheduler (--scheduler-cls minedraft)."
    )


def _merge(a: DraftTokenIds | None, b: DraftTokenIds | None) -> DraftTokenIds | None:
    if a is None:
        return b
    if b is None:
        return a
    return DraftTokenIds(a.req_ids + b.req_ids, a.draft_token_ids + b.draft_token_ids)


def _inject_fault(job: DraftJob, faults: frozenset[str]) -> DraftJob:
    """Tests only (MINEDRAFT_INJECT_FAULT): a failing or a stalled draft job."""
    if "draft_lane" in faults:
        return DraftJob(job.req_ids, _raise_injected_fault, (), {})
    if "draft_lane_stall" in faults:
        return DraftJob(job.req_ids, _stalled(job.propose), job.args, job.kwargs)
    return job


def _raise_injected_fault():
    raise RuntimeError("injected draft-lane fault (MINEDRAFT_INJECT_FAULT=draft_lane)")


def _stalled(propose):
    def stalled(*args, **kwargs):
        marker = environment.fault_marker()
        if marker:
            with open(marker, "a") as f:
                f.write("draft job started\n")
        time.sleep(environment.fault_stall_s())
        return propose(*args, **kwargs)

    return stalled
