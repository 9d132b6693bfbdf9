"""ProcessDrafterProposer: the target worker's drafter when the draft model runs in its own process.

vLLM builds it through its ``custom_class`` speculative method (the front end
puts it there, see frontend.py) and calls ``load_model`` (start the draft
engine) and ``propose``. MineDraft's model runner reaches it through its draft
source instead (minedraft/process_drafter/target/process_source.py), because a job needs the
requests' ids, which vLLM's proposer interface does not pass:
:meth:`ProcessDrafterProposer.prepare` makes a job that keeps only the tokens
each request gained since its last job, so it costs nothing to hold it until
the next step. :meth:`~ProcessDrafterProposer.send` sends it,
:meth:`~ProcessDrafterProposer.receive` waits for the drafts at most
``drafter_timeout_s`` and applies the reply here (resyncs, statistics); the
job turns the reply into drafts per row, the rows without them late
(verified without drafts, which is exact, and counted).

A DFlash draft (``dflash_engine.py``) takes no token histories: the runner
hands this proposer each step's hidden-state rows (``add_context``), which
the next job carries through shared memory.

Under tensor parallelism only the target's rank 0 starts and talks to the draft
engine (``drives_engine``): vLLM's executor takes a step's drafts from that rank
alone (its output rank), and every rank verifies the drafts the scheduler then
sends it, so the other ranks draft nothing (process_drafter/target/process_source.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from minedraft.config.methods import method_of_engine
from minedraft.config.drafter_device import DrafterDevice
from minedraft.config.settings import MineDraftSettings
from minedraft.contract import MineDraftDraftTokenIds
from minedraft.lifetime import end_with_vllm_parent
from minedraft.log import get_logger
from minedraft.process_drafter.context_channel import ContextWriter
from minedraft.process_drafter.history import SentHistories, Update
from minedraft.process_drafter.target.client import DRAFT_ENGINE, ProcessDrafterClient
from minedraft.process_drafter.target.context_queue import ContextQueue
from minedraft.rank import tensor_parallel_rank
from minedraft.registry import DRAFT_ENGINE_KEY

logger = get_logger(__name__)


@dataclass(frozen=True)
class ProcessDrafterJob:
    """Drafts for ``req_ids`` (the batch's rows at capture); ``drafted`` are the rows that get some."""

    req_ids: list[str]
    drafted: list[str]
    updates: list[Update]
    released: list[str]
    depth: int  # draft tokens per drafted row
    next_tokens: list[int] | None = None  # a DFlash drafter's: the token each drafted row drafts after
    # At depth 0: the rows whose new tokens are sent for the engine to draft ahead from (draft_ahead.py).
    ahead: list[str] = field(default_factory=list)

    def message(self) -> dict[str, Any] | None:
        """What the draft engine is sent; None when there is nothing to send."""
        if not (self.drafted or self.released or self.ahead):
            return None
        message = {"release": self.released, "updates": self.updates, "draft": self.drafted, "k": self.depth}
        if self.next_tokens is not None:
            message["next"] = self.next_tokens
        if self.ahead:
            message["ahead"] = self.ahead
        return message

    def result(self, reply: dict[str, Any] | None) -> MineDraftDraftTokenIds:
        """Drafts per row from the engine's reply; without one (late or gone) the drafted rows get none
        and are late."""
        drafts = {} if reply is None else dict(zip(self.drafted, reply["drafts"]))
        late = list(self.drafted) if reply is None else []
        return MineDraftDraftTokenIds(list(self.req_ids), [drafts.get(r, []) for r in self.req_ids], late)


@dataclass
class JobStats:
    """Per-job costs of the process drafter, logged when it shuts down: for inline jobs (sent and
    awaited at once) the round trip minus the engine's own time is the price of the process."""

    jobs: int = 0
    late: int = 0
    draft_s: float = 0.0
    inline_jobs: int = 0
    inline_round_trip_s: float = 0.0
    inline_draft_s: float = 0.0
    ahead_hits: int = 0  # requests whose drafts the engine had made ahead (draft_ahead.py)
    ahead_misses: int = 0
    ahead_late: int = 0  # jobs that came while the engine was drafting ahead

    def observe(self, reply: dict | None, sent_at: float | None) -> None:
        """One job's reply (None: late or gone); ``sent_at``: when an inline job was sent."""
        self.jobs += 1
        if reply is None:
            self.late += 1
            return
        self.draft_s += reply["draft_s"]
        self.ahead_hits += reply.get("ahead_hits", 0)
        self.ahead_misses += reply.get("ahead_misses", 0)
        self.ahead_late += reply.get("ahead_late", 0)
        if sent_at is not None:
            self.inline_jobs += 1
            self.inline_round_trip_s += time.perf_counter() - sent_at
            self.inline_draft_s += reply["draft_s"]

    def summary(self) -> str:
        line = f"{self.jobs} jobs ({self.late} late), {1e3 * self.draft_s / max(1, self.jobs - self.late):.1f} ms " \
               "drafting per job in the draft engine"
        if self.inline_jobs:
            overhead = (self.inline_round_trip_s - self.inline_draft_s) / self.inline_jobs
            line += f"; inline jobs: {1e3 * self.inline_round_trip_s / self.inline_jobs:.1f} ms round trip, " \
                    f"{1e3 * overhead:.2f} ms of it outside the engine (pipes, JSON, wake-ups)"
        if self.ahead_hits or self.ahead_misses:
            line += f"; drafted ahead: {self.ahead_hits} requests found their drafts made, {self.ahead_misses} " \
                    f"left the path, {self.ahead_late} jobs came while drafting ahead"
        return line


class ProcessDrafterProposer:
    """vLLM ``custom_class`` proposer: jobs for the draft engine process (minedraft/process_drafter/)."""

    # How the draft engine process is started (tests start a module of theirs, which injects faults).
    engine_entry: tuple[str, ...] = DRAFT_ENGINE

    def __init__(self, vllm_config: Any) -> None:
        settings = MineDraftSettings.of(vllm_config)
        self.engine_kwargs: dict[str, Any] = vllm_config.additional_config[DRAFT_ENGINE_KEY]
        self.device = DrafterDevice.parse(settings.drafter_device)
        self.timeout_s = settings.drafter_timeout_s
        self.draft_ahead = settings.draft_ahead
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self.max_model_len = vllm_config.model_config.max_model_len
        self.sent = SentHistories()
        self.client: ProcessDrafterClient | None = None
        self.stats = JobStats()
        self.drives_engine = tensor_parallel_rank() == 0
        # A DFlash draft's (set once its engine is up): the target layers whose hidden states it takes.
        self.context_layers: tuple[int, ...] = ()
        self.context: ContextQueue | None = None
        self.writer: ContextWriter | None = None
        self._unread: int | None = None  # a job that carried rows and whose reply nobody awaited

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's hook for loading the draft model: start its engine instead (rank 0 only)."""
        # The draft engine ends with this worker; this worker (vLLM's own process) with its
        # engine core, also if vLLM's death pipe does not get it out.
        end_with_vllm_parent()
        if not self.drives_engine:
            return
        self.client = ProcessDrafterClient(self.engine_kwargs, self.device, self.k, entry=self.engine_entry,
                                          draft_ahead=self.draft_ahead)
        self.max_model_len = min(self.max_model_len, self.client.max_model_len)
        if method_of_engine(self.engine_kwargs).sends_context:
            if not self.client.context_layers:
                raise RuntimeError("minedraft: the DFlash draft names no target layers (dflash_config."
                                   "target_layer_ids): its context cannot be sent to the process drafter.")
            self.context_layers = tuple(self.client.context_layers)
            self.context, self.writer = ContextQueue(), ContextWriter()

    @property
    def takes_hidden_states(self) -> bool:
        """The runner must capture the target's hidden states at ``context_layers`` for ``add_context``."""
        return self.context is not None

    def add_context(self, entries: list, rows: list) -> None:
        """A step's context (process_drafter/target/step_context.py): per request its entry and hidden-state rows."""
        self.context.add(entries, rows)

    def prepare(self, req_ids: list[str], depth: int, sampled_token_ids: list[list[int]], num_tokens_no_spec,
                token_ids_cpu, *, undrafted: frozenset[str] = frozenset(), **_: Any) -> ProcessDrafterJob:
        """A job for the batch's rows drafting ``depth`` tokens each (the step's depth), from vLLM's
        ``custom_class`` ``propose`` arguments. At depth 0 nothing is drafted: where the engine drafts ahead
        (``sends_ahead``) the rows' new tokens are sent for it to draft ahead from, so that the next job
        that drafts finds its drafts made; else nothing is sent but releases, and the draft engine's
        sessions take the tokens they missed with the next job that drafts.
        ``undrafted``: rows whose drafts the step does not want (contract.py), left out as at depth 0.
        A DFlash draft's job carries no tokens but the one each row drafts after; its context rows
        (``add_context``) go with whichever job is sent next, at any depth."""
        drafted, updates, next_tokens, ahead = [], [], [], []
        for row, req_id in enumerate(req_ids):
            length = int(num_tokens_no_spec[row])
            # As vLLM's proposers: no drafts for a prefill chunk (nothing sampled)
            # or where k more tokens would pass the model length.
            if req_id in undrafted or not sampled_token_ids[row] or not self._fits(length):
                continue
            if depth == 0:
                if self.sends_ahead:
                    updates.append(self.sent.update(req_id, token_ids_cpu[row], length))
                    ahead.append(req_id)
                continue
            if self.context is not None:  # no token history: the context came with add_context
                if req_id not in self.context.lost:
                    drafted.append(req_id)
                    next_tokens.append(int(sampled_token_ids[row][-1]))
                continue
            updates.append(self.sent.update(req_id, token_ids_cpu[row], length))
            drafted.append(req_id)
        if self.context is not None:  # releases go with the context, when the job is sent
            return ProcessDrafterJob(list(req_ids), drafted, [], [], depth, next_tokens)
        return ProcessDrafterJob(list(req_ids), drafted, updates, self.sent.take_released(), depth, ahead=ahead)

    def _fits(self, length: int) -> bool:
        """A history of ``length`` tokens leaves room for k drafts within the model length."""
        return length + self.k <= self.max_model_len

    @property
    def sends_ahead(self) -> bool:
        """Whether histories go to the engine with no drafts asked, for it to draft ahead from (prompts,
        a depth-0 step's tokens): not for a DFlash draft (it drafts from the target's context), nor
        where the drafter does not draft ahead."""
        return self.client is not None and self.context is None and self.draft_ahead != "off"

    def send_prompts(self, prompts: dict[str, Sequence[int]]) -> None:
        """Prompts the target computes now (their last chunks): the draft engine prefills them and drafts
        ahead from them beside the target's forward (draft_ahead.py), so the first job that drafts for them
        finds them in their sessions. Nobody waits for the reply (the next job's read skips it); the
        releases go with it. Where ``sends_ahead``."""
        updates = [self.sent.update(req_id, tokens, len(tokens)) for req_id, tokens in prompts.items()
                   if self._fits(len(tokens))]
        if updates:  # a job of no rows, as a depth-0 step's (prepare), drafted ahead as deep as the engine's k
            self.send(ProcessDrafterJob([], [], updates, self.sent.take_released(), self.k,
                                        ahead=[u[0] for u in updates]))

    def send(self, job: ProcessDrafterJob, inline: bool = False) -> int | None:
        """Send ``job``; its id (None: nothing to send, or the drafter is gone). ``inline``: the target waits
        for it now (a step of plain SD), so the draft engine may answer with the drafts it made ahead alone."""
        message = job.message() if self.context is None else self._with_context(job)
        if inline and message is not None:
            message["inline"] = True
        job_id = None if message is None else self.client.send(message)
        if message is not None and "context" in message and not job.drafted:
            self._unread = job_id  # a job with drafts is awaited anyway
        return job_id

    def _with_context(self, job: ProcessDrafterJob) -> dict[str, Any] | None:
        """A DFlash drafter's job: the releases and every context row captured since the last job
        (in shared memory), then the drafts. Sent even without drafts where rows are waiting: a
        step's hidden states exist only in its step."""
        if self.context.entries:
            self._await_unread()  # the segment is about to be overwritten (its resyncs drop rows here)
        released, entries, rows = self.context.take()
        if not (job.drafted or released or entries):
            return None
        message = {**(job.message() or {"draft": [], "next": [], "k": job.depth, "updates": []}),
                   "release": released}
        if entries:
            where = self.writer.write(rows)
            if where is None:  # no room in shared memory: these requests' context would have a gap
                self.context.forget(e[0] for e in entries)
                logger.warning_once("minedraft: no room in shared memory for a DFlash job's context rows; "
                                    "their requests draft no more (enlarge /dev/shm).")
            else:
                message["context"] = {**where, "entries": entries}
        return message

    def _await_unread(self) -> None:
        """Wait (at most ``timeout_s``) for the last job that carried rows and was not awaited: a drafter
        one job behind would otherwise find them overwritten, and lose their requests' context."""
        if self._unread is not None:
            job_id, self._unread = self._unread, None
            reply = self.client.receive(job_id, self.timeout_s)
            if reply is not None:
                self.context.forget(reply["resync"])

    def receive(self, job: ProcessDrafterJob, job_id: int | None,
                sent_at: float | None = None) -> MineDraftDraftTokenIds:
        """``job``'s drafts, waited for at most ``timeout_s``; ``sent_at``: an inline job's send, timed."""
        if not job.drafted:  # nothing to wait for (a job that only releases: its reply is dropped as stale)
            return job.result(None)
        reply = self.client.receive(job_id, self.timeout_s)
        if self._unread is not None and job_id is not None and job_id > self._unread:
            self._unread = None  # replies come in order: that job's has gone by
        self.stats.observe(reply, sent_at)
        if reply is not None:
            (self.sent if self.context is None else self.context).forget(reply["resync"])
        # A late job's histories are still applied by the drafter (jobs are processed in
        # order), so the next job's updates start where this one's ended.
        return job.result(reply)

    def round_trip(self, job: ProcessDrafterJob) -> MineDraftDraftTokenIds:
        """Inline (a plain-SD step): send and wait; the round trip is timed."""
        sent_at = time.perf_counter()
        return self.receive(job, self.send(job, inline=True), sent_at)

    def release(self, req_ids: Iterable[str]) -> None:
        """Finished or preempted requests: dropped by the drafter with the next job."""
        (self.sent if self.context is None else self.context).release(req_ids)

    def propose(self, *args: Any, **kwargs: Any):
        raise RuntimeError("minedraft: the process drafter needs MineDraft's model runner "
                           "(--scheduler-cls minedraft), which sends its jobs with the requests' ids.")

    def shutdown(self) -> None:
        if self.client is not None:
            logger.info("MineDraft process drafter: %s", self.stats.summary())
            self.client.close()
        if self.writer is not None:
            self.writer.close()
