"""How often drafts are accepted, per draft position: for the batch, and for each request.

Position j's acceptance is the chance the j-th draft is accepted given the j-1 before it were. One
estimator counts it twice from every verifying step, with older trials discounted:

* the batch's (the depth's choice): of the requests whose drafts reached position j, the share whose j-th
  was accepted, discounted by ``exp(-trials / batch_memory)``, behind ``prior_trials`` trials at 0.5;
* each request's own (its drafts' cut, and the depth's choice with it): discounted by
  ``exp(-1 / request_memory)`` for each of its steps, those that cut all its drafts included (its counts fade
  back to its prior until its drafts pay again), behind ``prior_trials`` trials at its prior.

A request's prior at position 1 is the acceptance of the requests that finished before it, each weighed once
(the last ``request_memory`` or so to arrive counting most), with the batch's rate as one request more: the
batch's rate alone counts trials, and leans to the requests that keep drafting. Their ages count in arrivals,
not in the order they finished: a request whose drafts were rejected gains fewer tokens a step and finishes
later, so the last to finish lean to the poor drafters (make demo's loads in one process: the last of its batch
of 32 to finish, few of their drafts accepted, set its next single request's prior at 0.31 where the batch
measured 0.69, and that request ran at depth 0, 0.64x stock SD). Past position 1 it is the batch's.
A request measured first (first_measurement.py) stands, for its first ``prior_trials`` verified steps, at the
rate of the finished requests that drafted best (``upper``) instead.

After a gap. A batch position unmeasured for over ``stale_s`` keeps what it knew as at most ``prior_trials``
trials: the text may have left, so the new text's first trials decide, but one rejection does not erase a
rate measured on many. A position not measured within ``stale_s`` of position 1's last measurement (the
steps drafted shallower) stands in with the one before where it was measured on fewer than
``telling_trials``; else it keeps its own (a depth measured to lose is not retried every ``stale_s``;
re-checks of the position past the chosen depth try it, and find a text that turned predictable deeper:
depth.py). A position never measured reads as None (counted as
accepted in a prediction: its first steps measure it). A request's own positions past 1 go stale the same
way (``_stands_in``), or once ``2 * request_memory`` of its own verified steps did not reach them: one rejection
at its first verification does not hold it shallow to its end.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from minedraft.policy.plan import VerifiedDrafts
from minedraft.policy.tuning import TUNING, Tuning

BATCH_PRIOR = 0.5  # the batch's prior rate: prior_trials trials, half of them accepted


@dataclass
class _Counts:
    """Discounted trials and hits by position 1..max_depth."""

    trials: list[float]
    hits: list[float]
    seen: list[float]  # when each position was last reached (the policy's clock)
    reached_step: list[int]  # a request's verified_steps when each position was last reached (the batch's: 0)
    cut_steps: int = 0  # a request's steps since it was last verified that cut all its drafts
    verified_steps: int = 0  # a request's steps that verified a draft of it
    first: float | None = None  # a request measured first: its position-1 prior for prior_trials verified steps
    arrived: int = 0  # requests met before it (those first met in one step alike)

    @classmethod
    def empty(cls, max_depth: int, first: float | None = None, arrived: int = 0) -> _Counts:
        return cls([0.0] * max_depth, [0.0] * max_depth, [-math.inf] * max_depth, [0] * max_depth, first=first,
                   arrived=arrived)

    def add(self, position: int, keep: float, trials: float, hits: float) -> None:
        self.trials[position] = keep * self.trials[position] + trials
        self.hits[position] = keep * self.hits[position] + hits


def reached(drafts: int, accepted: int, max_depth: int) -> range:
    """The positions a request's verified drafts reached: each up to the first rejected one."""
    return range(min(drafts, accepted + 1, max_depth))


