"""A real ``minedraft serve`` (or target-alone) server on 127.0.0.1, for tests.

Started in its own process session with a free port, ready when ``/health``
answers, stopped (SIGTERM, then SIGKILL of the whole group) on exit; if it
dies the test fails with the tail of its log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

MODEL_NAME = "kit-target"
K = 3
STARTUP_TIMEOUT_S = 420  # engine start is ~25 s alone; generous for a loaded machine
REQUEST_TIMEOUT_S = 300
STOP_TIMEOUT_S = 60
LOG_TAIL_CHARS = 6000

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
MINEDRAFT_COUNTERS = ("parallel_steps", "fallback_steps", "verified_requests", "draft_only_requests")
MINEDRAFT_GAUGES = ("verify_group_size", "draft_group_size", "parallel_mode_allowed")


# --------------------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"<no log: {e}>"


class Server:
    def __init__(self, name: str, proc: subprocess.Popen, port: int, log: Path):
        self.name, self.proc, self.port, self.log = name, proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def fail(self, what: str) -> None:
        pytest.fail(f"{self.name} server {what}; last lines of {self.log}:\n{_tail(self.log)}", pytrace=False)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            self.fail(f"exited with code {self.proc.returncode}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if requests.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.fail(f"not healthy after {timeout:.0f} s")

    def client(self) -> OpenAI:
        return OpenAI(base_url=f"{self.url}/v1", api_key="none", timeout=REQUEST_TIMEOUT_S, max_retries=0)

    def metrics(self) -> dict[str, float]:
        """Prometheus samples summed over labels, keyed ``name`` or ``name{label=value}``."""
        r = requests.get(f"{self.url}/metrics", timeout=30)
        r.raise_for_status()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(r.text):
            for s in family.samples:
                out[s.name] = out.get(s.name, 0.0) + s.value
                for label, value in s.labels.items():
                    key = f"{s.name}{{{label}={value}}}"
                    out[key] = out.get(key, 0.0) + s.value
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            # The server runs in its own session: its group holds the API server and its engine core.
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except ProcessLookupError:
                pass
        # Leftover children of the group (engine core), if the API server went first.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@contextmanager
def served(name: str, kit, chat_template: Path, log_dir: Path, minedraft: bool,
           extra_args: tuple[str, ...] = ()) -> Iterator[Server]:
    port = _free_port()
    argv = [
        sys.executable, "-m", "minedraft.cli", "serve", str(kit.target),
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL_NAME,
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--block-size", "32",
        "--seed", "0", "--chat-template", str(chat_template), "--disable-uvicorn-access-log",
    ]
    if minedraft:
        spec = {"method": "draft_model", "model": str(kit.draft_perturbed), "num_speculative_tokens": K}
        argv += ["--scheduler-cls", "minedraft", "--speculative-config", json.dumps(spec)]
    argv += list(extra_args)
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "MINEDRAFT_MODE": "parallel",
        "VLLM_LOG_STATS_INTERVAL": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = log_dir / f"{name}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(Path(__file__).resolve().parents[2]), start_new_session=True)
    server = Server(name, proc, port, log)
    try:
        server.wait_ready(STARTUP_TIMEOUT_S)
        yield server
    finally:
        server.stop()
