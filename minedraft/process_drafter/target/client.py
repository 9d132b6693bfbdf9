"""The target's side of the draft engine process: start it, send jobs, collect drafts with a bound.

One job is in flight at a time in MineDraft's pipeline, but a job the
target stopped waiting for (late beyond ``timeout_s``) still gets its reply
later: replies carry their job's id, and stale ones are dropped. A drafter
that exits or closes its pipe is *gone*: one ERROR line (exit code, log
file), then every later job returns no drafts at once, so the target keeps
serving, exactly, at plain-decoding speed. The process speaks the child
protocol (protocol.py), ends with the target's worker (minedraft/lifetime.py,
in :mod:`minedraft.process_drafter.draft_engine.engine`) and is stopped by
:meth:`ProcessDrafterClient.close`.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minedraft.config.drafter_device import DrafterDevice
from minedraft.log import get_logger
from minedraft.process_drafter.protocol import ChildPipe

logger = get_logger(__name__)

START_TIMEOUT_S = 900  # loading and warming the draft engine
DRAFT_ENGINE = ("-m", "minedraft.process_drafter.draft_engine.engine")  # the draft engine's entry point


class ProcessDrafterStartError(RuntimeError):
    """The draft engine process did not come up."""


class ProcessDrafterClient:
    def __init__(self, engine_kwargs: dict[str, Any], device: DrafterDevice, k: int,
                 log_dir: str | None = None, entry: Sequence[str] = DRAFT_ENGINE, draft_ahead: str = "off") -> None:
        device.check_available()
        self.device = device
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="minedraft-drafter-")) / "drafter.log"
        spec = {"engine": engine_kwargs, "k": k, "draft_ahead": draft_ahead, "parent_pid": os.getpid(),
                "cpu_affinity": sorted(device.cpu_affinity() or ())}
        self.pipe = ChildPipe(entry, spec, self.log_path, env={**os.environ, **device.process_env()})
        self.proc = self.pipe.proc
        self._next_job = 0
        self.gone = False
        ready = self.pipe.read(START_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            self.close()
            raise ProcessDrafterStartError(
                f"minedraft: the draft engine process on {device} did not start; see {self.log_path}:\n"
                + _tail(self.log_path))
        self.max_model_len: int = ready["max_model_len"]
        # The target's layers whose hidden states a DFlash draft takes as context (vLLM's numbering).
        self.context_layers: list[int] = ready.get("context_layers", [])
        logger.info("MineDraft draft engine up on %s in %.1f s (pid %d, log %s)", device, ready["start_s"],
                    self.proc.pid, self.log_path)

    # -------------------------------------------------------------- jobs
    def send(self, message: dict[str, Any]) -> int | None:
        """Send a job; its id, or None when the drafter is gone."""
        if self.gone:
            return None
        job_id = self._next_job = self._next_job + 1
        if not self.pipe.send({**message, "job": job_id}):
            self._lost()
            return None
        return job_id

    def receive(self, job_id: int | None, timeout_s: float) -> dict[str, Any] | None:
        """Job ``job_id``'s reply, or None if it is late beyond ``timeout_s`` or the drafter is gone."""
        if job_id is None or self.gone:
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self.pipe.read(max(0.0, deadline - time.monotonic()))
            if reply is None:
                if self.pipe.ended:
                    self._lost()
                return None
            if reply.get("job") == job_id:
                return reply
            # An older job's reply, arriving after the target stopped waiting for it.

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
        self.pipe.close(timeout_s=10)
        self.gone = True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