@dataclass
class Acceptance:
    max_depth: int
    tuning: Tuning = TUNING
    batch: _Counts = field(init=False)
    last_seen: float | None = None  # when any position was last measured
    _requests: dict[str, _Counts] = field(default_factory=dict)
    _finished: tuple[float, float] = (0.0, 0.0)  # finished requests' position-1 weights, and rates times them
    _finished_rates: deque = field(init=False)  # the last of them as (weight, rate, arrived), in finishing order
    _met: int = 0  # requests met so far: their arrivals' clock
    _upper: tuple[float, float] | None = None
    # Counts the changes to what it predicts: depth.py holds a depth 0, and policy.py keeps each request's
    # survivals, until one.
    version: int = 0
    # per_position(), expected_tokens() and request_prior(), until a measurement (or a request's release)
    _cache: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.batch = _Counts.empty(self.max_depth)
        # Kept while they weigh: the 8 x request_memory-th back weighs exp(-8).
        self._finished_rates = deque(maxlen=int(8 * self.tuning.request_memory))

    # ----------------------------------------------------------- measurement
    def observe(self, verified: Iterable[VerifiedDrafts], now: float) -> None:
        """One step's verified requests; ``now``: the policy's clock."""
        verified = list(verified)
        if verified:  # its requests' counts change (a cut count is reset too)
            self.version += 1
        self._observe_batch(verified, now)
        keep = math.exp(-1.0 / self.tuning.request_memory)
        arrived = self._met
        for v in verified:
            counts = self._requests.get(v.req_id)
            if counts is None:
                counts = self._meet(v.req_id, arrived)
            fade = keep ** (1 + counts.cut_steps)
            counts.verified_steps += v.drafts > 0
            positions = reached(v.drafts, v.accepted, self.max_depth)
            for j in positions:
                counts.add(j, fade, 1.0, j < v.accepted)
                counts.seen[j] = now
                counts.reached_step[j] = counts.verified_steps
            if v.drafts > 0:  # the positions it did not reach fade too: what they measured grows old
                for j in range(len(positions), self.max_depth):
                    counts.add(j, fade, 0.0, 0.0)
            counts.cut_steps = 0

    def _observe_batch(self, verified: list[VerifiedDrafts], now: float) -> None:
        trials, hits = [0] * self.max_depth, [0] * self.max_depth
        for v in verified:
            for j in reached(v.drafts, v.accepted, self.max_depth):
                trials[j] += 1
                hits[j] += j < v.accepted
        if not trials or not trials[0]:
            return  # no draft verified (a step at depth 0)
        self._cache.clear()
        t = self.tuning
        for j, (n, h) in enumerate(zip(trials, hits)):
            if n == 0:
                continue
            keep = math.exp(-n / t.batch_memory)
            if now - self.batch.seen[j] > t.stale_s and self.batch.trials[j] > t.prior_trials:
                keep *= t.prior_trials / self.batch.trials[j]  # what it knew weighs as the prior does
            self.batch.add(j, keep, n, h)
            self.batch.seen[j] = now
            self.last_seen = now

    def note_all_cut(self, req_id: str) -> None:
        """A step cut every draft of the request: it measures nothing, and its counts fade to its prior.
        (Not a step at depth 0: faded there too, a request measured poor drafts again every few steps, and the
        replay grid read 1.027 against 1.034.)"""
        counts = self._requests.get(req_id)
        if counts is not None:
            counts.cut_steps += 1
            self.version += 1

    def release(self, req_ids: Iterable[str]) -> None:
        """Finished requests: each one's acceptance at position 1 joins the prior of the requests after it."""
        prior_trials = self.tuning.prior_trials
        finished, joined = set(req_ids), False
        for rid in [rid for rid in self._requests if rid in finished]:
            counts = self._requests.pop(rid)
            if counts.trials and counts.trials[0] > 0:
                trials, hits = counts.trials[0], counts.hits[0]
                self._finished_rates.append((trials / (trials + prior_trials), hits / trials, counts.arrived))
                joined = True
        if joined:
            keep = math.exp(-1.0 / self.tuning.request_memory)
            newest = max(arrived for _, _, arrived in self._finished_rates)
            ages = [keep ** (newest - arrived) for _, _, arrived in self._finished_rates]
            self._finished = (sum(age * w for age, (w, _, _) in zip(ages, self._finished_rates)),
                              sum(age * w * r for age, (w, r, _) in zip(ages, self._finished_rates)))
            self._upper = _above_mean(self._finished_rates, ages)
            self._cache.pop("request_prior", None)
            self.version += 1

    # ----------------------------------------------------------- the batch's
    @property
    def batch_rates(self) -> list[float | None]:
        """By position 1..max_depth; None: never measured."""
        pt = self.tuning.prior_trials
        return [None if n == 0 else (h + BATCH_PRIOR * pt) / (n + pt) for n, h in zip(self.batch.trials, self.batch.hits)]

    def per_position(self) -> list[float | None]:
        """The batch's positions as used for a prediction (stale ones stand in with the one before)."""
        cached = self._cache.get("per_position")
        if cached is None:
            cached = self._cache["per_position"] = self._per_position()
        return cached

    def _per_position(self) -> list[float | None]:
        out = []
        for j, rate in enumerate(self.batch_rates):
            if j > 0 and rate is not None and self._stands_in(self.batch, j):
                rate = out[-1]
            out.append(rate)
        return out

    def expected_tokens(self, ceiling_past: int | None = None) -> list[float]:
        """A request's tokens from a step verifying 0..max_depth drafts at the batch's rates: the accepted run
        and the target's own token. A position never measured counts as accepted; so does every position past
        ``ceiling_past``, where given (a ceiling)."""
        key = ("expected", ceiling_past)
        totals = self._cache.get(key)
        if totals is None:
            totals, run = [1.0], 1.0
            for j, rate in enumerate(self.per_position()):
                run *= 1.0 if rate is None or (ceiling_past is not None and j >= ceiling_past) else rate
                totals.append(totals[-1] + run)
            self._cache[key] = totals
        return totals

    # ----------------------------------------------------------- each request's
    @property
    def upper(self) -> tuple[float, float] | None:
        """Of the finished requests, those whose position-1 rate was above their mean (weighed as in the
        prior): their share of the requests, each counted once, and their mean rate; None where none was."""
        return self._upper

    def undecided(self, req_id: str) -> bool:
        """Whether the request has neither counts of its own nor a decision on its first measurement."""
        return req_id not in self._requests

    def decide(self, req_ids: Iterable[str], first: float | None) -> None:
        """New requests' first measurement: at ``first`` (measured first), or at their prior (None)."""
        arrived = self._met
        for rid in req_ids:
            if rid not in self._requests:
                self._meet(rid, arrived, first)
        self.version += 1

    def _meet(self, req_id: str, arrived: int, first: float | None = None) -> _Counts:
        """A request's counts from its first verification or decision on; ``arrived``: the arrivals' clock
        where the step that met it began (those met in one step alike)."""
        counts = self._requests[req_id] = _Counts.empty(self.max_depth, first=first, arrived=arrived)
        self._met += 1
        return counts

    def request_prior(self) -> list[float | None]:
        """By position, what a request's own counts stand in front of (see the module)."""
        cached = self._cache.get("request_prior")
        if cached is None:
            cached = self._cache["request_prior"] = list(self.per_position())
            weight, weighted = self._finished
            if cached and weight > 0:
                cached[0] = weighted / weight if cached[0] is None else (weighted + cached[0]) / (weight + 1)
        return list(cached)

    def survivals(self, req_id: str, drafts: int, first: float | None = None) -> list[float]:
        """The chance each of the request's first ``drafts`` drafts is accepted (its run up to it); ``first``:
        its position-1 prior, as if it were measured first (see ``decide``)."""
        counts = self._requests.get(req_id)
        pt = self.tuning.prior_trials
        priors = self.request_prior()
        fade = 1.0
        if counts is not None:
            fade = math.exp(-counts.cut_steps / self.tuning.request_memory)
            if counts.first is not None and counts.verified_steps < pt:
                first = counts.first
        if first is not None and priors:
            priors[0] = first
        run, out, rate = 1.0, [], 1.0
        for j in range(min(drafts, self.max_depth)):
            prior = 1.0 if priors[j] is None else priors[j]
            if counts is None:
                rate = prior
            elif j > 0 and self._stands_in(counts, j):
                pass  # the rate of the position before
            else:
                rate = (fade * counts.hits[j] + prior * pt) / (fade * counts.trials[j] + pt)
            run *= rate
            out.append(run)
        return out

    def _stands_in(self, counts: _Counts, j: int) -> bool:
        """Whether position j of the batch's or a request's counts stands in with the one before: not reached
        within ``stale_s`` of its position 1 (its steps drafted shallower) and measured on fewer than
        ``telling_trials``. A lone request of code whose first verification rejected its second draft, and
        whose drafts were all accepted after, otherwise drafted at depth 1 to its end (its own 1 trial of 0
        kept position 2 near 0.3): 33 steps at depth 1 where depth 3 paid (real pair, AVX2 EPYC, 2026-12-03).
        A request's position also stands in once ``2 * request_memory`` of its verified steps in a row have not
        reached it (had they, what it measured would weigh exp(-2) by then): ``stale_s`` is 3-10 of the real
        pair's steps, but some 300 of the kit's (make demo's single request, two of whose first four
        verifications rejected its second draft, ran its other steps at depth 1: 0.81x stock SD)."""
        t = self.tuning
        if not 0 < counts.trials[j] < t.telling_trials:
            return False
        return (counts.seen[0] - counts.seen[j] > t.stale_s
                or counts.verified_steps - counts.reached_step[j] >= 2 * t.request_memory)  # never the batch: no steps


def _above_mean(rates: Sequence[tuple[float, float, int]], ages: Sequence[float]) -> tuple[float, float] | None:
    """Of (weight, rate, arrived) rows, each discounted by its age, those above the weighted mean: their share of
    the rows, each counted once (a request is as likely to come again however many of its drafts were
    verified), and their weighted mean rate."""
    weights = [w * age for age, (w, _, _) in zip(ages, rates)]
    mean = sum(w * r for w, (_, r, _) in zip(weights, rates)) / sum(weights)
    above = [i for i, (_, r, _) in enumerate(rates) if r > mean]
    if not above:
        return None
    weight = sum(weights[i] for i in above)
    return sum(ages[i] for i in above) / sum(ages), sum(weights[i] * rates[i][1] for i in above) / weight


def geometric_tokens(acceptance: float, depth: int) -> float:
    """A request's tokens from a step at ``depth`` when every position's acceptance is ``acceptance``."""
    return sum(acceptance ** i for i in range(depth + 1))
