"""What ``auto`` knows before it measures: where the lanes run, and what the cost model predicts.

A *placement* says which hardware the draft lane shares with the target:

* ``cpu-threads``: the thread lane, on the target's CPU cores (shared);
* ``gpu-stream``: a side CUDA stream, on the target's GPU (shared);
* ``inline``: ``MINEDRAFT_LANE=serial``, deferred drafts run inline: nothing
  overlaps, so a parallel step verifies half the batch for the same
  per-step cost and can never beat plain SD at equal concurrency;
* ``dedicated``: the drafter has hardware of its own (no prior: measure).

The prior of a shared placement is the cost model's predicted gain
(``minedraft.cost_model.model.choose_mode``: MineDraft / stock SD tokens/s at equal
concurrency) on a profile calibrated for that placement: the committed CPU
step profile for the thread lane (``minedraft/cost_model/calibration/``, measured on
this project's CPU machines), the published-figure H100 one-GPU profile for
the CUDA stream, whose same-GPU interference (0.97, eager) was measured on an
H100 with torch alone (no step profile inside vLLM on a GPU yet). On the CPU
profile the prediction stays below 1 up to 128 running requests at every k,
on the H100 one up to 256: the policy then rations its probes.
"""

from __future__ import annotations

import dataclasses
import functools

from minedraft.config.modes import PLACEMENTS
from minedraft.scheduling.mode_policy import Load, Prior


def placement(device_type: str, lane: str, drafter: str = "in-process") -> str:
    """The placement of MineDraft's draft lane for a device type, ``MINEDRAFT_LANE`` and
    ``MINEDRAFT_DRAFTER`` (a process drafter has hardware of its own)."""
    if drafter == "process":
        return "dedicated"
    if lane == "serial":
        return "inline"
    return "gpu-stream" if device_type == "cuda" else "cpu-threads"


def make_prior(where: str) -> Prior | None:
    """The predicted gain of parallel mode at a load, or None (no prior) for ``dedicated``."""
    if where not in PLACEMENTS:
        raise ValueError(f"unknown placement {where!r}: expected one of {', '.join(PLACEMENTS)}")
    if where == "dedicated":
        return None

    def prior(load: Load) -> float:
        from minedraft.cost_model.model import choose_mode

        running = max(load.decodes, 2)
        return choose_mode(_profile(where, load.k), running, load.k).gain

    return prior


@functools.lru_cache(maxsize=None)
def _profile(where: str, k: int):
    from minedraft.cost_model.calibrate import profile_by_name

    if where == "gpu-stream":
        return profile_by_name("h100-same-gpu", k)
    profile = profile_by_name("cpu", k)
    if where == "inline":  # the lanes take turns: an overlapped step costs the sum
        profile = dataclasses.replace(profile, interference=1.0)
    return profile
