"""harness/child.py: the child-process protocol, on a child that echoes its commands (no engine)."""

from __future__ import annotations

import pytest

from harness.child import Child, ChildError, run_once

ECHO_CHILD = """
from harness.child import serve

def make(spec):
    if spec.get("die"):
        raise RuntimeError("this child cannot start: " + spec["die"])
    return lambda command: {"echo": command, "spec": spec}

serve(make)
"""


def test_child_answers_commands_until_quit(tmp_path):
    script = tmp_path / "echo_child.py"
    script.write_text(ECHO_CHILD)
    with Child([str(script)], {"name": "echo", "x": 1}, tmp_path) as child:
        assert child.ready()["ready"] is True
        assert child.call({"cmd": "a"}) == {"echo": {"cmd": "a"}, "spec": {"name": "echo", "x": 1}}
        assert child.call({"cmd": "b"})["echo"] == {"cmd": "b"}
    assert child.proc.returncode == 0


def test_a_child_that_dies_becomes_an_error_with_its_log(tmp_path):
    script = tmp_path / "echo_child.py"
    script.write_text(ECHO_CHILD)
    with pytest.raises(ChildError, match="died") as err:
        run_once([str(script)], {"name": "dying", "die": "no model"}, log_dir=tmp_path)
    assert "RuntimeError: this child cannot start: no model" in str(err.value)
