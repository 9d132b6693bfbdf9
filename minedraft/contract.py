"""What crosses from MineDraft's scheduler to its worker and from the worker to a draft source.

* The scheduler's output (:class:`MineDraftSchedulerOutput`): vLLM's plus the lane plan.
* The worker's drafts (:class:`MineDraftDraftTokenIds`): vLLM's plus the requests left without them.
* One ``drafter.propose`` call of vLLM's runner (:class:`ProposeCall`), and the interface every draft
  source implements (:class:`DraftSource`).

At the bottom of the package's layers: it imports vLLM's types only.

Where drafts come from is a draft source, chosen once when the runner is built; two, behind the
same methods:

* :class:`~minedraft.worker.in_process.in_process_source.InProcessDraftSource`: vLLM's
  proposer in this worker. A deferred call is captured with copies of its
  inputs and replayed next step on an execution lane (thread, CUDA stream or
  inline, ``worker/in_process/lanes.py``).
* :class:`~minedraft.process_drafter.target.process_source.ProcessDrafterSource`: the draft
  model as its own engine in a process of its own (minedraft/process_drafter/).
  A job is sent to that process and its reply collected with a bound.

The runner (``worker/runner_mixin.py``) uses only the public methods, in this order within a
step: ``begin_step`` (requests that finished or were preempted; a call held last step that the
engine core took no drafts of, because a request arrived while its step ran; drafts a step without
``take_draft_token_ids`` left stale), ``add_context`` where the source takes the target's hidden
states (``context_layers``), ``start`` (the job deferred last step, beside the target), then, from
the ``propose`` call vLLM's runner makes, one of ``defer`` (a parallel step: next step's job),
``hold`` (a fallback step that drafts after its outputs) or ``draft_now`` (a fallback step), and
``collect`` (the running job's drafts and a held call's, with the late requests: one typed result).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import DraftTokenIds


@dataclass
class MineDraftSchedulerOutput(SchedulerOutput):
    # Requests verified in the previous step whose drafting was deferred to
    # this step, still running now: the draft lane proposes for them while the
    # target verifies this step's batch. Never overlaps num_scheduled_tokens'
    # decode requests.
    draft_only_req_ids: list[str] = field(default_factory=list)
    # Whether the worker defers drafting for this step's batch to the next
    # step (a parallel step) instead of drafting inline (a fallback step).
    defer_drafts: bool = False
    # A fallback step that computes prompt tokens (first tokens, prefill chunks): the worker
    # drafts for its batch after the engine core has queued the step's outputs (in
    # take_draft_token_ids) instead of inside sampling, so a first token never waits for
    # its request's draft work. The drafts still reach the scheduler before the next step.
    drafts_after_output: bool = False
    # Requests of this step's batch whose model drafts would go unused next step (the second source drafts
    # them, hybrid/): the in-process drafter skips their rows and catches them up when next drafted.
    undrafted_req_ids: frozenset[str] = frozenset()

    @classmethod
    def extend(
        cls,
        base: SchedulerOutput,
        draft_only_req_ids: list[str],
        defer_drafts: bool,
        drafts_after_output: bool = False,
        undrafted_req_ids: frozenset[str] = frozenset(),
    ) -> MineDraftSchedulerOutput:
        # vLLM's fields as they are (a shallow copy, as building the dataclass from them would be, at a
        # fraction of its cost: this runs every step), then the plan.
        extended = cls.__new__(cls)
        extended.__dict__.update(base.__dict__)
        extended.draft_only_req_ids = draft_only_req_ids
        extended.defer_drafts = defer_drafts
        extended.drafts_after_output = drafts_after_output
        extended.undrafted_req_ids = undrafted_req_ids
        return extended


@dataclass
class MineDraftDraftTokenIds(DraftTokenIds):
    """The worker's drafts and the requests left without them: what a draft source returns
    (minedraft/contract.py) and the scheduler counts."""

    # Requests the draft source owed drafts that came back without them (a
    # process drafter late beyond its bound, or gone): they are verified
    # without drafts, which stays exact. [num_late]
    late_req_ids: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, drafts: DraftTokenIds) -> MineDraftDraftTokenIds:
        """``drafts`` as MineDraft's: vLLM's own (its runner's inline drafts, its tests') have none late."""
        if isinstance(drafts, cls):
            return drafts
        return cls(drafts.req_ids, drafts.draft_token_ids)

    def without_drafts(self) -> MineDraftDraftTokenIds:
        """Only the late requests (drafts dropped as stale: their requests still went without)."""
        return MineDraftDraftTokenIds([], [], list(self.late_req_ids))


def merge_drafts(first: DraftTokenIds | None, then: DraftTokenIds | None) -> MineDraftDraftTokenIds | None:
    """``first``'s rows, then ``then``'s, and the late requests of both (None: neither has any)."""
    parts = [MineDraftDraftTokenIds.of(d) for d in (first, then) if d is not None]
    if len(parts) < 2:
        return parts[0] if parts else None
    a, b = parts
    return MineDraftDraftTokenIds(a.req_ids + b.req_ids, a.draft_token_ids + b.draft_token_ids,
                                  a.late_req_ids + b.late_req_ids)


@dataclass(frozen=True)
class ProposeCall:
    """One ``drafter.propose`` call of vLLM's runner, with the batch's request ids, which vLLM's
    proposer interface does not pass."""

    req_ids: list[str]  # [num_reqs], the batch's rows
    args: tuple
    kwargs: dict[str, Any]
    # The step's speculation depth (vLLM's num_spec_tokens_to_schedule), which vLLM passes to its
    # model and ngram drafters but not to a custom_class one such as the process drafter.
    depth: int
    # Rows whose drafts the step does not want (MineDraftSchedulerOutput.undrafted_req_ids): a source that
    # drafts a request later from every token it gained may skip them (config/idle_drafter.py's skips_rows).
    undrafted: frozenset[str] = frozenset()


class Job(Protocol):
    """A prepared job: it drafts for ``req_ids`` (the batch's rows when it was prepared)."""

    req_ids: list[str]


class DraftLaneError(RuntimeError):
    """A draft job failed; the engine stops with this error."""


class LanePlanError(RuntimeError):
    """The worker got a step the scheduler did not plan for MineDraft."""


class DraftSource(ABC):
    """Drafts for the runner: one job running at a time, joined before the next call drafts.

    A source implements ``_prepare`` (a call as a job), ``_run`` (start a job, never waiting for
    it), ``_join`` (wait for it) and ``draft_now``; the rest has defaults."""

    def __init__(self) -> None:
        # Joined before collect was called (by draft_now, which waits for the running job): kept for collect.
        self._kept: MineDraftDraftTokenIds | None = None
        self._deferred: Job | None = None  # deferred this step, started by the next step's start
        self._held: object | None = None  # held this step (_hold's), drafted by collect

    # -------------------------------------------------------------- the runner's verbs
    def begin_step(self, done_req_ids: Iterable[str]) -> None:
        """A step begins: a call held in the last step is skipped (the engine core took no drafts
        after it), ``done_req_ids`` (finished or preempted) are released, and the drafts of a job whose
        step had no ``take_draft_token_ids`` (an empty step) are joined and dropped. Their late
        requests are kept for the next collect: those still went without drafts."""
        held, self._held = self._held, None
        if held is not None:
            self._skip_held(held)
        self._release(done_req_ids)
        self._keep_joined()
        if self._kept is not None:
            self._kept = self._kept.without_drafts()

    def defer(self, call: ProposeCall) -> None:
        """A parallel step's call: the job that drafts for ``call.req_ids`` in the next step."""
        self._deferred = self._prepare(call)

    def hold(self, call: ProposeCall) -> None:
        """A fallback step's call, drafted by ``collect`` after the step's outputs were queued."""
        self._held = self._hold(call)

    @abstractmethod
    def draft_now(self, call: ProposeCall) -> Any:
        """A call drafted now (a fallback step), after the running job: what vLLM's runner gets from propose."""

    def start(self, planned_req_ids: list[str]) -> None:
        """Start the job deferred in the last step beside the target; it must draft for every request
        the scheduler planned drafts for in this step (``draft_only_req_ids``)."""
        job, self._deferred = self._deferred, None
        missing = set(planned_req_ids) - set(job.req_ids if job is not None else ())
        if missing:
            raise LanePlanError(
                f"minedraft: the scheduler planned drafts for {sorted(missing)} in this step, but the "
                "deferred draft job does not cover them (scheduler and worker disagree on the lane plan)."
            )
        self._run(job)

    def collect(self) -> MineDraftDraftTokenIds | None:
        """Join the running job, then draft a call held in this step: their drafts, with all late
        requests since the last collect."""
        self._keep_joined()
        held, self._held = self._held, None
        if held is not None:
            self._keep(self._draft_held(held))
        kept, self._kept = self._kept, None
        return kept

    @property
    def context_layers(self) -> tuple[int, ...] | None:
        """The target layers whose hidden states this source takes from every step, whatever its depth
        or plan (``add_context``): a DFlash draft in the process drafter, whose hidden states exist only
        in the step that computed them. None: it takes none (vLLM's own drafter reads what it needs from
        the propose call)."""
        return None

    @property
    def takes_prompts(self) -> bool:
        """Whether ``prompts`` is wanted: the runner then finds each step's prompts (a drafter in a
        process of its own prefills them beside the target's forward)."""
        return False

    def prompts(self, prompts: dict[str, Sequence[int]]) -> None:
        """The prompts whose last chunks the step computes, before the target's forward: per request,
        its prompt's tokens (``takes_prompts``)."""

    def add_context(self, entries: list, rows: list) -> None:
        """A step's context (process_drafter/target/step_context.py: per request its entry and hidden-state rows), where
        ``context_layers`` is not None."""
        raise NotImplementedError(f"{type(self).__name__} takes no step context")

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        pass

    # -------------------------------------------------------------- what a source implements
    @abstractmethod
    def _prepare(self, call: ProposeCall) -> Job:
        """``call`` as a job, run by ``_run``."""

    @abstractmethod
    def _run(self, job: Job | None) -> None:
        """Start ``job`` (None: none this step) beside the target; never waits for it."""

    @abstractmethod
    def _join(self) -> MineDraftDraftTokenIds | None:
        """Wait for the job ``_run`` started: its drafts and late requests (None: no job running)."""

    def _release(self, req_ids: Iterable[str]) -> None:  # noqa: B027 - optional hook
        """Requests that finished or were preempted."""

    def _hold(self, call: ProposeCall) -> object:
        """What ``hold`` keeps of ``call``: by default its job."""
        return self._prepare(call)

    def _draft_held(self, held: object) -> MineDraftDraftTokenIds | None:
        """A held call's drafts, made now that the step's outputs have been queued."""
        self._run(held)
        return self._joined()

    def _skip_held(self, held: object) -> None:
        """A held call whose drafts the engine core did not take: none are made. A source whose drafter
        keeps state catches it up when it next drafts; by default the call is only dropped (its drafter
        may draft worse for those tokens, never a wrong token)."""

    def _joined(self) -> MineDraftDraftTokenIds | None:
        try:
            return self._join()
        except Exception as e:
            raise DraftLaneError(f"minedraft draft lane failed: {e!r}") from e

    def _keep_joined(self) -> None:
        self._keep(self._joined())

    def _keep(self, drafts: MineDraftDraftTokenIds | None) -> None:
        self._kept = merge_drafts(self._kept, drafts)
