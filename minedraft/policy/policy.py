"""The speculation policy: each step's plan, decided in one place.

``plan(view)`` answers, before vLLM schedules a step: the depth vLLM's drafter drafts at (0 .. K), each
request's drafts cut to those it verifies, and whether the step may run in parallel (one group verified
while the lane drafts for the other); ``held_plan(key)`` answers the same from the step's key alone where a
depth 0 stands and nothing needs each request's view. ``observe(result)`` takes the step back once it ran:
its seconds and each request's drafts verified and accepted. The scheduler applies plans (scheduling/scheduler.py); how a
plan was chosen stays here:

* the depth (depth.py): the best predicted goodput from the step-cost model and measured acceptance, or K
  where the depth is not chosen (``speculation_depth: fixed``, vLLM's per-batch-size table, mode ``stock``);
* each request's drafts: its own limit (request_limits.py), and under ``speculation_depth: auto`` those its
  own acceptance pays for (paying_drafts.py), a new request measured first where that pays
  (first_measurement.py); the depth is chosen with that cut;
* parallel steps (overlap.py): where the drafter has hardware of its own, or where pinned.

A fresh engine's first ``warm_up_steps`` timed steps are not fitted (tuning.py), nor the first decode step
at each shape (the target's tokens, and whether the drafter ran): they pay one-off costs of the engine's
start and of a new batch shape, not what such a step costs.

Where vLLM's drafter drafts only K (parallel drafting, suffix decoding, Medusa) and the user asks for
``speculation_depth: auto``, the depth chosen is how many of the K drafts each request verifies.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from minedraft.config.methods import method_of
from minedraft.config.settings import MineDraftSettings
from minedraft.policy.depth import DepthChoice
from minedraft.policy.draft_sources import LookupCalibration, worth
from minedraft.policy.first_measurement import decide_first_measurements
from minedraft.policy.load import Load
from minedraft.policy.overlap import OverlapChoice, placement
from minedraft.policy.paying_drafts import paying_drafts
from minedraft.policy.plan import PlanCounts, StepKey, StepPlan, StepResult, StepView
from minedraft.policy.request_limits import RequestLimits
from minedraft.policy.tuning import TUNING, Tuning
from minedraft.policy.weight_bound import engine_draft_cost

# How the depth is chosen: fixed (K, or vLLM's per-batch-size table), the depth vLLM drafts at, or, where
# its drafter drafts only K, how many of them are verified.
DEPTH_CONTROLS = ("fixed", "drafted", "verified")


class SpeculationPolicy:
    def __init__(self, max_depth: int, *, mode: str = "auto", dedicated: bool = False,
                 depth_control: str = "fixed", per_request: bool = True, draft_cost: float | None = None,
                 catches_up: bool = False, skips_rows: bool | None = None, spec_max_len: int | None = None,
                 second_source: bool = False, tuning: Tuning = TUNING,
                 log: Callable[[str], None] | None = None) -> None:
        if depth_control not in DEPTH_CONTROLS:
            raise ValueError(f"depth_control must be one of {', '.join(DEPTH_CONTROLS)}, got {depth_control!r}")
        self.max_depth = max_depth
        self.depth_control = depth_control
        self.catches_up = catches_up  # the drafter skips depth-0 calls and catches up (config/idle_drafter.py)
        # It can leave rows of a call undrafted (config/idle_drafter.py): one that catches up, the process drafter.
        self.skips_rows = catches_up if skips_rows is None else skips_rows
        self.second_source = second_source  # a lookup source drafts beside the model drafter (hybrid/)
        self.limits = RequestLimits(max_depth, spec_max_len)
        self.overlap = OverlapChoice(mode, dedicated, tuning, on_change=log)
        self.depths = (DepthChoice(max_depth, draft_cost, tuning, on_change=log,
                                   partial_rechecks=self.skips_rows and not dedicated)
                       if depth_control != "fixed" else None)
        self.per_request = per_request and self.depths is not None
        self.depth = max_depth if self.depths is None else self.depths.starting_depth
        self._finished: list[str] = []
        self._skipped: dict[str, int] = {}  # per request, the tokens its drafter skipped at depth 0
        self._last_mix = (0, 0)  # the last step's prompt and decode tokens
        self._copying: frozenset[str] = frozenset()  # the last plan's requests verified with lookup drafts
        self.lookup_calibration = LookupCalibration()
        self._lookup_estimated: dict[str, float] = {}  # the last plan's lookup drafts: accepted tokens estimated
        # Per request, at every position up to K, while the acceptance (its version) stays as it was.
        self._survivals: dict[str, list[float]] = {}
        self._survivals_version = -1
        self._rechecked_last = False  # the last plan was a re-check's: the drafts held now are its drafts
        # The decoding requests (by id), the requests and whether the batch was closed, where the depth was
        # last weighed: a request that joins or leaves changes it.
        self._weighed_for: tuple | None = None
        self.tuning = tuning
        self._steps_timed = 0  # the first warm_up_steps are not fitted
        self._shapes_run: set[tuple[int, bool]] = set()  # decode steps' (the target's tokens, drafted) so far

    @classmethod
    def for_engine(cls, vllm_config: Any, settings: MineDraftSettings, max_depth: int, has_depth_table: bool,
                   catches_up: bool, spec_max_len: int | None, log: Callable[[str], None],
                   second_source: bool = False, skips_rows: bool | None = None) -> SpeculationPolicy:
        """The policy of an engine, with one INFO line for each choice its configuration makes."""
        spec = vllm_config.speculative_config
        if spec_max_len is not None and max_depth > 0:
            log(f"MineDraft: a request longer than the speculative max_model_len ({spec_max_len} tokens, with its "
                f"{max_depth} drafts) verifies no drafts from then on (policy/request_limits.py).")
        where = placement(vllm_config.device_config.device_type, settings.lane, settings.drafter)
        dedicated = where == "dedicated"
        if settings.mode == "auto" and not dedicated and max_depth > 0:
            log(f"MineDraft auto: the drafter shares the target's hardware ({where}): steps run as plain "
                "speculative decoding (parallel steps pay where the drafter has hardware of its own).")
        common = dict(mode=settings.mode, dedicated=dedicated, catches_up=catches_up, skips_rows=skips_rows,
                      spec_max_len=spec_max_len, second_source=second_source, log=log)
        control = settings.depth_control(has_depth_table)
        if control not in ("auto", "step") or settings.mode == "stock" or max_depth == 0:
            if has_depth_table and settings.mode == "auto":
                log("MineDraft: num_speculative_tokens_per_batch_size chooses the speculation depth.")
            return cls(max_depth, **common)
        if has_depth_table:  # refused by the front end; a directly built config may have it
            raise ValueError("minedraft: speculation_depth=auto and num_speculative_tokens_per_batch_size "
                             "both choose the depth; use one.")
        per_request = settings.speculation_depth != "step"
        only_k = method_of(spec).drafts_only_k
        if only_k is not None:
            if settings.speculation_depth is None:
                # Measured on CPU (benchmarks/README.md): choosing how many of K drafts to verify saved less
                # than its re-checks cost, so only a user's speculation_depth=auto asks for it.
                log(f"MineDraft: {only_k} drafts num_speculative_tokens={max_depth} tokens each step and they "
                    "are all verified (speculation_depth=auto: the policy chooses how many).")
                return cls(max_depth, **common)
            log(f"MineDraft: {only_k} drafts num_speculative_tokens={max_depth} tokens each step; the policy "
                "chooses how many of them the target verifies.")
            # The drafter makes K drafts at every depth: a draft forward costs nothing more at a deeper one.
            return cls(max_depth, depth_control="verified", per_request=per_request, draft_cost=0.0, **common)
        # Pinned parallel steps overlap draft forwards with verification: the weight bound does not hold.
        draft_cost = engine_draft_cost(vllm_config, dedicated) if settings.mode == "auto" else None
        policy = cls(max_depth, depth_control="drafted", per_request=per_request, draft_cost=draft_cost, **common)
        if draft_cost is not None:
            log(f"MineDraft auto: a draft forward multiplies {draft_cost:.2f}x the target's weights: the step-cost "
                f"model starts from that, and the depth at {policy.depth} (policy/weight_bound.py).")
        return policy

    # ----------------------------------------------------------- requests
    def add_request(self, req_id: str, limit: int | None) -> None:
        self.limits.add(req_id, limit)

    def finish(self, req_id: str) -> None:
        """A request finished (or was aborted): released before the next plan."""
        self._finished.append(req_id)

    # ----------------------------------------------------------- plans
    def plan(self, view: StepView) -> StepPlan:
        self._release_finished()
        rechecks, first = self._choose_depth(view)
        # A re-check's drafts are verified whole, in its steps and in the step after its last (a request's own
        # poor rate would cut them: nothing would be measured; at 8 requests or more a re-check is one step).
        whole = self.depths is not None and (self.depths.rechecking or self._rechecked_last)
        self._rechecked_last = self.depths is not None and self.depths.rechecking
        decoding = sum(r.decoding for r in view.requests)
        load = Load.of(decoding, self.depth, *self._last_mix)
        # Depth 0 drafts nothing: no step to overlap; nor does a step vLLM's runner will not draft after.
        parallel = self.depth > 0 and view.drafter_has_room and self.overlap.allowed(load)
        num_drafts, lookup_drafts, counts = self._num_drafts(view, parallel, whole)
        unused = self._unused_model_drafts(view, lookup_drafts, parallel)
        lookup_only = bool(unused) and unused >= {r.req_id for r in view.requests if not r.on_lane}
        if lookup_only:
            self.depth = 0
            load = Load.of(decoding, 0, *self._last_mix)
        undrafted = frozenset() if lookup_only else unused or self._left_out_of_recheck(view)
        self._copying = frozenset(lookup_drafts)
        return StepPlan(self.depth, parallel, num_drafts, load, PlanCounts(
            **counts, rechecks=rechecks, first_measurements=first, lookup_only=int(lookup_only),
            undrafted=len(undrafted)), lookup_drafts, undrafted)

    def held_plan(self, key: StepKey) -> StepPlan | None:
        """The plan of a step whose depth 0, chosen last, stands (``_holds_zero``), made from its ``key`` alone,
        so the scheduler builds no request's view: the plan ``plan`` makes there, where the step is ``plain``
        and no request passes the speculative max_model_len (nothing to cut, count or draft). None: ``plan``
        must see the step. At 32 requests, building and reading their views took about 0.15 ms a step, 3 %
        of a kit model's step at depth 0."""
        choice = self.depths
        if choice is None or self.second_source or not key.plain or self.limits.passes(key.longest):
            return None
        self._release_finished()
        if choice.can_speculate and not self._holds_zero(key):  # where it cannot, the depth is 0 on every step
            return None
        self.depth = 0
        self._rechecked_last = False  # a depth 0 that stands is not a re-check's
        return StepPlan(0, False, {}, Load.of(len(key.decoding), 0, *self._last_mix))

    def _release_finished(self) -> None:
        """Forget what the requests finished since the last plan were kept for."""
        finished, self._finished = self._finished, []
        if not finished:
            return
        self.limits.release(finished)
        for rid in finished:
            self._skipped.pop(rid, None)
        self.lookup_calibration.release(finished)
        if self.depths is not None:  # the finished ones join the prior of the requests after them
            self.depths.acceptance.release(finished)

    def _holds_zero(self, key: StepKey) -> bool:
        """Whether the depth 0 chosen last stands for the step without being weighed again: the same requests
        and depth.py's ``holds_zero``. A closed batch is scored by its last request (depth.py): where the
        requests have as many tokens left, that score does not move as they decode; where they differ, it can,
        and the depth is weighed again unless no depth could beat 0 however the batch drains."""
        return ((key.decoding, key.num_requests, key.closed) == self._weighed_for
                and self.depths.holds_zero(key.num_requests, key.even, key.num_requests == len(key.decoding)))

    def _unused_model_drafts(self, view: StepView, lookup_drafts: dict[str, int], parallel: bool) -> frozenset[str]:
        """The requests whose drafts the model drafter (it drafts after the step for every request the step
        runs) would make in vain: those that verify the lookup source's drafts now (text that repeats itself
        is likely to again next step), and, beside them or alone, those whose prompts start (a prompt's first
        drafts are not yet known to be wanted: its request may copy its prompt, which a lookup source drafts
        from its first output token on). Where that is every request, the step's depth is 0: the drafter
        skips its call; else it skips their rows (worker/in_process/call_rows.py; the process drafter's job
        leaves them out). Either way it drafts them later from every token they gained (``skips_rows``; where
        it catches up, the cost is weighed as any catch-up's): a request the model drafts for later pays the
        draft's prefill then, one step later, and one that the lookup source drafts to its end never pays it
        (a draft model's prefill of a 500-token prompt took about 4 s of 23 s for 64 tokens on the real pair,
        EPYC bf16, 2026-12-03). A request whose lookup draft misses next step verifies none of the model's
        that step. Not in a re-check, which measures its own depth, nor where the depth is the user's or a
        parallel step drafts for the lane."""
        if not (self.second_source and self.skips_rows and self.depth > 0 and not parallel
                and self.depths is not None and not self.depths.rechecking):
            return frozenset()
        running = [r for r in view.requests if not r.on_lane]
        copying = [r.req_id for r in running if r.decoding and r.req_id in lookup_drafts]
        if not copying and any(r.decoding for r in running):
            return frozenset()
        return frozenset(copying + [r.req_id for r in running if not r.decoding])

    def _left_out_of_recheck(self, view: StepView) -> frozenset[str]:
        """The requests a re-check that drafts for a few of the batch's leaves out (depth.py's
        ``recheck_rows``): all but the decoding requests whose drafter has the fewest tokens to catch up on,
        prompts starting included. Their tokens are noted as skipped and caught up when next drafted."""
        rows = self.depths.recheck_rows if self.depths is not None and self.depths.rechecking else None
        if rows is None:
            return frozenset()
        decoding = sorted((r for r in view.requests if r.decoding and not r.on_lane),
                          key=lambda r: self._skipped.get(r.req_id, 0))
        measured = {r.req_id for r in decoding[:rows]}
        return frozenset(r.req_id for r in view.requests if r.req_id not in measured)

    def _choose_depth(self, view: StepView) -> tuple[int, int]:
        """The depth for the step's requests: those that decode and those whose prompts start now (its drafts
        are verified next step, by the requests running then). What drafting costs once (a catch-up of skipped
        tokens, the draft's prefill of prompts) is weighed against the tokens they have left, and where the
        batch is closed, each request's tokens left (depth.py). The re-checks begun, and the requests measured
        first."""
        choice, requests = self.depths, view.requests
        if choice is None or not choice.can_speculate or not requests:
            return 0, 0
        key = view.key()
        if self._holds_zero(key):
            self.depth = 0
            return 0, 0
        self._weighed_for = (key.decoding, key.num_requests, key.closed)
        once = 0
        if self.catches_up:
            # Not for a request the lookup source drafts now or drafted last, nor for prompts starting beside
            # one: their rows are likely skipped (_unused_model_drafts). A copy of a 500-token prompt would
            # otherwise hold the batch beside it at depth 0 for a catch-up that does not come.
            copies = {r.req_id for r in requests if r.decoding and (r.lookup_probs or r.req_id in self._copying)}
            once = sum(self._skipped.get(r.req_id, 0) if r.decoding else r.prompt_left for r in requests
                       if r.req_id not in copies and (r.decoding or not copies))
        left = [r.tokens_left for r in requests]
        tokens_left = statistics.median(left)
        survivals = closing = None
        first = 0
        if self.per_request:  # each request verifies only the drafts that pay: the depth weighs those
            limits = [self.limits.limit(r) for r in requests]
            closing = left if view.closed else None
            first = decide_first_measurements(choice, requests, limits, once, tokens_left, closing)
            survivals = [self._model_survivals(r.req_id, n) for r, n in zip(requests, limits)]
        rechecks = choice.rechecks
        # Read only by a partial re-check (depth.py): not built where the drafter cannot leave rows out.
        row_catch_ups = ([self._skipped.get(r.req_id, 0) for r in requests if r.decoding and not r.on_lane]
                         if choice.partial_rechecks else ())
        self.depth = choice.depth(len(requests), tokens_left, catch_up=once, survivals=survivals, closing=closing,
                                  row_catch_ups=row_catch_ups)
        return choice.rechecks - rechecks, first

    def _num_drafts(self, view: StepView, parallel: bool,
                    whole: bool) -> tuple[dict[str, int], dict[str, int], dict[str, Any]]:
        """Each request verified now, its drafts cut: to the depth where it is the verified one, to its limit,
        and, unless a re-check made them (``whole``), to those its acceptance pays for; and those verified with
        the second source's drafts instead (draft_sources.py), how many of them."""
        past = self.limits.newly_past(view.requests)
        verified = [r for r in view.requests if r.decoding and (r.num_drafts or r.lookup_probs)
                    and not r.on_lane and not (parallel and r.held_if_parallel)]
        kept, raw, cut = {}, {}, 0
        for r in verified:
            limit = self.limits.limit(r)
            n = min(r.num_drafts, self.depth) if self.depth_control == "verified" else r.num_drafts
            cut += max(n - limit, 0)
            kept[r.req_id] = min(n, limit)
            own = self.limits.own(r)
            if r.lookup_probs and own != 0:
                raw[r.req_id] = r.lookup_probs[:own]
        counts = dict(drafts_cut=cut, past_spec_max_len=past)
        weighs = self.per_request and self.depths.costs.known and not whole
        num_verified = sum(1 for r in view.requests if r.decoding and not r.on_lane
                           and not (parallel and r.held_if_parallel))
        survivals = {rid: self._model_survivals(rid, n) for rid, n in kept.items() if n}
        threshold = self._threshold(num_verified, survivals) if weighs else 0.0
        lookup = {}  # the requests that verify the second source's drafts: their survivals
        for rid, probs in raw.items():
            own = self.lookup_calibration.survivals(rid, probs)
            if worth(own, threshold) > worth(survivals.get(rid, ()), threshold):
                lookup[rid] = survivals[rid] = own
                kept[rid] = 0  # its model drafts are not verified
        if weighs:
            counts.update(self._trim(num_verified, survivals, kept, lookup))
        lookup_drafts = {rid: len(own) for rid, own in lookup.items() if own}
        self._lookup_estimated = {rid: sum(raw[rid][:n]) for rid, n in lookup_drafts.items()}
        return kept, lookup_drafts, counts

    def _model_survivals(self, rid: str, n: int) -> list[float]:
        """The chance that each of the model drafter's ``n`` drafts survives: the request's measured
        acceptance, or, where the policy measures none (a fixed depth), all of them. Computed at every position
        (a request's first n are a prefix of them) once until the acceptance changes: the depth's choice and
        the cut both ask, and a depth 0 weighed again after a cost refit asks for 32 requests' again."""
        if self.depths is None:
            return [1.0] * n
        version = self.depths.acceptance.version
        if version != self._survivals_version:
            self._survivals, self._survivals_version = {}, version
        own = self._survivals.get(rid)
        if own is None:
            own = self._survivals[rid] = self.depths.acceptance.survivals(rid, self.max_depth)
        return own[:n]

    def _threshold(self, num_verified: int, survivals: dict[str, list[float]]) -> float:
        """The survival a draft must reach to pay in this step (paying_drafts.py): a verified token's seconds
        times the step's expected tokens per second."""
        token_s, step_s = self._verification_seconds(num_verified, sum(len(s) for s in survivals.values()))
        tokens = num_verified + sum(sum(s) for s in survivals.values())
        return token_s * tokens / step_s if token_s > 0 and step_s > 0 else 0.0

    def _verification_seconds(self, num_verified: int, drafts: int) -> tuple[float, float]:
        """A verified token's seconds, and the step's verifying ``drafts`` in all, in the step-cost model."""
        costs = self.depths.costs
        token_s = costs.token_seconds(num_verified)
        return token_s, costs.seconds(num_verified, self.max_depth)[self.depth] + token_s * (
            drafts - num_verified * self.depth)

    def _trim(self, num_verified: int, survivals: dict[str, list[float]], kept: dict[str, int],
              lookup: dict[str, list[float]]) -> dict[str, Any]:
        """The drafts of each request verified now cut to those whose chance of acceptance pays for their
        verification in the step-cost model (``kept``, and ``lookup`` for the second source's, cut in place)."""
        choice = self.depths
        rows = list(survivals.items())
        drafts = sum(len(s) for _, s in rows)
        if not drafts:
            return {}
        token_s, step_s = self._verification_seconds(num_verified, drafts)
        paying = paying_drafts([s for _, s in rows], num_verified, step_s, token_s)
        trimmed = trimmed_requests = 0
        by_drafts: dict[int, int] = {}
        for (rid, own), n in zip(rows, paying):
            by_drafts[n] = by_drafts.get(n, 0) + 1
            if n < len(own):
                trimmed += len(own) - n
                trimmed_requests += 1
                if rid in lookup:
                    lookup[rid] = own[:n]
                else:
                    kept[rid] = n
            if n == 0 and rid not in lookup:
                choice.acceptance.note_all_cut(rid)
        return dict(drafts_trimmed=trimmed, requests_trimmed=trimmed_requests, requests_by_drafts=by_drafts)

    # ----------------------------------------------------------- measurement
    def observe(self, result: StepResult) -> None:
        """A step as it ran: its verified drafts always; its seconds where it was timed."""
        plan = result.plan
        verified = result.verified
        if plan.lookup_drafts:  # the second source's drafts calibrate it, not the model's acceptance
            verified = [v for v in verified if v.req_id not in plan.lookup_drafts]
            for v in result.verified:
                if v.req_id in plan.lookup_drafts:
                    self.lookup_calibration.observe(v.req_id, self._lookup_estimated.get(v.req_id, 0.0), v.accepted)
        if self.depths is not None:
            self.depths.observe_verification(verified)
            if result.unanswered:
                self.depths.repeat_recheck(result.num_decoding)
        catch_up = self._count_catch_up(result)
        self._last_mix = (result.prefill_tokens, result.tokens - result.prefill_tokens)
        if result.seconds is None:
            return
        load = plan.load if result.measured else Load(0, plan.depth)
        if not result.unanswered:  # a drafter's start (below) is not plain SD's rate: no trial's baseline
            self.overlap.observe(plan.parallel, load, result.output_tokens, result.seconds)
        if self.depths is not None:
            # Steps that pay one-off costs are not fitted. oneDNN builds a kernel for each new row count on its
            # first call (about 1 ms a weight matrix): make demo's first depth-0 step at 32 requests took 10 ms,
            # the next ones 6, and fitted it held N = 32 at a depth that lost to depth 0. A shape is the target's
            # rows and whether the drafter ran (keyed by the depth itself, the replay grid read 1.031, not 1.035).
            # A fresh engine's first steps pay more of its start: fitted, they held the demo's single request at
            # depth 0 (0.69x). Prefill steps count towards the warm-up: a served load with a prompt always in
            # flight leaves it as soon.
            self._steps_timed += 1
            shape = (result.tokens, plan.depth > 0)
            first_at_shape = not result.prefill_tokens and shape not in self._shapes_run
            if not result.prefill_tokens:
                self._shapes_run.add(shape)
            # Rows the drafter left out (a re-check of a few, the hybrid's) cost no draft forward.
            drafted = (result.num_decoding - sum(rid in result.scheduled for rid in plan.undrafted)
                       if plan.undrafted else None)
            # A step whose drafts all came back empty: its seconds are the drafter's start (a draft engine
            # prefilling new prompts: 0.75 s where the target's step took 0.29, real pair at N = 16).
            self.depths.observe_step(result.num_decoding, plan.depth, result.tokens, result.seconds, catch_up,
                                     result.prefill_tokens,
                                     fit=(self._steps_timed > self.tuning.warm_up_steps and not first_at_shape
                                          and not result.unanswered),
                                     drafted=drafted)

    def _count_catch_up(self, result: StepResult) -> int:
        """The tokens a drafter that skips depth-0 calls ran its model over in the step besides the requests'
        own: at a depth > 0, those each request drafted skipped before (its catch-up) and the prompt tokens
        (the draft's prefill, the same work); the tokens of a request not drafted (at depth 0, or an
        undrafted row) are noted as skipped instead."""
        if not self.catches_up or self.depths is None or not self.depths.can_speculate:
            return 0
        plan = result.plan
        caught_up = 0
        for rid, tokens in result.scheduled.items():
            if plan.depth == 0 or rid in plan.undrafted:
                self._skipped[rid] = self._skipped.get(rid, 0) + tokens
            else:
                caught_up += self._skipped.pop(rid, 0)
        return 0 if plan.depth == 0 else caught_up + result.prompt_tokens
