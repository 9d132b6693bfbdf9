"""MineDraftScheduler: vLLM's scheduler with two alternating decode groups, applying the policy's plans.

Each step verifies one group on the target while the draft lane proposes for the other, whose verification
was in the previous step; next step the roles swap (groups.py). Each step's plan (the depth vLLM drafts at,
each request's drafts, whether the step may run in parallel) comes from the speculation policy
(minedraft/policy/), which sees the step as plain data and is told how it ran. The hooks:

* ``schedule``: the plan (made from the step's key alone where a depth 0 stands, else from its view of each
  request) is applied before vLLM schedules: requests that sit the step out get
  ``next_decode_eligible_step`` one step ahead (vLLM's RUNNING loop skips them: no tokens, no token budget,
  no ``allocate_slots``), each request's drafts are cut; after it, the lane plan is attached to the output.
* ``update_from_output``: the step's verified drafts are kept for the policy; its duration is taken at the
  next ``schedule``, so it includes the engine's post-step, where a parallel step joins the draft lane.
* ``add_request`` / ``_free_request``: a request's limit on its drafts is read once; a finished one released.
* ``update_draft_token_ids``: drops drafts for requests preempted while on the lane, and vLLM's placeholder
  zeros for a step its runner did not draft after; counts requests a process drafter left without drafts.
* ``make_stats``: MineDraft's counters ride along with vLLM's.
* ``expects_draft_tokens`` / ``skips_held_drafts`` (asked by the engine core, monkeypatch/
  patch_draft_collection.py): a step that drafted nothing, or whose every request finished, skips the round
  trip that collects drafts; a step whose drafting was held until after its outputs skips it for a request
  that arrived meanwhile.

KV slots: a request's drafting reads and writes only positions allocated when it was verified (vLLM
allocates 1 + k + lookahead slots), so a draft-only step allocates nothing. Everything else (admission,
prefill, preemption, acceptance accounting, rollback of rejected tokens) is vLLM's own code, unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

from minedraft._version import require_supported_vllm

# Before vLLM's imports: on another vLLM release they could fail less clearly, or succeed and run this
# scheduler without the patches it relies on (the plugin entry point installs none there).
require_supported_vllm()

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.metrics.stats import SchedulerStats
from vllm.v1.outputs import DraftTokenIds
from vllm.v1.request import Request, RequestStatus
from vllm.v1.spec_decode.metrics import SpecDecodingStats

from minedraft.config.idle_drafter import catches_up, skips_rows
from minedraft.config.methods import method_of
from minedraft.config.settings import MineDraftSettings
from minedraft.contract import MineDraftDraftTokenIds, MineDraftSchedulerOutput
from minedraft.hybrid.scheduler_drafts import lookup_source
from minedraft.lifetime import end_with_vllm_parent
from minedraft.log import get_logger
from minedraft.metrics.stats import MineDraftStats, attach
from minedraft.policy import RequestView, SpeculationPolicy, StepKey, StepPlan, StepResult, StepView
from minedraft.policy.request_limits import requested_limit
from minedraft.scheduling.drafter_limits import ChosenDepth, drafter_room, speculative_max_len
from minedraft.scheduling.groups import choose_held, is_balanced
from minedraft.scheduling.step_record import RanStep, drafts_unanswered, scheduled_step, verified_drafts

logger = get_logger(__name__)


class MineDraftScheduler(Scheduler):
    # Set in __init__ where the engine speculates; here too for a scheduler vLLM's own tests build around it.
    speculation: SpeculationPolicy | None = None
    _ran: RanStep | None = None  # the step update_from_output saw last
    _scheduled: tuple[StepResult, float] | None = None  # the step schedule() planned last, and its start
    _lookup = None  # the second draft source (hybrid/), where the user names one
    _drafts_expected = True  # the step scheduled last can have drafts to collect
    _held_drafting = False  # the step scheduled last holds a drafting round a new request may skip

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # In vLLM's engine core process: SIGKILL once the front end has exited (workers follow through vLLM's
        # death pipe; a draft engine follows its worker). Here because the scheduler is the first MineDraft code
        # that runs in that process: a forked engine core never calls the plugin hook.
        end_with_vllm_parent()
        self._drafting: set[str] = set()  # deferred in the last step: the lane drafts for them now
        self._due: set[str] = set()  # sat out the last step: verified now
        self.minedraft_stats = MineDraftStats()
        self.minedraft_totals = MineDraftStats()
        self.settings = MineDraftSettings.of(self.vllm_config)
        spec = self.vllm_config.speculative_config
        # Steps with prompt tokens draft after their outputs are queued (not in stock mode: vLLM's order). Not
        # for the n-gram and suffix drafters: they have no forward to move, and their call's inputs would be
        # copied for nothing.
        self._first_token_early = (self.settings.first_token == "early" and self.settings.mode != "stock"
                                   and method_of(spec).runs_model)
        # With a drafter that catches up on a skipped call, every plain SD step holds its drafting until after
        # its outputs, and skips it where a new request is waiting (skips_held_drafts).
        self._drafter_catches_up = catches_up(spec, self.settings, self.vllm_config.model_config.uses_mrope)
        self._arrivals_skip_drafting = self._first_token_early and self._drafter_catches_up
        self._placeholder_req_ids: set[str] = set()  # its requests whose drafts vLLM's runner will not make
        self._lookahead_slots = self.num_lookahead_tokens  # the KV slots vLLM reserves for the drafter (K)
        self._drafter_room = drafter_room(self.vllm_config) if spec is not None else 0
        self._lookup = lookup_source(self.settings, self.plans_lanes, self.max_model_len, logger.info)
        if self.plans_lanes:
            self.speculation = SpeculationPolicy.for_engine(
                self.vllm_config, self.settings, self.num_spec_tokens, self.dynamic_sd_lookup is not None,
                self._drafter_catches_up, speculative_max_len(self.vllm_config), logger.info,
                second_source=self._lookup is not None,
                skips_rows=skips_rows(spec, self.settings, self.vllm_config.model_config.uses_mrope))
            if self.speculation.depth_control == "drafted":
                self.dynamic_sd_lookup = ChosenDepth(lambda: self.speculation.depth)

    @property
    def drafting_req_ids(self) -> frozenset[str]:
        """Requests whose drafts the lane makes during the next step."""
        return frozenset(self._drafting)

    @property
    def plans_lanes(self) -> bool:
        """Whether this scheduler plans lanes at all: only when the engine speculates, in every mode (``stock``
        too, whose plans never run in parallel) so that the worker always gets a lane plan."""
        return self.num_spec_tokens > 0

    # ------------------------------------------------------------------ requests
    def add_request(self, request: Request) -> None:
        try:
            limit = requested_limit(request.sampling_params)
        except ValueError as e:  # the front end refuses it (patch request_validation); an engine core built alone
            logger.warning("%s: request %s speculates as if it asked nothing", e, request.request_id)
            limit = None
        if self.speculation is not None:
            self.speculation.add_request(request.request_id, limit)
        super().add_request(request)

    def _free_request(self, request: Request, delay_free_blocks: bool = False):
        if self.speculation is not None:
            self.speculation.finish(request.request_id)
        if self._lookup is not None:
            self._lookup.release(request.request_id)
        return super()._free_request(request, delay_free_blocks)

    # ------------------------------------------------------------------ schedule
    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        if not self.plans_lanes:
            return super().schedule(throttle_prefills)
        started = time.perf_counter()
        ran, self._ran = self._ran, None
        if ran is not None:  # timed to this schedule(): the engine joins the draft lane in its post-step
            self.speculation.observe(dataclasses.replace(
                ran.result, seconds=None if ran.started is None else started - ran.started,
                unanswered=drafts_unanswered(ran.result, self.requests)))
        decoding = [r for r in self.running if not r.is_prefill_chunk]
        starting = self._starting()
        # A depth 0 that stands needs no request's view: the plan is made from the step's key (policy.py).
        plan = self.speculation.held_plan(self._key(decoding, starting)) if self._may_hold(decoding) else None
        held = set()
        if plan is None:
            held = self._held_if_parallel(decoding)
            plan = self.speculation.plan(self._view(decoding, starting, held))
        # KV slots past a request's tokens only where this step's drafter writes there: one that skips its
        # depth-0 call (config/idle_drafter.py) writes nothing, so a load held at depth 0 by a short KV cache is
        # preempted no more than the target alone; a step at a depth > 0 reserves K again before it drafts.
        self.num_lookahead_tokens = 0 if plan.depth == 0 and self._drafter_catches_up else self._lookahead_slots
        self._sit_out(decoding, held if plan.parallel else set())
        for rid, kept in plan.num_drafts.items():  # as vLLM cuts them to a short token budget
            request = self.requests[rid]
            if len(request.spec_token_ids) > kept:
                request.spec_token_ids = request.spec_token_ids[:kept]
        if self._lookup is not None:
            self._lookup.apply(self.requests, plan.lookup_drafts)
        for stats in (self.minedraft_stats, self.minedraft_totals):
            stats.observe_plan(plan.counts)
        output = super().schedule(throttle_prefills)
        return self._plan_lanes(output, plan, started)

    def _starting(self) -> list[Request]:
        """The requests whose prompts start now: the prefilling ones and the waiting ones the batch has room for
        (the drafts made after the step are verified by them too)."""
        return ([r for r in self.running if r.is_prefill_chunk]
                + list(itertools.islice(self.waiting, self._room())))

    def _room(self) -> int:
        return max(self.max_num_running_reqs - len(self.running), 0)

    def _closed(self) -> bool:
        """Whether no request is left waiting beyond those that start now."""
        return self.get_request_counts()[1] <= self._room()

    def _may_hold(self, decoding: list[Request]) -> bool:
        """Whether the step's plan may be made from its key: no request holds drafts, none is on the lane, no
        second source drafts (``StepKey.plain``)."""
        return self._lookup is None and not self._drafting and not any(r.spec_token_ids for r in decoding)

    def _key(self, decoding: list[Request], starting: list[Request]) -> StepKey:
        """The step's key, as its view's (``StepView.key``) where ``_may_hold``."""
        closed = self._closed()
        return StepKey(tuple(r.request_id for r in decoding), len(decoding) + len(starting), closed,
                       even=not closed or len({r.max_tokens - r.num_output_tokens for r in decoding}) <= 1,
                       longest=max((r.num_tokens for r in itertools.chain(decoding, starting)), default=0),
                       plain=True)

    def _view(self, decoding: list[Request], starting: list[Request], held: set[str]) -> StepView:
        """The step as the policy sees it: the decoding requests, then those whose prompts start now."""
        lookup = ({} if self._lookup is None
                  else self._lookup.propose(r for r in decoding if r.request_id not in self._drafting))
        requests = [RequestView(r.request_id, True, r.max_tokens - r.num_output_tokens, r.num_tokens,
                                num_drafts=len(r.spec_token_ids), on_lane=r.request_id in self._drafting,
                                held_if_parallel=r.request_id in held, lookup_probs=lookup.get(r.request_id, ()))
                    for r in decoding]
        requests += [RequestView(r.request_id, False, r.max_tokens - r.num_output_tokens, r.num_tokens,
                                 prompt_left=max(r.num_prompt_tokens - r.num_computed_tokens, 0)) for r in starting]
        return StepView(requests, closed=self._closed(), drafter_has_room=self._drafter_has_room())

    def _held_if_parallel(self, decoding: list[Request]) -> set[str]:
        """The free requests held back for the lane if the step runs in parallel (groups.py)."""
        drafting = [r.request_id for r in decoding if r.request_id in self._drafting]
        due = [r.request_id for r in decoding if r.request_id in self._due and r.request_id not in self._drafting]
        free = [r.request_id for r in decoding if r.request_id not in self._drafting and r.request_id not in self._due]
        return set(choose_held(drafting, due, free))

    def _sit_out(self, decoding: list[Request], held: set[str]) -> None:
        """The requests the lane drafts for now, and those ``held``, sit this step out: vLLM increments
        current_step at the start of schedule(), so an eligible step of current_step + 2 skips that call only."""
        for request in decoding:
            if request.request_id in self._drafting or request.request_id in held:
                request.next_decode_eligible_step = self.current_step + 2

    def _plan_lanes(self, output: SchedulerOutput, plan: StepPlan, started: float) -> MineDraftSchedulerOutput:
        scheduled = output.num_scheduled_tokens
        running_ids = {r.request_id for r in self.running} if self._drafting else set()
        draft_only = [rid for rid in self._drafting if rid in running_ids and rid not in scheduled]
        # Decode requests not verified now: verified next step.
        next_due = {r.request_id for r in self.running if not r.is_prefill_chunk and r.request_id not in scheduled}
        drafter_runs = self._drafter_runs_after(scheduled)
        parallel = plan.parallel and is_balanced(len(scheduled), len(next_due)) and drafter_runs
        # Where vLLM's runner does not draft, its drafts for the step's requests are K zeros (placeholders):
        # not verified (update_draft_token_ids), and not collected at all where no lane job drafts either.
        self._placeholder_req_ids = set() if drafter_runs else set(scheduled)
        step = scheduled_step(plan, output, self.requests, bool(draft_only))
        self._scheduled = (step, started)
        # Requests whose prefill is still in progress are scheduled again next step whatever the mode; only
        # decode requests wait for their drafts.
        self._drafting = {rid for rid in scheduled if not self.requests[rid].is_prefill_chunk} if parallel else set()
        self._due = next_due
        self._drafts_expected = (output.num_spec_tokens_to_schedule > 0 and drafter_runs) or bool(draft_only)
        if scheduled:  # the engine's schedule() after a batch's last request runs nothing: not a step
            verified_only = self.speculation.depth_control == "verified"
            depth = plan.depth if verified_only else output.num_spec_tokens_to_schedule
            for stats in (self.minedraft_stats, self.minedraft_totals):
                stats.observe_step(len(scheduled), len(draft_only), parallel, plan.parallel,
                                   trial=self.speculation.overlap.trying is not None, depth=depth)
        # Prompt tokens in a step that drafts inline: its drafts can wait until its outputs are queued. With a
        # drafter that catches up, any such step's: a request that arrives meanwhile skips them.
        after_output = (not parallel and self._first_token_early and output.num_spec_tokens_to_schedule > 0
                        and (step.prefill_tokens > 0 or self._arrivals_skip_drafting))
        self._held_drafting = after_output and self._arrivals_skip_drafting and not draft_only
        undrafted = plan.undrafted.intersection(scheduled) if not parallel else frozenset()
        return MineDraftSchedulerOutput.extend(output, sorted(draft_only), parallel, after_output, undrafted)

    def update_from_output(self, scheduler_output, model_runner_output):
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        unwanted = self._drafts_expected and self._drafts_unwanted(scheduler_output)
        if unwanted:
            # The drafts made after this step would be for its requests only, and every one has finished: the
            # engine core does not collect them, so drafting held until after the outputs is never done (the
            # worker skips the held call at its next step, as for an arrival), and the step, short of it, is not
            # timed. A request's last step drafted for nothing: one of 18 decode steps at N = 1 on the real pair.
            self._drafts_expected = self._held_drafting = False
        scheduled, self._scheduled = self._scheduled, None
        if scheduled is not None:
            result, started = scheduled
            result = dataclasses.replace(
                result, verified=verified_drafts(scheduler_output, model_runner_output),
                output_tokens=sum(len(ids) for ids in model_runner_output.sampled_token_ids))
            if result.plan.lookup_drafts:
                for stats in (self.minedraft_stats, self.minedraft_totals):
                    stats.observe_lookup(result.verified, result.plan.lookup_drafts)
            if self.has_unfinished_requests():
                self._ran = RanStep(result, None if unwanted else started)
            else:  # the engine idles until the next request: that gap is not step time
                self.speculation.observe(result)
        return outputs

    # ------------------------------------------------------------------ drafts
    def _drafts_unwanted(self, scheduler_output) -> bool:
        """Whether no step will verify the drafts made after this one: it ran no lane job (they are for its own
        requests only), and every request it scheduled has finished."""
        if isinstance(scheduler_output, MineDraftSchedulerOutput) and scheduler_output.draft_only_req_ids:
            return False
        scheduled = scheduler_output.num_scheduled_tokens
        return bool(scheduled) and all(
            (request := self.requests.get(rid)) is None or request.is_finished() for rid in scheduled)

    def _drafter_has_room(self) -> bool:
        """Whether every running request, with the drafts it has, leaves the drafter room after the step: where
        one does not, no step holds a group back for the lane."""
        return max((r.num_tokens_with_spec for r in self.running), default=0) <= self._drafter_room

    def _drafter_runs_after(self, scheduled: dict[str, int]) -> bool:
        """Whether vLLM's runner drafts after this step: not for any of its requests where the longest (its
        tokens computed after the step) has no room for K drafts (``GPUModelRunner._input_fits_in_drafter``).
        Such a step is not deferred to the lane: no job would be made for it."""
        return max((self.requests[rid].num_computed_tokens for rid in scheduled), default=0) <= self._drafter_room

    def expects_draft_tokens(self) -> bool:
        """Whether the worker can have drafts for the step scheduled last: it drafted at a depth above 0, or its
        lane ran a deferred job. If not, vLLM has already cleared the step's drafts: the engine core may skip
        ``take_draft_token_ids``, one worker round trip a step."""
        return self._drafts_expected

    def skips_held_drafts(self) -> bool:
        """Asked by the engine core after a step, before it collects drafts, when a new request has reached it
        meanwhile: whether that step's drafting, held until after its outputs, is skipped, so the next step
        starts the new request's prefill without waiting for it (the drafter catches up when it next drafts:
        worker/in_process/draft_catch_up.py). Only for a step whose drafts all come from its held call, and
        where the new request can be admitted next step; the skipped step's duration is not measured."""
        if (not self._held_drafting or self.waiting or self.kv_holding_waiting
                or len(self.running) >= self.max_num_running_reqs):
            return False
        self._held_drafting = False
        if self._ran is not None:
            self._ran = self._ran._replace(started=None)
        for stats in (self.minedraft_stats, self.minedraft_totals):
            stats.arrival_skips += 1
        return True

    def update_draft_token_ids(self, draft_token_ids: DraftTokenIds) -> None:
        late = len(MineDraftDraftTokenIds.of(draft_token_ids).late_req_ids)
        self.minedraft_stats.late_drafts += late
        self.minedraft_totals.late_drafts += late
        # A request preempted while its drafts were being made is waiting again; vLLM's own path never delivers
        # drafts to such a request. vLLM's placeholder drafts (K zeros) for a step whose requests its runner did
        # not draft for would be verified, and almost all rejected, at a token's cost each.
        placeholders, self._placeholder_req_ids = self._placeholder_req_ids, set()
        keep = [i for i, rid in enumerate(draft_token_ids.req_ids)
                if (req := self.requests.get(rid)) is not None
                and req.status == RequestStatus.RUNNING and rid not in placeholders]
        if len(keep) != len(draft_token_ids.req_ids):
            draft_token_ids = DraftTokenIds([draft_token_ids.req_ids[i] for i in keep],
                                            [draft_token_ids.draft_token_ids[i] for i in keep])
        super().update_draft_token_ids(draft_token_ids)

    # ------------------------------------------------------------------ stats
    def make_spec_decoding_stats(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, *args, **kwargs):
        # vLLM sizes a step's per-position acceptance to K; the second source drafts deeper (every step's the
        # same size: vLLM's log line sums them; its per-position counters export the first K).
        if spec_decoding_stats is None and self._lookup is not None and self.log_stats and num_draft_tokens:
            spec_decoding_stats = SpecDecodingStats.new(max(self.num_spec_tokens, self._lookup.max_depth))
        return super().make_spec_decoding_stats(spec_decoding_stats, num_draft_tokens, num_accepted_tokens,
                                                *args, **kwargs)

    def make_stats(self, *args, **kwargs) -> SchedulerStats | None:
        stats = super().make_stats(*args, **kwargs)
        if stats is None or not self.plans_lanes:
            return stats
        attach(stats, self.minedraft_stats.to_payload())
        self.minedraft_stats = MineDraftStats()
        return stats

