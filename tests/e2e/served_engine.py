"""A real ``minedraft serve`` (or target-alone) server on 127.0.0.1, for tests.

The launcher's server (:mod:`harness.server`): its own process
session on a free port, ready when ``/health`` answers, its whole group
stopped on exit; if it dies the test fails with the tail of its log.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from openai import OpenAI

from harness import server as launch_server
from harness.engine_args import Speculation, engine_kwargs

MODEL_NAME = "kit-target"
LOG_TAIL_CHARS = launch_server.LOG_TAIL_CHARS
K = 3
STARTUP_TIMEOUT_S = 420  # engine start is ~25 s alone; generous for a loaded machine
REQUEST_TIMEOUT_S = 300
IDLE_TIMEOUT_S = 120

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
SERVER_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": "1"}
MINEDRAFT_COUNTERS = ("parallel_steps", "fallback_steps", "verified_requests", "draft_only_requests")
MINEDRAFT_GAUGES = ("verify_group_size", "draft_group_size", "parallel_mode_allowed")


# --------------------------------------------------------------------------- servers


class Server(launch_server.Server):
    """The launcher's server, with an OpenAI client; its failures fail the test."""

    def client(self) -> OpenAI:
        return OpenAI(base_url=f"{self.url}/v1", api_key="none", timeout=REQUEST_TIMEOUT_S, max_retries=0)

    def check_alive(self) -> None:
        try:
            super().check_alive()
        except launch_server.ServerError as e:
            pytest.fail(str(e), pytrace=False)

    def wait_idle(self, timeout_s: float = IDLE_TIMEOUT_S) -> dict[str, float]:
        """Wait until no request is running or waiting; the server's metrics then."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            m = self.metrics()
            if m.get("vllm:num_requests_running", 0) == 0 and m.get("vllm:num_requests_waiting", 0) == 0:
                return m
            assert time.monotonic() < deadline, f"requests still in flight after {timeout_s} s: {m}"
            time.sleep(0.5)

    def counters_after_answers(self) -> dict[str, float]:
        """The metrics once every request sent has been answered, for a server with several API servers
        (vLLM's default under data parallelism), where :meth:`wait_idle` cannot be used: an engine's
        statistics go to one API server per step, each API server stamps them with its own clock when
        it records them, and Prometheus' multiprocess ``mostrecent`` merge keeps the latest stamp, so a
        step recorded late by one API server can outlive the idle step another recorded first; an idle
        engine sends no further statistics, and the running/waiting gauges then stay above zero. The
        counters are sums over the API servers and hold every step but perhaps the last few."""
        self.check_alive()
        return self.metrics()

    def fail(self, what: str) -> None:
        pytest.fail(f"{self.name} server {what}; last lines of {self.log}:\n{self.tail()}", pytrace=False)


@contextmanager
def served(name: str, kit, chat_template: Path, log_dir: Path, minedraft: bool,
           extra_args: tuple[str, ...] = (), settings: dict | None = None,
           speculation: Speculation | None = None, env: dict[str, str] | None = None) -> Iterator[Server]:
    """The kit's target alone, or MineDraft pinned to parallel mode (k = 3, the perturbed draft unless
    ``speculation`` says otherwise; ``settings``: more MineDraft settings, e.g. the process drafter;
    ``env``: more environment, over ``SERVER_ENV``)."""
    args = ("--served-model-name", MODEL_NAME, "--chat-template", str(chat_template), *extra_args)
    started = launch_server.start(name, _engine(kit, minedraft, settings, speculation), log_dir,
                                  env={**SERVER_ENV, **(env or {})}, extra_args=args)
    server = Server(started.name, started.proc, started.port, started.log)
    try:
        try:
            server.wait_ready(STARTUP_TIMEOUT_S)
        except launch_server.ServerError as e:
            pytest.fail(str(e), pytrace=False)
        yield server
    finally:
        server.stop()


@contextmanager
def headless(name: str, kit, log_dir: Path, extra_args: tuple[str, ...],
             env: dict[str, str] | None = None) -> Iterator[launch_server.Server]:
    """vLLM's headless engine cores (``--headless``: data-parallel ranks of another host's front end),
    MineDraft pinned to parallel mode as in :func:`served`; stopped on exit."""
    started = launch_server.start(name, _engine(kit, True, None, None), log_dir, env={**SERVER_ENV, **(env or {})},
                                  extra_args=("--headless", *extra_args))
    try:
        yield started
    finally:
        started.stop()


def _engine(kit, minedraft: bool, settings: dict | None, speculation: Speculation | None) -> dict:
    mode = "minedraft_parallel" if minedraft else "no_sd"
    speculation = speculation or Speculation(str(kit.draft_perturbed), K)
    return engine_kwargs(mode, str(kit.target), speculation if minedraft else None, max_model_len=1024,
                         minedraft=settings)
