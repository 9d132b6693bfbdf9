"""When to run parallel steps at all: a prior first, then measurement.

Overlapping drafting with verification pays only where the two lanes do not
compete for the same hardware (performance model: two lanes on one device's
cores or SMs cannot win at equal concurrency). Plain speculative decoding is
always safe, so ``auto`` runs it by default and lets parallel steps in only
where they are measured to win:

* Prior. Before it measures anything, the policy asks the cost model (see
  ``scheduling/mode_prior.py``) for the predicted gain of parallel mode at the
  current load. Where the prior *rules parallel mode out* (predicted gain
  below ``1 + margin``: the lanes share the hardware, or the lane is serial),
  probes are rationed to ``ruled_out_budget`` of all decode steps: none by
  default, because on the CPU thread lane a probe's cost is not bounded by
  its own steps (once the lane thread has run, later plain steps were
  measured slower: a long run at 8 requests with one 4-step probe ran at
  0.87x of stock SD). With a budget (e.g. 0.02), a short run never probes
  and a long one still finds out a wrong prior. Where the prior allows a
  win, a load is probed as soon as plain SD has a baseline there, and again
  every ``exploit_steps`` decode steps.
* Probe. ``probe_steps`` parallel steps at one load, compared with the
  plain-SD rate measured at the same load just before. A probe stops early
  once it has run ``min_probe_steps`` and is losing by ``early_stop_loss``.
  Parallel mode is kept when it wins by ``margin`` (a tie goes to plain SD).
* Load. A load is the running decode requests (by power of two), k and
  whether prefill tokens dominate the step. A change of load ends a probe or
  a parallel choice made for another load: each load has its own verdict.

Only steps with decode requests count. Outputs do not depend on the mode
(both are exact), only speed does. ``parallel`` and ``stock`` pin the mode
(tests, measurements). Pure Python, no clock: the scheduler feeds it step
durations and reports choice changes through ``on_change``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from minedraft.config.modes import RUNTIME_MODES as MODES


@dataclass(frozen=True)
class Load:
    """What the choice depends on besides the hardware."""

    decodes: int  # running decode requests, rounded down to a power of two (0: none)
    k: int
    prefill_heavy: bool = False  # more prefill than decode tokens in the step

    @classmethod
    def of(cls, num_decodes: int, k: int, prefill_tokens: int = 0, decode_tokens: int = 0) -> Load:
        return cls(decode_bucket(num_decodes), k, prefill_tokens > decode_tokens)

    def __str__(self) -> str:
        return f"{describe_bucket(self.decodes)}, k={self.k}" + (", prefill-heavy" if self.prefill_heavy else "")


def decode_bucket(num_decodes: int) -> int:
    """Running decode requests rounded down to a power of two (0: none): the loads' granularity."""
    return 1 << (num_decodes.bit_length() - 1) if num_decodes > 0 else 0


def describe_bucket(bucket: int) -> str:
    return f"{bucket} decodes" if bucket < 2 else f"{bucket}-{2 * bucket - 1} decodes"


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


# Predicted parallel / plain-SD tokens/s at a load; None: no prior (measure).
Prior = Callable[[Load], "float | None"]


