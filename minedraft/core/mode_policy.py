"""When to run parallel steps at all: measure both modes, keep the faster one.

Overlapping drafting with verification pays only where the two lanes do not
compete for the same hardware (see the performance model in the README): on
a GPU with a small drafter it usually does, on a 2-core CPU it never does at
equal concurrency. The engine cannot know in advance, so ``auto`` measures.

``auto`` alternates two phases:

* probe: ``probe_steps`` steps allowing parallel mode, then ``probe_steps``
  steps of plain speculative decoding, recording output tokens and wall time
  of each step;
* exploit: ``exploit_steps`` steps in the mode with more output tokens per
  second (parallel must win by ``margin``: a tie goes to plain SD).

Then it probes again, so the choice follows the load. Only steps with decode
requests count: prefill-only steps say nothing about the choice. Outputs do
not depend on the mode (both are exact), only speed does.

``parallel`` and ``stock`` pin the mode (tests, measurements). Pure Python, no
clock: the scheduler feeds it step durations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODES = ("auto", "parallel", "stock")


@dataclass
class _Rate:
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
class ModePolicy:
    mode: str = "auto"
    probe_steps: int = 24
    exploit_steps: int = 400
    margin: float = 0.03
    _phase: str = "probe_parallel"  # probe_parallel -> probe_stock -> exploit
    _exploit_left: int = 0
    _exploit_parallel: bool = False
    _rates: dict[bool, _Rate] = field(default_factory=lambda: {True: _Rate(), False: _Rate()})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown MineDraft mode {self.mode!r}: expected one of {', '.join(MODES)}")

    def parallel_allowed(self) -> bool:
        """Whether the next step may run in parallel mode."""
        if self.mode != "auto":
            return self.mode == "parallel"
        if self._phase == "exploit":
            return self._exploit_parallel
        return self._phase == "probe_parallel"

    def observe(self, parallel_allowed: bool, has_decodes: bool, tokens: int, seconds: float) -> None:
        """Record one finished step scheduled with ``parallel_allowed``."""
        if self.mode != "auto" or not has_decodes:
            return
        if self._phase == "exploit":
            self._exploit_left -= 1
            if self._exploit_left <= 0:
                self._start_probe()
            return
        if parallel_allowed != (self._phase == "probe_parallel"):
            return  # a step scheduled before the phase changed
        rate = self._rates[parallel_allowed]
        rate.add(tokens, seconds)
        if rate.steps < self.probe_steps:
            return
        if self._phase == "probe_parallel":
            self._phase = "probe_stock"
        else:
            self._decide()

    @property
    def last_rates(self) -> tuple[float, float]:
        """Output tokens/s measured in the last probe: (parallel, stock)."""
        return self._rates[True].per_second, self._rates[False].per_second

    def _decide(self) -> None:
        parallel, stock = self.last_rates
        self._exploit_parallel = parallel > stock * (1 + self.margin)
        self._phase = "exploit"
        self._exploit_left = self.exploit_steps

    def _start_probe(self) -> None:
        self._phase = "probe_parallel"
        self._rates = {True: _Rate(), False: _Rate()}
