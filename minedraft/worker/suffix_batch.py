"""The suffix drafter's view of a step's batch, for a call that may run a step later.

vLLM's ``SuffixDecodingProposer.propose`` reads the runner's persistent
``InputBatch`` itself (request ids, the token table, prompt lengths), then
stops tracking every request the batch lacks. Two things break under
MineDraft's groups:

* a deferred call would read the batch of the step it runs in, not of the
  step it was made in (the batch object is reused);
* in a parallel step the batch holds one group: the other group's requests are
  still running, but the proposer would stop them, and each request's suffix
  tree would be rebuilt from its prompt at every verification, keeping only
  its last sampled tokens (exact, since verification decides, but with far
  fewer drafts accepted).

So every suffix call gets a :class:`SuffixBatchView`: the step's rows, copied
when the call is captured like any other argument (``draft_job.snapshot``),
and an index that also names the runner's other live requests, so the
proposer stops only requests the runner has let go (finished ones). Each
request's sampled tokens still reach its tree once and in order: a request's
call is made once per verification.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# In req_id_to_index: a live request that is not in this step's batch (never looked up by row).
NOT_IN_BATCH = -1


@dataclass
class SuffixBatchView:
    """What ``SuffixDecodingProposer.propose`` reads from an ``InputBatch``, for the batch's rows."""

    req_ids: list[str]
    req_id_to_index: dict[str, int]
    num_tokens_no_spec: np.ndarray
    num_prompt_tokens: np.ndarray
    token_ids_cpu: np.ndarray  # [rows, the longest row's num_tokens_no_spec]

    @classmethod
    def of(cls, input_batch: Any, live_req_ids: Any) -> SuffixBatchView:
        """Views of ``input_batch``'s rows (no copy: a captured call copies them);
        ``live_req_ids``: every request the runner still holds."""
        rows = input_batch.num_reqs
        req_ids = list(input_batch.req_ids[:rows])
        num_tokens = input_batch.num_tokens_no_spec[:rows]
        width = int(num_tokens.max()) if rows else 0
        index = dict.fromkeys(live_req_ids, NOT_IN_BATCH)
        index.update((req_id, row) for row, req_id in enumerate(req_ids))
        return cls(req_ids, index, num_tokens, input_batch.num_prompt_tokens[:rows],
                   input_batch.token_ids_cpu[:rows, :width])


def with_batch_view(args: tuple, kwargs: dict, input_batch: Any, live_req_ids: Any) -> tuple[tuple, dict]:
    """A suffix ``propose`` call's arguments with ``input_batch`` replaced by its view."""
    view = SuffixBatchView.of(input_batch, live_req_ids)
    return (tuple(view if arg is input_batch else arg for arg in args),
            {key: view if value is input_batch else value for key, value in kwargs.items()})
