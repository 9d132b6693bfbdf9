"""The in-process drafter: vLLM's proposer in this worker, its deferred calls replayed on an execution lane.

A deferred ``propose`` call is captured with copies of its inputs
(``DraftJob``: vLLM's runner reuses its buffers every step) and replayed next
step on the lane (``lanes.py``) while the target verifies the other group. A
call whose copy would exceed ``capture_max_mib`` (EAGLE's hidden states of a
long prefill chunk) is drafted at capture instead; its job only hands the
drafts over. The drafter's buffers belong to one call at a time, so drafting
now first joins the job on the lane.

The platform runner's hooks come with the lane: ``before_run(lane,
job_this_step)`` at the start of every step, with nothing on the lane (the
CPU kernel lock), and ``on_captured(lane)`` right after a call was captured
(the CUDA lane's capture event). A ``watchdog`` bounds each job it runs and
each join (``job_watchdog.py``): on the CUDA lane the job only enqueues its
kernels, and a stuck kernel or collective on the side stream shows only at the
join.

With a ``catch_up`` (the draft-model and EAGLE methods, ``idle_drafter=skip``), a
depth-0 call runs no forward, and a later call first feeds the drafter the tokens
its requests skipped (``draft_catch_up.py``), now, before the call is drafted or
captured. A call held to be drafted after the step's outputs (``hold``) is caught up
then too, and a held call the engine core took no drafts of (a request arrived while
its step ran) is skipped as a depth-0 call is. A ``stateless_drafter``
(n-gram) is not called at depth 0: its answer is empty, and there is nothing to catch up.
Where a step does not want some rows' drafts (a second source drafts them, hybrid/), a
call drafted now skips those rows the same way and runs for the others (``call_rows.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from minedraft.contract import DraftSource, MineDraftDraftTokenIds, ProposeCall
from minedraft.log import get_logger
from minedraft.worker.in_process.call_rows import call_rows, cuttable
from minedraft.worker.in_process.draft_catch_up import DraftCatchUp
from minedraft.worker.in_process.draft_job import DraftJob, as_lists, snapshot_nbytes
from minedraft.worker.in_process.draft_probs import DraftProbs
from minedraft.worker.in_process.job_watchdog import JobWatchdog
from minedraft.worker.in_process.lanes import Lane
from minedraft.worker.step_profile import StepProfiler

logger = get_logger(__name__)

CATCH_UP_LINE = "MineDraft: first catch-up"


class InProcessDraftSource(DraftSource):
    """``propose``: the drafter's own method (None where vLLM built no drafter: then nothing calls it)."""

    def __init__(self, propose: Callable[..., Any] | None, lane: Lane, *, capture_max_mib: float,
                 before_run: Callable[[Lane, bool], None], on_captured: Callable[[Lane], None],
                 profiler: StepProfiler | None = None, catch_up: DraftCatchUp | None = None,
                 stateless_drafter: bool = False, watchdog: JobWatchdog | None = None,
                 draft_probs: DraftProbs | None = None) -> None:
        super().__init__()
        self.watchdog = watchdog
        self.draft_probs = draft_probs
        self.propose, self.lane = propose, lane
        self.catch_up = catch_up
        self.stateless_drafter = stateless_drafter
        self.capture_max_mib = capture_max_mib
        self._before_run, self._on_captured = before_run, on_captured
        self.profiler = profiler
        self.inline_drafts = 0  # deferred calls drafted at capture (capture_max_mib)
        self.arrival_skips = 0  # held calls skipped (_skip_held)
        self._caught_up_once = False

    def _prepare(self, call: ProposeCall) -> DraftJob:
        skipped = self._skip(call)
        if skipped is not None:
            job = DraftJob.completed(call.req_ids, skipped)
        else:
            self._feed_skipped(call)
            job = self._capture_or_draft_now(call)
        self._on_captured(self.lane)
        return job

    def draft_now(self, call: ProposeCall) -> Any:
        skipped = self._skip(call)
        if skipped is not None:
            return skipped
        return self._draft_wanted_rows(call)

    def _hold(self, call: ProposeCall) -> ProposeCall:
        """The call itself, drafted after the outputs (its catch-up first). Its inputs are not copied,
        unlike a deferred call's: it is drafted in this step's ``take_draft_token_ids``, or skipped by
        the next step's ``begin_step`` before its ``execute_model`` reaches vLLM's, so the runner's
        buffers it reads still hold this step's inputs (copying them cost a 2-6 ms step of the kit's
        pair about 4 %: benchmarks/method_stages.py)."""
        return call

    def _skip_held(self, call: ProposeCall) -> None:
        """Recorded for the catch-up (at the start of the next step: the runner's batch is still the
        held call's); drafted and dropped where its hidden states would exceed ``catch_up_max_mib``.
        Without a catch-up, dropped."""
        if self.catch_up is None:
            return
        if self.catch_up.skip(call) is None:
            self._draft_held(call)
        self.arrival_skips += 1

    def _draft_held(self, call: ProposeCall) -> MineDraftDraftTokenIds:
        """On the calling thread, not the lane: nothing runs beside it now, and the lane thread's
        intra-op threads (``lane_threads``) would only make it slower."""
        self._keep_joined()
        with torch.inference_mode():
            drafts = self._skip(call)
            if drafts is None:
                drafts = self._bounded(lambda: self._draft_wanted_rows(call))()
        return MineDraftDraftTokenIds(call.req_ids, as_lists(drafts))

    def _release(self, req_ids) -> None:
        if self.catch_up is not None:
            self.catch_up.release(set(req_ids))
        if self.draft_probs is not None:
            self.draft_probs.release(req_ids)

    def _propose_now(self, call: ProposeCall) -> Any:
        self._keep_joined()  # the drafter's buffers belong to one call at a time
        return self._proposer(call)(*call.args, **call.kwargs)

    def _proposer(self, call: ProposeCall) -> Callable[..., Any]:
        """The drafter's propose for ``call``, keeping its draft probabilities where they are sampled."""
        return self.propose if self.draft_probs is None else self.draft_probs.recording(self.propose, call.req_ids)

    def _skip(self, call: ProposeCall) -> Any:
        """A depth-0 call's result without its forward; None where the call runs."""
        if call.depth != 0:
            return None
        if self.catch_up is not None:
            return self.catch_up.skip(call)
        if self.stateless_drafter:
            return [[] for _ in call.req_ids]
        return None

    def _draft_wanted_rows(self, call: ProposeCall) -> Any:
        """``call`` drafted now, its requests caught up first; rows whose drafts the step does not want
        (``call.undrafted``) skipped where the catch-up can (call_rows.py), their drafts empty."""
        rows = range(len(call.req_ids))
        unwanted = [row for row in rows if call.req_ids[row] in call.undrafted]
        if (not unwanted or self.catch_up is None or self.draft_probs is not None or not cuttable(call)
                or self.catch_up.skip(call, unwanted) is None):
            self._feed_skipped(call)
            return self._propose_now(call)
        wanted = [row for row in rows if call.req_ids[row] not in call.undrafted]
        if not wanted:
            return [[] for _ in rows]
        self._feed_skipped(call, wanted)
        drafts = [[] for _ in rows]
        for row, own in zip(wanted, as_lists(self._propose_now(call_rows(call, wanted)))):
            drafts[row] = own
        return drafts

    def _feed_skipped(self, call: ProposeCall, rows: list[int] | None = None) -> None:
        if self.catch_up is None:
            return
        for catch_up in self.catch_up.calls_before(call, rows):
            self._propose_now(catch_up)
            if not self._caught_up_once:
                self._caught_up_once = True
                logger.info("%s: the drafter skipped its forward in %d depth-0 steps and caught up on "
                            "%d tokens (RFC §2.5)", CATCH_UP_LINE, self.catch_up.skipped_calls,
                            self.catch_up.caught_up_tokens)

    def _run(self, job: DraftJob | None) -> None:
        self._before_run(self.lane, job is not None)
        if job is not None:
            self.lane.submit(self._bounded(job.run if self.profiler is None else self.profiler.timed(job.run)))

    def _bounded(self, run: Callable[[], Any]) -> Callable[[], Any]:
        return run if self.watchdog is None else self.watchdog.watched(run)

    def _join(self) -> MineDraftDraftTokenIds | None:
        if not self.lane.busy:
            return None
        req_ids, drafts = self._bounded(self.lane.wait)()
        return MineDraftDraftTokenIds(req_ids, as_lists(drafts))

    def shutdown(self) -> None:
        self.lane.shutdown()

    def _capture_or_draft_now(self, call: ProposeCall) -> DraftJob:
        """The call with its inputs copied, or, when the copy would exceed ``capture_max_mib``,
        its drafts made now: the next step's job only hands them over."""
        nbytes = snapshot_nbytes((call.args, call.kwargs))
        if nbytes <= self.capture_max_mib * 2**20:
            return DraftJob.capture(call.req_ids, self._proposer(call), call.args, call.kwargs)
        if not self.inline_drafts:
            logger.info("MineDraft: a deferred draft call would copy %.1f MiB (capture_max_mib=%s); "
                        "steps like it draft inline.", nbytes / 2**20, self.capture_max_mib)
        self.inline_drafts += 1
        return DraftJob.completed(call.req_ids, self._propose_now(call))
