"""minedraft/lifetime.py: a process that ends with its parent, on a real process tree.

A parent process starts a child that calls ``end_with_parent`` and then blocks
forever; the parent is SIGKILLed and the child must be gone. Both ways of
noticing the parent's exit are run: the pidfd (Linux >= 5.3) and the
``getppid`` poll used where there is none.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from minedraft import lifetime

GONE_WITHIN_S = 30  # an upper bound for a loaded machine, not a pace: it ends within ~1 s

CHILD = textwrap.dedent("""
    import os, sys, threading
    from minedraft import lifetime
    if sys.argv[1] == "poll":
        lifetime._open_pidfd = lambda pid: None
    lifetime.end_with_parent(os.getppid(), "the test child")
    print("watching", flush=True)
    threading.Event().wait()  # blocks forever: only the watcher can end this process
""")

PARENT = textwrap.dedent("""
    import subprocess, sys, threading
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "watching\\n"
    print(child.pid, flush=True)
    threading.Event().wait()
""")


@pytest.mark.parametrize("how", ["pidfd", "poll"])
def test_a_child_ends_when_its_parent_is_killed(how):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, how], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running() and child.ppid() == parent.pid
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        child.wait(timeout=GONE_WITHIN_S)  # raises psutil.TimeoutExpired if it outlives its parent
        # The child said why it ended (it shares the parent's stderr).
        assert f"the test child (pid {child.pid}) is gone; ending it" in parent.stderr.read()
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_process_told_a_parent_it_does_not_have_ends_at_once():
    """As when the parent exited (and its pid was perhaps reused) before the watch began."""
    code = "from minedraft import lifetime; lifetime.end_with_parent(1, 'orphan'); print('not reached')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL and "not reached" not in done.stdout
    assert "of orphan" in done.stderr


def test_one_watcher_per_process():
    """vLLM's worker inside its engine core calls it twice in one process: one thread watches."""
    code = ("import os, threading; from minedraft import lifetime; "
            "a = lifetime.end_with_parent(os.getppid(), 'x'); n = threading.active_count(); "
            "b = lifetime.end_with_parent(os.getppid(), 'x'); print(a is b, threading.active_count() == n)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True"], done


def test_only_vllm_engine_core_and_worker_processes_watch_their_parent(monkeypatch):
    """The pytest process (no multiprocessing parent) and a user's own child process are left alone."""
    assert lifetime.end_with_vllm_parent() is None
    started = []
    monkeypatch.setattr(lifetime, "end_with_parent", lambda pid, what: started.append((pid, what)))
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: psutil.Process(os.getppid()))
    for name, expected in (("EngineCore", True), ("EngineCore_DP1", True), ("VllmWorker-0", True),
                           ("Process-1", False), ("MainProcess", False)):
        started.clear()
        monkeypatch.setattr(multiprocessing.current_process(), "name", name)
        lifetime.end_with_vllm_parent()
        assert bool(started) == expected, name
        assert not started or started[0] == (os.getppid(), name)


LAUNCHER = textwrap.dedent("""
    import multiprocessing, sys, threading
    from minedraft import lifetime
    lifetime.end_spawned_process_with_parent()  # as minedraft/cli.py does at import

    def run(ready):
        ready.put(multiprocessing.current_process().name)
        threading.Event().wait()  # blocks forever: only its watcher can end it

    if __name__ == "__main__":
        lifetime.launched_processes_end_with_their_parent()
        ready = multiprocessing.get_context("spawn").Queue()
        children = [multiprocessing.get_context(how).Process(target=run, args=(ready,), name=f"{how}ed")
                    for how in ("spawn", "fork")]
        for child in children:
            child.start()
        assert sorted(ready.get(timeout=120) for _ in children) == ["forked", "spawned"]
        print(*(child.pid for child in children), flush=True)
        threading.Event().wait()
""")


def test_processes_spawned_or_forked_from_a_launcher_end_with_it(tmp_path):
    """``minedraft serve``'s hooks (minedraft/cli.py): a spawned child, prepared from the launcher's
    main module, and a forked one both go when the launcher is SIGKILLed; the launcher itself does
    not watch its own parent (the test)."""
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    launcher = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path)
    try:
        children = [psutil.Process(int(pid)) for pid in launcher.stdout.readline().split()]
        assert len(children) == 2 and all(c.ppid() == launcher.pid for c in children), launcher.stderr.read()
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        _, alive = psutil.wait_procs(children, timeout=GONE_WITHIN_S)
        assert not alive
        said = launcher.stderr.read()
        assert "of spawned (pid" in said and "of a forked process (pid" in said, said
    finally:
        if launcher.poll() is None:
            launcher.kill()
