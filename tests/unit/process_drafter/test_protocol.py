"""minedraft/process_drafter/protocol.py: the JSON-lines child protocol, on real child processes (no engine)."""

from __future__ import annotations

import os
import textwrap

import pytest

from minedraft.process_drafter.protocol import ChildPipe

CHILD = textwrap.dedent("""
    import sys
    from minedraft.process_drafter.protocol import serve

    def start(spec):
        if spec.get("die"):
            raise SystemExit("cannot start: " + spec["die"])
        def handle(command):
            print("a log line on stdout")  # fd 1 is the log: never a reply
            return {"echo": command}
        return handle, {"greeting": spec["greeting"]}

    serve(start)
""")
SILENT = "import threading\nthreading.Event().wait()\n"  # never answers, never quits


@pytest.fixture
def child(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    pipes = []

    def start(spec, source=None):
        if source is not None:
            script.write_text(source)
        pipe = ChildPipe([str(script)], spec, tmp_path / "child.log", env=os.environ)
        pipes.append(pipe)
        return pipe

    yield start
    for pipe in pipes:
        pipe.kill()


def test_a_child_is_ready_then_answers_each_command_until_quit(child, tmp_path):
    pipe = child({"greeting": "hi"})
    ready = pipe.read(60)
    assert ready["ready"] is True and ready["greeting"] == "hi" and ready["start_s"] >= 0
    for n in range(3):
        assert pipe.send({"n": n})
        assert pipe.read(60) == {"echo": {"n": n}}
    pipe.close(timeout_s=60)
    assert pipe.proc.returncode == 0
    assert (tmp_path / "child.log").read_text().count("a log line on stdout") == 3


def test_a_read_is_bounded_and_says_whether_the_child_ended(child):
    pipe = child({"greeting": "hi"})
    pipe.read(60)
    assert pipe.read(0.1) is None and not pipe.ended  # no command sent: nothing comes
    dead = child({"die": "no model"})
    assert dead.read(60) is None and dead.ended
    dead.proc.wait()
    assert not dead.send({"n": 1})  # nobody reads any more


def test_close_kills_a_child_that_does_not_quit(child):
    pipe = child({}, source=SILENT)
    pipe.close(timeout_s=0.1)
    assert pipe.proc.returncode == -9


IDLE_CHILD = textwrap.dedent("""
    from minedraft.process_drafter.protocol import serve

    def start(spec):
        seen = []  # per idle call: whether a command was waiting

        def handle(command):
            return {"echo": command, "idle": list(seen)}

        def idle(waiting):
            seen.append(waiting())

        return handle, {}, idle

    serve(start)
""")


def test_the_idle_hook_runs_after_each_reply_and_sees_a_waiting_command(child):
    pipe = child({}, source=IDLE_CHILD)
    pipe.read(60)
    assert pipe.send({"n": 0})
    assert pipe.read(60)["idle"] == []
    # Two commands in one write (atomic on a pipe): after the first reply the second one waits.
    pipe.proc.stdin.write(b'{"n": 1}\n{"n": 2}\n')
    pipe.proc.stdin.flush()
    assert len(pipe.read(60)["idle"]) == 1  # one idle call after reply 0 (commands 1 and 2 may have come)
    assert pipe.read(60)["idle"][1] is True  # after reply 1, command 2 had come with it
    pipe.close(timeout_s=60)
    assert pipe.proc.returncode == 0
