"""MineDraftScheduler: vLLM's scheduler with two alternating decode groups.

Each step verifies one group on the target while the draft lane proposes for
the other group, whose verification was in the previous step; next step the
roles swap. Only these hooks differ from vLLM's ``Scheduler``:

* ``schedule``: before vLLM schedules, requests that must sit the step out get
  ``next_decode_eligible_step`` one step ahead (vLLM's RUNNING loop skips them:
  no tokens, no token budget, no ``allocate_slots``), and where vLLM's drafter
  drafts only K (parallel drafting, suffix decoding) under ``speculation_depth:
  auto``, each request's drafts are cut to the depth controller's choice, to the request's own
  limit (scheduling/request_limits.py) and, under ``speculation_depth: auto``, to those its
  measured acceptance pays for (scheduling/request_depths.py); afterwards the step is
  classified as parallel or fallback and the lane plan is attached to the
  output (``MineDraftSchedulerOutput``).
* ``add_request``: a request's limit on its drafts (``extra_args``) is read once.
* ``update_from_output``: the step's output tokens are noted for the mode
  policy (``auto`` runs plain SD unless parallel steps are measured to win at
  the current load, see scheduling/mode_policy.py); the step's duration is taken
  at the next ``schedule``, so it includes the engine's post-step, where a
  parallel step joins the draft lane.
* ``update_draft_token_ids``: drafts arriving for requests that were
  preempted while on the draft lane are dropped, as are vLLM's placeholder
  zeros for a step its runner did not draft after (no room in the drafter);
  requests a process drafter left without drafts (late or gone) are counted.
* ``make_stats``: MineDraft's counters ride along with vLLM's.
* ``expects_draft_tokens`` and ``skips_held_drafts`` (MineDraft's own; the engine
  core asks them through monkeypatch/patch_draft_collection.py): a step that
  drafted nothing, at depth 0 with no draft job on the lane, skips the worker
  round trip that collects drafts; and a step whose drafting was held until after
  its outputs skips it when a new request has reached the engine core meanwhile,
  so that request's prefill starts without waiting for the drafter.

KV slots: a request's drafting reads and writes only positions whose blocks
were allocated when it was verified (vLLM allocates 1 + k + lookahead slots),
so a draft-only step allocates nothing. Everything else (admission, prefill
and chunked prefill, preemption, acceptance accounting, rollback of rejected
tokens) is vLLM's own code, unchanged.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import NamedTuple

from minedraft._version import require_supported_vllm

# Before vLLM's imports: on another vLLM release they could fail less clearly,
# or succeed and run this scheduler without the patches it relies on (the
# plugin entry point installs none there).
require_supported_vllm()

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.metrics.stats import SchedulerStats
from vllm.v1.outputs import DraftTokenIds
from vllm.v1.request import Request, RequestStatus

from minedraft.config.idle_drafter import catches_up
from minedraft.config.methods import method_of
from minedraft.config.settings import MineDraftSettings
from minedraft.contract import MineDraftDraftTokenIds, MineDraftSchedulerOutput
from minedraft.lifetime import end_with_vllm_parent
from minedraft.log import get_logger
from minedraft.metrics.stats import MineDraftStats, attach
from minedraft.scheduling.depth_controller import ChosenDepth, DepthController
from minedraft.scheduling.depth_prior import speculative_cost_ratio
from minedraft.scheduling.first_measurement import decide_first_measurements
from minedraft.scheduling.groups import choose_held, is_balanced
from minedraft.scheduling.mode_policy import Load, ModePolicy
from minedraft.scheduling.mode_prior import make_prior, placement
from minedraft.scheduling.request_depths import RequestDepths
from minedraft.scheduling.request_limits import RequestLimits, requested_limit

logger = get_logger(__name__)


class _StepRecord(NamedTuple):
    """A step as the mode policy and the depth controller see it."""

    parallel_allowed: bool
    load: Load  # decodes == 0: the step verified and drafted nothing
    started: float
    decodes: int = 0  # decode requests scheduled (the depth controller's cost model)
    scheduled_tokens: int = 0  # every token the target computed: prompt, decode and verified drafts
    prefill_tokens: int = 0  # of them, those in prefill chunks (prompts, a preempted request's recomputation)
    catch_up: int = 0  # tokens the drafter catches up on in this step (skipped at depth 0 before)
    timed: bool = True  # False: its drafting was skipped, its duration says nothing of its depth
    tokens: int | None = None  # set by update_from_output


class MineDraftScheduler(Scheduler):
    # The step scheduled last; the next schedule() times it once
    # update_from_output has counted its output tokens.
    _last_step: _StepRecord | None = None
    # Set in __init__; here too so that a scheduler vLLM's own tests build around __init__ has it.
    depth_controller: DepthController | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # In vLLM's engine core process: SIGKILL once the front end has exited (workers
        # follow through vLLM's death pipe; a draft engine follows its worker). Here because
        # the scheduler is the first MineDraft code that runs in that process: a forked engine
        # core inherits the front end's "plugins loaded" flag and never calls the plugin hook.
        end_with_vllm_parent()
        # Request ids whose drafting was deferred in the last step: the draft
        # lane runs for them during the step being scheduled now.
        self._drafting: set[str] = set()
        # Request ids that sat out the last step and must be verified now.
        self._due: set[str] = set()
        self.minedraft_stats = MineDraftStats()
        self.minedraft_totals = MineDraftStats()
        self.settings = MineDraftSettings.of(self.vllm_config)
        self.lane_placement = placement(self.vllm_config.device_config.device_type, self.settings.lane,
                                        self.settings.drafter)
        self.mode_policy = ModePolicy(self.settings.mode, prior=make_prior(self.lane_placement),
                                      on_change=logger.info)
        # The depth of the step being scheduled: K, or the depth controller's choice.
        self._depth = self.num_spec_tokens
        # Per request, the tokens computed while its drafter skipped them (depth 0), which it catches up
        # on when next drafted (worker/in_process/draft_catch_up.py): the catch-up's cost in the depth controller.
        self._skipped_tokens: dict[str, int] = {}
        # Where vLLM's drafter drafts only K (_fixed_depth_drafter), the controller's depth is the
        # number of each request's drafts the target verifies; elsewhere the depth vLLM drafts at.
        self._verified_depth_only = False
        self.depth_controller = self._make_depth_controller()
        if self.depth_controller is not None:
            self._depth = self.depth_controller.starting_depth()
        # Each request's verified drafts cut to those its acceptance pays for; not where the user asked
        # for the step-level depth alone (speculation_depth=step).
        self.request_depths = (RequestDepths(self.num_spec_tokens) if self.depth_controller is not None
                               and self.settings.speculation_depth != "step" else None)
        # Prefill and decode tokens of the last step: the load's mix for the next one.
        self._last_mix = (0, 0)
        # Whether the step scheduled last can have drafts to collect (expects_draft_tokens).
        self._drafts_expected = True
        # The requests of the step scheduled last whose drafts vLLM's runner will not make (_drafter_runs_after).
        self._placeholder_req_ids: set[str] = set()
        # Steps with prompt tokens draft after their outputs are queued (not in stock mode: vLLM's order).
        # Not for the n-gram and suffix drafters: they have no forward to move, and their call's inputs
        # (the whole token table) would be copied for nothing.
        spec = self.vllm_config.speculative_config
        runs_no_model = not method_of(spec).runs_model
        self._first_token_early = (self.settings.first_token == "early" and self.settings.mode != "stock"
                                   and not runs_no_model)
        # With a drafter that catches up on a skipped call, every plain SD step holds its drafting until
        # after its outputs, and skips it where a new request is waiting (skips_held_drafts).
        self._drafter_catches_up = catches_up(spec, self.settings, self.vllm_config.model_config.uses_mrope)
        self._arrivals_skip_drafting = self._first_token_early and self._drafter_catches_up
        self._held_drafting = False  # the step scheduled last holds a drafting round a new request may skip
        # The KV slots vLLM reserves past each scheduled request's tokens for its drafter (K a step).
        self._lookahead_slots = self.num_lookahead_tokens
        self.request_limits = RequestLimits(self.num_spec_tokens, _speculative_max_len(self.vllm_config))
        self._drafter_room = _drafter_room(self.vllm_config) if spec is not None else 0
        if self.request_limits.max_model_len is not None and self.plans_lanes:
            logger.info("MineDraft: a request longer than the speculative max_model_len (%d tokens, with its %d "
                        "drafts) verifies no drafts from then on (scheduling/request_limits.py).",
                        self.request_limits.max_model_len, self.num_spec_tokens)

    def _make_depth_controller(self) -> DepthController | None:
        has_table = self.dynamic_sd_lookup is not None
        if (self.settings.depth_control(has_table) not in ("auto", "step") or self.settings.mode == "stock"
                or not self.plans_lanes):
            if has_table and self.settings.mode == "auto":
                logger.info("MineDraft: num_speculative_tokens_per_batch_size chooses the speculation depth "
                            "(the depth controller is off).")
            return None
        if has_table:  # refused by the front end; a directly built config may have it
            raise ValueError("minedraft: speculation_depth=auto and num_speculative_tokens_per_batch_size "
                             "both choose the depth; use one.")
        fixed = _fixed_depth_drafter(self.vllm_config.speculative_config)
        if fixed is not None:
            if self.settings.speculation_depth is None:
                # Measured on CPU (benchmarks/README.md): choosing how many of K drafts to verify saved less
                # than the controller's probes cost, so only a user's speculation_depth=auto asks for it.
                logger.info("MineDraft: %s drafts num_speculative_tokens=%d tokens each step and they are all "
                            "verified (speculation_depth=auto: the depth controller chooses how many).",
                            fixed, self.num_spec_tokens)
                return None
            # vLLM's drafter makes K drafts every step; the controller chooses how many of them the target
            # verifies. The draft costs the same at every depth: its cost prior is 0.
            self._verified_depth_only = True
            logger.info("MineDraft: %s drafts num_speculative_tokens=%d tokens each step; the depth "
                        "controller chooses how many of them the target verifies.", fixed, self.num_spec_tokens)
            return DepthController(self.num_spec_tokens, draft_ratio=0.0, on_change=logger.info)
        self.dynamic_sd_lookup = ChosenDepth(lambda: self._depth)
        # Pinned parallel mode overlaps draft forwards with verification: the bound adds them.
        cost_ratio = (speculative_cost_ratio(self.vllm_config, self.lane_placement)
                      if self.settings.mode == "auto" else None)
        controller = DepthController(self.num_spec_tokens, draft_ratio=cost_ratio, on_change=logger.info)
        if cost_ratio is not None:
            logger.info("MineDraft auto: a draft forward multiplies %.2fx the target's weights: the step-cost "
                        "model starts from that, and starts at depth %d (scheduling/depth_controller.py).",
                        cost_ratio, controller.starting_depth())
        return controller

    @property
    def drafting_req_ids(self) -> frozenset[str]:
        """Requests whose drafts the lane makes during the next step."""
        return frozenset(self._drafting)

    @property
    def plans_lanes(self) -> bool:
        """Whether this scheduler plans lanes at all: only when the engine speculates. In
        every mode, ``stock`` too (whose policy simply never allows a parallel step), so
        that the worker always gets a lane plan and the counters are comparable."""
        return self.num_spec_tokens > 0

    # ------------------------------------------------------------------ schedule
    def add_request(self, request: Request) -> None:
        try:
            limit = requested_limit(request.sampling_params)
        except ValueError as e:  # the front end refuses it (patch request_validation); an engine core built alone
            logger.warning("%s: request %s speculates as if it asked nothing", e, request.request_id)
            limit = None
        self.request_limits.add(request.request_id, limit)
        super().add_request(request)

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        if not self.plans_lanes:
            return super().schedule(throttle_prefills)
        started = time.perf_counter()
        self._time_finished_step(started)
        if self.request_depths is not None:  # the finished ones join the prior of the requests after them
            self.request_depths.release([rid for rid in self.request_depths.request_ids if rid not in self.requests])
        load = self._current_load()
        if self.depth_controller is not None:
            self._reserve_draft_slots(load.k)
        # Depth 0 drafts nothing: no step to overlap; nor does a step vLLM's runner will not draft after.
        allowed = load.k > 0 and self._drafter_has_room() and self.mode_policy.parallel_allowed(load)
        self._hold_back_for_this_step(allowed)
        if self._verified_depth_only:
            self._cut_drafts_to(load.k)
        if self.request_limits.active:
            self._cut_drafts_to_request_limits()
        if self.request_depths is not None:
            self._cut_drafts_that_do_not_pay()
        output = super().schedule(throttle_prefills)
        return self._plan_lanes(output, allowed, load, started)

    def update_from_output(self, scheduler_output, model_runner_output):
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        if self.depth_controller is not None:
            verified = _verified(scheduler_output, model_runner_output)
            self.depth_controller.observe_verification([(drafts, accepted) for _, drafts, accepted in verified])
            if self.request_depths is not None:
                self.request_depths.observe(verified)
        step, self._last_step = self._last_step, None
        # With nothing left to run the engine idles until the next request:
        # that gap is not step time, so such a step is not timed.
        if step is not None and self.has_unfinished_requests():
            self._last_step = step._replace(tokens=sum(len(ids) for ids in model_runner_output.sampled_token_ids))
        return outputs

    def _time_finished_step(self, now: float) -> None:
        """Feed the mode policy the last step, timed from its schedule() to
        this one: the engine joins the draft lane after update_from_output
        (``take_draft_token_ids`` in its post-step), and a parallel step that
        waits there must be charged for it."""
        step, self._last_step = self._last_step, None
        if step is not None and step.tokens is not None:
            self.mode_policy.observe(step.parallel_allowed, step.load, step.tokens, now - step.started)
            if self.depth_controller is not None and step.timed:
                self.depth_controller.observe_step(step.decodes, step.load.k, step.scheduled_tokens,
                                                   now - step.started, step.catch_up, step.prefill_tokens)

    def _decode_requests(self) -> list[Request]:
        return [r for r in self.running if not r.is_prefill_chunk]

    def _current_load(self) -> Load:
        """The load of the step being scheduled, its depth chosen."""
        decodes = self._decode_requests()
        if self.depth_controller is not None:
            self._choose_depth(decodes)
        return Load.of(len(decodes), self._depth, *self._last_mix)

    def _choose_depth(self, decodes: list[Request]) -> None:
        """The depth controller's choice for the step being scheduled. Its drafts are verified next step,
        by the requests running then: the decodes, and those whose prompts this step computes (the
        prefilling ones and the waiting ones the batch has room for). The choice is the best depth for
        their decode steps; what drafting costs once (a catch-up of skipped tokens, the draft's prefill
        of the prompts) is weighed against the tokens they have left, and where no request is left waiting,
        each request's tokens left: the batch ends with its last request (depth_controller.py)."""
        if not self.depth_controller.can_speculate:
            return  # depth 0 on every step (its starting depth)
        room = max(self.max_num_running_reqs - len(self.running), 0)
        starting = [r for r in self.running if r.is_prefill_chunk] + list(itertools.islice(self.waiting, room))
        requests = decodes + starting
        if not requests:
            return
        once = 0
        if self._drafter_catches_up:
            once = (sum(self._skipped_tokens.get(r.request_id, 0) for r in decodes)
                    + sum(max(r.num_prompt_tokens - r.num_computed_tokens, 0) for r in starting))
        left = [r.max_tokens - r.num_output_tokens for r in requests]
        remaining = statistics.median(left)
        survivals = finishing = None
        first = 0  # requests measured first (scheduling/first_measurement.py)
        if self.request_depths is not None:  # each request verifies only the drafts that pay: the depth weighs those
            rates = self.depth_controller.acceptance.per_position()
            limits = [self.request_limits.limit(r) for r in requests]
            if self.get_request_counts()[1] <= room:  # none left waiting: the batch ends with its last request
                finishing = left
            first = decide_first_measurements(self.depth_controller, self.request_depths, requests, len(decodes),
                                              limits, rates, once, remaining, left, finishing)
            survivals = [self.request_depths.survivals(r.request_id, n, rates) for r, n in zip(requests, limits)]
        rechecks = self.depth_controller.rechecks
        self._depth = self.depth_controller.depth(len(requests), catch_up=once, remaining=remaining,
                                                  survivals=survivals, finishing=finishing)
        for stats in (self.minedraft_stats, self.minedraft_totals):
            stats.depth_rechecks += self.depth_controller.rechecks - rechecks
            stats.first_measurements += first

    def _reserve_draft_slots(self, depth: int) -> None:
        """KV slots past a request's scheduled tokens only where this step's drafter writes there. A
        drafter that skips its depth-0 call (config/idle_drafter.py) writes nothing at depth 0: such a step
        reserves no slots for it, where vLLM reserves K whatever the depth (its drafter still runs),
        so that a load held at depth 0 by a short KV cache is preempted no more than the target alone.
        A step at depth > 0 reserves K again before its drafter runs; the tokens it catches up on have
        their slots (the target computed them)."""
        self.num_lookahead_tokens = 0 if depth == 0 and self._drafter_catches_up else self._lookahead_slots

    def _count_skipped(self, scheduled: dict[str, int], depth: int) -> int:
        """The tokens a drafter that skips depth-0 calls (config/idle_drafter.py) runs its model over in this
        step besides the decodes' own: at a depth > 0, the tokens each request skipped at depth 0 (its
        catch-up) and the prompt tokens scheduled now (the draft's prefill, the same work); at depth 0
        each request's tokens are noted as skipped instead."""
        if not self._drafter_catches_up or self.depth_controller is None or not self.depth_controller.can_speculate:
            return 0
        extra = 0
        for rid, tokens in scheduled.items():
            if depth == 0:
                self._skipped_tokens[rid] = self._skipped_tokens.get(rid, 0) + tokens
            else:
                extra += self._skipped_tokens.pop(rid, 0) + _prompt_tokens_scheduled(self.requests[rid], tokens)
        for rid in [rid for rid in self._skipped_tokens if rid not in self.requests]:
            del self._skipped_tokens[rid]  # finished: never caught up
        return extra

    def _cut_drafts_to(self, depth: int) -> None:
        """Each running request's drafts cut to the first ``depth``: what vLLM's scheduler itself
        does when the token budget cannot hold them all (rejection sampling then verifies the
        drafts scheduled; the drafter's next call starts from the tokens accepted, as after a
        rejection). The drafter made all K: its state stays what it would be at K."""
        for request in self.running:
            if len(request.spec_token_ids) > depth:
                request.spec_token_ids = request.spec_token_ids[:depth]

    def _cut_drafts_to_request_limits(self) -> None:
        """Each running request's drafts cut to its own limit (scheduling/request_limits.py), as
        ``_cut_drafts_to`` cuts them to a depth."""
        limits = self.request_limits
        limits.release([rid for rid in limits.request_ids if rid not in self.requests])  # finished
        cut, past = limits.cut(self.running)
        for stats in (self.minedraft_stats, self.minedraft_totals):
            stats.drafts_cut += cut
            stats.past_spec_max_len += past

    def _cut_drafts_that_do_not_pay(self) -> None:
        """The drafts of each request verified in this step cut to those whose acceptance, measured per
        request, pays for their verification in the step-cost model (scheduling/request_depths.py)."""
        controller, depths = self.depth_controller, self.request_depths
        if not controller.costs.known:
            return
        due = [r for r in self.running if not r.is_prefill_chunk
               and r.next_decode_eligible_step <= self.current_step + 1]  # not sitting this step out
        drafts = sum(len(r.spec_token_ids) for r in due)
        if not drafts:
            return
        decodes, depth = len(due), self._depth
        token_s = controller.costs.token_seconds(decodes)
        step_s = controller.costs.seconds(decodes, self.num_spec_tokens)[depth] + token_s * (drafts - decodes * depth)
        trimmed, by_drafts = depths.cut(due, decodes, step_s, token_s, controller.acceptance.per_position())
        for stats in (self.minedraft_stats, self.minedraft_totals):
            stats.drafts_trimmed += trimmed
            for kept, requests in by_drafts.items():
                stats.requests_by_drafts[str(kept)] = stats.requests_by_drafts.get(str(kept), 0) + requests

    def _hold_back_for_this_step(self, parallel_allowed: bool) -> None:
        if not parallel_allowed and not self._drafting:
            return  # no group sits this step out (every step at depth 0, or in plain SD)
        decodes = self._decode_requests()
        drafting = [r for r in decodes if r.request_id in self._drafting]
        due = [r for r in decodes if r.request_id in self._due and r.request_id not in self._drafting]
        free = [r for r in decodes if r.request_id not in self._drafting and r.request_id not in self._due]
        held_ids = set(
            choose_held(
                [r.request_id for r in drafting],
                [r.request_id for r in due],
                [r.request_id for r in free],
            )
            if parallel_allowed
            else ()
        )
        # vLLM increments current_step at the start of schedule(); a request
        # whose eligible step is current_step + 2 is skipped by that call only.
        skip_until = self.current_step + 2
        for request in drafting:
            request.next_decode_eligible_step = skip_until
        for request in free:
            if request.request_id in held_ids:
                request.next_decode_eligible_step = skip_until

    def _plan_lanes(
        self, output: SchedulerOutput, parallel_allowed: bool, load: Load, started: float
    ) -> MineDraftSchedulerOutput:
        scheduled = output.num_scheduled_tokens
        if self._drafting:
            running_ids = {r.request_id for r in self.running}
            draft_only = [rid for rid in self._drafting if rid in running_ids and rid not in scheduled]
        else:
            draft_only = []  # plain SD and depth 0: nothing on the lane
        # Decode requests not verified now: verified next step.
        next_due = {
            r.request_id
            for r in self.running
            if not r.is_prefill_chunk and r.request_id not in scheduled
        }
        drafter_runs = self._drafter_runs_after(scheduled)
        parallel = parallel_allowed and is_balanced(len(scheduled), len(next_due)) and drafter_runs
        # Where vLLM's runner does not draft, its drafts for the step's requests are K zeros (placeholders):
        # not verified (update_draft_token_ids), and not collected at all where no lane job drafts either.
        self._placeholder_req_ids = set() if drafter_runs else set(scheduled)
        spec = output.scheduled_spec_decode_tokens
        decode_tokens = sum(n for rid, n in scheduled.items() if n == 1 + len(spec.get(rid, ())))
        # Steps that verify or draft nothing tell the mode policy nothing; at depth 0 a decode
        # step verifies nothing by design, and is what the depth controller measures there.
        has_decodes = bool(draft_only or spec) or (load.k == 0 and decode_tokens > 0)
        prefill_tokens = output.total_num_scheduled_tokens - decode_tokens
        self._last_step = _StepRecord(parallel_allowed, load if has_decodes else Load(0, load.k), started,
                                      decodes=sum(1 for rid in scheduled if not self.requests[rid].is_prefill_chunk),
                                      scheduled_tokens=output.total_num_scheduled_tokens,
                                      prefill_tokens=prefill_tokens,
                                      catch_up=self._count_skipped(scheduled, output.num_spec_tokens_to_schedule))
        self._last_mix = (prefill_tokens, decode_tokens)
        # Requests whose prefill is still in progress are scheduled again next
        # step whatever the mode; only decode requests wait for their drafts.
        self._drafting = (
            {rid for rid in scheduled if not self.requests[rid].is_prefill_chunk}
            if parallel
            else set()
        )
        self._due = next_due
        self._drafts_expected = (output.num_spec_tokens_to_schedule > 0 and drafter_runs) or bool(draft_only)
        # The depth vLLM drafts this step at: the controller's, or a user's per-batch-size table's;
        # where the drafter drafts only K, the depth the controller verified this step at.
        depth = output.num_spec_tokens_to_schedule if scheduled and not self._verified_depth_only else self._depth
        for stats in (self.minedraft_stats, self.minedraft_totals):
            stats.observe_step(len(scheduled), len(draft_only), parallel, parallel_allowed,
                               probing=self.mode_policy.probing is not None, depth=depth)
        # Prompt tokens in a step that drafts inline: its drafts can wait until its outputs are queued.
        # With a drafter that catches up, any such step's: a request that arrives meanwhile skips them.
        after_output = (not parallel and self._first_token_early and output.num_spec_tokens_to_schedule > 0
                        and (output.total_num_scheduled_tokens > decode_tokens or self._arrivals_skip_drafting))
        self._held_drafting = after_output and self._arrivals_skip_drafting and not draft_only
        return MineDraftSchedulerOutput.extend(output, sorted(draft_only), parallel, after_output)

    # ------------------------------------------------------------------ drafts
    def _drafter_has_room(self) -> bool:
        """Whether every running request, with the drafts it has, leaves the drafter room after the step
        (``_drafter_runs_after``): where one does not, no step holds a group back for the lane."""
        return max((r.num_tokens_with_spec for r in self.running), default=0) <= self._drafter_room

    def _drafter_runs_after(self, scheduled: dict[str, int]) -> bool:
        """Whether vLLM's runner drafts after this step: it drafts for none of the step's requests where the
        longest of them (its tokens computed after the step), with K drafts, passes the drafter's max_model_len
        (``GPUModelRunner._input_fits_in_drafter``). Such a step is not deferred to the lane: no job would be
        made for it, and the next step's plan would count on one."""
        return max((self.requests[rid].num_computed_tokens for rid in scheduled), default=0) <= self._drafter_room

    def expects_draft_tokens(self) -> bool:
        """Whether the worker can have drafts for the step scheduled last: it drafted at a depth
        above 0, or its lane ran a deferred job. At depth 0 with no job, vLLM's scheduler has
        already cleared every scheduled request's drafts and the worker's would all be empty, so
        the engine core may skip ``take_draft_token_ids``: one worker round trip a step."""
        return self._drafts_expected

    def skips_held_drafts(self) -> bool:
        """Called by the engine core after a step, before it collects drafts, when a new request has
        reached it meanwhile: whether that step's drafting, held until after its outputs, is skipped
        (then no drafts are collected), so the next step can start the new request's prefill without
        waiting for it. The step's requests are then verified without drafts next time (vLLM cleared
        them when it scheduled the step), and the drafter catches up on the skipped tokens when it next
        drafts (worker/in_process/draft_catch_up.py). Only for a step whose drafts all come from its held call
        (none from the lane), and only where the new request can be admitted next step: nothing waits
        before it and the batch has room (else the round would be lost for nothing). The skipped step's
        duration, which lacks its drafting, is not measured by the mode policy or depth controller."""
        if (not self._held_drafting or self.waiting or self.kv_holding_waiting
                or len(self.running) >= self.max_num_running_reqs):
            return False
        self._held_drafting = False
        if self._last_step is not None:
            self._last_step = self._last_step._replace(load=Load(0, self._last_step.load.k), timed=False)
        for stats in (self.minedraft_stats, self.minedraft_totals):
            stats.arrival_skips += 1
        return True

    def update_draft_token_ids(self, draft_token_ids: DraftTokenIds) -> None:
        late = len(MineDraftDraftTokenIds.of(draft_token_ids).late_req_ids)
        self.minedraft_stats.late_drafts += late
        self.minedraft_totals.late_drafts += late
        # A request preempted while its drafts were being made is waiting again; vLLM's own path never
        # delivers drafts to such a request. vLLM's placeholder drafts (K zeros) for a step whose requests
        # its runner did not draft for would be verified, and almost all rejected, at a token's cost each.
        placeholders, self._placeholder_req_ids = self._placeholder_req_ids, set()
        keep = [
            i
            for i, rid in enumerate(draft_token_ids.req_ids)
            if (req := self.requests.get(rid)) is not None
            and req.status == RequestStatus.RUNNING and rid not in placeholders
        ]
        if len(keep) != len(draft_token_ids.req_ids):
            draft_token_ids = DraftTokenIds(
                [draft_token_ids.req_ids[i] for i in keep],
                [draft_token_ids.draft_token_ids[i] for i in keep],
            )
        super().update_draft_token_ids(draft_token_ids)

    # ------------------------------------------------------------------ stats
    def make_stats(self, *args, **kwargs) -> SchedulerStats | None:
        stats = super().make_stats(*args, **kwargs)
        if stats is None or not self.plans_lanes:
            return stats
        attach(stats, self.minedraft_stats.to_payload())
        self.minedraft_stats = MineDraftStats()
        return stats


