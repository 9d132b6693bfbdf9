"""What a step costs: a decode step's seconds predicted for any depth at any load, from measured steps.

A step's time is modelled as linear in what it computes:

    seconds = a + w * tokens + s * [depth > 0] + depth * (c + e * decodes) + u * catch_up

* ``a``: the fixed cost of a step (launches, metadata, on a memory-bound device most of it);
* ``w``: the target's cost per decode token (a decode's own token and the drafts it verifies);
* ``s``: what a step that drafts costs once whatever its depth: vLLM's speculative path (the
  rejection sampler, the drafts' metadata, the drafter's call and its inputs), which a depth-0 step
  leaves out (RFC §2.5). Without it a fit over depths 0, 1 and 3 spreads that cost over the depths
  and predicts depth 1 too cheap (the kit's EAGLE-3 head drafted at 1 where it lost 15 %);
* ``c + e * decodes``: one draft forward (a draft model runs ``depth`` of them; a drafter that
  drafts in one forward or runs no model has ``c = e = 0`` once measured);
* ``u``: a token the drafter runs over besides the decodes' own: one it catches up on after skipping
  it at depth 0 (worker/in_process/draft_catch_up.py), or a prompt token (the draft's prefill).

It predicts decode steps, and is fitted on them only: a step that computes prefill tokens (prompt
chunks, a preempted request's recomputation) is not observed. Such a step is compute-bound where a
decode step on a CPU is memory-bound (on the real pair a 38-token prompt took 0.6-1.0 s beside 0.1 s
for a decode step; 32 prompts, 7 s), and no linear term shared with decode steps fits both: read into
the fit, one prompt's step made every depth > 0 predict a loss at one request, depth 0 ran, and
nothing measured drafting there again.

Steps are kept as sufficient statistics in cells by (load bucket, depth), each cell forgetting
its older steps as new ones come (``memory``), and every prediction solves a least-squares fit
weighted towards the load asked about: cells one bucket away count ``neighbour_weight`` as much,
two away its square (on a CPU the per-token cost bends between one request and 32; a local fit
follows it). Where the steps cannot tell the terms apart (a load seen at one depth only, no
catch-up yet), soft priors decide: a draft forward costs ``draft_ratio`` of a target step of the
same requests (the weights' ratio, scheduling/depth_prior.py, where known) and a caught-up token
``draft_ratio`` of a target token, and ``s`` is 0. Each prior weighs as ``prior_weight`` steps, so
measurements override it as soon as they separate the terms.

No term of the fit is negative (a step has no part that makes it cheaper), and drafting more never
makes a step cheaper: predictions are made non-decreasing in depth.

A fit is solved again once the steps observed since the last one add up to ``refit_s`` (or a step
opens a cell, or lands in one still forming), and the steps are added to their cells then, in one
pass: a solve costs about 0.1 ms of Python, nothing beside a real model's 0.1-1 s step (every step
refits), but 5 % of the kit's 2 ms steps (there a change in what steps cost reaches the fits within
``refit_s`` of steps, not at once).
Pure Python and NumPy, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from minedraft.scheduling.mode_policy import decode_bucket

FEATURES = 6  # 1, tokens, drafts at all, depth, depth * decodes, catch_up


def features(decodes: int, depth: int, tokens: int, catch_up: int = 0) -> tuple[float, ...]:
    return (1.0, float(tokens), float(depth > 0), float(depth), float(depth * decodes), float(catch_up))


@dataclass
class StepCosts:
    draft_ratio: float = 0.1
    memory: float = 0.8  # a cell's older steps count this much less with each new one (about 5 steps)
    neighbour_weight: float = 0.25
    prior_weight: float = 1.0
    outlier: float = 2.0
    refit_s: float = 0.05  # the observed steps' seconds after which the fits are solved again
    # Per cell (load bucket, depth), stacked: the steps' Gram matrices and moments, each older step
    # discounted by ``memory``, and their discounted count.
    cells: dict[tuple[int, int], int] = field(default_factory=dict)  # cell -> row
    grams: np.ndarray = field(default_factory=lambda: np.zeros((0, FEATURES, FEATURES)))
    moments: np.ndarray = field(default_factory=lambda: np.zeros((0, FEATURES)))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    levels: np.ndarray = field(default_factory=lambda: np.zeros(0))  # each cell's bucket.bit_length()
    _fits: dict[int, tuple[float, ...]] = field(default_factory=dict)  # by bucket, until the next refit
    _times: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # seconds(), until the next refit
    _unfitted_s: float = 0.0  # the seconds of the steps observed since the fits were solved
    _unfolded: list[tuple[int, tuple[float, ...], float]] = field(default_factory=list)  # (row, x, seconds)
    # The soft priors' Gram matrices, per step and per request (see __post_init__).
    _priors: tuple[np.ndarray, np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        # Rows that should be zero: s and c - r*a, and (per request, so scaled by decodes in _solve)
        # e - r*w and u - r*w, r the draft ratio. s's prior weighs a tenth of a step: one step at
        # depth 0 must be able to override it.
        r = self.draft_ratio
        step = np.array([[0, 0, 0.1 ** 0.5, 0, 0, 0], [-r, 0, 0, 1, 0, 0.0]])
        rows = np.array([[0, -r, 0, 0, 1, 0], [0, -r, 0, 0, 0, 1.0]])
        self._priors = (step.T @ step, rows.T @ rows)

    def observe(self, decodes: int, depth: int, tokens: int, seconds: float, catch_up: int = 0,
                prefill: int = 0) -> None:
        """A finished step; ``prefill``: its prefill tokens, of ``tokens`` (such a step is not fitted)."""
        if prefill:
            return
        x = features(decodes, depth, tokens, catch_up)
        bucket = decode_bucket(decodes)
        row = self.cells.get((bucket, depth))
        settled = row is not None and self.weights[row] >= 2
        if settled:
            # A stall of the machine (this project's VMs: 100 ms beside 5 ms steps) is not the depth's
            # cost: a step counts at most ``outlier`` times its prediction, so a real change still
            # shows within a few steps.
            predicted = sum(f * t for f, t in zip(x, self._fit(decodes)))
            seconds = min(seconds, self.outlier * max(predicted, 0.0) or seconds)
        if row is None:
            row = self.cells[(bucket, depth)] = len(self.weights)
            self.grams = np.concatenate([self.grams, np.zeros((1, FEATURES, FEATURES))])
            self.moments = np.concatenate([self.moments, np.zeros((1, FEATURES))])
            self.weights = np.append(self.weights, 0.0)
            self.levels = np.append(self.levels, bucket.bit_length())
        self._unfolded.append((row, x, seconds))
        self.weights[row] = self.memory * self.weights[row] + 1.0
        self._unfitted_s += seconds
        if not settled or self._unfitted_s >= self.refit_s:
            self.refit()

    def refit(self) -> None:
        """Solve the fits again when next asked (the steps observed since are folded in then)."""
        self._fits.clear()
        self._times.clear()
        self._unfitted_s = 0.0

    def _fold(self) -> None:
        """The steps observed since the last fit, added to their cells' statistics in one pass: each
        step's and each cell's discount is what adding them one by one would have given."""
        if not self._unfolded:
            return
        rows = [row for row, _, _ in self._unfolded]
        later, counts = [0] * len(rows), {}
        for i in range(len(rows) - 1, -1, -1):  # a step is discounted once per later step of its cell
            later[i] = counts.get(rows[i], 0)
            counts[rows[i]] = later[i] + 1
        for row, n in counts.items():
            self.grams[row] *= self.memory ** n
            self.moments[row] *= self.memory ** n
        x = np.array([step for _, step, _ in self._unfolded])
        discount = self.memory ** np.array(later, dtype=float)
        seconds = np.array([s for _, _, s in self._unfolded])
        np.add.at(self.grams, rows, discount[:, None, None] * x[:, :, None] * x[:, None, :])
        np.add.at(self.moments, rows, (discount * seconds)[:, None] * x)
        self._unfolded.clear()

    @property
    def known(self) -> bool:
        return bool(self.cells)

    def measured_near(self, decodes: int, depth: int) -> bool:
        """Whether a step at ``depth`` has been measured at this load's bucket or a neighbouring one."""
        level = decode_bucket(max(decodes, 1)).bit_length()
        return any(d == depth and abs(bucket.bit_length() - level) <= 1 for bucket, d in self.cells)

    def seconds(self, decodes: int, max_depth: int) -> list[float]:
        """The predicted seconds of a decode step of ``decodes`` requests at each depth 0..``max_depth``,
        nothing to catch up; non-decreasing in depth (kept until the next refit: a step asks several times)."""
        key = (decodes, max_depth)
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = self._seconds(decodes, max_depth)
        return times

    def _seconds(self, decodes: int, max_depth: int) -> list[float]:
        a, w, s, c, e, _ = self._fit(decodes)
        s = max(s, 0.0)  # drafting never makes a step cheaper (a fit from few depth-0 steps may say so)
        times, floor = [], 0.0
        for depth in range(max_depth + 1):  # features(decodes, depth, decodes * (1 + depth)) @ theta
            floor = max(floor, a + w * decodes * (1 + depth) + (s if depth else 0.0) + depth * (c + e * decodes))
            times.append(floor)
        return times

    def token_seconds(self, decodes: int) -> float:
        """The predicted cost of one more token the target verifies in a step of ``decodes`` decodes."""
        return max(0.0, self._fit(decodes)[1])

    def catch_up_seconds(self, decodes: int, tokens: int) -> float:
        """The predicted cost of catching the drafter up on ``tokens`` skipped tokens."""
        return max(0.0, self._fit(decodes)[5] * tokens)

    def _fit(self, decodes: int) -> tuple[float, ...]:
        """The fitted (a, w, s, c, e, u) for a load of ``decodes``, solved once per bucket between steps."""
        bucket = decode_bucket(max(decodes, 1))
        theta = self._fits.get(bucket)
        if theta is None:
            theta = self._fits[bucket] = tuple(self._solve(bucket, decodes).tolist())
        return theta

    def _solve(self, bucket: int, decodes: int) -> np.ndarray:
        self._fold()
        near = self.neighbour_weight ** np.abs(self.levels - bucket.bit_length())
        # Weighted sums written elementwise, not as matrix products: a product goes to NumPy's BLAS,
        # whose threads, woken in an engine process whose cores the model keeps busy, took about a
        # millisecond a step on a 2-core CPU (measured with py-spy), a tenth of a small model's step.
        gram = (near[:, None, None] * self.grams).sum(axis=0)
        moment = (near[:, None] * self.moments).sum(axis=0)
        # Soft priors (__post_init__), scaled so each weighs as ``prior_weight`` steps of ``decodes``
        # requests at depth 1.
        per_step, per_request = self._priors
        gram += self.prior_weight * (per_step + max(decodes, 1) ** 2 * per_request)
        gram += 1e-9 * max(float((near * self.weights).sum()), 1.0) * np.eye(FEATURES)  # nothing measured yet: still solvable
        return _non_negative(gram, moment)


def _non_negative(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """The least-squares solution with no negative term: a step's cost has no part that makes it cheaper.
    Steps that all verify as many tokens (a load held at one depth: each step verifies the drafts of the
    one before) cannot tell the fixed part from the part per token, and the priors then split them at
    random: on a fake engine at one request, a fixed part of 0.61 s against a measured 0.11 and -0.12 s
    per token, which predicted depth 1 at 0.41 s against a true 0.16. A negative term is set to 0 and the
    rest solved again (an active set; six terms at most)."""
    free = np.ones(len(moment), dtype=bool)
    theta = np.linalg.solve(gram, moment)
    while (theta[free] < 0).any():
        free[np.flatnonzero(free)[np.argmin(theta[free])]] = False
        theta = np.zeros(len(moment))
        if free.any():
            theta[free] = np.linalg.solve(gram[np.ix_(free, free)], moment[free])
    return theta

