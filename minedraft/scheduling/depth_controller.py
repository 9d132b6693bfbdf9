"""How deep to speculate: the depth k' in 0..K for the next step, chosen from measured goodput.

Speculation pays only at some loads: with a weak drafter, many running
requests or a large K the target alone (k' = 0) or a shallow depth is faster,
and the best depth moves with the load and with the text (a drafter predicts
code and prose differently). The controller keeps one verdict per load and
measures, per depth, the goodput that depth gave there (output tokens per
second of whole steps, so acceptance, drafting and verification all count):

* Verdict. A load starts at the verdict of the nearest load where a round
  has ended, else at K (what stock speculative decoding runs), unless the
  prior rules K out (below).
* Prior. ``ruled_out``: depths that cannot beat depth 0 at any acceptance,
  from the draft's cost (scheduling/depth_prior.py: a draft as large as the
  target). They are left out of rounds like a depth whose ceiling is measured
  low (below), and a first load starts at the deepest depth not ruled out.
* Round. Once the verdict's depth has ``baseline_steps`` measured steps, the
  controller probes its neighbours and 0 (speculation off) for ``probe_steps``
  each (every window also lasts ``min_window_s``: a few short steps are mostly
  the machine's noise; 0.1 s, because with steps of 2-7 ms a window of 0.2 s made a round
  outlast a burst of requests: analysis/depth_replay.py) and moves to the best if it beats
  the verdict by ``margin`` and by ``confidence`` standard errors of the difference
  (estimated from the windows' steps: a window taken while the machine was busy has a wide
  one and moves nothing). Before a move the
  verdict is measured once more, and the move must beat its windows before and after the
  probes, each: a machine whose speed drifted while the round went on (this project's CPU
  VMs move by 30 % within seconds) cannot make it; a probe ahead by more than
  ``decisive_gain`` (50 %: more than such a drift) ends early and moves without that second
  look (replayed, analysis/depth_replay.py: the second look and full windows took most of a
  short phase where drafts stopped paying, and such a move is never the machine's). After a
  move it climbs on at once, otherwise it waits ``exploit_steps`` decode steps
  and ``exploit_s`` seconds of them (a probe window lasts a time, so the wait
  does too), both doubled after each round that kept the verdict (up to
  ``2**max_backoff`` times): leaving depth 0 costs the draft model a catch-up over every token it
  skipped (worker/draft_catch_up.py), which the probe's own measurement does not
  show (those steps settle). A probe that loses by ``early_stop_loss`` to the
  verdict or to an earlier probe (it cannot win the round) after ``min_probe_steps`` stops.
* Predicted probes. A window at a depth > 0 says the acceptance per draft
  position (its tokens over its ceiling, geometric). A round that drift starts
  and the climb right after a move judge the text that was just measured: each
  neighbour's goodput is predicted from that acceptance and the neighbour's step
  cost here (its ceiling from an earlier round, or the step time interpolated
  between two measured depths, which errs towards probing); probes go likeliest
  first, and one predicted to lose by more than ``prediction_tolerance`` is
  skipped. Rounds that look for text that changed (new requests, shared text,
  the scheduled ones) predict nothing.
* Absence. Steps at a load that resume after the engine ran at other loads for
  longer than the window the load was filling (and ``min_window_s``) start that
  window again: it measured requests, and text, that may have left since.
* Drift. If the verdict's own goodput drifts by more than ``drift`` from what
  it was when the verdict was made (the text changed, and with it the
  acceptance), a round starts at once; not at depth 0, where nothing is drafted
  and the rate moves only with the step's cost. A verdict whose window falls
  below what depth 0 gave at this load (its rate in an earlier round: at depth 0
  it does not depend on the text) probes depth 0 alone: the drafts stopped paying,
  and a neighbour's window would speculate on text the drafter misses too.
* New requests. Acceptance belongs to the requests. At depth 0, once every
  running request arrived after the last round ended (``arrivals``), the
  requests that verdict was judged on have all left, and a round starts at
  once: a load that turned speculation off on text its drafter missed tries
  again on the text that follows, not only at the next scheduled round. Such
  rounds, like drift's, leave out the depths that cannot pay (prior, ceiling).
  They back off too: after ``n`` rounds in a row that kept the verdict, the
  running requests must all have been replaced ``2**min(n, max_turnover_backoff)``
  times. Many short requests replace the running set every few hundred steps,
  and a probe that leaves depth 0 costs the draft a catch-up besides its own
  steps (measured with the EAGLE-3 head at 32 requests: 8-23 % of its steps
  off depth 0 and 0.79x-0.80x of the target alone, against a depth-0 floor
  near 0.9x; with this backoff 7-8 %).
* Shared text. Acceptance belongs to the text, and every load drafts on it:
  when a round at one load moves off depth 0, every other load that settled
  on depth 0 starts a round at its next window (``retry``), without waiting
  for its own requests to be replaced or its scheduled round.
* Settling. A step verifies drafts made one or two steps earlier (two in a
  MineDraft parallel step), so after a change of depth ``settle_steps`` steps
  are not counted for either depth.
* Ceiling. A depth's goodput can never exceed what its steps would give out if
  every draft were accepted: its step time is the cost of speculating there,
  whatever the text. Once measured, a depth whose ceiling does not beat the
  verdict by ``margin`` is left out of later rounds at that load (a draft as
  costly as the target, or many requests on a compute-bound device: no
  acceptance can make it pay), except when the wait between rounds is at its
  longest, where every neighbour is probed again (a ceiling measured while the
  engine was cold may be low) in the round that wait brings. A neighbour left out
  is passed over: the round probes the nearest depth beyond it that can still pay
  (depth 1 carries the draft's first forward alone and may lose where 2 pays).

Outputs never depend on the depth (verification is exact); only speed does.
Pure Python, no clock: the scheduler feeds it step durations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from minedraft.scheduling.mode_policy import Rate, describe_bucket


@dataclass
class _LoadState:
    depth: int  # the verdict
    rates: dict[int, Rate] = field(default_factory=dict)  # this round's measurements, by depth
    ceilings: dict[int, float] = field(default_factory=dict)  # by depth: last measured Rate.ceiling_per_second
    candidates: list[int] = field(default_factory=list)  # depths still to probe this round
    probing: int | None = None
    verdict_rate: float = 0.0  # the verdict's goodput when it was made (0: not yet known)
    last_round: int | None = None  # decode step when the last round ended
    last_round_s: float = 0.0  # decode seconds when the last round ended
    last_round_newest: float | None = None  # the newest running request's arrival when the last round ended
    kept_rounds: int = 0  # rounds in a row that kept the verdict
    turnovers: int = 0  # times the running requests were all replaced since the last round (depth 0)
    decided: bool = False  # a round has ended here: the verdict was compared, not just inherited
    before: Rate | None = None  # the verdict's window before the probes, while it is measured again after
    retry: bool = False  # at depth 0: a round at another load has since moved off depth 0
    acceptance: float | None = None  # per draft position, from the latest window at a depth > 0 here
    last_seen_s: float = 0.0  # decode seconds after the last step observed here

    def rate(self, depth: int) -> Rate:
        return self.rates.setdefault(depth, Rate())


@dataclass
class DepthController:
    max_depth: int
    ruled_out: frozenset[int] = frozenset()  # depths the prior says cannot pay (never 0)
    baseline_steps: int = 12
    probe_steps: int = 8
    min_probe_steps: int = 3
    settle_steps: int = 2
    early_stop_loss: float = 0.10
    min_window_s: float = 0.1
    exploit_steps: int = 300
    exploit_s: float = 5.0
    max_backoff: int = 4
    max_turnover_backoff: int = 2
    margin: float = 0.03
    confidence: float = 1.0  # a move also needs a gain of this many standard errors of the difference
    drift: float = 0.20
    decisive_gain: float = 0.50  # a probe this far ahead ends early and moves without measuring the verdict again
    prediction_tolerance: float = 0.20  # a probe is skipped only if predicted to lose by more than this
    on_change: Callable[[str], None] | None = None
    # --- state
    decode_steps: int = 0
    decode_seconds: float = 0.0
    probe_steps_run: int = 0
    loads: dict[int, _LoadState] = field(default_factory=dict)
    _last_depth: int | None = None
    _unsettled: int = 0
    _newest_arrival: float | None = None

    def __post_init__(self) -> None:
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {self.max_depth}")
        if 0 in self.ruled_out:
            raise ValueError("depth 0 (speculation off) cannot be ruled out")

    # ------------------------------------------------------------- decisions
    def depth(self, load: int) -> int:
        """The depth of the next step at ``load`` (its running decode requests, bucketed)."""
        state = self._state(load)
        chosen = state.probing if state.probing is not None else state.depth
        if chosen != self._last_depth:
            self._last_depth, self._unsettled = chosen, self.settle_steps
        return chosen

    def verdict(self, load: int) -> int:
        return self._state(load).depth

    def _state(self, load: int) -> _LoadState:
        state = self.loads.get(load)
        if state is None:
            state = self.loads[load] = _LoadState(self._starting_depth(load))
        return state

    def _starting_depth(self, load: int) -> int:
        decided = [other for other, state in self.loads.items() if state.decided]
        if decided:  # a load seen only briefly (a warm-up, a ramp) has nothing to pass on
            nearest = min(decided, key=lambda other: (abs(other - load), other))
            return self.loads[nearest].depth
        return max(d for d in range(self.max_depth + 1) if d not in self.ruled_out)

    # ----------------------------------------------------------- measurement
    def observe(self, load: int, depth: int, tokens: int, seconds: float, ceiling_tokens: int | None = None,
                arrivals: tuple[float, float] | None = None) -> None:
        """One finished decode step, scheduled at ``load`` with ``depth``: the ``tokens`` it gave out,
        the ``ceiling_tokens`` it would have given had every draft been accepted (default: ``tokens``),
        and the arrival times of its oldest and newest running request (None: not known)."""
        self.decode_steps += 1
        self.decode_seconds += seconds
        oldest = None
        if arrivals is not None:
            oldest, newest = arrivals
            self._newest_arrival = newest if self._newest_arrival is None else max(newest, self._newest_arrival)
        state = self._state(load)
        self._forget_if_away(state, seconds)
        if self._unsettled > 0:
            self._unsettled -= 1
            return
        if depth not in (state.depth, state.probing):
            return  # a step of a probe or verdict that has since ended
        state.rate(depth).add(tokens, seconds, ceiling_tokens)
        if state.probing is not None:
            self.probe_steps_run += 1
            self._after_probe_step(load, state)
        else:
            self._after_verdict_step(load, state, oldest)

    def _forget_if_away(self, state: _LoadState, seconds: float) -> None:
        """A load whose steps resume after the engine ran at others for longer than the window it was
        filling (and ``min_window_s``) starts that window again: its steps measured requests, and text,
        that may have left since. A round under way goes on; its move is still checked against the
        verdict measured again after the probes."""
        away = self.decode_seconds - seconds - state.last_seen_s
        state.last_seen_s = self.decode_seconds
        filling = state.probing if state.probing is not None else state.depth
        if filling in state.rates and away > max(self.min_window_s, state.rates[filling].seconds):
            state.rates[filling] = Rate()

    def _after_verdict_step(self, load: int, state: _LoadState, oldest: float | None) -> None:
        """The verdict is measured in windows of ``baseline_steps``; the last full window is
        the baseline a round compares against, and what drift is judged on."""
        window = state.rate(state.depth)
        if window.steps < self.baseline_steps or window.seconds < self.min_window_s:
            return
        if state.verdict_rate == 0.0:
            state.verdict_rate = window.per_second
        drifted = state.depth > 0 and abs(window.per_second - state.verdict_rate) > self.drift * state.verdict_rate
        new_requests = (state.depth == 0 and oldest is not None and state.last_round_newest is not None
                        and oldest > state.last_round_newest)
        if new_requests:
            state.turnovers += 1
            state.last_round_newest = self._newest_arrival  # the next turnover replaces these
            new_requests = state.turnovers >= 2 ** min(state.kept_rounds, self.max_turnover_backoff)
        retry, state.retry = state.retry, False
        climbing = state.last_round is None and state.decided
        if state.depth > 0:
            state.acceptance = per_position_acceptance(window, state.depth)
        backoff = 2 ** min(state.kept_rounds, self.max_backoff)
        due = state.last_round is None or (self.decode_steps - state.last_round >= self.exploit_steps * backoff
                                           and self.decode_seconds - state.last_round_s >= self.exploit_s * backoff)
        if drifted or new_requests or due or retry:
            # At the longest wait every neighbour is probed again, even one that cannot pay.
            # Drift and a climb judge the text the verdict's window (or the round just ended) measured:
            # predictions may skip probes. New requests and scheduled rounds look for text that changed.
            informed = (drifted or climbing) and not (new_requests or retry)
            if self._start_round(state, recheck=due and state.kept_rounds >= self.max_backoff, informed=informed):
                return
            if drifted or due:  # every neighbour is known to lose, at any acceptance: the verdict stays
                self._end_round(load, state)
                return
            # New requests, and nothing that could pay to probe: the wait for the next round goes on
            # (from these requests: last_round_newest moved on with the turnover).
        state.rates = {state.depth: Rate()}

    def _start_round(self, state: _LoadState, recheck: bool = False, informed: bool = False) -> bool:
        """Set up the round's probes, the likeliest first; False if there is nothing to probe. ``informed``:
        the acceptance measured last at this load holds, and a probe predicted to lose is skipped."""
        d = state.depth
        bar = state.rate(d).per_second * (1 + self.margin)
        if recheck:  # the longest wait: every neighbour, whatever its ceiling or the prior
            neighbours = {d - 1, d + 1, 0} & set(range(self.max_depth + 1))
        elif d > 0 and bar < state.ceilings.get(0, 0.0):
            neighbours = {0}  # below what speculation off gave at this load: the drafts stopped paying
        else:
            neighbours = self._nearest_that_can_pay(state, bar)
        predicted = {c: self._predicted(state, c) for c in neighbours - {d}}
        if informed and not recheck:
            known = [rate for rate in predicted.values() if rate is not None]
            bar = max([bar, *known]) * (1 - self.prediction_tolerance)
            neighbours = {c for c, rate in predicted.items() if rate is None or rate >= bar}
        state.candidates = sorted(neighbours - {d}, key=lambda c: (-(predicted[c] or float("inf")), abs(c - d), c))
        state.rates = {d: state.rates[d]}  # fresh measurements for the candidates
        self._next_probe(state)
        return state.probing is not None

    def _nearest_that_can_pay(self, state: _LoadState, bar: float) -> set[int]:
        """The round's neighbours of the verdict where some depths cannot beat ``bar`` (ruled out, or
        a ceiling below it): the nearest depth above and below the verdict that can, and 0 if it can.
        A depth that cannot pay is passed over, not a wall: from depth 0, with depth 1's ceiling
        measured low (the jump to 1 costs the draft's first forward; a few steps on a busy machine),
        depth 2 may still pay, and without this a load on depth 0 would never speculate again."""
        d = state.depth
        can_pay = [c for c in range(self.max_depth + 1)
                   if c != d and c not in self.ruled_out and state.ceilings.get(c, float("inf")) > bar]
        nearest = {max((c for c in can_pay if c < d), default=None), min((c for c in can_pay if c > d), default=None)}
        return (nearest | ({0} & set(can_pay))) - {None}

    def _predicted(self, state: _LoadState, depth: int) -> float | None:
        """Depth ``depth``'s goodput here at the acceptance measured last: its steps per second (from
        its ceiling, measured in an earlier round) times the tokens that acceptance gives a step. A
        depth not measured here but between two that were gets its step time interpolated between
        theirs: a step costs a jump from depth 0 to 1 (the draft's first forward, the verification's
        metadata) and then about the same per depth, so the line between two depths lies at or below
        the steps between them, and the prediction errs towards probing."""
        if state.acceptance is None:
            return None
        # Per depth: a request's steps per second (``ceiling / (1 + depth)``; 1 / its step time).
        speed = {d: ceiling / (1 + d) for d, ceiling in state.ceilings.items() if ceiling > 0}
        if depth not in speed:
            below, above = [d for d in speed if d < depth], [d for d in speed if d > depth]
            if not below or not above:
                return None
            low, high = max(below), min(above)
            step = 1 / speed[low] + (1 / speed[high] - 1 / speed[low]) * (depth - low) / (high - low)
            speed[depth] = 1 / step
        return speed[depth] * expected_tokens(state.acceptance, depth)

    def _next_probe(self, state: _LoadState) -> None:
        state.probing = state.candidates.pop(0) if state.candidates else None

    def _after_probe_step(self, load: int, state: _LoadState) -> None:
        probe, baseline = state.rate(state.probing), state.rate(state.depth).per_second
        if state.probing != state.depth:  # a probe that loses to an earlier one cannot win the round either
            baseline = max([baseline, *(r.per_second for d, r in state.rates.items()
                                        if d not in (state.depth, state.probing) and r.steps > 0)])
        if (probe.steps >= self.min_probe_steps and probe.seconds >= self.min_window_s / 2
                and not baseline * (1 - self.early_stop_loss) <= probe.per_second <= self._decisive(baseline)):
            self._next_probe(state)
        elif probe.steps >= self.probe_steps and probe.seconds >= self.min_window_s:
            self._next_probe(state)
        if state.probing is None:
            self._end_round(load, state)

    def _end_round(self, load: int, state: _LoadState) -> None:
        old = state.depth
        if state.before is None:
            best = self._moves(state, state.rate(old))
            if best is not None and state.rates[best].per_second <= self._decisive(state.rate(old).per_second):
                # Measure the verdict once more before moving: the move must beat its windows before
                # and after the probes, each, so a machine that sped up or slowed down while the round
                # went on cannot make it.
                state.before, state.rates[old] = state.rates[old], Rate()
                state.probing = old
                return
        else:
            before, after, state.before = state.before, state.rates[old], None
            best = self._moves(state, before)
            if best is not None and self._moves(state, after) != best:
                best = None
            state.rates[old] = before.plus(after)
        baseline = state.rate(old).per_second
        measured = {d: r.per_second for d, r in state.rates.items() if r.steps > 0}
        state.ceilings.update({d: state.rates[d].ceiling_per_second for d in measured})
        deepest = max((d for d in measured if d > 0), key=lambda d: state.rates[d].ceiling_tokens, default=None)
        if deepest is not None:
            state.acceptance = per_position_acceptance(state.rates[deepest], deepest)
        state.last_round, state.last_round_s = self.decode_steps, self.decode_seconds
        state.last_round_newest = self._newest_arrival
        state.turnovers = 0
        state.decided = True
        if best is not None:
            state.depth, state.verdict_rate = best, measured[best]
            state.rates = {best: state.rates[best]}
            state.last_round = None  # climb on: the next round starts once the new depth has its baseline
            state.kept_rounds = 0
            self._report(load, old, best, measured)
            if old == 0:
                self._retry_depth_0(load)
        else:
            state.kept_rounds += 1
            state.verdict_rate = baseline
            state.rates = {old: Rate()}  # the next window starts with fresh steps

    def _retry_depth_0(self, moved: int) -> None:
        """Speculation pays again at load ``moved``: the text turned predictable, and the other loads that
        settled on depth 0 judge their verdict again at their next window."""
        for load, state in self.loads.items():
            if load != moved and state.decided and state.depth == 0 and state.probing is None:
                state.retry = True

    def _moves(self, state: _LoadState, verdict: Rate) -> int | None:
        """The depth the round's probes move the verdict to against the verdict's window ``verdict``, or
        None: the best probe, if it beats that window by ``margin`` and by ``confidence`` standard errors
        of the difference."""
        old = state.depth
        measured = {d: r.per_second for d, r in state.rates.items() if d != old and r.steps > 0}
        if not measured:
            return None
        best = max(measured, key=lambda d: (measured[d], -abs(d - old)))
        if measured[best] > verdict.per_second * (1 + self.margin) and self._significant(state.rates[best], verdict):
            return best
        return None

    def _decisive(self, rate: float) -> float:
        """Goodput beyond this beats ``rate`` by more than the machine's speed moves in a round."""
        return rate * (1 + self.decisive_gain)

    def _significant(self, new: Rate, old: Rate) -> bool:
        """Is ``new``'s gain over ``old`` more than ``confidence`` standard errors of the difference?"""
        noise = (new.standard_error ** 2 + old.standard_error ** 2) ** 0.5
        return new.per_second - old.per_second > self.confidence * noise

    def _report(self, load: int, old: int, new: int, measured: dict[int, float]) -> None:
        if self.on_change is None:
            return
        rates = ", ".join(f"k'={d}: {r:.0f} tok/s" for d, r in sorted(measured.items()))
        self.on_change(f"MineDraft auto: speculation depth {old} -> {new} at {describe_bucket(load)} ({rates})")


def expected_tokens(acceptance: float, depth: int) -> float:
    """A request's tokens from a step at ``depth`` when each draft is accepted with ``acceptance``
    given the one before: the accepted run and the target's own token."""
    return sum(acceptance ** i for i in range(depth + 1))


def per_position_acceptance(window: Rate, depth: int) -> float | None:
    """The ``acceptance`` whose :func:`expected_tokens` at ``depth`` is the window's tokens over its
    ceiling (what its steps gave out against what every draft accepted would have); None at depth 0."""
    if depth == 0 or window.ceiling_tokens <= 0:
        return None
    return acceptance_for_tokens(window.tokens / window.ceiling_tokens * (1 + depth), depth)


def acceptance_for_tokens(tokens: float, depth: int) -> float:
    """The ``acceptance`` in [0, 1] whose :func:`expected_tokens` at ``depth`` is ``tokens`` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if expected_tokens(mid, depth) < tokens else (low, mid)
    return low


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
