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
    """Intra-op threads of the CPU draft lane: 1 unless set; 0 keeps torch's default.

    The count is per thread (OpenMP): the main lane, and so the target's
    arithmetic, keeps all cores. One thread is the default because a lane
    thread with its own multi-threaded OpenMP team left the main lane's
    fallback steps 2.5x slower after the lane had run (measured here: one
    request, 128 tokens, 2,008 ms against 853 ms with one lane thread and
    646 ms drafting serially), and parallel steps were no faster with it.
    """
    value = os.environ.get("MINEDRAFT_LANE_THREADS")
    if not value:
        return 1
    threads = int(value)
    return threads if threads > 0 else None


def step_profile_path() -> str | None:
    """Measurements: append per-step lane timings to this JSON-lines file."""
    return os.environ.get("MINEDRAFT_STEP_PROFILE") or None
