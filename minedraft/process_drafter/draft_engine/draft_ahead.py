"""Drafting ahead: while the target verifies a job's drafts, the draft engine drafts past them.

With one group (N = 1, or a step of plain SD) the draft engine waits while the
target verifies, and the target waits while it drafts. After answering a job,
the engine goes on drafting each of its requests as if the target accepted
every draft and then sampled the draft model's own next token (its *guess*):
the *path* is the job's drafts and the guess, and the drafts after the path
are kept. When the next job's history of that request is exactly the path,
its drafts are those already made: the tokens greedy drafting would make now,
from the same history, and the session's KV already holds them. Any other
history is a miss: the session rolls back to what the target accepted, as
after any job (session_scheduler.py). Exact by construction: the target
verifies every draft, wherever it was made.

How far ahead: ``off``; ``always`` (the job's depth and the guess, after every
job: the tests' and measurements' setting); or ``auto``, as far as the
drafter's spare time reaches: the time from a reply to the next job (the
*gap*, measured on every job; the median of the last few) over the engine's
time per decode step (measured on its last drafting call), rounded. Drafting
ahead runs one engine step per call (each a streaming update of one token, as
a decode step), so in ``auto`` a job that comes stops it after the step in
flight: a job waits at most one draft step (as a rule half of one) for
drafting it did not ask for. Where drafts and verification alternate (a
second group, or a target that sends the next job at once) the gap is short
and nothing is drafted ahead. Drafting ahead costs the target's hardware
nothing: the drafter has its own.

Histories sent with no drafts asked (``start``). The target's worker sends
each prompt as its last chunk is scheduled, before the target's forward over
it, and at a step of depth 0 each request's new tokens: the engine drafts
ahead from them beside the target's step (a prompt: its prefill, and past the
draft's guess of the target's first token), so the next job that drafts for
the request finds its drafts made, or at least its history in the session.
They are drafted k + 1 steps whatever the room (a prefill step leaves room;
the prefill is the next job's work anyway), and requests whose drafting
ahead they stopped are drafted again with them.

A miss. In ``always``, and in ``auto`` for a job of one request, a request
whose drafts were not made ahead waits for them to be made now. In ``auto``
a job of more requests that the target waits on (inline: a step of plain SD;
a parallel step's job has the target's step to be drafted in), where the gaps
have room, is answered at once (``answers_at_once``): such a request gets no
drafts this step (verified without drafts, exact: the target samples its next
token as it would alone) and is drafted ahead from its new history while the
target verifies. Were it waited for, every request of the job would wait for
the slowest, and the chance that all N followed the path falls as its N-th
power.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

GAPS = 4  # the gaps a decision looks at (their median: one slow step, a prefill, does not count)
# ``auto``: a job of at most this many requests waits for the drafts not made ahead; one of more is answered at
# once. On the real pair (bf16, the drafter on core 1, 2026-12-06) drafting ahead with every job waiting read
# 1.26x of not drafting ahead at N = 1, and 0.78x and 0.75x at N = 2 and 4: one miss held the whole job.
WAITING_MAX_REQUESTS = 1


@dataclass
class AheadDrafts:
    """One request drafted ahead: the history it extends (its length), the path, the drafts after it."""

    base: int
    path: list[int]
    drafts: list[int]


@dataclass
class AheadCounts:
    """Per job, sent in its reply (the target's proposer sums them)."""

    hits: int = 0  # requests whose drafts (all or some) were made ahead
    misses: int = 0  # requests drafted ahead whose history left the path
    late: int = 0  # jobs that came while the engine was drafting ahead (auto: the gap was overrun)


@dataclass
class DraftAhead:
    """The draft engine's work between jobs. ``draft(histories, depth)`` is the sessions' own
    drafting (sessions.py)."""

    draft: Callable[..., dict[str, list[int]]]
    mode: str
    max_model_len: int
    ahead: dict[str, AheadDrafts] = field(default_factory=dict)
    # Gaps before jobs the target waits on (inline: a step of plain SD), and before a parallel step's jobs (sent
    # as the step starts: little room as a rule). Drafting ahead after a job reads the gaps of its kind: those of
    # parallel steps, read after plain SD came back, held a batch of 8 at one or two drafts for six steps.
    gaps: deque = field(default_factory=lambda: deque(maxlen=GAPS))
    parallel_gaps: deque = field(default_factory=lambda: deque(maxlen=GAPS))
    _inline: bool = True  # the kind of the last job
    counts: AheadCounts = field(default_factory=AheadCounts)
    _last_job: dict[str, list[int]] = field(default_factory=dict)  # request -> its drafts, to draft past
    _unfinished: dict[str, list[int]] = field(default_factory=dict)  # a run a job stopped: its requests left
    _started: set[str] = field(default_factory=set)  # histories sent with no drafts asked: depth + 1 steps
    _last_depth: int = 0
    _step_s: float | None = None
    _replied_at: float | None = None
    _arrived_at: float | None = None

    # ------------------------------------------------------------------ a job
    def job_arrived(self, inline: bool = True) -> None:
        """A job is being handled: the gap since the last reply is one more measurement of its kind."""
        arrived = self._arrived_at or time.perf_counter()
        self._inline = inline
        if self._replied_at is not None:
            (self.gaps if inline else self.parallel_gaps).append(arrived - self._replied_at)
        if self._arrived_at is not None:
            self.counts.late += 1
        self._replied_at = self._arrived_at = None

    def forget(self, req_ids: Sequence[str]) -> None:
        """Released or resynchronised requests: their sessions are gone."""
        for req_id in req_ids:
            self.ahead.pop(req_id, None)
            self._last_job.pop(req_id, None)
            self._unfinished.pop(req_id, None)
            self._started.discard(req_id)

    def start(self, req_ids: Sequence[str], depth: int) -> None:
        """Histories sent with no drafts asked (no job: nothing is answered, no gap measured): drafted ahead
        ``depth`` + 1 steps from them, beside any requests whose drafting ahead their coming stopped."""
        self._arrived_at = None  # a job the target waits for is not late for them
        self._last_job = {**self._unfinished, **self._last_job, **{r: [] for r in req_ids}}
        self._unfinished = {}
        self._started.update(req_ids)
        self._last_depth = max(self._last_depth, depth)

    def take(self, histories: Mapping[str, Sequence[int]], depth: int) -> dict[str, list[int]]:
        """The drafts already made for each request whose history is the path drafted ahead (at most
        ``depth``); every other request's are dropped."""
        ready = {}
        for req_id, history in histories.items():
            made = self.ahead.pop(req_id, None)
            if made is None:
                continue
            end = made.base + len(made.path)
            if len(history) == end and list(history[made.base:end]) == made.path:
                ready[req_id] = made.drafts[:depth]
                self.counts.hits += 1
            else:
                self.counts.misses += 1
        return ready

    def answers_at_once(self, requests: int, inline: bool) -> bool:
        """A job of ``requests`` gets only the drafts made ahead (``auto``, a job the target waits on, where the
        gaps have room to draft ahead: requests new to the engine, or back from depth 0, are drafted ahead during
        the target's step)."""
        return self.mode == "auto" and inline and requests > WAITING_MAX_REQUESTS and self._room() >= 2

    def answered(self, drafted: Mapping[str, list[int]], depth: int) -> None:
        """The job's drafts (a request answered without any: none): what to draft past when idle."""
        self._last_job = dict(drafted)
        self._unfinished, self._started = {}, set()
        self._last_depth = depth
        self._replied_at = time.perf_counter()  # the gap runs from here to the next job

    def timed(self, seconds: float, steps: int) -> None:
        """A drafting call of ``steps`` engine steps took ``seconds`` (with the tokens it fed: an upper
        bound on a decode step's time)."""
        if steps:
            self._step_s = seconds / steps

    def take_counts(self) -> dict[str, int]:
        counts, self.counts = self.counts, AheadCounts()
        return {"ahead_hits": counts.hits, "ahead_misses": counts.misses, "ahead_late": counts.late}

    # ------------------------------------------------------------------ between jobs
    def run(self, histories: Mapping[str, Sequence[int]], waiting: Callable[[], bool]) -> None:
        """Called right after each reply: draft the last job's requests ahead, one engine step per call, so
        that in ``auto`` a job that comes stops it after the step in flight."""
        last, self._last_job = self._last_job, {}
        started, self._started = self._started, set()
        job_steps = self._steps(len(last))
        steps = {r: self._last_depth + 1 if r in started else job_steps for r in last}
        base = {req_id: len(histories[req_id]) for req_id in last if req_id in histories and steps[req_id] >= 2
                and len(histories[req_id]) + len(last[req_id]) + steps[req_id] <= self.max_model_len}
        if not base or waiting():  # one step drafts only the guess
            self._unfinished = {r: last[r] for r in base}
            return
        made: dict[str, list[int]] = {req_id: [] for req_id in base}
        for step_index in range(max(steps[r] for r in base)):
            if waiting():
                self._arrived_at = self._arrived_at or time.perf_counter()  # a job came: it is late
                if self.mode == "auto":
                    self._unfinished = {r: last[r] for r in base if len(made.get(r, ())) < steps[r]}
                    break
            started = time.perf_counter()
            drafting = {r: tokens for r, tokens in made.items() if step_index < steps[r]}
            step = self.draft({r: [*histories[r], *last[r], *tokens] for r, tokens in drafting.items()}, 1)
            if step_index:  # the first feeds what the target accepted (a new request: its prompt), the rest a token
                self.timed(time.perf_counter() - started, 1)
            made = {r: [*tokens, *step[r]] if r in drafting else tokens for r, tokens in made.items()
                    if step.get(r) or r not in drafting}
        for req_id, tokens in made.items():
            if len(tokens) >= 2:
                self.ahead[req_id] = AheadDrafts(base[req_id], [*last[req_id], tokens[0]], tokens[1:])

    def _steps(self, requests: int) -> int:
        """Engine steps to draft ahead: the guess and the drafts after it."""
        if self.mode == "off" or not requests:
            return 0
        most = self._last_depth + 1
        return most if self.mode == "always" else min(most, self._room())

    def _room(self) -> int:
        """``auto``: the engine steps the median recent gap holds, the last one where over half of it fits (0
        until measured). A job then waits less than half a step for one draft more per request: on the real
        pair the target's step at N = 4 held 2.9 draft steps (2026-12-06)."""
        gaps = self.gaps if self._inline else self.parallel_gaps
        if len(gaps) < GAPS or not self._step_s:
            return 0
        return int(statistics.median(gaps) / self._step_s + 0.5)
