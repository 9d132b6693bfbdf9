"""An engine in a child process, answering JSON commands: the tooling's side of the child protocol.

The protocol itself is the runtime's (:mod:`minedraft.process_drafter.protocol`,
which the process drafter's draft engine speaks too): the parent starts
``python FILE_OR_-m_MODULE SPEC_JSON``; the child builds its state from the
spec (typically one vLLM engine), says ``{"ready": ...}`` and then answers
each command line read on stdin with one JSON line, its engine's logs going
to a log file. Here, a child that dies or stalls becomes an error carrying the
log's last error lines; ``close`` asks it to quit and kills it if it does not.

Parent: ``with Child(["tests/e2e/test_faults.py"], spec, log_dir) as c: c.call({...})``,
or :func:`run_once` for one command. Child: ``serve(make_handler)`` in its
``__main__``, where ``make_handler(spec)`` returns ``handle(command) -> dict``.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.environment import CPU_ENV, set_defaults
from minedraft.process_drafter import protocol

REPO = Path(__file__).resolve().parents[1]  # the checkout: tooling runs from it
DEFAULT_TIMEOUT_S = 900
CLOSE_TIMEOUT_S = 60


def checkout_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``extra``, with the checkout on ``PYTHONPATH``: a child
    may import the tooling (harness/, modelkit/), which is not installed."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


class ChildError(RuntimeError):
    """The child died, stalled or could not start."""


class Child:
    def __init__(self, target: list[str], spec: dict[str, Any], log_dir: Path | None = None, *,
                 env: dict[str, str] | None = None, name: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.name = name or spec.get("name") or Path(target[-1]).stem
        log_dir = Path(log_dir or tempfile.mkdtemp(prefix="minedraft-child-"))
        self.log_path = log_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.name)}.log"
        self.timeout_s = timeout_s
        self.launched = time.perf_counter()
        self.pipe = protocol.ChildPipe(target, spec, self.log_path, env=checkout_env(env), cwd=REPO)
        self.proc = self.pipe.proc
        self.started: dict[str, Any] | None = None

    def ready(self) -> dict[str, Any]:
        """The child's ready message (waits for it once), with ``ready_s`` since launch."""
        if self.started is None:
            self.started = {**self._read(), "ready_s": round(time.perf_counter() - self.launched, 1)}
        return self.started

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        self.ready()
        self.pipe.send(command)  # a child that died meanwhile: _read says so
        return self._read()

    def close(self) -> None:
        self.pipe.close(CLOSE_TIMEOUT_S)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self) -> dict[str, Any]:
        reply = self.pipe.read(self.timeout_s)
        if reply is None:
            self.pipe.kill()
            raise ChildError(f"{self.name}: child {'died' if self.pipe.ended else 'timed out'} "
                             f"(exit {self.proc.returncode}, log {self.log_path})\n{self.log_errors()}")
        return reply

    def log_errors(self, lines: int = 15) -> str:
        """The log's error lines (vLLM tracebacks are long; their last lines say why), then its tail."""
        text = self.log_path.read_text(errors="replace").splitlines()
        errors = [x for x in text if "Error" in x or "error:" in x]
        return "\n".join(errors[-lines:] + ["--- tail ---"] + text[-lines:])


def run_once(target: list[str], spec: dict[str, Any], command: dict[str, Any] | None = None,
             **kwargs: Any) -> dict[str, Any]:
    """Start a child, send it one command (default ``{"cmd": "run"}``), close it."""
    with Child(target, spec, **kwargs) as child:
        return child.call(command or {"cmd": "run"})


def serve(make_handler: Callable[[dict[str, Any]], Callable[[dict[str, Any]], dict[str, Any]]]) -> None:
    """The child's side: ``make_handler(spec)`` once, then one reply per command until ``quit``."""
    set_defaults(CPU_ENV)
    protocol.serve(lambda spec: (make_handler(spec), {}))
