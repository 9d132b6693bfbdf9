"""How the running decode requests are split into a verify group and a draft group.

Pure functions, no vLLM or torch: the scheduler feeds them request ids.

Every decode request is in one of three states at the start of a step:

* drafting: verified last step with its drafting deferred; the draft lane
  proposes for it during this step, so it must sit this step out;
* due: sat out last step; it has fresh drafts and must be verified now (this
  is what bounds the gap between two verifications of a request to two steps);
* free: verified last step and drafted inline (a fallback step), or just
  finished its prefill in one; it may be verified now or held for one step.

The scheduler holds some free requests so that the group verified now and the
group verified next step (drafting + held) have about the same size.
"""

from __future__ import annotations

from collections.abc import Sequence


def balance_tolerance(total: int) -> int:
    """Largest size difference between the two groups still worth overlapping."""
    return max(1, total // 4)


def is_balanced(num_verify: int, num_next: int) -> bool:
    """Whether a step that verifies ``num_verify`` requests should defer their
    drafts so the draft lane overlaps them with verifying ``num_next`` next step."""
    if num_verify == 0 or num_next == 0:
        return False
    return abs(num_verify - num_next) <= balance_tolerance(num_verify + num_next)


def choose_held(
    drafting: Sequence[str], due: Sequence[str], free: Sequence[str]
) -> list[str]:
    """Free requests to hold this step so both groups end up balanced.

    Returns an empty list when no choice makes a balanced split (the step then
    runs as plain speculative decoding for the requests it verifies).
    """
    total = len(drafting) + len(due) + len(free)
    if total < 2:
        return []
    # Verify due + (free - held); next step verifies drafting + held.
    num_held = (len(due) + len(free) - len(drafting) + 1) // 2
    num_held = min(max(num_held, 0), len(free))
    num_verify = len(due) + len(free) - num_held
    if not is_balanced(num_verify, len(drafting) + num_held):
        return []
    return list(free[len(free) - num_held :])
