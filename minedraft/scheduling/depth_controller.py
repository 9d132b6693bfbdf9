"""How deep to speculate: each step's depth k' in 0..K chosen from a cost model and measured acceptance.

Speculation pays only at some loads: with a weak drafter, many running requests or a large K the
target alone (k' = 0) or a shallow depth is faster, and the best depth moves with the load and the
text. Each step the controller predicts, for every depth, the goodput of a step of the running
requests

    goodput(k') = decodes * expected_tokens(k') / seconds(k')

and runs the best. ``seconds`` comes from the step-cost model (scheduling/step_costs.py: every
measured step, at every load and depth, refines one linear model of a step's cost);
``expected_tokens`` from the acceptance per draft position measured in every verifying step
(scheduling/acceptance.py). Nothing is learned by running a depth for a window: a load never seen
is predicted from the loads that were, from its first step.

* Start. Before any step is measured, the deepest depth that can beat speculation off with every
  draft accepted, at the draft's cost ratio where known (scheduling/depth_prior.py), else K: what
  stock speculative decoding runs. A depth that bound rules out is never run; where it rules out
  every depth > 0 (a draft as large as the target) each step is at depth 0 and nothing is measured.
  Where a position's acceptance is not measured yet it counts as accepted (optimistic): its first
  steps measure it.
* Depth 0 measured. A step that drafts at all costs vLLM's speculative path once (step_costs.py's
  ``s``), which only a step at depth 0 tells apart from the rest: where no load within a power of two
  has run one, one step runs at depth 0 to measure it.
* Hysteresis. At the same load (running decodes within a power of two) the choice moves only to a
  depth predicted to beat the current one by ``margin``; a new load takes its best depth at once.
* Catch-up. Leaving depth 0 costs a draft model or EAGLE head a catch-up over every token it skipped
  (worker/in_process/draft_catch_up.py), and drafting for new requests its prefill of their prompts, paid once:
  it counts against a depth > 0 spread over the steps the running requests have left (their
  remaining ``max_tokens``, at that depth's tokens per step).
* Re-check. At depth 0 acceptance is not measured, and the text may change. Where a depth > 0
  could pay with every draft accepted, the shallowest such depth is drafted for ``recheck_drafts``
  requests' steps (one step of 8 requests, four of 2: a step of one or two requests tells little
  against the prior) once the acceptance measured last is older than the re-check's cost over
  ``recheck_budget`` (at least ``min_recheck_s``): re-checks take about that share of the run's
  time, counted in seconds, not steps, whatever a step costs. A re-check counts drafts, not steps,
  and a new load ends it (a burst's first request, arrived alone, may begin one: its steps at depth 1
  for the whole burst would pay the draft's prefill of every prompt); ended before its drafts were made,
  it does not count as done. Acceptance that old decides no depth:
  a load that arrives after a long stretch at depth 0 (a batch, then a few requests of a new text)
  runs the re-check's few shallow steps first, not the depth the old text would have earned.
  At a depth k' > 0 the position past it goes unmeasured the same way, and where position 1 holds
  (acceptance.py keeps a deeper position's old rate then) nothing else would try it again: it is
  re-checked as depth 0's acceptance is, ``recheck_drafts`` drafts at the next depth that could pay,
  spaced by their cost over ``recheck_budget`` (on the real pair without it, two of three
  phases of one request of code ran at depth 1 throughout with all 32 first drafts accepted, where
  stock SD at k = 3 was 15 % faster than at k = 1).

* Per request. Under ``speculation_depth: auto`` each request verifies only the drafts its own
  acceptance pays for (scheduling/request_depths.py), and the depth is chosen with that cut: a
  step's tokens and seconds are its requests' own at each depth, the drafter's forwards paid for
  all of them. In a batch of code and prose the code's drafts can pay where the batch's one rate
  says no depth does.
* Nothing waiting. While requests wait, the batch's tokens per second is what frees their slots
  soonest. Where none waits, the batch ends with its last request: each depth is scored by how soon
  the request with the most steps left at that depth (its ``max_tokens`` left over its tokens per
  step) would finish, in the batch's tokens per second, so that drafting the code beside prose never
  delays the prose that ends the batch (on the real pair, a closed batch of one code and one prose
  request drafted for the code and ended 5 % later than the target alone).

Outputs never depend on the depth (verification is exact); only speed does. No clock: the scheduler
feeds it step durations, and its time is the sum of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from minedraft.scheduling.acceptance import Acceptance
from minedraft.scheduling.depth_prior import ruled_out_depths
from minedraft.scheduling.mode_policy import decode_bucket
from minedraft.scheduling.request_depths import paying_drafts
from minedraft.scheduling.step_costs import StepCosts

DEFAULT_DRAFT_RATIO = 0.1  # a draft forward's cost prior where the draft's weights are not known
DEFAULT_REMAINING = 64  # tokens a request is taken to have left where no max_tokens says


@dataclass
class DepthController:
    max_depth: int
    draft_ratio: float | None = None  # a draft forward's weights over the target's, where known
    margin: float = 0.03
    recheck_budget: float = 0.03
    min_recheck_s: float = 1.0
    recheck_drafts: int = 8  # a re-check drafts for this many requests' steps: one step of 8, 4 of 2
    on_change: Callable[[str], None] | None = None
    costs: StepCosts = field(init=False)
    acceptance: Acceptance = field(init=False)
    seconds: float = 0.0  # of the steps measured: the controller's clock
    steps: int = 0
    rechecks: int = 0
    _choice: int | None = None  # the depth chosen last (not a re-check)
    _load: int = 0  # the decode bucket it was chosen at
    report_every_s: float = 10.0  # at most one line about a change per this many seconds of steps
    _reported_at: float | None = None
    _unreported: int = 0
    _recheck_from: float = 0.0  # a re-check's wait counts from here
    _recheck_left: int = 0  # requests' drafts the re-check under way has yet to make
    _recheck_load: int = 0  # the decode bucket it began at
    _recheck_before: float = 0.0  # _recheck_from before it began
    _recheck_depth: int = 0
    _start: int = field(init=False)  # the depth before anything is measured
    _depths: tuple[int, ...] = field(init=False)  # the depths the prior does not rule out

    def __post_init__(self) -> None:
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {self.max_depth}")
        ratio = DEFAULT_DRAFT_RATIO if self.draft_ratio is None else self.draft_ratio
        self.costs = StepCosts(draft_ratio=ratio)
        self.acceptance = Acceptance(self.max_depth)
        ruled_out = ruled_out_depths(self.max_depth, self.draft_ratio, self.margin)
        self._depths = tuple(d for d in range(self.max_depth + 1) if d not in ruled_out)
        self._start = self._depths[-1]

    # ----------------------------------------------------------- decisions
    def depth(self, decodes: int, catch_up: int = 0, remaining: float | None = None,
              survivals: Sequence[Sequence[float]] | None = None, finishing: Sequence[float] | None = None) -> int:
        """The depth for the decode steps of ``decodes`` requests; ``catch_up``: the tokens the drafter
        would run over once before drafting them (skipped ones, prompts), ``remaining``: the tokens a
        request has left (typically); ``survivals`` and ``finishing``: each request's own (see ``goodput``)."""
        if decodes <= 0 or not self.can_speculate:
            return self._choice if self._choice is not None else self.starting_depth()
        if self._recheck_left > 0 and decode_bucket(decodes) == self._recheck_load:
            # A re-check under way (_recheck), counted in drafts, not steps. A new load ends it: a
            # burst of requests would pay the draft's prefill of every prompt for it.
            self._recheck_left -= decodes
            return self._recheck_depth
        if self._recheck_left > 0:
            # Ended before its drafts were made (a burst's first request began it): it measured at
            # most one step's drafts, so the new load may re-check at once, at its own cost.
            self._recheck_left, self._recheck_from = 0, self._recheck_before
        start = self.starting_depth()
        if (not self.costs.known or self.costs.seconds(decodes, 0)[0] <= 0
                or (start > 0 and self.acceptance.last_seen is None)):
            # Its first steps measure acceptance and costs (a step of prompts alone cannot tell a
            # decode step's cost yet).
            return self._settle(start, decodes, None)
        rates = self.goodput(decodes, catch_up, remaining, survivals=survivals, finishing=finishing)
        probe = self._recheck(decodes, catch_up, remaining, rates)
        if probe:  # the acceptance measured last is too old to run any depth on (a re-check is due)
            return probe
        best = self.best_depth(rates)
        same_load = self._choice is not None and decode_bucket(decodes) == self._load
        current = self._choice if same_load else best
        chosen = best if rates[best] > rates[current] * (1 + self.margin) else current
        self._load = decode_bucket(decodes)
        chosen = self._settle(chosen, decodes, rates)
        if chosen > 0 and not self.costs.measured_near(decodes, 0):
            # What a step costs without drafting (vLLM's speculative path left out) cannot be told
            # from steps that all drafted: one step at depth 0 measures it near this load.
            return 0
        # The position past the chosen depth goes unmeasured while the steps draft at it: re-checked
        # as depth 0's acceptance is, or a text whose deeper drafts became good is never drafted deeper.
        return (chosen and self._recheck(decodes, 0, remaining, rates, base=chosen)) or chosen

    def starting_depth(self) -> int:
        return self._start

    def best_depth(self, rates: Sequence[float]) -> int:
        """Of the depths the prior does not rule out, the one of the highest rate (the shallower on a tie)."""
        return max(self._depths, key=lambda d: (rates[d], -d))

    @property
    def can_speculate(self) -> bool:
        """Whether any depth > 0 can pay: where the prior rules every one out (a draft as large as the
        target), the depth is 0 on every step and nothing needs measuring."""
        return len(self._depths) > 1

    def goodput(self, decodes: int, catch_up: int = 0, remaining: float | None = None,
                ceiling_past: int | None = None, survivals: Sequence[Sequence[float]] | None = None,
                finishing: Sequence[float] | None = None) -> list[float]:
        """Predicted output tokens per second at each depth 0..K; ``ceiling_past``: had every draft past
        that position been accepted (0: every draft; a position whose acceptance is not measured yet always
        counts as accepted). ``survivals``: per request, the chance each of its drafts up to its limit is
        accepted (scheduling/request_depths.py); where given, each request verifies at each depth only the
        drafts that pay (``paying_drafts``), and the step's tokens and seconds are its requests', not the
        batch's acceptance times ``decodes``: in a batch of code and prose the code's drafts can pay where
        the batch's rate says no depth does. ``finishing``: with ``survivals``, where no request waits, the
        tokens each request has left: each depth is scored by when the request with the most steps left
        would finish, as ``decodes`` tokens per step of it (see the module): the batch's tokens per
        second where every request makes as many tokens a step."""
        seconds = self.costs.seconds(decodes, self.max_depth)
        each = None
        if survivals is None:
            tokens = [decodes * t for t in self.acceptance.expected_tokens(ceiling_past)]
        else:
            seconds, each = self._with_paying_drafts(decodes, seconds, survivals)
            tokens = [decodes + sum(row) for row in each]
        last = None
        if finishing is not None and each is not None:
            left_each = [max(left, 1.0) for left in finishing]
            most = max(left_each, default=1.0)
            # Steps the last request needs at each depth, over those it needs at depth 0 (a token a step).
            last = [max((n / (1 + extra) for n, extra in zip(left_each, row)), default=most) / most for row in each]
        catch_up_s = self.costs.catch_up_seconds(decodes, catch_up) if catch_up else 0.0
        left = DEFAULT_REMAINING if remaining is None else max(remaining, 1.0)
        rates = []
        for depth, (step, total) in enumerate(zip(seconds, tokens)):
            if depth > 0 and catch_up_s > 0:
                step += catch_up_s / max(1.0, left * decodes / total)
            if last is not None:
                total = decodes / last[depth]
            rates.append(total / step if step > 0 else 0.0)
        return rates

    def _with_paying_drafts(self, decodes: int, seconds: list[float],
                            survivals: Sequence[Sequence[float]]) -> tuple[list[float], list[list[float]]]:
        """Each depth's step seconds, and each request's expected accepted drafts, where each request
        verifies, of its first ``depth`` drafts, those that pay: a draft cut, or past the request's limit,
        saves its verification."""
        token_s = self.costs.token_seconds(decodes)
        times, accepted = [], []
        for depth, step in enumerate(seconds):
            rows = [s[:depth] for s in survivals]
            step -= token_s * sum(depth - len(r) for r in rows)
            kept = paying_drafts(rows, decodes, step, token_s)
            times.append(step - token_s * sum(len(r) - k for r, k in zip(rows, kept)))
            accepted.append([sum(r[:k]) for r, k in zip(rows, kept)])
        return times, accepted

    def _settle(self, chosen: int, decodes: int, rates: list[float] | None) -> int:
        old, self._choice = self._choice, chosen
        if old is None or old == chosen or self.on_change is None:
            return chosen
        self._unreported += 1
        if self._reported_at is None or self.seconds - self._reported_at >= self.report_every_s:
            predicted = "" if rates is None else " (predicted " + ", ".join(
                f"k'={d}: {r:.0f} tok/s" for d, r in enumerate(rates)) + ")"
            more = f"; {self._unreported - 1} changes since the last line" if self._unreported > 1 else ""
            self.on_change(f"MineDraft auto: speculation depth {old} -> {chosen} at {decodes} requests"
                           f"{predicted}{more}")
            self._reported_at, self._unreported = self.seconds, 0
        return chosen

    def _recheck(self, decodes: int, catch_up: int, remaining: float | None, rates: list[float],
                 base: int = 0) -> int:
        """A re-check's depth when one is due (see the module), else 0: from depth 0 (``base``), of
        acceptance at all; from a depth > 0, of the position past it."""
        if base >= self._depths[-1]:
            return 0  # no depth deeper to try
        last = self.acceptance.last_seen if base == 0 else self.acceptance.seen_at[base]
        since = self.seconds - max(-math.inf if last is None else last, self._recheck_from)
        if since < self.min_recheck_s:
            return 0  # no re-check waits less: every step at a depth > 0 asks
        ceiling = self.goodput(decodes, 0, remaining, ceiling_past=base)
        probe = next((d for d in self._depths if d > base and ceiling[d] > rates[base] * (1 + self.margin)), None)
        if probe is None:
            return 0  # no acceptance could make drafting (deeper) pay here
        steps = -(-self.recheck_drafts // decodes)  # enough drafts to tell acceptance from the prior
        seconds = self.costs.seconds(decodes, probe)
        cost = steps * (seconds[probe] - seconds[base]) + self.costs.catch_up_seconds(decodes, catch_up)
        if since < max(self.min_recheck_s, cost / self.recheck_budget):
            return 0
        self._recheck_before, self._recheck_from = self._recheck_from, self.seconds
        self._recheck_left, self._recheck_depth = self.recheck_drafts - decodes, probe
        self._recheck_load = decode_bucket(decodes)
        self.rechecks += 1
        return probe

    # ----------------------------------------------------------- measurement
    def observe_step(self, decodes: int, depth: int, tokens: int, seconds: float, catch_up: int = 0,
                     prefill: int = 0) -> None:
        """A finished step: its ``decodes`` requests, the ``depth`` it drafted at, the ``tokens`` the
        target computed (prompt, decode and verified draft tokens; ``prefill`` of them in prefill chunks), the
        tokens the drafter ran over once (a catch-up of skipped tokens, a prompt's draft prefill), and its
        duration."""
        if not self.can_speculate:
            return
        self.steps += 1
        self.seconds += seconds
        self.costs.observe(decodes, depth, tokens, seconds, catch_up, prefill)

    def observe_verification(self, verified: Iterable[tuple[int, int]]) -> None:
        """A finished step's verified requests, as (drafts verified, drafts accepted)."""
        self.acceptance.observe(verified, self.seconds)


class ChosenDepth:
    """vLLM's per-step depth lookup (``Scheduler.dynamic_sd_lookup``), answering the chosen depth.

    vLLM's scheduler reads ``dynamic_sd_lookup[number of scheduled requests]`` into
    ``SchedulerOutput.num_spec_tokens_to_schedule``, which its runner passes to the drafter as
    the depth of the drafts it makes at the end of the step. Being set (not None) also stops
    vLLM from padding a resumed request's first decode with K placeholder drafts, which the
    target would verify and reject at any depth below K.
    """

    def __init__(self, depth: Callable[[], int]) -> None:
        self._depth = depth

    def __getitem__(self, num_scheduled_requests: int) -> int:
        return self._depth()
