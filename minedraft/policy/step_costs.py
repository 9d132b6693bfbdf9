"""What a step costs: a decode step's seconds predicted for any depth at any load, from measured steps.

A step's time is modelled as linear in what it computes:

    seconds = a + w * tokens + s * [depth > 0] + depth * (c + e * num_reqs) + u * catch_up

* ``a``: the fixed cost of a step (launches, metadata; on a memory-bound device most of it);
* ``w``: the target's cost per decode token (a request's own token and the drafts it verifies);
* ``s``: what a step that drafts at all costs once, whatever its depth: vLLM's speculative path (the
  rejection sampler, the drafts' metadata, the drafter's call), which only a depth-0 step leaves out;
* ``c + e * num_reqs``: one draft forward (a draft model runs ``depth`` of them; a drafter that drafts
  in one forward or runs no model has ``c = e = 0`` once measured);
* ``u``: a token the drafter runs over besides the requests' own: one it catches up on after skipping it
  at depth 0 (worker/in_process/draft_catch_up.py), or a prompt token (the draft's prefill). The drafter
  computes such tokens as the target computes a prompt, many in one forward, so it is priced from the
  target's prompt tokens (below), not its decode tokens: on the real pair a catch-up of 546 tokens took
  0.85 s where the decode token's price predicted 0.05 s, and re-checks ran at five times their budget.

It predicts decode steps and is fitted on them only: a step that computes prompt tokens is compute-bound
where a decode step on a CPU is memory-bound, and no linear term shared with decode steps fits both.

Steps are kept as sufficient statistics in cells by (batch bucket, depth), each cell forgetting its older
steps (``cost_memory``); every prediction solves a least-squares fit weighted towards the load asked
about (``neighbour_weight`` per bucket away). Where steps cannot tell the terms apart, soft priors decide,
each weighing ``cost_prior_steps`` steps: a draft forward costs ``draft_cost`` of a target step of the
same requests, a caught-up token ``draft_cost`` of a target prompt token (what steps at depth 0 that
compute prompts measured it at beyond their decode part; until one ran, of a decode token), and ``s`` is 0
(weighing a tenth as much). No term is negative, and predictions never fall with depth. The fits are solved again once
``refit_s`` of steps were observed (or a cell is new or still forming). Pure Python and NumPy, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from minedraft.policy.load import batch_bucket
from minedraft.policy.tuning import TUNING, Tuning

FEATURES = 6  # 1, tokens, drafts at all, depth, depth * num_reqs, catch_up


def features(num_reqs: int, depth: int, tokens: int, catch_up: int = 0,
             drafted: int | None = None) -> tuple[float, ...]:
    """``drafted``: the requests whose rows the drafter drafted (all ``num_reqs`` where None)."""
    rows = num_reqs if drafted is None else drafted
    return (1.0, float(tokens), float(depth > 0), float(depth), float(depth * rows), float(catch_up))


@dataclass
class StepCosts:
    draft_cost: float = TUNING.draft_cost_prior  # a draft forward over a target step: the prior
    tuning: Tuning = TUNING
    # Per cell (batch bucket, depth), stacked: the steps' Gram matrices and moments, each older step
    # discounted by cost_memory, and their discounted count.
    cells: dict[tuple[int, int], int] = field(default_factory=dict)  # cell -> row
    grams: np.ndarray = field(default_factory=lambda: np.zeros((0, FEATURES, FEATURES)))
    moments: np.ndarray = field(default_factory=lambda: np.zeros((0, FEATURES)))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    levels: np.ndarray = field(default_factory=lambda: np.zeros(0))  # each cell's bucket.bit_length()
    _fits: dict[int, tuple[float, ...]] = field(default_factory=dict)  # by bucket, until the next refit
    _times: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # seconds(), until the next refit
    version: int = 0  # counts the refits (depth.py holds a depth 0 until one)
    _unfitted_s: float = 0.0  # the seconds of the steps observed since the fits were solved
    _unfolded: list[tuple[int, tuple[float, ...], float]] = field(default_factory=list)  # (row, x, seconds)
    # The target's seconds per prompt token beyond a decode step's: discounted sums over the steps at depth 0
    # that computed prompts (a step at a depth > 0 holds the draft's prefill of them too).
    prompt_seconds: float = 0.0
    prompt_tokens: float = 0.0
    _priors: tuple[np.ndarray, ...] = field(init=False)  # the soft priors' Gram matrices (see __post_init__)

    def __post_init__(self) -> None:
        # Rows that should be zero: s and c - r*a, and (per request, so scaled by num_reqs in _solve)
        # e - r*w and u - r*w, r the draft's cost; once a prompt token's price p is measured, u - r*p
        # instead (_solve). s's prior weighs a tenth as much: one step at depth 0 must be able to override it.
        r = self.draft_cost
        step = np.array([[0, 0, 0.1 ** 0.5, 0, 0, 0], [-r, 0, 0, 1, 0, 0.0]])
        draft_forward = np.array([[0, -r, 0, 0, 1, 0.0]])
        catch_up = np.array([[0, -r, 0, 0, 0, 1.0]])  # u's row, priced as a decode token
        priced = np.array([[0, 0, 0, 0, 0, 1.0]])  # u's row once a prompt token is priced (target: r*p)
        self._priors = tuple(m.T @ m for m in (step, draft_forward, catch_up, priced))

    def observe(self, num_reqs: int, depth: int, tokens: int, seconds: float, catch_up: int = 0,
                prefill: int = 0, drafted: int | None = None) -> None:
        """A finished step; ``prefill``: its prompt tokens, of ``tokens`` (such a step is not fitted; at depth 0
        it prices a prompt token); ``drafted``: the requests the drafter drafted for, where it left some rows
        out (a draft forward's cost per request is theirs)."""
        if prefill:
            if depth == 0:
                self._observe_prompt(num_reqs, tokens, seconds, prefill)
            return
        x = features(num_reqs, depth, tokens, catch_up, drafted)
        bucket = batch_bucket(num_reqs)
        row = self.cells.get((bucket, depth))
        settled = row is not None and self.weights[row] >= 2
        if settled:  # a stall of the machine is not the depth's cost; a real change still shows in a few steps
            predicted = sum(f * t for f, t in zip(x, self._fit(num_reqs)))
            seconds = min(seconds, self.tuning.stall_cap * max(predicted, 0.0) or seconds)
        if row is None:
            row = self.cells[(bucket, depth)] = len(self.weights)
            self.grams = np.concatenate([self.grams, np.zeros((1, FEATURES, FEATURES))])
            self.moments = np.concatenate([self.moments, np.zeros((1, FEATURES))])
            self.weights = np.append(self.weights, 0.0)
            self.levels = np.append(self.levels, bucket.bit_length())
        self._unfolded.append((row, x, seconds))
        self.weights[row] = self.tuning.cost_memory * self.weights[row] + 1.0
        self._unfitted_s += seconds
        if not settled or self._unfitted_s >= self.tuning.refit_s:
            self.refit()

    def _observe_prompt(self, num_reqs: int, tokens: int, seconds: float, prefill: int) -> None:
        """A step at depth 0 that computed ``prefill`` prompt tokens: what it took beyond a decode step of its
        other tokens prices a prompt token."""
        beyond = seconds
        if self.known:
            a, w, *_ = self._fit(num_reqs)
            beyond -= a + w * (tokens - prefill)
        memory = self.tuning.cost_memory
        self.prompt_seconds = memory * self.prompt_seconds + max(beyond, 0.0)
        self.prompt_tokens = memory * self.prompt_tokens + prefill
        self.refit()

    @property
    def prompt_token_seconds(self) -> float | None:
        """The target's measured seconds per prompt token; None before a step at depth 0 computed one."""
        return self.prompt_seconds / self.prompt_tokens if self.prompt_tokens > 0 else None

    def refit(self) -> None:
        """Solve the fits again when next asked (the steps observed since are folded in then)."""
        self._fits.clear()
        self._times.clear()
        self._unfitted_s = 0.0
        self.version += 1

    def _fold(self) -> None:
        """The steps observed since the last fit, added to their cells' statistics in one pass: each
        step's and each cell's discount is what adding them one by one would have given."""
        if not self._unfolded:
            return
        memory = self.tuning.cost_memory
        rows = [row for row, _, _ in self._unfolded]
        later, counts = [0] * len(rows), {}
        for i in range(len(rows) - 1, -1, -1):  # a step is discounted once per later step of its cell
            later[i] = counts.get(rows[i], 0)
            counts[rows[i]] = later[i] + 1
        for row, n in counts.items():
            self.grams[row] *= memory ** n
            self.moments[row] *= memory ** n
        x = np.array([step for _, step, _ in self._unfolded])
        discount = memory ** np.array(later, dtype=float)
        seconds = np.array([s for _, _, s in self._unfolded])
        np.add.at(self.grams, rows, discount[:, None, None] * x[:, :, None] * x[:, None, :])
        np.add.at(self.moments, rows, (discount * seconds)[:, None] * x)
        self._unfolded.clear()

    @property
    def known(self) -> bool:
        return bool(self.cells)

    def measured_near(self, num_reqs: int, depth: int) -> bool:
        """Whether a step at ``depth`` has been measured at this load's bucket or a neighbouring one."""
        level = batch_bucket(max(num_reqs, 1)).bit_length()
        return any(d == depth and abs(bucket.bit_length() - level) <= 1 for bucket, d in self.cells)

    def seconds(self, num_reqs: int, max_depth: int) -> list[float]:
        """The predicted seconds of a decode step of ``num_reqs`` requests at each depth 0..``max_depth``,
        nothing to catch up; non-decreasing in depth (kept until the next refit: a step asks several times)."""
        key = (num_reqs, max_depth)
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = self._seconds(num_reqs, max_depth)
        return times

    def _seconds(self, num_reqs: int, max_depth: int) -> list[float]:
        a, w, s, c, e, _ = self._fit(num_reqs)
        s = max(s, 0.0)
        times, floor = [], 0.0
        for depth in range(max_depth + 1):  # features(num_reqs, depth, num_reqs * (1 + depth)) @ theta
            floor = max(floor, a + w * num_reqs * (1 + depth) + (s if depth else 0.0) + depth * (c + e * num_reqs))
            times.append(floor)
        return times

    def forget_drafting(self, bucket: int) -> None:
        """Drop what steps that drafted at ``bucket`` measured (depth 0's kept): a re-check measures it again
        (depth.py), and the old steps, kept, would outweigh its few."""
        self._fold()
        for (cell_bucket, depth), row in self.cells.items():
            if cell_bucket == bucket and depth > 0:
                self.grams[row] = 0.0
                self.moments[row] = 0.0
                self.weights[row] = 0.0
        self.refit()

    def seconds_at_weights(self, num_reqs: int, max_depth: int) -> list[float]:
        """As ``seconds``, each depth > 0 priced at most as the draft's weights would price it (weight_bound.py):
        depth 0's step, ``draft_cost`` of it per draft forward, and a decode token per draft verified. A
        re-check's ceiling where the steps that drafted are too old to trust (depth.py)."""
        times = self.seconds(num_reqs, max_depth)
        token = self.token_seconds(num_reqs)
        return [min(t, times[0] * (1 + d * self.draft_cost) + token * num_reqs * d) for d, t in enumerate(times)]

    def drafting_seconds(self, num_reqs: int, depth: int, drafted: int) -> float:
        """What a step of ``num_reqs`` requests at ``depth`` costs over one at depth 0 where the drafter drafts
        for ``drafted`` of them (the others' rows left out): once for drafting at all, their draft forwards, and
        the verification of their drafts."""
        if depth == 0:
            return 0.0
        _, w, s, c, e, _ = self._fit(num_reqs)
        return max(s, 0.0) + depth * (c + (e + w) * drafted)

    def token_seconds(self, num_reqs: int) -> float:
        """The predicted cost of one more token the target verifies in a step of ``num_reqs`` requests."""
        return max(0.0, self._fit(num_reqs)[1])

    def catch_up_seconds(self, num_reqs: int, tokens: int) -> float:
        """The predicted cost of the drafter running over ``tokens`` more tokens (skipped ones, prompts)."""
        return max(0.0, self._fit(num_reqs)[5] * tokens)

    def _fit(self, num_reqs: int) -> tuple[float, ...]:
        """The fitted (a, w, s, c, e, u) for a load of ``num_reqs``, solved once per bucket between refits."""
        bucket = batch_bucket(max(num_reqs, 1))
        theta = self._fits.get(bucket)
        if theta is None:
            theta = self._fits[bucket] = tuple(self._solve(bucket, num_reqs).tolist())
        return theta

    def _solve(self, bucket: int, num_reqs: int) -> np.ndarray:
        self._fold()
        near = self.tuning.neighbour_weight ** np.abs(self.levels - bucket.bit_length())
        # Weighted sums written elementwise, not as matrix products: a product goes to NumPy's BLAS, whose
        # threads, woken in an engine process whose cores the model keeps busy, took about a millisecond a
        # step on a 2-core CPU (py-spy), a tenth of a small model's step.
        gram = (near[:, None, None] * self.grams).sum(axis=0)
        moment = (near[:, None] * self.moments).sum(axis=0)
        # Each prior weighs as cost_prior_steps steps of num_reqs at depth 1.
        per_step, draft_forward, catch_up, priced = self._priors
        scale = max(num_reqs, 1) ** 2
        p = self.prompt_token_seconds
        per_request = draft_forward + (catch_up if p is None else priced)
        gram += self.tuning.cost_prior_steps * (per_step + scale * per_request)
        if p is not None:  # u's row reads u = r*p: its target enters the moment
            moment[5] += self.tuning.cost_prior_steps * scale * self.draft_cost * p
        gram += 1e-9 * max(float((near * self.weights).sum()), 1.0) * np.eye(FEATURES)  # solvable when empty
        return _non_negative(gram, moment)


def _non_negative(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """The least-squares solution with no negative term: a step's cost has no part that makes it cheaper.
    Steps that all verify as many tokens (a load held at one depth) cannot tell the fixed part from the part
    per token, and a free fit split them at random (a negative cost per token predicted depth 1 at 0.41 s
    against a true 0.16). A negative term is set to 0 and the rest solved again (an active set)."""
    free = np.ones(len(moment), dtype=bool)
    theta = np.linalg.solve(gram, moment)
    while (theta[free] < 0).any():
        free[np.flatnonzero(free)[np.argmin(theta[free])]] = False
        theta = np.zeros(len(moment))
        if free.any():
            theta[free] = np.linalg.solve(gram[np.ix_(free, free)], moment[free])
    return theta
