"""MINEDRAFT_* variables that are not engine settings: the model kit's cache and test hooks.

The engine's settings (``MINEDRAFT_MODE``, ``MINEDRAFT_LANE``, ...) are parsed
once in the front end: see settings.py.
"""

import os


def kit_dir() -> str:
    """Where the model kit is cached."""
    return os.environ.get(
        "MINEDRAFT_KIT_DIR", os.path.expanduser("~/.cache/minedraft/kit-v1")
    )


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
