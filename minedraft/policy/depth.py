"""How deep to speculate: each step's depth in 0..K, the one of the highest predicted goodput.

For every depth the choice predicts the goodput of a step of the requests it is for,

    goodput(depth) = expected tokens(depth) / seconds(depth)

``seconds`` from the step-cost model (step_costs.py: every measured step, at every load and depth, refines
one linear model), ``expected tokens`` from measured acceptance (acceptance.py): each request's own, where
given (``survivals``), each verifying only the drafts that pay (paying_drafts.py), else the batch's. A load
never seen is predicted from those that were, from its first step. The rules around it, each from a
measured loss (benchmarks/README.md, "Why does the policy have each of its rules?"):

* Start: the deepest depth the draft's weight bound leaves (weight_bound.py), else K, until steps are
  measured. A depth the bound rules out is never run.
* Depth 0 measured: a step that drafts at all pays vLLM's speculative path once (step_costs.py's ``s``),
  which only a depth-0 step tells apart: where no load within a bucket has run one, one step runs there.
* Hysteresis: at the same load (batch bucket) the choice moves only for a predicted gain of ``margin``.
* Catch-up: leaving depth 0 costs a draft model or EAGLE head a catch-up over the tokens it skipped, and
  the draft's prefill of new prompts, once: spread over the steps the requests have left.
* Re-check: at depth 0 acceptance is not measured, and the text may change. Where a depth > 0 could pay
  with every draft accepted, a re-check drafts for ``telling_trials`` requests' steps, once the acceptance
  measured last is older than the re-check's cost over ``margin`` (at least ``stale_s``), and its drafts are
  verified whole (a request's own poor rate would cut them: nothing would be measured). Where the drafter
  can leave rows of a call undrafted, a re-check of a larger batch drafts for ``telling_trials`` of its
  requests only (``recheck_rows``), those it has the fewest tokens to catch up on, and is priced so. It
  drafts at the depth the acceptance measured last predicts best, or where that is 0, at the shallowest that
  could pay: what it measures then confirms or overturns that prediction, in as many steps. A new load ends
  a re-check; one ended before its drafts were made does not count, nor does a step of it whose requests
  all came back without drafts (``repeat_recheck``: a process drafter that answers at once, before it
  holds the requests): it runs again. Acceptance that old decides no depth. At a depth > 0 the position
  past it is re-checked the same way.
* Costs go stale too: where no step near a load drafted for ``cost_stale_s``, what those steps measured
  may be a slow spell of the machine's, never measured again at depth 0. The re-check's ceiling then prices
  drafting at the draft's weights (step_costs.py), and the re-check forgets those steps and measures afresh.
* A closed batch: where no request waits, the batch ends with its last request, so each depth is scored by
  when the request with the most steps left would finish, not by the batch's tokens per second.

A depth 0 chosen stands without being weighed again until the step costs refit, the acceptance or the
requests change, or a re-check may be due (``holds_zero``): at depth 0 nothing else moves the choice.

Outputs never depend on the depth (verification is exact); only speed does. No clock: the policy feeds it
step durations, and its time is their sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from minedraft.policy.acceptance import Acceptance
from minedraft.policy.load import batch_bucket
from minedraft.policy.paying_drafts import paying_drafts
from minedraft.policy.plan import VerifiedDrafts
from minedraft.policy.step_costs import StepCosts
from minedraft.policy.tuning import TUNING, Tuning
from minedraft.policy.weight_bound import ruled_out_depths

REPORT_EVERY_S = 10.0  # at most one log line about a change per this many seconds of steps (decides nothing)
# A re-check step whose drafts all came back empty runs again at most this many times. On the real pair (bf16, the
# draft engine on core 1, draft_ahead auto, 2026-12-06) a batch of 8 new requests got its first drafts on the third
# step at depth 3 (the draft engine prefilled their prompts meanwhile); a drafter that never answers is not
# re-checked for ever.
RECHECK_REPEATS = 4


@dataclass
class DepthChoice:
    max_depth: int
    draft_cost: float | None = None  # a draft forward's weights over the target's, where known
    tuning: Tuning = TUNING
    on_change: Callable[[str], None] | None = None
    # The drafter can leave rows of a call undrafted and draft them later (config/idle_drafter.py), on the
    # target's hardware: a re-check of more than telling_trials requests drafts for that many only.
    partial_rechecks: bool = False
    costs: StepCosts = field(init=False)
    acceptance: Acceptance = field(init=False)
    seconds: float = 0.0  # of the steps measured: the policy's clock
    rechecks: int = 0
    rechecking: bool = False  # the depth chosen last is a re-check's: its drafts are verified whole
    recheck_rows: int | None = None  # with rechecking: the requests it drafts for (None: all of them)
    _choice: int | None = None  # the depth chosen last (not a re-check)
    _bucket: int = 0  # the batch bucket it was chosen at
    _reported_at: float | None = None
    _unreported: int = 0
    _recheck_from: float = 0.0  # a re-check's wait counts from here
    _recheck_left: int = 0  # requests' drafts the re-check under way has yet to make
    _recheck_bucket: int = 0  # the batch bucket it began at
    _recheck_before: float = 0.0  # _recheck_from before it began
    _recheck_depth: int = 0
    _recheck_repeats: int = 0  # the re-check's steps run again: their drafts all came back empty
    _drafted_at: dict[int, float] = field(default_factory=dict)  # batch bucket -> when a decode step last drafted
    _weighed_on: tuple[int, int, int] | None = None  # the requests, costs and acceptance the depth was chosen on
    _recheck_due: float = -math.inf  # when a re-check from depth 0 may next be due (see holds_zero)
    _closing_ceiling: float | None = None  # the last closed batch's best rate at a depth > 0 however it drains
    _zero_stands_closing: bool = False  # the depth 0 chosen last stands however the closed batch drains
    _zero_rate: float = 0.0  # the last closed batch's rate at depth 0
    _depths: tuple[int, ...] = field(init=False)  # the depths the weight bound leaves

    def __post_init__(self) -> None:
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {self.max_depth}")
        cost = self.tuning.draft_cost_prior if self.draft_cost is None else self.draft_cost
        self.costs = StepCosts(draft_cost=cost, tuning=self.tuning)
        self.acceptance = Acceptance(self.max_depth, self.tuning)
        ruled_out = ruled_out_depths(self.max_depth, self.draft_cost, self.tuning.margin)
        self._depths = tuple(d for d in range(self.max_depth + 1) if d not in ruled_out)

    # ----------------------------------------------------------- decisions
    def depth(self, num_reqs: int, tokens_left: float, catch_up: int = 0,
              survivals: Sequence[Sequence[float]] | None = None, closing: Sequence[float] | None = None,
              row_catch_ups: Sequence[int] = ()) -> int:
        """The depth for the next steps of ``num_reqs`` requests; ``tokens_left``: a typical request's,
        ``catch_up``: the tokens the drafter would run over once before drafting them (skipped ones, prompts);
        ``survivals`` and ``closing``: each request's own (see ``goodput``); ``row_catch_ups``: each decoding
        request's tokens skipped to catch up on (a re-check that drafts for a few, those with the fewest)."""
        self.rechecking, self.recheck_rows = False, None
        if num_reqs <= 0 or not self.can_speculate:
            return self._choice if self._choice is not None else self.starting_depth
        self._recheck_due = -math.inf
        self._closing_ceiling = None
        chosen = self._depth(num_reqs, tokens_left, catch_up, survivals, closing, row_catch_ups)
        self._weighed_on = (num_reqs, self.costs.version, self.acceptance.version)
        ceiling = self._closing_ceiling
        self._zero_stands_closing = (chosen == 0 and not self.rechecking and ceiling is not None
                                     and ceiling <= self._zero_rate * (1 + self.tuning.margin))
        return chosen

    def holds_zero(self, num_reqs: int, even: bool = True, decoding: bool = True) -> bool:
        """Whether depth 0, chosen last, stands for a step of ``num_reqs`` requests without being weighed
        again: the step costs and the acceptance are those it was chosen on, the depth was not a re-check's,
        and no re-check is due yet. At depth 0 acceptance is not measured, and what else moves (each
        request's steps left shrink, the tokens its drafter skipped grow) weighs against drafting; so where
        the requests are those it was chosen for too (the caller knows), weighing again would choose 0 (the
        same depths on a moving load, tests/unit/policy/test_depth_zero_hold.py; at 32 requests a choice took
        about 0.4 ms, 4 % of a kit model's step). A closed batch is scored by its last request, whose score
        can rise as the others decode: there the caller holds only where every request has as many tokens
        left (the score then stands still), ``even``; where they differ and every request decodes (one token
        a step each), only where no depth could beat 0 however the batch drains (``goodput``'s closing
        ceiling): a re-check that let some requests gain tokens had the kit's batch of 32 weighed at every step
        after it, 0.3 ms of a 6 ms step."""
        return ((even or (decoding and self._zero_stands_closing)) and self._choice == 0 and not self.rechecking
                and self._recheck_left <= 0
                and self.seconds < self._recheck_due
                and self._weighed_on == (num_reqs, self.costs.version, self.acceptance.version))

    def repeat_recheck(self, rows: int) -> None:
        """The re-check step chosen last drafted for ``rows`` requests and none of them got drafts: a process
        drafter that answers a job at once with the drafts it made ahead (draft_ahead.py) has none for
        requests it does not hold yet. That step measured nothing: the re-check asks for ``rows`` more."""
        if self.rechecking and rows > 0 and self._recheck_repeats < RECHECK_REPEATS:
            self._recheck_repeats += 1
            self._recheck_left = max(self._recheck_left, 0) + rows

    def _depth(self, num_reqs: int, tokens_left: float, catch_up: int,
               survivals: Sequence[Sequence[float]] | None, closing: Sequence[float] | None,
               row_catch_ups: Sequence[int]) -> int:
        if self._recheck_left > 0 and batch_bucket(num_reqs) == self._recheck_bucket:
            self._recheck_left -= num_reqs  # a re-check under way, counted in drafts, not steps
            self.rechecking = True
            return self._recheck_depth
        if self._recheck_left > 0:  # ended by a new load before its drafts were made: not done
            self._recheck_left, self._recheck_from = 0, self._recheck_before
        start = self.starting_depth
        if (not self.costs.known or self.costs.seconds(num_reqs, 0)[0] <= 0
                or (start > 0 and self.acceptance.last_seen is None)):
            return self._settle(start, num_reqs, None)  # its first steps measure acceptance and costs
        rates = self.goodput(num_reqs, tokens_left, catch_up, survivals=survivals, closing=closing)
        recheck = self._recheck(num_reqs, tokens_left, catch_up, rates, row_catch_ups=row_catch_ups)
        if recheck:  # the acceptance measured last is too old to run any depth on
            return recheck
        best = self.best_depth(rates)
        same_load = self._choice is not None and batch_bucket(num_reqs) == self._bucket
        current = self._choice if same_load else best
        chosen = best if rates[best] > rates[current] * (1 + self.tuning.margin) else current
        self._bucket = batch_bucket(num_reqs)
        chosen = self._settle(chosen, num_reqs, rates)
        if chosen > 0 and not self.costs.measured_near(num_reqs, 0):
            return 0  # what a step costs without drafting: one step at depth 0 measures it near this load
        # The position past the chosen depth goes unmeasured while the steps draft at it: re-checked too.
        return (chosen and self._recheck(num_reqs, tokens_left, 0, rates, base=chosen)) or chosen

    @property
    def starting_depth(self) -> int:
        return self._depths[-1]

    def best_depth(self, rates: Sequence[float]) -> int:
        """Of the depths the weight bound leaves, the one of the highest rate (the shallower on a tie)."""
        return max(self._depths, key=lambda d: (rates[d], -d))

    @property
    def can_speculate(self) -> bool:
        """Whether any depth > 0 can pay: where the weight bound rules every one out (a draft as large as the
        target), the depth is 0 on every step and nothing needs measuring."""
        return len(self._depths) > 1

    def goodput(self, num_reqs: int, tokens_left: float, catch_up: int = 0, ceiling_past: int | None = None,
                survivals: Sequence[Sequence[float]] | None = None,
                closing: Sequence[float] | None = None, at_weights: bool = False) -> list[float]:
        """Predicted output tokens per second at each depth 0..K. ``ceiling_past``: had every draft past that
        position been accepted. ``survivals``: per request, the chance each of its drafts up to its limit is
        accepted; where given, each request verifies at each depth only the drafts that pay, and the step's
        tokens and seconds are its requests' own. ``closing``: with ``survivals``, where no request waits, each
        request's tokens left: a depth is scored by when the request with the most steps left would finish,
        as ``num_reqs`` tokens per step of it. ``at_weights``: drafting priced at most at the draft's weights."""
        seconds = (self.costs.seconds_at_weights if at_weights else self.costs.seconds)(num_reqs, self.max_depth)
        each = None
        if survivals is None:
            tokens = [num_reqs * t for t in self.acceptance.expected_tokens(ceiling_past)]
        else:
            seconds, each = self._with_paying_drafts(num_reqs, seconds, survivals)
            tokens = [num_reqs + sum(row) for row in each]
        last = None
        if closing is not None and each is not None:
            left_each = [max(left, 1.0) for left in closing]
            most = max(left_each, default=1.0)
            # Steps the last request needs at each depth, over those it needs at depth 0 (a token a step).
            last = [max((n / (1 + extra) for n, extra in zip(left_each, row)), default=most) / most for row in each]
            # At depth 0 every decoding request's tokens left fall by one a step, so the one with the most stays
            # last: the batch's steps at a depth, over those at depth 0, stay at least 1 / (1 + the drafts it is
            # expected to accept a step), and a catch-up only adds seconds. However the batch drains, no depth
            # > 0 scores above this while these estimates hold (holds_zero).
            leaders = [i for i, n in enumerate(left_each) if n == most]
            self._closing_ceiling = max((num_reqs * (1 + min(row[i] for i in leaders)) / step
                                         for step, row in zip(seconds[1:], each[1:]) if step > 0), default=0.0)
            self._zero_rate = num_reqs / seconds[0] if seconds[0] > 0 else math.inf
        catch_up_s = self.costs.catch_up_seconds(num_reqs, catch_up) if catch_up else 0.0
        left = max(tokens_left, 1.0)
        rates = []
        for depth, (step, total) in enumerate(zip(seconds, tokens)):
            if depth > 0 and catch_up_s > 0:
                step += catch_up_s / max(1.0, left * num_reqs / total)
            if last is not None:
                total = num_reqs / last[depth]
            rates.append(total / step if step > 0 else 0.0)
        return rates

    def _with_paying_drafts(self, num_reqs: int, seconds: list[float],
                            survivals: Sequence[Sequence[float]]) -> tuple[list[float], list[list[float]]]:
        """Each depth's step seconds, and each request's expected accepted drafts, where each request
        verifies, of its first ``depth`` drafts, those that pay: a draft cut, or past its limit, saves its
        verification."""
        token_s = self.costs.token_seconds(num_reqs)
        times, accepted = [], []
        for depth, step in enumerate(seconds):
            rows = [s[:depth] for s in survivals]
            step -= token_s * sum(depth - len(r) for r in rows)
            kept = paying_drafts(rows, num_reqs, step, token_s)
            times.append(step - token_s * sum(len(r) - k for r, k in zip(rows, kept)))
            accepted.append([sum(r[:k]) for r, k in zip(rows, kept)])
        return times, accepted

    def _settle(self, chosen: int, num_reqs: int, rates: list[float] | None) -> int:
        old, self._choice = self._choice, chosen
        if old is None or old == chosen or self.on_change is None:
            return chosen
        self._unreported += 1
        if self._reported_at is None or self.seconds - self._reported_at >= REPORT_EVERY_S:
            predicted = "" if rates is None else " (predicted " + ", ".join(
                f"depth {d}: {r:.0f} tok/s" for d, r in enumerate(rates)) + ")"
            more = f"; {self._unreported - 1} changes since the last line" if self._unreported > 1 else ""
            self.on_change(f"MineDraft auto: speculation depth {old} -> {chosen} at {num_reqs} requests"
                           f"{predicted}{more}")
            self._reported_at, self._unreported = self.seconds, 0
        return chosen

    def _recheck(self, num_reqs: int, tokens_left: float, catch_up: int, rates: list[float], base: int = 0,
                 row_catch_ups: Sequence[int] = ()) -> int:
        """A re-check's depth when one is due (see the module), else 0: from depth 0 (``base``), of acceptance
        at all; from a depth > 0, of the position past it."""
        t = self.tuning
        if base >= self._depths[-1]:
            return 0  # no depth deeper to try
        last = self.acceptance.last_seen if base == 0 else self.acceptance.batch.seen[base]
        since = self.seconds - max(-math.inf if last is None else last, self._recheck_from)
        if since < t.stale_s:
            return self._not_due(base, t.stale_s - since)  # no re-check waits less: every step at a depth > 0 asks
        stale_costs = self._stale_drafting(num_reqs)
        ceiling = self.goodput(num_reqs, tokens_left, 0, ceiling_past=base, at_weights=bool(stale_costs))
        deeper = next((d for d in self._depths if d > base and ceiling[d] > rates[base] * (1 + t.margin)), None)
        if deeper is None:
            # No acceptance could make drafting (deeper) pay here; priced afresh once its costs go stale, it might.
            return self._not_due(base, math.inf if stale_costs else self._fresh_for(num_reqs))
        shallowest = deeper
        if base == 0:  # at depth 1, one request's re-check ran 8 of its 22 steps where depth 3 paid (real pair)
            deeper = max(deeper, self.best_depth(rates))
        steps = -(-t.telling_trials // num_reqs)  # enough drafts to tell acceptance from the prior
        # From depth 0, with costs that need no measuring afresh, a batch larger than that drafts for as many
        # of its requests as tell acceptance: the kit's batch of 32 caught up on 20 tokens each for a re-check,
        # 12 ms of a 410 ms run.
        rows = num_reqs
        if self.partial_rechecks and base == 0 and not stale_costs and len(row_catch_ups) > t.telling_trials:
            rows = t.telling_trials
            catch_up = sum(sorted(row_catch_ups)[:rows])
        seconds = self.costs.seconds(num_reqs, self.max_depth)
        catch_up_s = self.costs.catch_up_seconds(num_reqs, catch_up)

        def drafting(depth: int) -> float:  # what drafting at depth adds over the steps at base
            if rows < num_reqs:
                return self.costs.drafting_seconds(num_reqs, depth, rows)
            return steps * (seconds[depth] - seconds[base])

        cost = drafting(deeper) + catch_up_s
        if since < max(t.stale_s, cost / t.margin):
            # Due at the soonest where the best depth falls to the shallowest that could pay (the catch-up
            # only grows meanwhile).
            soonest = drafting(shallowest) + catch_up_s
            return self._not_due(base, max(t.stale_s, soonest / t.margin) - since)
        for bucket in stale_costs:  # measured again by the re-check
            self.costs.forget_drafting(bucket)
            self._drafted_at.pop(bucket, None)
        self._recheck_before, self._recheck_from = self._recheck_from, self.seconds
        self._recheck_left, self._recheck_depth = t.telling_trials - rows, deeper
        self._recheck_repeats = 0
        self._recheck_bucket = batch_bucket(num_reqs)
        self.rechecks += 1
        self.rechecking = True
        self.recheck_rows = rows if rows < num_reqs else None
        return deeper

    def _not_due(self, base: int, wait: float) -> int:
        """No re-check now (0); from depth 0, one may be due after ``wait`` more seconds of steps."""
        if base == 0:
            self._recheck_due = self.seconds + wait
        return 0

    def _stale_drafting(self, num_reqs: int) -> list[int]:
        """The batch buckets at or next to this load's whose steps that drafted are ``cost_stale_s`` old, all
        of them: what the step-cost model says drafting costs here may no longer be this machine's. Empty
        where a step drafted there lately, or none ever did."""
        near = self._drafted_near(num_reqs)
        if any(self.seconds - at <= self.tuning.cost_stale_s for at in near.values()):
            return []
        return list(near)

    def _fresh_for(self, num_reqs: int) -> float:
        """The seconds of steps before what drafting costs near this load goes stale (inf: nothing drafted)."""
        near = self._drafted_near(num_reqs)
        return max(near.values()) + self.tuning.cost_stale_s - self.seconds if near else math.inf

    def _drafted_near(self, num_reqs: int) -> dict[int, float]:
        level = batch_bucket(max(num_reqs, 1)).bit_length()
        return {bucket: at for bucket, at in self._drafted_at.items() if abs(bucket.bit_length() - level) <= 1}

    # ----------------------------------------------------------- measurement
    def observe_step(self, num_reqs: int, depth: int, tokens: int, seconds: float, catch_up: int = 0,
                     prefill: int = 0, fit: bool = True, drafted: int | None = None) -> None:
        """A finished step: its ``num_reqs`` decoding requests, the ``depth`` it drafted at, the ``tokens`` the
        target computed (``prefill`` of them in prompt chunks), the tokens the drafter ran over once (a
        catch-up, a prompt's draft prefill), and its duration; ``drafted``: the requests drafted for where the
        drafter left rows out. ``fit=False``: its duration is not what such a step costs (a one-off cost:
        policy.py); its time passes, and no cost is fitted to it."""
        if not self.can_speculate:
            return
        self.seconds += seconds
        if not fit:
            return
        if depth > 0 and num_reqs > 0 and not prefill:
            self._drafted_at[batch_bucket(num_reqs)] = self.seconds
        self.costs.observe(num_reqs, depth, tokens, seconds, catch_up, prefill, drafted)

    def observe_verification(self, verified: Iterable[VerifiedDrafts]) -> None:
        self.acceptance.observe(verified, self.seconds)
