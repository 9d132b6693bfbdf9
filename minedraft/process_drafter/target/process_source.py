"""The process drafter as a draft source: jobs sent to the draft engine process, drafts collected with a bound.

vLLM built :class:`~minedraft.process_drafter.target.proposer.ProcessDrafterProposer`
as this worker's drafter (the front end put it in the speculative config).
A job holds only the tokens each request gained since its last job, so a
deferred call costs nothing to hold until the next step: ``start`` sends it,
``collect`` waits for its reply at most ``drafter_timeout_s``. A fallback
step's call is sent and awaited at once. Rows the drafter left without
drafts (late or gone) come back as late requests, verified without drafts.

Under tensor parallelism the other ranks of the target use :class:`NoDraftSource`:
vLLM's executor takes drafts from rank 0 alone, and the drafts reach every rank
through the scheduler's next output.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from minedraft.contract import DraftSource, MineDraftDraftTokenIds, ProposeCall
from minedraft.process_drafter.target.proposer import ProcessDrafterJob, ProcessDrafterProposer


class ProcessDrafterSource(DraftSource):
    def __init__(self, proposer: ProcessDrafterProposer) -> None:
        super().__init__()
        self.proposer = proposer
        self._sent: tuple[ProcessDrafterJob, int | None] | None = None  # the running job and its id

    def _prepare(self, call: ProposeCall) -> ProcessDrafterJob:
        return self.proposer.prepare(call.req_ids, call.depth, *call.args, undrafted=call.undrafted,
                                     **call.kwargs)

    def draft_now(self, call: ProposeCall) -> list[list[int]]:
        # Prepared before the running job is joined, the order the runner has always had: a resync
        # asked for in that job's reply reaches the next job, not this one.
        job = self._prepare(call)
        self._keep_joined()  # one job in flight at a time
        drafts = self.proposer.round_trip(job)
        self._keep(drafts.without_drafts())  # its rows go back through vLLM's runner, its late ones here
        return drafts.draft_token_ids

    def _run(self, job: ProcessDrafterJob | None) -> None:
        if job is not None:
            self._sent = job, self.proposer.send(job)

    def _join(self) -> MineDraftDraftTokenIds | None:
        if self._sent is None:
            return None
        (job, job_id), self._sent = self._sent, None
        return self.proposer.receive(job, job_id)

    def _release(self, req_ids: Iterable[str]) -> None:
        self.proposer.release(req_ids)

    @property
    def context_layers(self) -> tuple[int, ...] | None:
        # Known once the draft engine is up (the proposer's load_model), before vLLM asks for its layers.
        return self.proposer.context_layers if self.proposer.takes_hidden_states else None

    @property
    def takes_prompts(self) -> bool:
        return self.proposer.sends_ahead

    def prompts(self, prompts: dict[str, Sequence[int]]) -> None:
        self.proposer.send_prompts(prompts)

    def add_context(self, entries: list, rows: list) -> None:
        self.proposer.add_context(entries, rows)

    def shutdown(self) -> None:
        self.proposer.shutdown()


@dataclass(frozen=True)
class NoDraftJob:
    req_ids: list[str]


class NoDraftSource(DraftSource):
    """A target rank other than 0 beside the process drafter: it drafts nothing (its drafts would
    never be read) and follows the runner's plan with empty jobs."""

    def _prepare(self, call: ProposeCall) -> NoDraftJob:
        return NoDraftJob(list(call.req_ids))

    def draft_now(self, call: ProposeCall) -> list[list[int]]:
        return [[] for _ in call.req_ids]  # vLLM's runner takes lists from a custom_class drafter

    def _run(self, job: NoDraftJob | None) -> None:
        pass

    def _join(self) -> MineDraftDraftTokenIds | None:
        return None
