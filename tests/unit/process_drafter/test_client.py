"""minedraft/process_drafter/target/client.py: the target's end of the draft engine process, bounded.

A fake draft engine (a few lines speaking the child protocol) stands in for vLLM's: it answers each
job with the number of rows asked for, waits for a FIFO where a job says so, or exits.
"""

from __future__ import annotations

import logging
import os
import textwrap

import pytest

from minedraft.config.drafter_device import DrafterDevice
from minedraft.process_drafter.target.client import ProcessDrafterClient, ProcessDrafterStartError

FAKE_ENGINE = textwrap.dedent("""
    import os
    from minedraft.process_drafter.protocol import serve

    def start(spec):
        if spec["engine"].get("fail"):
            raise SystemExit("no draft model: " + spec["engine"]["fail"])
        def handle(job):
            if job.get("exit"):
                os._exit(3)
            if job.get("wait_for"):  # answers once the test writes to this FIFO
                open(job["wait_for"]).read()
            return {"job": job["job"], "drafts": [[len(job["draft"])]], "resync": [], "draft_s": 0.0}
        return handle, {"max_model_len": 128}

    serve(start)
""")


@pytest.fixture
def start(tmp_path):
    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE)
    clients = []

    def start_client(**engine) -> ProcessDrafterClient:
        client = ProcessDrafterClient(engine, DrafterDevice.parse("cpu:0"), 3, log_dir=str(tmp_path),
                                      entry=[str(script)])
        clients.append(client)
        return client

    yield start_client
    for client in clients:
        client.close()


def test_a_late_reply_is_dropped_when_it_comes(start, tmp_path):
    client = start()
    assert client.max_model_len == 128
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    late = client.send({"draft": ["a"], "wait_for": str(fifo)})
    assert client.receive(late, timeout_s=0.2) is None and not client.gone  # late: not gone
    on_time = client.send({"draft": ["a", "b"]})
    fifo.write_text("go")  # the late job's reply now comes first
    assert client.receive(on_time, timeout_s=60) == {"job": on_time, "drafts": [[2]], "resync": [], "draft_s": 0.0}


def test_a_drafter_that_exits_is_gone_after_one_error_line(start, caplog):
    client = start()
    with caplog.at_level(logging.ERROR, logger="vllm.minedraft.process_drafter.target.client"):
        assert client.receive(client.send({"draft": ["a"], "exit": True}), timeout_s=60) is None
        assert client.gone
        assert client.send({"draft": ["a"]}) is None and client.receive(1, timeout_s=60) is None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "exited (code 3)" in errors[0]


def test_a_drafter_that_does_not_start_is_one_error_with_its_log(start):
    with pytest.raises(ProcessDrafterStartError, match="did not start") as err:
        start(fail="none on disk")
    assert "no draft model: none on disk" in str(err.value)
