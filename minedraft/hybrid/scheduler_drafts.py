"""The second draft source where the scheduler plans a step: drafts from each request's own tokens.

A lookup source (suffix decoding: suffix_drafts.py; n-gram matching: ngram_drafts.py) needs a request's
tokens and nothing of the worker's, so it runs in the scheduler, which holds them (vLLM's
``Request.all_token_ids``): no worker or lane changes. Exact at TP 2 (tests/e2e/test_tensor_parallel.py),
beside the process drafter, served (tests/e2e/test_served.py: the draft engine is sent the tokens each request
gained since its last job, however many the target accepted), and at DP 2, each rank's scheduler choosing for
its own requests (test_served.py). Before a step is planned,
each decoding request gets a lookup draft; the policy chooses per request whose drafts the target verifies
(policy/draft_sources.py); the chosen ones are put where vLLM's scheduler reads drafts
(``Request.spec_token_ids``), which its step then schedules, verifies and accounts for as any drafts. The
model drafter drafts after the step for every request it ran (vLLM's runner drafts its whole batch), except
those whose drafts would go unused: requests that verified lookup drafts now, and prompts starting beside
them. Where that is every request the policy sets the step's depth to 0, which a drafter that catches up
skips; else the in-process drafter skips their rows (policy/policy.py ``_unused_model_drafts``,
worker/in_process/call_rows.py), and the process drafter's job leaves them out, as at depth 0."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from minedraft.config.hybrid import LookupLimits, SuffixLimits, lookup_limits
from minedraft.hybrid.draft import LookupDraft


class SchedulerLookupDrafts:
    def __init__(self, limits: LookupLimits, max_model_len: int) -> None:
        if isinstance(limits, SuffixLimits):
            from minedraft.hybrid.suffix_drafts import SuffixDrafts  # the `suffix` extra

            self.source = SuffixDrafts(limits, max_model_len)
        else:
            from minedraft.hybrid.ngram_drafts import NgramDrafts

            self.source = NgramDrafts(limits, max_model_len)
        self._drafts: dict[str, LookupDraft] = {}  # the step planned now: each request's draft
        self.max_depth = limits.max_depth

    def propose(self, requests: Iterable[Any]) -> dict[str, tuple[float, ...]]:
        """A draft for each of ``requests`` (vLLM ``Request``\\s that decode); per request with one, its
        tokens' survival estimates (``RequestView.lookup_probs``)."""
        self._drafts = {}
        for request in requests:
            # Skipped: a request whose grammar must accept its drafts (vLLM checks the model drafter's with its
            # structured-output manager), and one with outputs still in flight (async scheduling), whose
            # token table is behind its position.
            if request.use_structured_output or request.num_output_placeholders:
                continue
            draft = self.source.draft(request.request_id, request.all_token_ids, request.num_prompt_tokens)
            if draft.token_ids:
                self._drafts[request.request_id] = draft
        return {rid: draft.probs for rid, draft in self._drafts.items()}

    def apply(self, requests: Mapping[str, Any], chosen: Mapping[str, int]) -> None:
        """The plan's choice: each chosen request's drafts are its suffix draft's first ``chosen[rid]``."""
        for rid, n in chosen.items():
            requests[rid].spec_token_ids = list(self._drafts[rid].token_ids[:n])
        self._drafts = {}

    def release(self, req_id: str) -> None:
        """A request freed (finished or aborted): suffix decoding's tree of finished outputs takes its output."""
        self.source.release((req_id,))


def lookup_source(settings: Any, speculates: bool, max_model_len: int,
                  log: Callable[[str], None]) -> SchedulerLookupDrafts | None:
    """The scheduler's second source where the user names one (``settings.hybrid``), with one INFO line."""
    limits = lookup_limits(settings.hybrid)
    if limits is None or not speculates:
        return None
    if settings.mode == "stock":
        log("MineDraft hybrid: not in mode stock, which stays vLLM's speculative decoding: the model drafter "
            "alone drafts.")
        return None
    log(f"MineDraft hybrid: {limits.describe()}, up to {limits.max_depth} tokens, beside the model drafter; each "
        "request verifies, each step, the drafts with the higher predicted goodput (policy/draft_sources.py).")
    return SchedulerLookupDrafts(limits, max_model_len)
