"""The JSON-lines child protocol: an engine in a child process, answering JSON commands.

The parent starts ``python ARGS SPEC_JSON`` with pipes as stdin and stdout and
a log file as stderr. The child builds its state from the spec (typically one
vLLM engine), says ``{"ready": true, "start_s": ...}`` and then answers each
JSON line read on stdin with one JSON line, until ``{"cmd": "quit"}`` or the
end of its input. Replies go to a private copy of the child's stdout: fd 1
itself, where vLLM logs, joins the log file, so engine logs never corrupt the
protocol.

The one implementation, for the draft engine process (client.py, engine.py)
and for the project's tooling (``harness/child.py``: the demo, the tests and
the benchmarks run their engines as children). Reads are bounded: a child that
is late or gone is the caller's to handle (the drafter verifies without
drafts; the tooling raises).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

QUIT = "quit"

Handler = Callable[[dict[str, Any]], dict[str, Any]]


class ChildPipe:
    """The parent's end: the child process, lines sent, lines read with a bound."""

    def __init__(self, args: Sequence[str], spec: dict[str, Any], log_path: Path, env: Mapping[str, str],
                 cwd: Path | None = None) -> None:
        with open(log_path, "w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, *args, json.dumps(spec)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=dict(env), cwd=cwd)
        self._lines = Lines(self.proc.stdout.fileno())

    def send(self, message: dict[str, Any]) -> bool:
        """Write one line; False when the child no longer reads (it exited)."""
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def read(self, timeout_s: float) -> dict[str, Any] | None:
        """The next line; None when none came within ``timeout_s`` or the child ended (``ended``)."""
        line = self._lines.read(timeout_s)
        return None if line is None else json.loads(line)

    @property
    def ended(self) -> bool:
        """The child closed its output: it exited."""
        return self._lines.ended

    def close(self, timeout_s: float) -> None:
        """Ask the child to quit; kill it if it has not exited within ``timeout_s``."""
        if self.proc.poll() is None:
            try:
                if self.send({"cmd": QUIT}):
                    self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Lines:
    """Lines read from a file descriptor, each read bounded; ``waiting`` looks without blocking."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self.ended = False  # the writer closed its end

    def read(self, timeout_s: float | None) -> bytes | None:
        """The next line; None when none came within ``timeout_s`` (None: no bound) or the input ended."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if self.ended or not self._fill(None if deadline is None else max(0.0, deadline - time.monotonic())):
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def waiting(self) -> bool:
        """Whether input has come (a line, part of one, or its end): the reader is wanted."""
        return b"\n" in self._buffer or self.ended or self._fill(0.0)

    def _fill(self, timeout_s: float | None) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return False
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            self.ended = True
            return False
        self._buffer += chunk
        return True


# Called after each reply, with a function that says whether one has come:
# the child's own work between commands (the draft engine drafts ahead: draft_ahead.py).
Idle = Callable[[Callable[[], bool]], None]


def serve(start: Callable[[dict[str, Any]], tuple[Handler, dict[str, Any]] | tuple[Handler, dict[str, Any], Idle]]
          ) -> None:
    """The child's side: ``start(spec)`` once, which returns the command handler, what the ready
    line adds and, optionally, what to do when idle; then one reply per command until ``quit`` or the
    end of input."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # vLLM's logs (stdout) join the log file
    spec = json.loads(sys.argv[-1])
    started = time.perf_counter()
    handle, ready, *idle = start(spec)
    reply.write(json.dumps({"ready": True, "start_s": round(time.perf_counter() - started, 2), **ready}) + "\n")
    commands = Lines(sys.stdin.fileno())
    while (line := commands.read(None)) is not None:
        command = json.loads(line)
        if command.get("cmd") == QUIT:
            break
        reply.write(json.dumps(handle(command)) + "\n")
        if idle:
            idle[0](commands.waiting)
