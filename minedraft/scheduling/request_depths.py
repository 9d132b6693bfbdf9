"""Per request, how many of its drafts the target verifies: those whose expected acceptance pays for them.

A step's depth is one number for the batch (depth_controller.py), but acceptance belongs to each
request: in one batch, code the draft predicts well beside prose it misses. A verified draft costs
the target one token of compute, ``w`` seconds in the step-cost model (step_costs.py): next to
nothing in a memory-bound step, a token's share of a compute-bound one (a CPU; a GPU at a large
batch). The j-th draft of a request is accepted with the product of the request's acceptance at
positions 1..j (its survival); verifying it adds that many expected tokens and ``w`` seconds, so it
pays where its survival exceeds ``w * G``, G the step's expected tokens over its predicted seconds.
Each request's drafts are cut to the prefix above that threshold (survivals only fall along a
request's drafts). G is computed with every draft, then once more after the cut: a step without
its poor drafts makes more tokens per second, and its threshold rises.

A request's acceptance per position is counted from its own verified drafts, each older step
discounted by ``exp(-1 / tau)``, in front of ``prior_trials`` trials at the prior. At position 1 the
prior is the acceptance of the requests that finished before it, each weighed once (by its trials
over theirs and ``prior_trials``, at most 1; the last ``requests_tau`` or so counting most), with the
batch's rate (the depth controller's) as one request more. Not the batch's rate alone: it counts
trials, and a request whose drafts are cut adds none, so it leans to the requests that keep drafting
(on the real pair, after a code request and a prose one, it read the code's rate, and each closed
batch of code and prose began with 3-5 steps at depth 3 for the prose). Past position 1 the prior is
the batch's rate (only requests whose first draft was accepted reach there, and a position the
deeper steps left unmeasured stands in with the one before: acceptance.py; finished requests' rates
there, kept as they were, held a code request after two short ones at depth 1 throughout).
A request with no verified drafts of its own may stand, for its first ``prior_trials`` verified steps,
at the rate of the finished requests that drafted best instead (``upper``; measured first where that
pays: scheduling/first_measurement.py), so that a request of code after prose is measured, not held at
the mean that pays for no depth.
A request whose drafts are all cut measures nothing: its counts fade by ``idle`` for each step that
cut them all (not for a step it sits out of, in a parallel step's other group), back to the prior,
until its drafts pay again and are verified.

The depth controller weighs the same cut when it chooses the step's depth (``paying_drafts`` at each
depth), so that a step drafts where some requests' drafts pay, not only where the batch's do.

Exact by construction: the target verifies a prefix of the drafts made, as when vLLM's token
budget is short.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

FINISHED_KEPT = 64  # finished requests' rates kept for ``upper``: the 64th back weighs exp(-8) with requests_tau 8


@dataclass
class _Counts:
    trials: list[float]
    hits: list[float]
    unmeasured: int = 0  # steps since the last measurement that cut every one of the request's drafts
    verified: int = 0  # its steps that verified a draft of it
    first: float | None = None  # its position-1 prior until it has verified prior_trials steps (measured first)


@dataclass
class RequestDepths:
    max_depth: int
    tau: float = 8.0  # a request's verified steps that discount its older ones by 1/e
    prior_trials: float = 2.0
    idle: float = 0.9  # a request's counts keep this much for each step that cut all its drafts
    requests_tau: float = 8.0  # finished requests that discount the older ones' share of the prior by 1/e
    _counts: dict[str, _Counts] = field(default_factory=dict)
    _finished: tuple[float, float] = (0.0, 0.0)  # finished requests' position-1 weights and rates times them
    # The last FINISHED_KEPT of them as (weight, rate), oldest first, and those above their mean (``upper``).
    _rates: deque = field(default_factory=lambda: deque(maxlen=FINISHED_KEPT))
    _upper: tuple[float, float] | None = None

    def observe(self, verified: Iterable[tuple[str, int, int]]) -> None:
        """A finished step's requests as (request id, drafts verified, drafts accepted)."""
        keep = math.exp(-1.0 / self.tau)
        for rid, drafts, accepted in verified:
            counts = self._counts.get(rid)
            if counts is None:
                counts = self._counts[rid] = _Counts([0.0] * self.max_depth, [0.0] * self.max_depth)
            fade = keep * self.idle ** counts.unmeasured
            for j in range(min(drafts, accepted + 1, self.max_depth)):
                counts.trials[j] = fade * counts.trials[j] + 1.0
                counts.hits[j] = fade * counts.hits[j] + (j < accepted)
            counts.unmeasured = 0
            counts.verified += drafts > 0

    def release(self, request_ids: Iterable[str]) -> None:
        """Finished requests: each one's own acceptance at position 1 joins the prior of the requests after it."""
        keep = math.exp(-1.0 / self.requests_tau)
        for rid in request_ids:
            counts = self._counts.pop(rid, None)
            if counts is None or not counts.trials or counts.trials[0] <= 0:
                continue
            trials, hits = counts.trials[0], counts.hits[0]  # its rate hits / trials, weighed as below
            weight, weighted = self._finished
            self._finished = (keep * weight + trials / (trials + self.prior_trials),
                              keep * weighted + hits / (trials + self.prior_trials))
            self._rates.append((trials / (trials + self.prior_trials), hits / trials))
            self._upper = _above_mean(self._rates, keep)

    @property
    def upper(self) -> tuple[float, float] | None:
        """Of the finished requests, those whose position-1 rate was above their mean (weighed as in the
        prior): their share of the requests, each counted once, and their mean rate; None where none was."""
        return self._upper

    def undecided(self, rid: str) -> bool:
        """Whether the request has neither counts of its own nor a decision on its first measurement."""
        return rid not in self._counts

    def decide(self, request_ids: Iterable[str], first: float | None) -> None:
        """New requests' first measurement: at ``first`` (measured first), or at the prior (None)."""
        for rid in request_ids:
            self._counts.setdefault(rid, _Counts([0.0] * self.max_depth, [0.0] * self.max_depth, first=first))

    def prior(self, batch_rates: Sequence[float | None]) -> list[float | None]:
        """By position, what a request's own counts stand in front of (see the module)."""
        out = [batch_rates[j] if j < len(batch_rates) else None for j in range(self.max_depth)]
        weight, weighted = self._finished
        if out and weight > 0:
            out[0] = weighted / weight if out[0] is None else (weighted + out[0]) / (weight + 1)
        return out

    @property
    def request_ids(self) -> list[str]:
        return list(self._counts)

    def survivals(self, rid: str, drafts: int, batch_rates: Sequence[float | None],
                  first: float | None = None) -> list[float]:
        """The chance each of the request's first ``drafts`` drafts is accepted (its run up to it);
        ``first``: its position-1 prior, as if it were measured first (see ``decide``)."""
        counts = self._counts.get(rid)
        fade = 1.0 if counts is None else self.idle ** counts.unmeasured
        priors = self.prior(batch_rates)
        if counts is not None and counts.first is not None and counts.verified < self.prior_trials:
            first = counts.first
        if first is not None and priors:
            priors[0] = first
        run, out = 1.0, []
        for j in range(min(drafts, self.max_depth)):
            prior = 1.0 if priors[j] is None else priors[j]
            if counts is None:
                rate = prior
            else:
                rate = ((fade * counts.hits[j] + prior * self.prior_trials)
                        / (fade * counts.trials[j] + self.prior_trials))
            run *= rate
            out.append(run)
        return out

    def cut(self, requests: Sequence[Any], decodes: int, step_seconds: float, token_seconds: float,
            batch_rates: Sequence[float | None]) -> tuple[int, dict[int, int]]:
        """Each request's drafts (``spec_token_ids``) cut to those that pay in a step of ``decodes``
        decode requests predicted to take ``step_seconds`` with every draft: the drafts cut, and how many
        requests kept each number of drafts."""
        rows = [(r, self.survivals(r.request_id, len(r.spec_token_ids), batch_rates))
                for r in requests if r.spec_token_ids]
        if not rows:
            return 0, {}
        kept = paying_drafts([s for _, s in rows], decodes, step_seconds, token_seconds)
        cut, by_drafts = 0, {}
        for (request, survivals), k in zip(rows, kept):
            by_drafts[k] = by_drafts.get(k, 0) + 1
            if k < len(request.spec_token_ids):
                cut += len(request.spec_token_ids) - k
                request.spec_token_ids = request.spec_token_ids[:k]
            if k == 0 and (counts := self._counts.get(request.request_id)) is not None:
                counts.unmeasured += 1
        return cut, by_drafts


