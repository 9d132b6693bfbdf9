"""Processes that die with their parent: no orphan when a front end is killed.

``die_with_parent`` sets Linux's parent-death signal (``PR_SET_PDEATHSIG``)
for the calling process: the kernel sends it when the thread that started
this process exits, however it exits (SIGKILL included). MineDraft uses it
for the draft engine's process (SIGKILL: it holds nothing worth saving) and
for vLLM's engine core when MineDraft is selected (SIGTERM: vLLM's own
handler then shuts its workers down). vLLM 0.32.0's engine core and workers
otherwise outlive a SIGKILLed front end (measured: still running a minute
later).
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Get ``sig`` when the parent dies; exits now if it already has. False where
    the platform has no ``prctl`` (not Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return False
    if libc.prctl(PR_SET_PDEATHSIG, int(sig)) != 0:
        return False
    if os.getppid() != parent_pid:  # the parent died before prctl
        os._exit(1)
    return True
