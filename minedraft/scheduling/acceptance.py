"""How often drafts are accepted: per draft position, measured from every verifying step.

Position j's acceptance is the chance the j-th draft is accepted given the j-1 before it were:
of the requests whose drafts reached position j (at least j drafts verified, the first j-1
accepted), the share whose j-th was accepted. Trials and hits are counted with older ones
discounted by ``exp(-trials since / tau)``: a step of 32 requests all but replaces what was known,
a single request's step moves it a little, so a change of text shows within a few steps at any
load. ``prior_trials`` trials at ``prior`` stand in front of the first ones, so that one request's
first rejected draft does not read as a drafter that never helps. A position not measured for more
than ``forget_s`` (depth 0, then a re-check) keeps what it knew as at most ``prior_trials`` trials:
the text it was measured on may have left, so the new text's first trials decide, but a single
rejected draft does not erase a rate measured on many (on the real pair, one request's first
rejection after seconds at depth 0 read 0.35 where 0.93 had been measured, and a phase of code ran
undrafted).

A position not measured within ``forget_s`` of position 1's last measurement (the steps drafted
shallower: a re-check at depth 1 after a long stretch at depth 0) stands in with the position
before it where position 1 now accepts more than it did then (by ``rise``): the text changed for
the better, and what the deeper position measured was of the old one. Where position 1 did not rise
(the steps drafted shallower because the deeper positions were measured poor) it keeps its own: a
depth measured to lose is not tried again every ``forget_s`` (the depth controller re-checks it at a
bounded share of time instead). That verdict takes ``trusted_trials``:
a position that reached fewer trials (a request or two's first steps) stands in with the one before
until the steps that try it again have measured it. A position never measured reads as None
(counted as accepted in a prediction: its first steps measure it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Acceptance:
    max_depth: int
    tau: float = 32.0  # trials that discount the older ones by 1/e
    forget_s: float = 1.0  # a position unmeasured for longer keeps what it knew as prior_trials trials
    prior: float = 0.5
    prior_trials: float = 2.0
    rise: float = 0.1  # position 1's rise over its rate when a stale position was measured: a new text
    trusted_trials: float = 8.0  # a stale position keeps its own rate only if measured on this many trials
    trials: list[float] = field(default_factory=list)  # by position 1..max_depth, discounted
    hits: list[float] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)  # the time each position was last measured
    first_then: list[float] = field(default_factory=list)  # position 1's rate at each one's last measurement
    last_seen: float | None = None  # when any position was last measured
    _expected: dict[int | None, list[float]] = field(default_factory=dict)  # expected_tokens, until a measurement

    def __post_init__(self) -> None:
        self.trials = [0.0] * self.max_depth
        self.hits = [0.0] * self.max_depth
        self.seen_at = [-math.inf] * self.max_depth
        self.first_then = [0.0] * self.max_depth

    def observe(self, verified: Iterable[tuple[int, int]], now: float) -> None:
        """One step's requests as (drafts verified, drafts accepted)."""
        reached, accepted = [0] * self.max_depth, [0] * self.max_depth
        for drafts, taken in verified:
            for j in range(min(drafts, taken + 1, self.max_depth)):
                reached[j] += 1
                accepted[j] += j < taken
        if not reached or not reached[0]:
            return  # no draft verified (every step at depth 0)
        self._expected.clear()
        for j, (trials, hits) in enumerate(zip(reached, accepted)):
            if trials == 0:
                continue
            keep = math.exp(-trials / self.tau)
            if now - self.seen_at[j] > self.forget_s and self.trials[j] > self.prior_trials:
                keep *= self.prior_trials / self.trials[j]  # what it knew weighs as the prior does
            self.trials[j] = keep * self.trials[j] + trials
            self.hits[j] = keep * self.hits[j] + hits
            self.seen_at[j] = now
            self.last_seen = now
        first = self.rates[0] if self.max_depth else None
        for j, trials in enumerate(reached):
            if trials and first is not None:
                self.first_then[j] = first

    @property
    def rates(self) -> list[float | None]:
        """By position 1..max_depth; None: never measured."""
        return [None if n == 0 else (h + self.prior * self.prior_trials) / (n + self.prior_trials)
                for n, h in zip(self.trials, self.hits)]

    def per_position(self) -> list[float | None]:
        """Positions 1..max_depth as used for a prediction (stale ones stand in with the one before)."""
        out: list[float | None] = []
        rates = self.rates
        for j, rate in enumerate(rates):
            if (j > 0 and rate is not None and self.seen_at[0] - self.seen_at[j] > self.forget_s
                    and (rates[0] > self.first_then[j] + self.rise or self.trials[j] < self.trusted_trials)):
                rate = out[-1]
            out.append(rate)
        return out

    def expected_tokens(self, ceiling_past: int | None = None) -> list[float]:
        """A request's tokens from a step verifying 0..max_depth drafts: the accepted run and the
        target's own token. A position never measured counts as accepted: its first steps measure it;
        so does every position past ``ceiling_past``, where given (a ceiling). Kept until the next
        measurement: a step asks several times, and a step at depth 0 measures nothing."""
        totals = self._expected.get(ceiling_past)
        if totals is None:
            totals = self._expected[ceiling_past] = self._expected_tokens(ceiling_past)
        return totals

    def _expected_tokens(self, ceiling_past: int | None) -> list[float]:
        totals, run = [1.0], 1.0
        for j, rate in enumerate(self.per_position()):
            if ceiling_past is not None and j >= ceiling_past:
                rate = None
            run *= 1.0 if rate is None else rate
            totals.append(totals[-1] + run)
        return totals

def geometric_tokens(acceptance: float, depth: int) -> float:
    """A request's tokens from a step at ``depth`` when every position's acceptance is ``acceptance``."""
    return sum(acceptance ** i for i in range(depth + 1))
