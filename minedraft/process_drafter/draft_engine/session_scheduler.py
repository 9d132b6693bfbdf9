"""The draft engine's scheduler: vLLM's, with streaming-input sessions that can roll back.

Each target request is one resumable request in the draft engine (vLLM's
streaming-input session, see sessions.py), so its draft KV stays between
jobs. When a session stops after k draft tokens, vLLM keeps the computed
ones (the first k - 1 drafts) as part of its prompt and appends the next
input chunk after them. The target accepts only some drafts, so the next
chunk must start earlier: the chunk's sampling parameters carry
``extra_args[KEEP_KEY]``, how many of the session's tokens are still the
request's history, and this scheduler truncates the session to them before
vLLM's own update appends the chunk. The KV of the dropped positions is
simply overwritten, which is why the draft engine runs without prefix
caching: a block cached under its old tokens must not be rewritten.

``patches/0008-streaming-session-rollback.patch`` proposes the same rollback
upstream as a field of the streaming update; it would retire this class.
"""

from __future__ import annotations

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, StreamingUpdate

KEEP_KEY = "minedraft_keep"


class DraftSessionScheduler(Scheduler):
    def _update_request_as_session(self, session: Request, update: StreamingUpdate) -> None:
        keep = _keep(update)
        if keep is not None:
            _truncate(session, keep)
        super()._update_request_as_session(session, update)  # also drops the block hashes past keep


def _keep(update: StreamingUpdate) -> int | None:
    params = update.sampling_params
    return (params.extra_args or {}).get(KEEP_KEY) if params is not None else None


def _truncate(session: Request, keep: int) -> None:
    """Make ``session`` hold only its first ``keep`` tokens, all of them computed."""
    if keep > session.num_computed_tokens:
        # vLLM's update drops tokens past num_computed_tokens, so the chunk would not
        # continue this history. The drafter's bookkeeping guarantees it never happens;
        # failing here ends the draft engine, and the target goes on without drafts.
        raise RuntimeError(f"minedraft draft session {session.request_id}: keep {keep} > computed "
                           f"{session.num_computed_tokens}")
    del session._all_token_ids[keep:]
    if keep < session.num_prompt_tokens:
        del session.prompt_token_ids[keep:]
        session.num_prompt_tokens = keep
    session.num_computed_tokens = keep