def _prompt_tokens_scheduled(request: Request, scheduled: int) -> int:
    """Of the ``scheduled`` tokens of ``request``'s step (already counted in its computed tokens), its prompt's."""
    return max(0, min(scheduled, request.num_prompt_tokens - (request.num_computed_tokens - scheduled)))


def _verified(scheduler_output: SchedulerOutput, runner_output) -> list[tuple[str, int, int]]:
    """Each request that had drafts verified in the step: (its id, drafts verified, drafts accepted)."""
    index, sampled = runner_output.req_id_to_index, runner_output.sampled_token_ids
    verified = []
    for rid, drafts in scheduler_output.scheduled_spec_decode_tokens.items():
        row = index.get(rid)
        if drafts and row is not None and row < len(sampled) and len(sampled[row]):
            verified.append((rid, len(drafts), min(len(sampled[row]) - 1, len(drafts))))
    return verified


def _speculative_max_len(vllm_config) -> int | None:
    """The speculative config's max_model_len where it is below the target's (vLLM sets it no higher)."""
    spec = vllm_config.speculative_config
    length = getattr(spec, "max_model_len", None) if spec is not None else None
    if length is None or length >= vllm_config.model_config.max_model_len:
        return None
    return length


def _drafter_room(vllm_config) -> int:
    """The longest sequence after which vLLM's runner still drafts: the drafter's max_model_len (the
    speculative max_model_len where set, else the target's) less the tokens its query adds (K, and
    DFlash's bonus token), as ``GPUModelRunner._input_fits_in_drafter`` reads them."""
    spec = vllm_config.speculative_config
    draft = spec.draft_model_config
    length = (draft.max_model_len if draft is not None and draft.max_model_len is not None
              else vllm_config.model_config.max_model_len)
    return length - spec.num_speculative_tokens - method_of(spec).query_extra


def _fixed_depth_drafter(spec) -> str | None:
    """The drafter that vLLM runs only at depth K, named; None where any depth 0..K runs: parallel drafting
    (config/methods.py), and SuffixDecodingProposer.propose and MedusaProposer.propose (one head per draft
    token), which assert K."""
    return method_of(spec).drafts_only_k
