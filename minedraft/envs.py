"""Every MINEDRAFT_* environment variable, read lazily."""

import os


def kit_dir() -> str:
    """Where the model kit is cached."""
    return os.environ.get(
        "MINEDRAFT_KIT_DIR", os.path.expanduser("~/.cache/minedraft/kit-v1")
    )


def lane_mode() -> str:
    """Execution of the draft lane: ``auto`` (overlap when it pays), ``overlap``
    (always overlap in parallel steps) or ``serial`` (run the lane inline; for
    debugging and measurement)."""
    return os.environ.get("MINEDRAFT_LANE", "overlap")


def fault_injection() -> str | None:
    """Test hook: ``draft_lane`` makes the next draft-lane job raise."""
    return os.environ.get("MINEDRAFT_INJECT_FAULT") or None
