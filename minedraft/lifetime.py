"""Processes that end with their parent: no orphan when a front end is killed.

``end_with_parent`` starts a daemon thread that waits for the parent
*process* to exit (a pidfd where Linux has one, else polling ``getppid``) and
then SIGKILLs the calling process. MineDraft uses it (``end_with_vllm_parent``)
for vLLM's engine core when MineDraft is selected, for MineDraft's worker processes (vLLM's
multiprocessing executor: a worker stuck inside a collective cannot act on vLLM's own request to
stop), and for the draft engine itself; a SIGKILLed front end then takes
the whole tree with it, level by level (in about 2 s here). vLLM 0.32.0's
engine core and workers otherwise outlive a SIGKILLed front end (measured:
still running a minute later).

``minedraft serve`` goes further: every process started from the launcher (vLLM's API servers,
its data-parallel coordinator, engine cores and their workers, whatever MineDraft is told)
ends with its parent, through :func:`launched_processes_end_with_their_parent` for forked
ones and :func:`end_spawned_process_with_parent` for spawned ones. With data parallelism
vLLM 0.32.0 starts an API server per rank and a coordinator beside the engine cores; after a
SIGKILL to the launcher those kept the port and ran on (measured: a minute later, 2026-11-27).

Why not ``PR_SET_PDEATHSIG``: the kernel sends it when the parent *thread*
that started the process exits (a front end that builds its ``LLM`` in a
short-lived thread would lose its engine), and the earlier SIGTERM variant
relied on vLLM's graceful handler finishing, which one CI run saw not happen
within a minute. A thread that watches the process and ends with SIGKILL
depends on neither.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import sys
import threading
import time

POLL_S = 0.25  # only where pidfd_open is missing (not Linux, or Linux < 5.3)
# vLLM 0.32.0's multiprocessing names for its engine core and worker processes.
VLLM_PROCESS_NAMES = ("EngineCore", "VllmWorker")
# This process's watcher, with the pid it watches for (a forked child inherits the variable,
# not the thread): one per process, also where vLLM runs its worker inside the engine core.
_watcher: tuple[int, threading.Thread] | None = None


def end_with_vllm_parent() -> threading.Thread | None:
    """In a vLLM engine core or worker process: ``end_with_parent`` for it. Elsewhere (an
    engine core or worker inside the front end's process, a user's own process): nothing."""
    me, parent = multiprocessing.current_process(), multiprocessing.parent_process()
    if parent is None or parent.pid is None or not me.name.startswith(VLLM_PROCESS_NAMES):
        return None
    return end_with_parent(parent.pid, me.name)


def launched_processes_end_with_their_parent() -> None:
    """In a launcher: each process forked from it (and from those) ends with its parent."""
    os.register_at_fork(after_in_child=_end_forked_process_with_parent)


def end_spawned_process_with_parent() -> None:
    """Called where the launcher's main module is imported: in a process that multiprocessing's
    spawn is preparing from it (``__mp_main__``: vLLM's API servers, coordinator, engine cores and
    workers of ``minedraft serve``), it ends with its parent; in the launcher itself, nothing."""
    if "__mp_main__" in sys.modules:
        end_with_parent(os.getppid(), multiprocessing.current_process().name)


def _end_forked_process_with_parent() -> None:
    end_with_parent(os.getppid(), "a forked process")


def end_with_parent(parent_pid: int, what: str) -> threading.Thread:
    """SIGKILL this process once process ``parent_pid`` (its parent) has exited; exits
    now if it already has. ``what`` names this process in the one line said then."""
    global _watcher
    if _watcher is not None and _watcher[0] == os.getpid():
        return _watcher[1]
    pidfd = _open_pidfd(parent_pid)
    if os.getppid() != parent_pid:  # gone before we looked (or the pid was reused)
        _end(parent_pid, what)
    watcher = threading.Thread(target=_watch, args=(parent_pid, pidfd, what), daemon=True,
                               name="minedraft-end-with-parent")
    watcher.start()
    _watcher = (os.getpid(), watcher)
    return watcher


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _watch(parent_pid: int, pidfd: int | None, what: str) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the process has exited
    else:
        while os.getppid() == parent_pid:
            time.sleep(POLL_S)
    _end(parent_pid, what)


def _end(parent_pid: int, what: str) -> None:
    end_now(f"minedraft: the parent (pid {parent_pid}) of {what} (pid {os.getpid()}) is gone; ending it")


def end_now(line: str) -> None:
    """Say ``line`` on stderr and SIGKILL this process."""
    # A raw write: the logging module's locks may be held by a thread this kill interrupts.
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)
