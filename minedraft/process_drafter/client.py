"""The target's side of the draft engine process: start it, send jobs, collect drafts with a bound.

One job is in flight at a time in MineDraft's pipeline, but a job the
target stopped waiting for (late beyond ``timeout_s``) still gets its reply
later: replies carry their job's id, and stale ones are dropped. A drafter
that exits or closes its pipe is *gone*: one ERROR line (exit code, log
file), then every later job returns no drafts at once, so the target keeps
serving, exactly, at plain-decoding speed. The process ends with the target's
worker (minedraft/lifetime.py, in :mod:`minedraft.process_drafter.engine`) and is
stopped by :meth:`DrafterClient.close`.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from minedraft.config.placement import DrafterDevice
from minedraft.log import get_logger

logger = get_logger(__name__)

START_TIMEOUT_S = 900  # loading and warming the draft engine


class DrafterStartError(RuntimeError):
    """The draft engine process did not come up."""


class DrafterClient:
    def __init__(self, engine_kwargs: dict[str, Any], device: DrafterDevice, k: int,
                 log_dir: str | None = None) -> None:
        device.check_available()
        self.device = device
        log_dir = Path(log_dir or tempfile.mkdtemp(prefix="minedraft-drafter-"))
        self.log_path = log_dir / "drafter.log"
        spec = {"engine": engine_kwargs, "k": k, "parent_pid": os.getpid(),
                "cpu_affinity": sorted(device.cpu_affinity() or ())}
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "minedraft.process_drafter.engine", json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                env={**os.environ, **device.process_env()})
        self._buffer = b""
        self._next_job = 0
        self.gone = False
        ready = self._read_line(START_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            self.close()
            raise DrafterStartError(
                f"minedraft: the draft engine process on {device} did not start; see {self.log_path}:\n"
                + _tail(self.log_path))
        self.max_model_len: int = ready["max_model_len"]
        logger.info("MineDraft draft engine up on %s in %.1f s (pid %d, log %s)", device, ready["start_s"],
                    self.proc.pid, self.log_path)

    # -------------------------------------------------------------- jobs
    def send(self, message: dict[str, Any]) -> int | None:
        """Send a job; its id, or None when the drafter is gone."""
        if self.gone:
            return None
        job_id = self._next_job = self._next_job + 1
        try:
            self.proc.stdin.write((json.dumps({**message, "job": job_id}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._lost()
            return None
        return job_id

    def receive(self, job_id: int | None, timeout_s: float) -> dict[str, Any] | None:
        """Job ``job_id``'s reply, or None if it is late beyond ``timeout_s`` or the drafter is gone."""
        if job_id is None or self.gone:
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_line(max(0.0, deadline - time.monotonic()))
            if reply is None:
                return None
            if reply.get("job") == job_id:
                return reply
            # An older job's reply, arriving after the target stopped waiting for it.

    def _read_line(self, timeout_s: float) -> dict[str, Any] | None:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self._lost()
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _lost(self) -> None:
        if self.gone:
            return
        self.gone = True
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        logger.error("minedraft: the draft engine process on %s exited (code %s); the target goes on "
                     "without drafts (outputs stay exact, throughput drops to plain decoding). Log: %s",
                     self.device, code, self.log_path)

    # -------------------------------------------------------------- life
    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.gone = True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
