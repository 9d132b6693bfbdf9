"""Draft sessions: each request's draft KV stays in the draft engine from one job to the next.

A job asks for k greedy draft tokens after each request's history. Sending
the history as a new request every job would prefill it again (prefix
caching helps only for whole KV blocks, and each new request pays vLLM's
admission and scheduling). Instead each target request is one resumable
request of the draft engine (vLLM's streaming-input session): a job sends
only what changed since the session's last job, from the last token both
agree on (``keep``), and the engine computes just those tokens before its k
decode steps. ``session_scheduler.py`` rolls the session back to ``keep``.

The engine is driven through its engine-core client (``add_request``,
``get_output``), in this process for one device and through vLLM's workers
for several. A job is bounded in engine steps; a session that does not
finish within the bound (no KV left in the draft engine) is aborted and its
request gets no drafts this time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from minedraft.log import get_logger
from minedraft.process_drafter.draft_engine.session_scheduler import KEEP_KEY

logger = get_logger(__name__)

SLACK_STEPS = 8  # engine steps a job may take beyond k and its prefill chunks


class DraftSessions:
    """The draft engine's sessions, keyed by the target's request ids."""

    def __init__(self, llm, k: int, spare_slots: int = 0) -> None:
        from vllm import SamplingParams

        self.k = k
        self.engine = llm.llm_engine
        self.core = self.engine.engine_core
        self.tasks = self.core.get_supported_tasks()
        scheduler_config = self.engine.vllm_config.scheduler_config
        # Idle sessions hold a request slot each; ``spare_slots`` stay free for other requests.
        self.max_sessions = scheduler_config.max_num_seqs - spare_slots
        self.step_tokens = scheduler_config.max_num_batched_tokens
        self.params = SamplingParams(temperature=0, max_tokens=k, ignore_eos=True, detokenize=False)
        # Per session: the tokens its KV holds after its last job (the history and all drafts but
        # the last), in the order of last use.
        self.computed: dict[str, list[int]] = {}
        self.aborted_by_bound = 0

    def draft(self, histories: Mapping[str, Sequence[int]], depth: int | None = None) -> dict[str, list[int]]:
        """``depth`` (default k) draft tokens after each history; requests that missed the step bound
        get none."""
        depth = self.k if depth is None else depth
        req_ids = list(histories)[: self.max_sessions]  # more than the engine holds: the rest get none
        if not req_ids or depth == 0:
            return {}
        self._make_room(req_ids)
        fed = sum(self._submit(req_id, histories[req_id], depth) for req_id in req_ids)
        drafts = self._drive(req_ids, max_steps=depth + SLACK_STEPS + -(-fed // self.step_tokens))
        for req_id, draft in drafts.items():
            self.computed.pop(req_id, None)  # re-inserted: the dict's order is the order of last use
            if draft:  # the session computed every sampled token but the last
                self.computed[req_id] = list(histories[req_id]) + draft[:-1]
            else:
                self.core.abort_requests([_session_id(req_id)])
        return drafts

    def release(self, req_ids: Iterable[str]) -> None:
        """End these sessions and free their KV."""
        ended = [req_id for req_id in req_ids if self.computed.pop(req_id, None) is not None]
        if ended:
            self.core.abort_requests([_session_id(r) for r in ended])

    # ------------------------------------------------------------------ internals
    def _submit(self, req_id: str, history: Sequence[int], depth: int) -> int:
        """Send the session the part of ``history`` it does not hold; how many tokens that is."""
        from vllm.inputs.engine import tokens_input

        held = self.computed.get(req_id)
        keep = None if held is None else min(_common_prefix(held, history), len(history) - 1)
        params = self.params
        if keep is not None or depth != self.k:
            params = self.params.clone()
            params.max_tokens = depth
            if keep is not None:
                params.extra_args = {KEEP_KEY: keep}
        tokens = [int(t) for t in history[keep or 0:]]
        request = self.engine.input_processor.process_inputs(
            request_id=_session_id(req_id), prompt=tokens_input(tokens), params=params,
            supported_tasks=self.tasks, resumable=True)
        self.core.add_request(request)
        return len(tokens)

    def _drive(self, req_ids: list[str], max_steps: int) -> dict[str, list[int]]:
        tokens: dict[str, list[int]] = {_session_id(r): [] for r in req_ids}
        pending = set(tokens)
        for _ in range(max_steps):
            if not pending:
                break
            for output in self.core.get_output().outputs:
                if output.request_id in pending:
                    tokens[output.request_id].extend(output.new_token_ids)
                    if output.finish_reason is not None:
                        pending.discard(output.request_id)
        if pending:
            self._abort_unfinished(pending)
        return {r: tokens[_session_id(r)] for r in req_ids if _session_id(r) not in pending}

    def _abort_unfinished(self, session_ids: set[str]) -> None:
        if not self.aborted_by_bound:
            logger.warning("minedraft draft engine: %d sessions did not finish within the job's step bound "
                           "(draft KV cache full?); they are restarted at their next job", len(session_ids))
        self.aborted_by_bound += len(session_ids)
        self.core.abort_requests(sorted(session_ids))
        for session_id in session_ids:
            self.computed.pop(session_id.removeprefix(SESSION_PREFIX), None)

    def _make_room(self, job_req_ids: Iterable[str]) -> None:
        """Idle sessions hold a request slot of the draft engine: end the least recently used
        ones the job's requests need (the target releases finished ones, so this is rare)."""
        job_req_ids = set(job_req_ids)
        excess = len(self.computed.keys() | job_req_ids) - self.max_sessions
        if excess > 0:
            self.release([r for r in self.computed if r not in job_req_ids][:excess])


SESSION_PREFIX = "minedraft-session-"


def _session_id(req_id: str) -> str:
    """The draft engine's id of a target request: prefixed so no other request can take it."""
    return SESSION_PREFIX + req_id


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (slice comparisons run in C: histories are long)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    agree, differ = 0, n  # a[:agree] == b[:agree], a[:differ] != b[:differ]
    while differ - agree > 1:
        mid = (agree + differ) // 2
        if a[:mid] == b[:mid]:
            agree = mid
        else:
            differ = mid
    return agree
