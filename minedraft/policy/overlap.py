"""Whether a step may run in parallel: one group verified while the lane drafts for the other.

Overlapping drafting with verification pays only where the drafter does not compete with the target for
the same hardware (performance model: two lanes on one device's cores or SMs cannot win at equal
concurrency; on the CPU thread lane, measured, even a plain step after the lane thread had run was slower).
Plain speculative decoding is always safe, so ``auto``:

* runs plain SD wherever the drafter shares the target's hardware (a thread on its CPU cores, a stream on
  its GPU, or the serial lane): its placement decides, before any step;
* where the drafter has hardware of its own, tries parallel steps at each load and keeps them where they
  win: ``trial_steps`` parallel steps, against the plain-SD rate measured at the same load just before
  (``trial_steps`` steps of it); kept where they win by ``margin`` (a tie goes to plain SD), and tried
  again after ``trial_every`` decode steps at that load. A trial that after a quarter of its steps runs
  under ``trial_early_loss`` of plain SD's rate ends there, lost: no noise of a few steps hides a loss that
  large, and each parallel step of it costs the load. A load is the decoding requests' bucket, the depth,
  and whether prompt tokens dominated the step before: each load has its own verdict.

``parallel`` and ``stock`` pin the choice (tests, measurements). Only steps that verify or draft count.
Outputs do not depend on it (both are exact), only speed does. No clock: the policy feeds it step durations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from minedraft.config.modes import PLACEMENTS, RUNTIME_MODES
from minedraft.policy.load import Load
from minedraft.policy.tuning import TUNING, Tuning


def placement(device_type: str, lane: str, drafter: str = "in-process") -> str:
    """Where the drafter runs: ``dedicated`` (a process drafter, on hardware of its own), ``inline`` (the
    serial lane: nothing overlaps), ``gpu-stream`` or ``cpu-threads`` (a side stream or a thread on the
    target's own device)."""
    if drafter == "process":
        placed = "dedicated"
    elif lane == "serial":
        placed = "inline"
    else:
        placed = "gpu-stream" if device_type == "cuda" else "cpu-threads"
    assert placed in PLACEMENTS
    return placed


@dataclass
class Rate:
    """Output tokens over seconds of whole steps: measured goodput."""

    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens += tokens
        self.seconds += seconds
        self.steps += 1

    @property
    def per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class OverlapChoice:
    mode: str = "auto"
    dedicated: bool = False  # the drafter has hardware of its own: auto tries parallel steps
    tuning: Tuning = TUNING
    on_change: Callable[[str], None] | None = None
    parallel: bool = False  # the choice outside trials, as last reported
    trying: Load | None = None  # the load a trial runs at
    decode_steps: int = 0
    trial_steps_run: int = 0
    last_verdict: str = ""
    _trial: Rate = field(default_factory=Rate)
    _baseline: dict[Load, Rate] = field(default_factory=dict)
    _wins: dict[Load, tuple[int, str]] = field(default_factory=dict)  # load -> (decode step won at, rates)
    _last_trial: dict[Load, int] = field(default_factory=dict)  # load -> decode step of its last trial

    def __post_init__(self) -> None:
        if self.mode not in RUNTIME_MODES:
            raise ValueError(f"unknown MineDraft mode {self.mode!r}: expected one of {', '.join(RUNTIME_MODES)}")

    def allowed(self, load: Load) -> bool:
        """Whether the next step, at ``load``, may run in parallel."""
        if self.mode != "auto":
            return self.mode == "parallel"
        if not self.dedicated:
            return False
        if self.trying is not None and self.trying != load:
            self.trying = None  # the load moved on: this trial says nothing
        chosen = self._won(load)
        if self.trying is None and not chosen and self._may_try(load):
            self.trying, self._trial = load, Rate()
        self._report(chosen, load)
        return chosen or self.trying is not None

    def _won(self, load: Load) -> bool:
        """Parallel steps won the last trial at ``load``, less than ``trial_every`` decode steps ago."""
        won = self._wins.get(load)
        if won is not None and self.decode_steps - won[0] >= self.tuning.trial_every:
            del self._wins[load]  # measure plain SD again: its baseline decides the next trial
            return False
        return won is not None

    def _may_try(self, load: Load) -> bool:
        if load.bucket < 2:
            return False  # one decoding request: no second group
        baseline = self._baseline.get(load)
        if baseline is None or baseline.steps < self.tuning.trial_steps:
            return False
        last = self._last_trial.get(load)
        return last is None or self.decode_steps - last >= self.tuning.trial_every

    def _report(self, chosen: bool, load: Load) -> None:
        if chosen == self.parallel:
            return
        self.parallel = chosen
        if self.on_change is not None:
            why = (self._wins[load][1] if chosen
                   else f"no winning trial at this load within the last {self.tuning.trial_every} decode steps")
            self.on_change(f"MineDraft auto: parallel steps {'on' if chosen else 'off'} at {load} ({why})")

    def observe(self, allowed: bool, load: Load, tokens: int, seconds: float) -> None:
        """One finished step planned at ``load`` with parallel steps ``allowed`` (not one whose requests all
        came back without drafts: policy.py)."""
        if self.mode != "auto" or not self.dedicated or load.bucket == 0:
            return
        self.decode_steps += 1
        if not allowed:
            self._baseline.setdefault(load, Rate()).add(tokens, seconds)
            return
        if self.trying != load:
            return  # a parallel step of a won load, or of a trial that ended
        self.trial_steps_run += 1
        self._trial.add(tokens, seconds)
        baseline, rate = self._baseline[load].per_second, self._trial.per_second
        rates = f"parallel {rate:.0f} tok/s vs plain SD {baseline:.0f} tok/s"
        if self._trial.steps >= self.tuning.trial_steps:
            self._end_trial(load, rate > baseline * (1 + self.tuning.margin), rates)
        elif (self._trial.steps >= max(1, self.tuning.trial_steps // 4)
              and rate < baseline * self.tuning.trial_early_loss):
            self._end_trial(load, False, f"{rates} after {self._trial.steps} steps")

    def _end_trial(self, load: Load, win: bool, rates: str) -> None:
        self.trying = None
        self._last_trial[load] = self.decode_steps
        self._baseline.pop(load, None)  # the next trial compares against fresh steps
        self.last_verdict = f"{load}: {'parallel' if win else 'plain SD'} ({rates})"
        if win:
            self._wins[load] = (self.decode_steps, rates)
