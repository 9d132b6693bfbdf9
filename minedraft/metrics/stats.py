"""MineDraft's per-interval scheduler statistics (engine core -> front end)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

# Key under which the stats ride in SchedulerStats (see patch_metrics.py).
PAYLOAD_KEY = "minedraft"


@dataclass
class MineDraftStats:
    """Counts since the last ``make_stats``; plain ints so they serialize as-is."""

    parallel_steps: int = 0  # steps whose drafting was deferred to the lane
    fallback_steps: int = 0  # steps that drafted inline (plain SD)
    verified_requests: int = 0  # sum over steps of requests verified
    draft_only_requests: int = 0  # sum over steps of requests on the draft lane
    verify_group_size: int = 0  # last step's verify group
    draft_group_size: int = 0  # last step's draft-only group
    parallel_mode_allowed: int = 0  # 1 if the mode policy allowed parallel steps last step
    probe_steps: int = 0  # steps auto allowed parallel mode only to measure it
    late_drafts: int = 0  # requests whose drafts the process drafter did not deliver in time

    def observe_step(
        self, num_verified: int, num_draft_only: int, parallel: bool, allowed: bool,
        probing: bool = False,
    ) -> None:
        self.probe_steps += int(probing)
        if parallel:
            self.parallel_steps += 1
        else:
            self.fallback_steps += 1
        self.verified_requests += num_verified
        self.draft_only_requests += num_draft_only
        self.verify_group_size = num_verified
        self.draft_group_size = num_draft_only
        self.parallel_mode_allowed = int(allowed)

    def to_payload(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, int]) -> MineDraftStats:
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in payload.items() if k in names})

    @property
    def empty(self) -> bool:
        return self.parallel_steps == 0 and self.fallback_steps == 0
