"""A ``minedraft serve`` server on 127.0.0.1, for the served tests, the soak and the serving benchmark.

Started in its own process session on a free port (:func:`start`), ready
when ``/health`` answers (:meth:`Server.wait_ready`), stopped with SIGTERM and
then SIGKILL of its whole process group (the API server and its engine core),
so no engine outlives it. A server that dies raises :class:`ServerError`
with the tail of its log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from harness.child import REPO, checkout_env
from harness.engine_args import serve_flags

STOP_TIMEOUT_S = 30
LOG_TAIL_CHARS = 6000


class ServerError(RuntimeError):
    """The server exited, or did not become healthy in time."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text's samples summed over labels, keyed ``name`` and ``name{label=value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
            for label, value in sample.labels.items():
                key = f"{sample.name}{{{label}={value}}}"
                out[key] = out.get(key, 0.0) + sample.value
    return out


class Server:
    def __init__(self, name: str, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.name, self.proc, self.port, self.log = name, proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError as e:
            return f"<no log: {e}>"

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise ServerError(f"{self.name} server exited with code {self.proc.returncode}; "
                              f"last lines of {self.log}:\n{self.tail()}")

    def is_healthy(self) -> bool:
        import requests

        self.check_alive()
        try:
            return requests.get(f"{self.url}/health", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.is_healthy():
            if time.monotonic() > deadline:
                raise ServerError(f"{self.name} server not healthy after {timeout_s:.0f} s; "
                                  f"last lines of {self.log}:\n{self.tail()}")
            time.sleep(0.5)

    def metrics(self) -> dict[str, float]:
        """``/metrics`` samples summed over labels (:func:`parse_metrics`)."""
        import requests

        r = requests.get(f"{self.url}/metrics", timeout=30)
        r.raise_for_status()
        return parse_metrics(r.text)

    def terminate(self) -> None:
        """SIGTERM to the group (the API server shuts its engine core down)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)

    def reap(self) -> None:
        """Wait for a terminated server; kill what is left of its group."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        # An engine core may outlive its API server.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        self.terminate()
        self.reap()


def start(name: str, engine: dict, log_dir: Path, *, env: dict[str, str] | None = None,
          extra_args: tuple[str, ...] = ()) -> Server:
    """``minedraft serve`` with the engine arguments ``engine`` (see ``engine_args``)."""
    port = free_port()
    argv = [sys.executable, "-m", "minedraft.cli", "serve", *serve_flags(engine),
            "--host", "127.0.0.1", "--port", str(port), "--disable-uvicorn-access-log", *extra_args]
    full_env = checkout_env({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})})
    # MineDraft's settings travel in --additional-config; an inherited MINEDRAFT_* would skew a comparison.
    for var in [v for v in full_env if v.startswith("MINEDRAFT_") and v != "MINEDRAFT_KIT_DIR" and v not in (env or {})]:
        full_env.pop(var)
    full_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = Path(log_dir) / f"{name}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                                cwd=str(REPO), start_new_session=True)
    return Server(name, proc, port, log)


@contextlib.contextmanager
def served(name: str, engine: dict, log_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None,
           extra_args: tuple[str, ...] = ()) -> Iterator[Server]:
    """One server, healthy on entry, stopped on exit."""
    server = start(name, engine, log_dir, env=env, extra_args=extra_args)
    try:
        server.wait_ready(timeout_s)
        yield server
    finally:
        server.stop()