@dataclass
class ModePolicy:
    mode: str = "auto"
    prior: Prior | None = None
    probe_steps: int = 16
    min_probe_steps: int = 4
    early_stop_loss: float = 0.10
    baseline_steps: int = 16
    exploit_steps: int = 400
    margin: float = 0.03
    ruled_out_budget: float = 0.0
    on_change: Callable[[str], None] | None = None
    # --- state
    parallel: bool = False  # the choice outside probes, as last reported
    probing: Load | None = None
    decode_steps: int = 0
    probe_steps_run: int = 0
    last_verdict: str = ""
    _probe: Rate = field(default_factory=Rate)
    _baseline: dict[Load, Rate] = field(default_factory=dict)
    _wins: dict[Load, tuple[int, str]] = field(default_factory=dict)  # load -> (decode step won, rates)
    _last_probe: dict[Load, int] = field(default_factory=dict)  # load -> decode step of its last probe
    _priors: dict[Load, float | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown MineDraft mode {self.mode!r}: expected one of {', '.join(MODES)}")

    # ------------------------------------------------------------- decisions
    def parallel_allowed(self, load: Load) -> bool:
        """Whether the next step, at ``load``, may run in parallel mode."""
        if self.mode != "auto":
            return self.mode == "parallel"
        if self.probing is not None and self.probing != load:
            self.probing = None  # the load moved on: this probe says nothing
        chosen = self._won(load)
        if self.probing is None and not chosen and self._may_probe(load):
            self.probing, self._probe = load, Rate()
        self._report(chosen, load)
        return chosen or self.probing is not None

    def predicted_gain(self, load: Load) -> float | None:
        if load not in self._priors:
            self._priors[load] = self.prior(load) if self.prior is not None else None
        return self._priors[load]

    def ruled_out(self, load: Load) -> bool:
        gain = self.predicted_gain(load)
        return gain is not None and gain < 1 + self.margin

    def _won(self, load: Load) -> bool:
        """Parallel mode won the last probe at ``load``, less than ``exploit_steps`` ago."""
        won = self._wins.get(load)
        if won is not None and self.decode_steps - won[0] >= self.exploit_steps:
            del self._wins[load]  # measure plain SD again: its baseline decides the next probe
            return False
        return won is not None

    def _may_probe(self, load: Load) -> bool:
        if load.decodes < 2:
            return False  # one decode request: nothing to overlap
        baseline = self._baseline.get(load)
        if baseline is None or baseline.steps < self.baseline_steps:
            return False
        last = self._last_probe.get(load)
        if last is not None and self.decode_steps - last < self.exploit_steps:
            return False
        if self.ruled_out(load):
            budget = self.ruled_out_budget * self.decode_steps
            return budget > 0 and self.probe_steps_run + self.probe_steps <= budget
        return True

    def _report(self, chosen: bool, load: Load) -> None:
        if chosen == self.parallel:
            return
        self.parallel = chosen
        if self.on_change is not None:
            why = (self._wins[load][1] if chosen
                   else f"no winning probe at this load within the last {self.exploit_steps} decode steps")
            self.on_change(f"MineDraft auto: parallel steps {'on' if chosen else 'off'} at {load} ({why})")

    # ----------------------------------------------------------- measurement
    def observe(self, parallel_allowed: bool, load: Load, tokens: int, seconds: float) -> None:
        """Record one finished step scheduled at ``load`` with ``parallel_allowed``."""
        if self.mode != "auto" or load.decodes == 0:
            return
        self.decode_steps += 1
        if not parallel_allowed:
            self._baseline.setdefault(load, Rate()).add(tokens, seconds)
            return
        if self.probing != load:
            return  # a parallel step of a won load, or of a probe that ended
        self.probe_steps_run += 1
        self._probe.add(tokens, seconds)
        baseline = self._baseline[load].per_second
        rate = self._probe.per_second
        rates = f"parallel {rate:.0f} tok/s vs plain SD {baseline:.0f} tok/s"
        if self._probe.steps >= self.min_probe_steps and rate < baseline * (1 - self.early_stop_loss):
            self._end_probe(load, False, f"{rates}, stopped after {self._probe.steps} steps")
        elif self._probe.steps >= self.probe_steps:
            self._end_probe(load, rate > baseline * (1 + self.margin), rates)

    def _end_probe(self, load: Load, win: bool, rates: str) -> None:
        self.probing = None
        self._last_probe[load] = self.decode_steps
        self._baseline.pop(load, None)  # the next probe compares against fresh steps
        self.last_verdict = f"{load}: {'parallel' if win else 'plain SD'} ({rates})"
        if win:
            self._wins[load] = (self.decode_steps, rates)