def _above_mean(rates: Sequence[tuple[float, float]], keep: float) -> tuple[float, float] | None:
    """Of (weight, rate) rows, oldest first, each discounted by ``keep`` per row after it, those above the
    weighted mean: their share of the rows, each counted once (a request is as likely to come again however
    many of its drafts were verified: a prose request cut after one rejection counts as a code request
    drafted throughout), and their weighted mean rate."""
    ages = [keep ** (len(rates) - 1 - i) for i in range(len(rates))]
    weights = [w * age for age, (w, _) in zip(ages, rates)]
    mean = sum(w * r for w, (_, r) in zip(weights, rates)) / sum(weights)
    above = [i for i, (_, r) in enumerate(rates) if r > mean]
    if not above:
        return None
    weight = sum(weights[i] for i in above)
    return sum(ages[i] for i in above) / sum(ages), sum(weights[i] * rates[i][1] for i in above) / weight


def paying_drafts(survivals: Sequence[Sequence[float]], decodes: int, step_seconds: float,
                  token_seconds: float) -> list[int]:
    """How many of each request's drafts pay, given their ``survivals``, in a step of ``decodes`` decode
    requests predicted to take ``step_seconds`` verifying all of them (see the module)."""
    if token_seconds <= 0 or step_seconds <= 0:
        return [len(s) for s in survivals]
    tokens = decodes + sum(sum(s) for s in survivals)
    kept = [_above(s, token_seconds * tokens / step_seconds) for s in survivals]
    dropped = sum(len(s) - k for s, k in zip(survivals, kept))
    if dropped:  # the step without them: more tokens per second, a higher threshold
        tokens = decodes + sum(sum(s[:k]) for s, k in zip(survivals, kept))
        threshold = token_seconds * tokens / max(step_seconds - token_seconds * dropped, 1e-9)
        kept = [_above(s, threshold) for s in survivals]
    return kept


def _above(survivals: Sequence[float], threshold: float) -> int:
    """How many leading survivals reach ``threshold``."""
    for j, survival in enumerate(survivals):
        if survival < threshold:
            return j
    return len(survivals)
