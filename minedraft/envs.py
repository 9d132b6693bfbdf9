"""Every MINEDRAFT_* environment variable, read lazily."""

import os


def kit_dir() -> str:
    """Where the model kit is cached."""
    return os.environ.get(
        "MINEDRAFT_KIT_DIR", os.path.expanduser("~/.cache/minedraft/kit-v1")
    )


def lane_mode() -> str:
    """Where deferred drafts run: ``overlap`` (default: a second thread on CPU,
    a second CUDA stream on GPU) or ``serial`` (inline at the start of the next
    step; for debugging and measurements)."""
    return os.environ.get("MINEDRAFT_LANE", "overlap")


def mode() -> str:
    """Whether steps may run in parallel: ``auto`` (default: measure both
    modes and keep the faster, see core/mode_policy.py), ``parallel`` (always
    when the groups allow it) or ``stock`` (plain speculative decoding)."""
    return os.environ.get("MINEDRAFT_MODE", "auto")


def fault_injection() -> str | None:
    """Test hook: ``draft_lane`` makes the next draft-lane job raise;
    ``draft_lane_stall`` makes every draft-lane job touch
    ``MINEDRAFT_FAULT_MARKER`` and then take ``MINEDRAFT_FAULT_STALL_S``
    seconds (default 5) before drafting."""
    return os.environ.get("MINEDRAFT_INJECT_FAULT") or None


def fault_marker() -> str | None:
    return os.environ.get("MINEDRAFT_FAULT_MARKER") or None


def fault_stall_s() -> float:
    return float(os.environ.get("MINEDRAFT_FAULT_STALL_S", "5"))


def lane_threads() -> int | None:
    """Intra-op threads of the CPU draft lane; unset keeps torch's default.

    Setting it changes a process-wide BLAS setting on some builds, which can
    change the target's arithmetic; leave it unset where exactness matters.
    """
    value = os.environ.get("MINEDRAFT_LANE_THREADS")
    return int(value) if value else None


def step_profile_path() -> str | None:
    """Measurements: append per-step lane timings to this JSON-lines file."""
    return os.environ.get("MINEDRAFT_STEP_PROFILE") or None
