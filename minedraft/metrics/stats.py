"""MineDraft's per-interval scheduler statistics (engine core -> front end), and how they travel.

They ride in ``SchedulerStats.extra[PAYLOAD_KEY]``: a field that vLLM 0.32.0
lacks and the ``metrics`` patch adds in every vLLM process (the engine core ->
front end serialisation decodes ``SchedulerStats`` as that exact class, so a
subclass's field would be dropped); patches/0003-scheduler-stats-extra.patch
proposes it upstream. :func:`attach` and :func:`detach` are the one place that
knows the carrier; the front end takes the key out before any vLLM logger
sees the stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

EXTRA_FIELD = "extra"
PAYLOAD_KEY = "minedraft"


def attach(scheduler_stats: Any, payload: dict[str, int]) -> None:
    """Put MineDraft's ``payload`` on vLLM's ``SchedulerStats`` (engine core)."""
    # A new dict: the field's default (None, as the patch adds it) or vLLM's own dict is never mutated.
    extra = getattr(scheduler_stats, EXTRA_FIELD, None) or {}
    setattr(scheduler_stats, EXTRA_FIELD, {**extra, PAYLOAD_KEY: payload})


def detach(scheduler_stats: Any) -> dict[str, int] | None:
    """Take MineDraft's payload off ``SchedulerStats`` (front end); None if there is none."""
    extra = getattr(scheduler_stats, EXTRA_FIELD, None)
    if not extra or PAYLOAD_KEY not in extra:
        return None
    return extra.pop(PAYLOAD_KEY)


@dataclass
class MineDraftStats:
    """Counts since the last ``make_stats``; ints (and one dict of ints) so they serialize as-is."""

    parallel_steps: int = 0  # steps whose drafting was deferred to the lane
    fallback_steps: int = 0  # steps that drafted inline (plain SD)
    verified_requests: int = 0  # sum over steps of requests verified
    draft_only_requests: int = 0  # sum over steps of requests on the draft lane
    verify_group_size: int = 0  # last step's verify group
    draft_group_size: int = 0  # last step's draft-only group
    parallel_mode_allowed: int = 0  # 1 if the mode policy allowed parallel steps last step
    parallel_trial_steps: int = 0  # steps auto allowed parallel mode only to measure it (policy/overlap.py)
    late_drafts: int = 0  # requests whose drafts the process drafter did not deliver in time
    arrival_skips: int = 0  # held drafting rounds skipped because a request arrived (first token)
    depth_rechecks: int = 0  # re-checks of acceptance begun (at depth 0, or one depth deeper: policy/depth.py)
    drafts_cut: int = 0  # drafts not verified: past their request's limit (policy/request_limits.py)
    drafts_trimmed: int = 0  # drafts not verified: their acceptance did not pay (policy/paying_drafts.py)
    requests_trimmed: int = 0  # sum over steps of the requests verified with some of their drafts trimmed
    first_measurements: int = 0  # new requests measured first (policy/first_measurement.py)
    past_spec_max_len: int = 0  # requests that passed the speculative max_model_len (no drafts verified since)
    lookup_requests: int = 0  # sum over steps of requests verified with the second source's drafts (hybrid)
    lookup_drafts: int = 0  # of the second source's drafts, those verified
    lookup_accepted: int = 0  # of them, those accepted
    lookup_first_accepted: int = 0  # of the lookup requests, those whose first draft was accepted
    lookup_only_steps: int = 0  # decoding requests all verified the second source's drafts: no model drafting
    undrafted_requests: int = 0  # sum over steps of requests the model drafter skipped while drafting others
    speculation_depth: int = 0  # the depth the last step drafted at (its drafts are verified next)
    steps_by_depth: dict[str, int] = field(default_factory=dict)  # str(depth) -> steps
    # str(drafts) -> requests: the drafts each request with drafts had verified, after the cuts
    requests_by_drafts: dict[str, int] = field(default_factory=dict)

    def observe_step(
        self, num_verified: int, num_draft_only: int, parallel: bool, allowed: bool,
        trial: bool = False, depth: int = 0,
    ) -> None:
        self.parallel_trial_steps += int(trial)
        self.speculation_depth = depth
        self.steps_by_depth[str(depth)] = self.steps_by_depth.get(str(depth), 0) + 1
        if parallel:
            self.parallel_steps += 1
        else:
            self.fallback_steps += 1
        self.verified_requests += num_verified
        self.draft_only_requests += num_draft_only
        self.verify_group_size = num_verified
        self.draft_group_size = num_draft_only
        self.parallel_mode_allowed = int(allowed)

    def observe_plan(self, counts: Any) -> None:
        """What a step's plan did (``minedraft.policy.PlanCounts``)."""
        self.drafts_cut += counts.drafts_cut
        self.past_spec_max_len += counts.past_spec_max_len
        self.drafts_trimmed += counts.drafts_trimmed
        self.requests_trimmed += counts.requests_trimmed
        self.depth_rechecks += counts.rechecks
        self.first_measurements += counts.first_measurements
        self.lookup_only_steps += counts.lookup_only
        self.undrafted_requests += counts.undrafted
        for kept, requests in counts.requests_by_drafts.items():
            self.requests_by_drafts[str(kept)] = self.requests_by_drafts.get(str(kept), 0) + requests

    def to_payload(self) -> dict[str, int]:
        # Every step, in the engine core: ``asdict``'s deep copy cost as much as the rest of make_stats.
        payload = {name: getattr(self, name) for name in _FIELD_NAMES}
        payload["steps_by_depth"] = dict(self.steps_by_depth)
        payload["requests_by_drafts"] = dict(self.requests_by_drafts)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, int]) -> MineDraftStats:
        return cls(**{k: {str(d): int(n) for d, n in v.items()} if isinstance(v, dict) else int(v)
                      for k, v in payload.items() if k in _FIELD_NAMES})

    def observe_lookup(self, verified: Any, lookup_req_ids: Any) -> None:
        """A step's verified drafts (``minedraft.policy.VerifiedDrafts``): those of the second source's."""
        for v in verified:
            if v.req_id in lookup_req_ids:
                self.lookup_requests += 1
                self.lookup_drafts += v.drafts
                self.lookup_accepted += v.accepted
                self.lookup_first_accepted += int(v.accepted > 0)

    @property
    def empty(self) -> bool:
        return self.parallel_steps == 0 and self.fallback_steps == 0


_FIELD_NAMES = tuple(f.name for f in fields(MineDraftStats))
